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
//! ([`SimOutcome::Unanswerable`]); and what is not done here (a
//! precompile overridden or moved, the deposit contract's logs):
//! [`SimOutcome::Unsupported`]. The blocks' roots and hashes are the
//! caller's to make.

mod fees;
mod logs;

use std::cell::RefCell;
use std::rc::Rc;

use alloy_primitives::{address, keccak256, Address, Bytes, Log, B256, U256};
use revm::bytecode::Bytecode;
use revm::context::result::{EVMError, ExecutionResult};
use revm::context::{BlockEnv, CfgEnv, TxEnv};
use revm::database::CacheDB;
use revm::database_interface::{Database, DatabaseCommit};
use revm::handler::SystemCallEvm;
use revm::primitives::{TxKind, KECCAK_EMPTY};
use revm::{Context, InspectEvm, MainBuilder, MainContext};

pub use fees::{blob_schedule, BlobSchedule};
pub use logs::{SimLog, TRANSFER_LOG_ADDRESS};

use crate::db::RoundDb;
use crate::inner::Trace;
use crate::{AccessList, BlockContext, KnownState, Need, RecoveredAuthorization, SpecId};
use crate::{Unanswerable, GAS_CAP};

/// EIP-4788's beacon roots contract.
pub const BEACON_ROOTS: Address = address!("0x000F3df6D732807Ef1319fB7B8bB8522d0Beac02");
/// EIP-2935's history storage contract.
pub const HISTORY_STORAGE: Address = address!("0x0000F90827F1C53a10cb7A02335B175320002935");
/// EIP-7002's withdrawal requests contract.
const WITHDRAWAL_REQUESTS: Address = address!("0x00000961Ef480Eb55e80D19ad83579A64c007002");
/// EIP-7251's consolidation requests contract.
const CONSOLIDATION_REQUESTS: Address = address!("0x0000BBdDc7CE488642fb579F8B00f3a590007251");
/// Mainnet's deposit contract (EIP-6110 reads its logs as requests).
const DEPOSIT_CONTRACT: Address = address!("0x00000000219ab540356cBB839Cbe05303d7705Fa");
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

/// A state override of one account.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountOverride {
    pub balance: Option<U256>,
    pub nonce: Option<u64>,
    pub code: Option<Bytes>,
    /// The whole storage.
    pub state: Option<Vec<(B256, B256)>>,
    /// Words changed.
    pub state_diff: Option<Vec<(B256, B256)>>,
    /// `movePrecompileToAddress`.
    pub move_precompile_to: Option<Address>,
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
}

type SimDb<'a> = CacheDB<RoundDb<'a>>;

/// Why a run stops early: a failure, or something not done here (a noun
/// phrase: "... does not simulate {it}").
enum Stop {
    Failed(i32, String),
    Unsupported(String),
}

/// Runs `sim` over `known`.
pub fn simulate(sim: &Simulation, known: &KnownState) -> SimOutcome {
    let trace = Rc::new(RefCell::new(Trace::default()));
    let mut db: SimDb = CacheDB::new(RoundDb::new(known, &sim.base.context, trace.clone()));
    db.cache
        .block_hashes
        .insert(U256::from(sim.base.context.number), sim.base.hash);
    let result = run_blocks(sim, &mut db);
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

fn run_blocks(sim: &Simulation, db: &mut SimDb) -> Result<Vec<SimBlockDone>, Stop> {
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
        let result = run_block(sim, block, &parent, parent_hash, &mut budget, db)?;
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

/// One block's environment: its rules, base fee and blob facts.
struct BlockFacts {
    spec: SpecId,
    env: BlockEnv,
    base_fee: u64,
    excess_blob_gas: u64,
}

fn block_facts(sim: &Simulation, block: &SimBlock, parent: &Parent) -> Result<BlockFacts, Stop> {
    let chain = sim.base.context.chain_id;
    let spec = crate::spec_for(chain, block.number, block.timestamp, sim.latest);
    if !spec.is_enabled_in(SpecId::MERGE) {
        return Err(Stop::Unsupported("a block before the merge".into()));
    }
    let base_fee = match (block.base_fee, sim.validation) {
        (Some(fee), _) => fee,
        (None, true) => fees::next_base_fee(parent.gas_used, parent.gas_limit, parent.base_fee),
        (None, false) => 0,
    };
    let mut env = BlockEnv {
        number: U256::from(block.number),
        timestamp: U256::from(block.timestamp),
        gas_limit: block.gas_limit,
        basefee: base_fee,
        beneficiary: block.coinbase,
        prevrandao: Some(block.prevrandao),
        difficulty: U256::ZERO,
        ..Default::default()
    };
    env.blob_excess_gas_and_price = None;
    let mut excess_blob_gas = 0;
    if spec.is_enabled_in(SpecId::CANCUN) {
        let schedule = blob_schedule(chain, spec, block.timestamp);
        let parent_spec = crate::spec_for(chain, parent.number, parent.timestamp, sim.latest);
        if parent_spec.is_enabled_in(SpecId::CANCUN) {
            excess_blob_gas = fees::next_excess_blob_gas(
                parent.excess_blob_gas.unwrap_or(0),
                parent.blob_gas_used.unwrap_or(0),
                parent.base_fee,
                &schedule,
                spec.is_enabled_in(SpecId::OSAKA),
            );
        }
        env.set_blob_excess_gas_and_price(excess_blob_gas, schedule.update_fraction);
        if let (Some(price), Some(set)) =
            (block.blob_base_fee, env.blob_excess_gas_and_price.as_mut())
        {
            set.blob_gasprice = price;
        }
    }
    Ok(BlockFacts {
        spec,
        env,
        base_fee,
        excess_blob_gas,
    })
}

fn run_block(
    sim: &Simulation,
    block: &SimBlock,
    parent: &Parent,
    parent_hash: Option<B256>,
    budget: &mut u64,
    db: &mut SimDb,
) -> Result<SimBlockDone, Stop> {
    let facts = block_facts(sim, block, parent)?;
    apply_overrides(sim, &facts, block, db)?;
    let mut tracer = logs::CallLogs::new(sim.trace_transfers);
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
        let result = run_call(sim, &facts, block, call, &done, budget, &mut tracer, db)?;
        if tracer.reads_history {
            return Err(Stop::Unsupported(
                "a call reading the history contract after the first block (its hashes are not made here)".into(),
            ));
        }
        if result
            .receipt_logs
            .iter()
            .any(|log| log.address == DEPOSIT_CONTRACT)
        {
            return Err(Stop::Unsupported("a deposit (EIP-6110 requests)".into()));
        }
        done.gas_used += result.gas_used;
        done.blob_gas_used +=
            GAS_PER_BLOB * call.blob_hashes.as_ref().map_or(0, |h| h.len() as u64);
        done.calls.push(result);
    }
    if facts.spec.is_enabled_in(SpecId::PRAGUE) {
        for (kind, contract) in [(1u8, WITHDRAWAL_REQUESTS), (2u8, CONSOLIDATION_REQUESTS)] {
            let output = system_call(sim, &facts, db, contract, Vec::new())?;
            if !output.is_empty() {
                let mut request = vec![kind];
                request.extend_from_slice(&output);
                done.requests.push(Bytes::from(request));
            }
        }
    }
    credit_withdrawals(block, db);
    Ok(done)
}

/// Applies a block's state overrides, in ascending address order (geth's).
fn apply_overrides(
    sim: &Simulation,
    facts: &BlockFacts,
    block: &SimBlock,
    db: &mut SimDb,
) -> Result<(), Stop> {
    let precompiles = revm::precompile::Precompiles::new(
        revm::precompile::PrecompileSpecId::from_spec_id(facts.spec),
    );
    let _ = sim;
    for (address, over) in &block.overrides {
        if let Some(to) = over.move_precompile_to {
            if !precompiles.contains(address) {
                return Err(Stop::Failed(
                    -32000,
                    format!("account {address} is not a precompile"),
                ));
            }
            if block.overrides.iter().any(|(a, _)| *a == to) {
                return Err(Stop::Failed(
                    -32000,
                    format!("account {to} is already overridden"),
                ));
            }
        }
        if precompiles.contains(address) {
            return Err(Stop::Unsupported(format!(
                "a precompile overridden or moved ({address})"
            )));
        }
        if over.state.is_some() && over.state_diff.is_some() {
            return Err(Stop::Failed(
                -32000,
                format!("account {address} has both 'state' and 'stateDiff'"),
            ));
        }
        let mut info = db.basic(*address).ok().flatten().unwrap_or_default();
        if let Some(nonce) = over.nonce {
            info.nonce = nonce;
        }
        if let Some(balance) = over.balance {
            info.balance = balance;
        }
        if let Some(code) = &over.code {
            info.code_hash = match code.is_empty() {
                true => KECCAK_EMPTY,
                false => keccak256(code),
            };
            info.code = Some(Bytecode::new_raw(code.clone()));
        }
        db.insert_account_info(*address, info);
        let word = |(slot, value): &(B256, B256)| {
            (U256::from_be_bytes(slot.0), U256::from_be_bytes(value.0))
        };
        if let Some(state) = &over.state {
            let _ = db.replace_account_storage(*address, state.iter().map(word).collect());
        }
        if let Some(diff) = &over.state_diff {
            for (slot, value) in diff.iter().map(word) {
                let _ = db.insert_account_storage(*address, slot, value);
            }
        }
    }
    Ok(())
}

/// A system call of the block (EIP-4788, 2935, 7002, 7251), committed; its
/// output. A contract the state lacks does nothing.
fn system_call(
    sim: &Simulation,
    facts: &BlockFacts,
    db: &mut SimDb,
    contract: Address,
    data: Vec<u8>,
) -> Result<Bytes, Stop> {
    let has_code = db
        .basic(contract)
        .ok()
        .flatten()
        .is_some_and(|info| info.code_hash != KECCAK_EMPTY);
    if !has_code {
        return Ok(Bytes::new());
    }
    let mut evm = Context::mainnet()
        .with_db(&mut *db)
        .with_cfg(cfg(sim, facts.spec))
        .with_block(facts.env.clone())
        .build_mainnet();
    let result = evm.system_call(contract, Bytes::from(data));
    drop(evm);
    match result {
        Ok(out) => {
            db.commit(out.state);
            match out.result {
                ExecutionResult::Success { output, .. } => Ok(output.into_data()),
                _ => Err(Stop::Failed(
                    -32000,
                    format!("system call to {contract} failed to execute"),
                )),
            }
        }
        Err(e) => Err(Stop::Failed(
            -32603,
            format!("system call to {contract}: {e}"),
        )),
    }
}

/// Credits a block's withdrawals (gwei) after its calls.
fn credit_withdrawals(block: &SimBlock, db: &mut SimDb) {
    for (address, gwei) in &block.withdrawals {
        let mut info = db.basic(*address).ok().flatten().unwrap_or_default();
        info.balance = info
            .balance
            .saturating_add(U256::from(*gwei) * U256::from(1_000_000_000u64));
        db.insert_account_info(*address, info);
    }
}

/// geth's settings for simulated transactions: the checks of a
/// transaction's nonce only with `validation`, no sender-code check, no
/// per-transaction gas cap, the block's gas counted here.
fn cfg(sim: &Simulation, spec: SpecId) -> CfgEnv {
    let mut cfg = CfgEnv::new_with_spec(spec);
    cfg.chain_id = sim.base.context.chain_id;
    cfg.disable_nonce_check = !sim.validation;
    cfg.disable_eip3607 = true;
    cfg.disable_block_gas_limit = true;
    cfg.tx_gas_limit_cap = Some(u64::MAX);
    cfg
}

/// The transaction a call becomes: geth's defaults (the state's nonce,
/// the block's gas left within the budget, zero fees), or why the
/// request fails.
fn transaction(
    call: &SimCall,
    state_nonce: u64,
    gas_left: u64,
    budget: u64,
) -> Result<(SimTx, bool), Stop> {
    let wanted = call.gas.unwrap_or(gas_left);
    if gas_left < wanted {
        return Err(Stop::Failed(
            -38015,
            format!("block gas limit reached: remaining: {gas_left}, required: {wanted}"),
        ));
    }
    let gas = wanted.min(budget);
    let named_1559 = call.max_fee_per_gas.is_some() || call.max_priority_fee_per_gas.is_some();
    if call.gas_price.is_some() && named_1559 {
        return Err(Stop::Failed(
            -32000,
            "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified".into(),
        ));
    }
    let typed_fields =
        !call.access_list.is_empty() || call.authorizations.is_some() || call.blob_hashes.is_some();
    if call.gas_price.is_some() && typed_fields {
        return Err(Stop::Unsupported(
            "a call naming gasPrice with typed fields (an access list, blobs, delegations)".into(),
        ));
    }
    let tx_type = match (
        call.gas_price.is_some(),
        &call.authorizations,
        &call.blob_hashes,
    ) {
        (true, ..) => 0,
        (false, Some(_), _) => 4,
        (false, None, Some(_)) => 3,
        (false, None, None) => 2,
    };
    let (cap, tip) = match call.gas_price {
        Some(price) => (price, price),
        None => (
            call.max_fee_per_gas.unwrap_or(0),
            call.max_priority_fee_per_gas.unwrap_or(0),
        ),
    };
    let tx = SimTx {
        tx_type,
        nonce: call.nonce.unwrap_or(state_nonce),
        gas,
        max_fee_per_gas: cap,
        max_priority_fee_per_gas: tip,
        max_fee_per_blob_gas: call.max_fee_per_blob_gas.unwrap_or(0),
    };
    Ok((tx, gas < wanted))
}

/// geth's first check of a transaction under `validation` (before its
/// fees, where revm checks them first).
fn check_nonce(from: Address, tx: u64, state: u64, gas: u64) -> Result<(), Stop> {
    let (code, message) = match tx.cmp(&state) {
        std::cmp::Ordering::Greater => (
            -38011,
            format!("nonce too high: address {from}, tx: {tx} state: {state}"),
        ),
        std::cmp::Ordering::Less => (
            -38010,
            format!("nonce too low: address {from}, tx: {tx} state: {state}"),
        ),
        std::cmp::Ordering::Equal if state == u64::MAX => (
            -32603,
            format!("nonce has max value: address {from}, nonce: {state}"),
        ),
        std::cmp::Ordering::Equal => return Ok(()),
    };
    Err(Stop::Failed(
        code,
        format!("err: {message} (supplied gas {gas})"),
    ))
}

#[allow(clippy::too_many_arguments)]
fn run_call(
    sim: &Simulation,
    facts: &BlockFacts,
    block: &SimBlock,
    call: &SimCall,
    done: &SimBlockDone,
    budget: &mut u64,
    tracer: &mut logs::CallLogs,
    db: &mut SimDb,
) -> Result<SimCallDone, Stop> {
    let sender = db.basic(call.from).ok().flatten().unwrap_or_default();
    let gas_left = block.gas_limit.saturating_sub(done.gas_used);
    let (tx, gas_capped) = transaction(call, sender.nonce, gas_left, *budget)?;
    if sim.validation {
        check_nonce(call.from, tx.nonce, sender.nonce, tx.gas)?;
    }
    let mut cfg = cfg(sim, facts.spec);
    // geth skips the fee checks only without validation and with no fee
    // named (or both zero).
    cfg.disable_base_fee =
        !sim.validation && tx.max_fee_per_gas == 0 && tx.max_priority_fee_per_gas == 0;
    let mut env = TxEnv {
        tx_type: tx.tx_type,
        caller: call.from,
        gas_limit: tx.gas,
        gas_price: tx.max_fee_per_gas,
        gas_priority_fee: (tx.tx_type != 0).then_some(tx.max_priority_fee_per_gas),
        kind: call.to.map_or(TxKind::Create, TxKind::Call),
        value: call.value,
        data: call.input.clone(),
        nonce: tx.nonce,
        chain_id: Some(sim.base.context.chain_id),
        access_list: call.access_list.clone(),
        blob_hashes: call.blob_hashes.clone().unwrap_or_default(),
        max_fee_per_blob_gas: tx.max_fee_per_blob_gas,
        ..Default::default()
    };
    env.set_recovered_authorization(call.authorizations.clone().unwrap_or_default());
    tracer.reset();
    let result = {
        let mut evm = Context::mainnet()
            .with_db(&mut *db)
            .with_cfg(cfg)
            .with_block(facts.env.clone())
            .build_mainnet_with_inspector(&mut *tracer);
        evm.inspect_tx(env)
    };
    let out = match result {
        Ok(out) => out,
        Err(EVMError::Transaction(invalid)) => {
            let (code, message) = fees::refusal(&invalid);
            return Err(Stop::Failed(
                code,
                format!("err: {message} (supplied gas {})", tx.gas),
            ));
        }
        Err(e) => return Err(Stop::Failed(-32603, e.to_string())),
    };
    db.commit(out.state);
    // geth's nonce wraps past 2^64 - 1; revm's stays.
    if sender.nonce == u64::MAX && call.to.is_some() {
        let mut info = db.basic(call.from).ok().flatten().unwrap_or_default();
        info.nonce = 0;
        db.insert_account_info(call.from, info);
    }
    let logs = tracer.take();
    let gas = match &out.result {
        ExecutionResult::Success { gas, .. }
        | ExecutionResult::Revert { gas, .. }
        | ExecutionResult::Halt { gas, .. } => *gas,
    };
    let (gas_used, max_used_gas) = (
        gas.tx_gas_used(),
        gas.total_gas_spent().max(gas.floor_gas()),
    );
    *budget = budget.saturating_sub(gas_used);
    let (output, failure, receipt_logs, logs) = match out.result {
        ExecutionResult::Success {
            output,
            logs: receipt,
            ..
        } => (output.into_data(), None, receipt, logs),
        ExecutionResult::Revert { output, .. } => (
            Bytes::new(),
            Some(CallFailure::Reverted(output)),
            Vec::new(),
            Vec::new(),
        ),
        ExecutionResult::Halt { reason, .. } => (
            Bytes::new(),
            Some(CallFailure::Halted(crate::halt_message(&reason))),
            Vec::new(),
            Vec::new(),
        ),
    };
    Ok(SimCallDone {
        tx,
        output,
        gas_used,
        max_used_gas,
        logs,
        receipt_logs,
        failure,
        gas_capped,
    })
}

#[cfg(test)]
mod tests;
