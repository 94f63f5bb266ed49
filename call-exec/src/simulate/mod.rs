//! `eth_simulateV1`'s blocks run in revm over state read privately, as
//! geth runs them: one state through every block (overrides applied at
//! each block's start, then its system calls, then its calls, each
//! committed), a block gas pool, a gas budget over the whole request
//! ([`GAS_CAP`]), nonces taken from the state, the checks of a
//! transaction only with `validation`, and logs as geth's tracer takes
//! them ([`logs`]).
//!
//! As [`crate::run`], a run lacking reads notes them all and is thrown
//! away ([`SimOutcome::Needs`]); the caller reads them and runs again.
//! What cannot be answered here ends it: an old or a simulated block's
//! hash (a simulated block's hash depends on its state root, which needs
//! the state trie), the storage of a contract not held
//! ([`SimOutcome::Unanswerable`]); and what is not done here (a system
//! contract overridden or created, a deposit, a blob fee geth's balance
//! would wrap for): [`SimOutcome::Unsupported`]. The blocks' roots and hashes are the
//! caller's to make.

mod block;
mod call;
mod fees;
mod logs;

use crate::precompiles::BlockPrecompiles;
use block::{apply_overrides, block_facts, cfg, credit_withdrawals, system_call, BlockFacts};
use call::run_call;
use revm::handler::instructions::EthInstructions;

/// What a block's calls run in: the request, the block's environment and
/// precompiles, the block.
struct BlockRun<'a> {
    sim: &'a Simulation,
    facts: BlockFacts,
    precompiles: BlockPrecompiles,
    block: &'a SimBlock,
}

use std::cell::RefCell;
use std::rc::Rc;

use alloy_primitives::{Address, Bytes, Log, B256, U256};
use revm::context::result::{EVMError, ExecutionResult};
use revm::context::{BlockEnv, CfgEnv, TxEnv};
use revm::database::CacheDB;
use revm::database_interface::{Database, DatabaseCommit};
use revm::handler::SystemCallEvm;
use revm::primitives::{TxKind, KECCAK_EMPTY};
use revm::{Context, InspectEvm, MainBuilder, MainContext};

pub use crate::overrides::AccountOverride;
pub use crate::spec::{blob_schedule, blob_schedule_known, BlobSchedule};
pub use logs::{SimLog, TRANSFER_LOG_ADDRESS};

use crate::db::RoundDb;
use crate::inner::Trace;
use crate::overrides::OverrideError;
use crate::{AccessList, BlockContext, KnownState, Need, RecoveredAuthorization, SpecId};
use crate::{Unanswerable, GAS_CAP};

pub use crate::system::{BEACON_ROOTS, HISTORY_STORAGE};
use crate::system::{CONSOLIDATION_REQUESTS, DEPOSIT_EVENT, SYSTEM_CONTRACTS, WITHDRAWAL_REQUESTS};

/// Blob gas per blob.
const GAS_PER_BLOB: u64 = revm::primitives::eip4844::GAS_PER_BLOB;

/// The block the simulation starts from (its state is the view's).
#[derive(Clone, Debug)]
pub struct BaseBlock {
    /// Number, time, chain, and the header's facts (needed).
    pub context: BlockContext,
    pub hash: B256,
    pub gas_used: u64,
    pub blob_gas_used: Option<u64>,
}

/// One simulated block, its header facts settled by the caller (numbers,
/// times and gaps as geth's `sanitizeChain` leaves them).
#[derive(Clone, Debug, Default)]
pub struct SimBlock {
    pub number: u64,
    pub timestamp: u64,
    pub gas_limit: u64,
    pub coinbase: Address,
    pub prevrandao: B256,
    /// Named by the caller; else the parent's rule (`validation`) or 0.
    pub base_fee: Option<u64>,
    pub blob_base_fee: Option<u128>,
    /// EIP-4788's root (zero unless named).
    pub beacon_root: B256,
    /// Withdrawals credited after the calls: (address, gwei).
    pub withdrawals: Vec<(Address, u64)>,
    /// In ascending address order.
    pub overrides: Vec<(Address, AccountOverride)>,
    pub calls: Vec<SimCall>,
}

/// One call of a simulated block, as the wallet sent it.
#[derive(Clone, Debug, Default)]
pub struct SimCall {
    pub from: Address,
    /// `None`: a creation.
    pub to: Option<Address>,
    pub gas: Option<u64>,
    pub gas_price: Option<u128>,
    pub max_fee_per_gas: Option<u128>,
    pub max_priority_fee_per_gas: Option<u128>,
    pub value: U256,
    pub input: Bytes,
    pub nonce: Option<u64>,
    pub access_list: AccessList,
    pub authorizations: Option<Vec<RecoveredAuthorization>>,
    pub blob_hashes: Option<Vec<B256>>,
    pub max_fee_per_blob_gas: Option<u128>,
    /// As named (geth refuses another chain's).
    pub chain_id: Option<U256>,
}

/// A whole request.
#[derive(Clone, Debug)]
pub struct Simulation {
    pub base: BaseBlock,
    pub blocks: Vec<SimBlock>,
    pub validation: bool,
    pub trace_transfers: bool,
    /// The rules of chains other than mainnet.
    pub latest: SpecId,
}

/// The transaction a call became (what its hash is made of).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimTx {
    /// 0 (legacy: `gasPrice` named), 2, 3 or 4.
    pub tx_type: u8,
    pub nonce: u64,
    /// The gas it was given (capped by the budget).
    pub gas: u64,
    /// Legacy: the price; else the fee cap and the tip.
    pub max_fee_per_gas: u128,
    pub max_priority_fee_per_gas: u128,
    pub max_fee_per_blob_gas: u128,
}

/// How a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallFailure {
    Reverted(Bytes),
    /// geth's words for the halt.
    Halted(String),
}

/// A call's result.
#[derive(Clone, Debug)]
pub struct SimCallDone {
    pub tx: SimTx,
    pub output: Bytes,
    pub gas_used: u64,
    /// Gas before refunds (or the EIP-7623 floor, when more).
    pub max_used_gas: u64,
    /// As geth's tracer took them (empty when it failed).
    pub logs: Vec<SimLog>,
    /// The receipt's logs (what the block's bloom and receipts root hold).
    pub receipt_logs: Vec<Log>,
    pub failure: Option<CallFailure>,
    /// Its gas was cut to what was left of the budget.
    pub gas_capped: bool,
}

/// A block's results.
#[derive(Clone, Debug)]
pub struct SimBlockDone {
    pub spec: SpecId,
    pub base_fee: u64,
    pub excess_blob_gas: u64,
    pub gas_used: u64,
    pub blob_gas_used: u64,
    /// EIP-7685's requests (type byte first), empty ones left out.
    pub requests: Vec<Bytes>,
    pub calls: Vec<SimCallDone>,
}

/// What one run of a simulation gives.
#[derive(Clone, Debug)]
pub enum SimOutcome {
    Done(Vec<SimBlockDone>),
    /// The request fails as geth fails it (a call's transaction refused,
    /// the block's gas exceeded, a bad override): its code and words.
    Failed {
        code: i32,
        message: String,
    },
    Needs(Vec<Need>),
    Unanswerable(Unanswerable),
    /// What is not done here.
    Unsupported(String),
    /// The simulation passed its deadline ([`simulate_until`]).
    TimedOut,
}

type SimDb<'a> = CacheDB<RoundDb<'a>>;

/// Why a run stops early: a failure, or something not done here (a noun
/// phrase: "... does not simulate {it}").
enum Stop {
    Failed(i32, String),
    Unsupported(String),
    TimedOut,
}

/// Runs `sim` over `known`.
pub fn simulate(sim: &Simulation, known: &KnownState) -> SimOutcome {
    simulate_until(sim, known, None)
}

/// [`simulate`], halted once `deadline` passes ([`SimOutcome::TimedOut`]):
/// geth's `--rpc.evmtimeout`, over the whole simulation.
pub fn simulate_until(
    sim: &Simulation,
    known: &KnownState,
    deadline: Option<std::time::Instant>,
) -> SimOutcome {
    let trace = Rc::new(RefCell::new(Trace::default()));
    let mut db: SimDb = CacheDB::new(RoundDb::new(known, &sim.base.context, trace.clone()));
    db.cache
        .block_hashes
        .insert(U256::from(sim.base.context.number), sim.base.hash);
    let result = run_blocks(sim, &mut db, deadline);
    if matches!(result, Err(Stop::TimedOut)) {
        // Cut short: what it read or lacked is thrown away.
        return SimOutcome::TimedOut;
    }
    let trace = trace.take();
    if !trace.misses.is_empty() {
        return SimOutcome::Needs(trace.misses);
    }
    if let Some(why) = trace.unanswerable {
        return SimOutcome::Unanswerable(why);
    }
    match result {
        Ok(blocks) => SimOutcome::Done(blocks),
        Err(Stop::Failed(code, message)) => SimOutcome::Failed { code, message },
        Err(Stop::Unsupported(why)) => SimOutcome::Unsupported(why),
        Err(Stop::TimedOut) => SimOutcome::TimedOut,
    }
}

/// The parent's facts a block's fees follow from.
struct Parent {
    number: u64,
    timestamp: u64,
    gas_used: u64,
    gas_limit: u64,
    base_fee: u64,
    excess_blob_gas: Option<u64>,
    blob_gas_used: Option<u64>,
}

fn run_blocks(
    sim: &Simulation,
    db: &mut SimDb,
    deadline: Option<std::time::Instant>,
) -> Result<Vec<SimBlockDone>, Stop> {
    let base = &sim.base.context;
    let Some(header) = &base.header else {
        return Err(Stop::Unsupported(
            "a base block whose header could not be had".into(),
        ));
    };
    if !header.difficulty.is_zero() {
        return Err(Stop::Unsupported("a base block before the merge".into()));
    }
    let mut parent = Parent {
        number: base.number,
        timestamp: base.timestamp,
        gas_used: sim.base.gas_used,
        gas_limit: header.gas_limit,
        base_fee: header.base_fee.unwrap_or(0),
        excess_blob_gas: header.excess_blob_gas,
        blob_gas_used: sim.base.blob_gas_used,
    };
    let mut budget = GAS_CAP;
    let mut done = Vec::with_capacity(sim.blocks.len());
    for (i, block) in sim.blocks.iter().enumerate() {
        let parent_hash = match i {
            0 => Some(sim.base.hash),
            _ => None,
        };
        let at = BlockStart {
            parent: &parent,
            parent_hash,
            deadline,
        };
        let result = run_block(sim, block, at, &mut budget, db)?;
        parent = Parent {
            number: block.number,
            timestamp: block.timestamp,
            gas_used: result.gas_used,
            gas_limit: block.gas_limit,
            base_fee: result.base_fee,
            excess_blob_gas: result
                .spec
                .is_enabled_in(SpecId::CANCUN)
                .then_some(result.excess_blob_gas),
            blob_gas_used: Some(result.blob_gas_used),
        };
        done.push(result);
    }
    Ok(done)
}

/// Where a block starts: its parent, the parent's hash when known (the
/// first block's), and the simulation's deadline.
#[derive(Clone, Copy)]
struct BlockStart<'a> {
    parent: &'a Parent,
    parent_hash: Option<B256>,
    deadline: Option<std::time::Instant>,
}

fn run_block(
    sim: &Simulation,
    block: &SimBlock,
    at: BlockStart,
    budget: &mut u64,
    db: &mut SimDb,
) -> Result<SimBlockDone, Stop> {
    let (run, mut tracer) = start_block(sim, block, at, db)?;
    let facts = &run.facts;
    let mut done = SimBlockDone {
        spec: facts.spec,
        base_fee: facts.base_fee,
        excess_blob_gas: facts.excess_blob_gas,
        gas_used: 0,
        blob_gas_used: 0,
        requests: Vec::new(),
        calls: Vec::with_capacity(block.calls.len()),
    };
    for call in &block.calls {
        let result = run_call(&run, call, &done, budget, &mut tracer, db);
        if tracer.timed_out() {
            return Err(Stop::TimedOut);
        }
        let result = result?;
        if tracer.reads_history {
            return Err(Stop::Unsupported(
                "a call reading the history contract after the first block (its hashes are not made here)".into(),
            ));
        }
        let deposit = |log: &Log| log.topics().first() == Some(&DEPOSIT_EVENT);
        if result.receipt_logs.iter().any(deposit) {
            return Err(Stop::Unsupported("a deposit (EIP-6110 requests)".into()));
        }
        done.gas_used += result.gas_used;
        // (Only a blob transaction's blobs count: geth's receipts.)
        if result.tx.tx_type == 3 {
            let blobs = call.blob_hashes.as_ref().map_or(0, |h| h.len() as u64);
            done.blob_gas_used += GAS_PER_BLOB * blobs;
        }
        done.calls.push(result);
    }
    done.requests = end_block(&run, db)?;
    Ok(done)
}

/// A block's start: its environment, its overrides applied, its system
/// calls (EIP-4788's root, EIP-2935's parent hash) run.
fn start_block<'a>(
    sim: &'a Simulation,
    block: &'a SimBlock,
    at: BlockStart,
    db: &mut SimDb,
) -> Result<(BlockRun<'a>, logs::CallLogs), Stop> {
    let BlockStart {
        parent,
        parent_hash,
        deadline,
    } = at;
    let facts = block_facts(sim, block, parent)?;
    let precompiles = apply_overrides(&facts, block, db)?;
    let mut tracer = logs::CallLogs::new(sim.trace_transfers).deadline(deadline);
    if facts.spec.is_enabled_in(SpecId::CANCUN) {
        system_call(sim, &facts, db, BEACON_ROOTS, block.beacon_root.0.to_vec())?;
    }
    if facts.spec.is_enabled_in(SpecId::PRAGUE) {
        // A later block's parent hash depends on state roots not made
        // here: a call that reads the history contract there is refused
        // (`CallLogs::reads_history`).
        let hash = parent_hash.unwrap_or_default();
        system_call(sim, &facts, db, HISTORY_STORAGE, hash.0.to_vec())?;
        tracer.history_unknown = parent_hash.is_none();
    }
    let run = BlockRun {
        sim,
        facts,
        precompiles,
        block,
    };
    Ok((run, tracer))
}

/// A block's end: EIP-7002's and 7251's requests (type byte first, empty
/// ones left out), then its withdrawals credited.
fn end_block(run: &BlockRun, db: &mut SimDb) -> Result<Vec<Bytes>, Stop> {
    let mut requests = Vec::new();
    if run.facts.spec.is_enabled_in(SpecId::PRAGUE) {
        for (kind, contract) in [(1u8, WITHDRAWAL_REQUESTS), (2u8, CONSOLIDATION_REQUESTS)] {
            let output = system_call(run.sim, &run.facts, db, contract, Vec::new())?;
            if !output.is_empty() {
                let mut request = vec![kind];
                request.extend_from_slice(&output);
                requests.push(Bytes::from(request));
            }
        }
    }
    credit_withdrawals(run.block, db);
    Ok(requests)
}

#[cfg(test)]
mod tests;
