//! Runs an `eth_call` in revm over state read privately, in rounds.
//!
//! The caller holds what it has read so far ([`KnownState`]: accounts,
//! their code, storage words, and the answers of inner calls that went
//! their own way). [`run`] executes the call over it. Every read the
//! state lacks is noted and answered as "absent" for the rest of that run
//! (whose result is then thrown away): the outcome is the whole list of
//! reads to make ([`Outcome::Needs`]), which the caller fetches in one
//! private request and runs again. Most calls settle in two or three
//! rounds: the contract's account and code, then a proxy's
//! implementation, then the mappings.
//!
//! What the state can never answer privately (a storage word of a
//! contract whose storage the snapshot does not hold, an old block's
//! hash) ends the run as [`Outcome::Unanswerable`], never as a zero
//! read. Inside a batch, it is the inner call that made the read which
//! is set apart ([`Outcome::Needs`]`::inner`): a call of the top-level
//! contract to another one ([`InnerCall`]), made before anything in the
//! transaction wrote state, so that its answer taken elsewhere (the
//! upstream node, or a failure under private-only settings) is the one it
//! would have given here. The next run uses that answer in its place and
//! the rest of the batch stays private.
//!
//! Semantics are geth's `eth_call`: no nonce or sender-code checks, no
//! block gas limit, a gas cap of [`GAS_CAP`], a zero base fee when the
//! call names no gas price (so that it pays nothing), the zero address as
//! the sender when none is given.

#![forbid(unsafe_code)]

mod access;
mod db;
mod inner;
mod naming;
pub mod overrides;
mod precompiles;
pub mod simulate;
mod spec;
mod system;
mod timer;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use revm::bytecode::Bytecode;
use revm::context::result::{ExecutionResult, HaltReason};
use revm::context::{BlockEnv, CfgEnv, TxEnv};
use revm::primitives::TxKind;
use revm::{Context, InspectEvm, MainContext};

pub use access::Touched;
pub use naming::Naming;
pub use revm::context::transaction::{AccessList, AccessListItem};
pub use revm::context_interface::transaction::{
    Authorization, RecoveredAuthorization, SignedAuthorization,
};
pub use revm::primitives::hardfork::SpecId;
pub use spec::spec_for;

/// geth's default `--rpc.gascap`: the gas of a call that names none, and
/// the most one may name.
pub const GAS_CAP: u64 = 50_000_000;

/// geth's message for a call that ran out of gas.
pub const OUT_OF_GAS: &str = "out of gas";

/// The block a call runs in: what the view's manifest says (number,
/// time, chain), and its header when one was fetched and checked against
/// the block hash the view names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockContext {
    pub chain_id: u64,
    pub number: u64,
    pub timestamp: u64,
    /// `None`: no header could be had (no upstream node); a call that
    /// reads a fact only the header has is unanswerable
    /// ([`Unanswerable::BlockField`]).
    pub header: Option<HeaderFacts>,
}

/// What a call may read of its block's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderFacts {
    /// `None` before London.
    pub base_fee: Option<u64>,
    pub coinbase: Address,
    /// The header's mix hash: PREVRANDAO after the merge.
    pub mix_hash: B256,
    pub difficulty: U256,
    pub gas_limit: u64,
    /// BLOCKHASH of the block before (the only one a call may ask).
    pub parent_hash: B256,
    /// `None` before Cancun.
    pub excess_blob_gas: Option<u64>,
    /// What the block used (a simulated block after it takes its fees
    /// from them).
    pub gas_used: u64,
    /// `None` before Cancun.
    pub blob_gas_used: Option<u64>,
}

/// What an `eth_call` asks, as a wallet sends it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallArgs {
    pub from: Option<Address>,
    /// `None`: a creation (the init code in `input` runs, and its return
    /// data is the answer).
    pub to: Option<Address>,
    pub gas: Option<u64>,
    pub gas_price: Option<u128>,
    pub max_fee_per_gas: Option<u128>,
    pub max_priority_fee_per_gas: Option<u128>,
    pub value: U256,
    pub input: Bytes,
    /// EIP-2930: the call's own access list as given, warm from the start
    /// and paid for as a transaction pays (each entry, repeated ones too).
    pub access_list: AccessList,
    /// EIP-7702: the delegations the call applies before it runs, each
    /// with the account its signature recovers (one that recovers none, or
    /// whose chain or nonce is not the authority's, is skipped, as a node
    /// skips it).
    /// (Named empty, the call is still of that type, which a node
    /// refuses: `authorizationList: []`; so with `blobVersionedHashes`.)
    pub authorizations: Option<Vec<RecoveredAuthorization>>,
    /// EIP-4844: the versioned hashes `BLOBHASH` reads, and the blob fee
    /// cap.
    pub blob_hashes: Option<Vec<B256>>,
    pub max_fee_per_blob_gas: Option<u128>,
    /// State overrides (the methods' third parameter), in ascending
    /// address order, applied before the call runs.
    pub overrides: Vec<(Address, overrides::AccountOverride)>,
    /// Block overrides (`eth_call`'s fourth parameter).
    pub block_overrides: Option<overrides::BlockOverrides>,
    /// Whose rules the overrides follow (the method's).
    pub override_rules: overrides::OverrideRules,
}

impl CallArgs {
    /// The accounts that signed its delegations (those that recover).
    pub fn authorities(&self) -> impl Iterator<Item = Address> + '_ {
        self.authorizations
            .iter()
            .flatten()
            .filter_map(|a| a.authority())
    }
}

/// An account as read privately.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountFacts {
    /// In the state at all (an absent account reads as no account).
    pub exists: bool,
    pub balance: U256,
    pub nonce: u64,
    /// Whether it has code (its bytes are a read of their own).
    pub has_code: bool,
}

/// A read the state lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Need {
    Account(Address),
    /// The code of an account read with `has_code`.
    Code(Address),
    Slot {
        contract: Address,
        slot: B256,
    },
}

/// A call the top-level contract made to another contract, answered
/// elsewhere because something under it is unanswerable privately.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InnerCall {
    /// The contract that made it (the top-level one).
    pub caller: Address,
    pub target: Address,
    pub input: Bytes,
    /// The gas the frame was given: the node is asked with as much, so
    /// that a call that runs out of gas there runs out of gas here.
    pub gas_limit: u64,
}

/// EIP-7825's cap on a transaction's gas (Osaka): a node may refuse an
/// `eth_call` given more.
pub const TX_GAS_CAP: u64 = 1 << 24;

impl InnerCall {
    /// The gas of a top-level `eth_call` that gives the call's frame
    /// `gas_limit`: the frame's gas plus the transaction's intrinsic cost
    /// (21,000 and the call data), and at least EIP-7623's floor for the
    /// data, so that the node accepts it. `None` past [`TX_GAS_CAP`]: the
    /// node's own default then (no frame that large runs out of gas in a
    /// read).
    pub fn upstream_gas(&self) -> Option<u64> {
        let zeros = self.input.iter().filter(|b| **b == 0).count() as u64;
        let nonzeros = self.input.len() as u64 - zeros;
        let intrinsic = 21_000 + 4 * zeros + 16 * nonzeros;
        let floor = 21_000 + 10 * (zeros + 4 * nonzeros);
        let gas = self.gas_limit.saturating_add(intrinsic).max(floor);
        (gas <= TX_GAS_CAP).then_some(gas)
    }

    /// What its answer is kept by.
    pub(crate) fn key(&self) -> (Address, Address, Bytes) {
        (self.caller, self.target, self.input.clone())
    }
}
/// An inner call's answer, taken elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InnerAnswer {
    Returned(Bytes),
    Reverted(Bytes),
}

/// Why a call cannot be answered privately.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unanswerable {
    /// It reads storage of a contract whose storage is not held.
    Storage(Address),
    /// It asks the hash of a block other than the one before (or of that
    /// one without a header).
    BlockHash(u64),
    /// It reads a fact of the block only its header has, without one
    /// (the opcode).
    BlockField(u8),
    /// It observes gas (the `GAS` opcode, or a frame running out of gas)
    /// after an inner call answered elsewhere, whose gas is not known
    /// here: the node's answer could differ (a quoter that measures
    /// `gasleft()` around a call), so none is made.
    GasAfterInner,
    /// What is not done here (a noun phrase: an override of a system
    /// contract, code that begins like a delegation and is none).
    Unsupported(String),
}

/// What the state holds: every read so far, and the contracts whose whole
/// storage may be read.
#[derive(Clone, Debug, Default)]
pub struct KnownState {
    accounts: HashMap<Address, AccountFacts>,
    codes: HashMap<Address, (B256, Bytecode)>,
    slots: HashMap<(Address, B256), U256>,
    held: HashSet<Address>,
    /// Every contract's storage may be read (a whole-state view): a slot
    /// never read is a miss to read, never unanswerable.
    whole_state: bool,
    /// By caller, target and input: a later run whose frame is given
    /// other gas (before its reads were all known) reuses the answer.
    inner: HashMap<(Address, Address, Bytes), InnerAnswer>,
}

impl KnownState {
    /// A state that may read the storage of `held` contracts.
    pub fn new(held: impl IntoIterator<Item = Address>) -> Self {
        KnownState {
            held: held.into_iter().collect(),
            ..Default::default()
        }
    }

    /// A state that may read every contract's storage (the view holds the
    /// whole state, and says so under its signature).
    pub fn whole_state() -> Self {
        KnownState {
            whole_state: true,
            ..Default::default()
        }
    }

    pub fn add_account(&mut self, address: Address, facts: AccountFacts) {
        self.accounts.insert(address, facts);
    }

    pub fn add_code(&mut self, address: Address, code: Bytes) {
        let hash = keccak256(&code);
        self.codes.insert(
            address,
            (hash, Bytecode::new_raw_checked(code).unwrap_or_default()),
        );
    }

    pub fn add_slot(&mut self, contract: Address, slot: B256, word: U256) {
        self.slots.insert((contract, slot), word);
    }

    pub fn add_inner(&mut self, call: InnerCall, answer: InnerAnswer) {
        self.inner.insert(call.key(), answer);
    }

    pub fn account(&self, address: &Address) -> Option<&AccountFacts> {
        self.accounts.get(address)
    }

    /// Whether `contract`'s storage may be read.
    pub fn holds(&self, contract: &Address) -> bool {
        self.whole_state || self.held.contains(contract)
    }
}

/// A call's end, as the node reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallResult {
    Success {
        output: Bytes,
        gas_used: u64,
    },
    Revert {
        output: Bytes,
        gas_used: u64,
    },
    /// It ran out of gas, or hit an invalid instruction: geth's message.
    Halt {
        message: String,
        gas_used: u64,
    },
    /// The call was refused before running (e.g. the sender cannot pay
    /// the value): geth's message.
    Invalid {
        message: String,
    },
}

/// What one run gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done(CallResult),
    /// Reads to make and inner calls to answer elsewhere, then run again.
    Needs {
        reads: Vec<Need>,
        inner: Vec<InnerCall>,
    },
    Unanswerable(Unanswerable),
    /// The run passed its deadline ([`run_named_until`]): what it read or
    /// lacked is thrown away.
    TimedOut,
}

/// Runs `args` in `block` over `known`, with its own access list.
pub fn run(block: &BlockContext, spec: SpecId, args: &CallArgs, known: &KnownState) -> Outcome {
    run_traced(block, spec, args, known, &args.access_list).0
}

/// The accounts and slots an access list makes warm, each once.
pub fn warm_set(list: &AccessList) -> Touched {
    let mut set = Touched::new();
    for item in list.iter() {
        let slots = set.entry(item.address).or_default();
        slots.extend(item.storage_keys.iter().copied());
    }
    set
}

/// An access list of `set`'s accounts and slots, each once (the list a
/// run that touched them would be given).
pub fn listing(set: &Touched) -> AccessList {
    let items = set.iter().map(|(address, slots)| AccessListItem {
        address: *address,
        storage_keys: slots.iter().copied().collect(),
    });
    AccessList(items.collect())
}

/// Runs `args` with `access_list` (EIP-2930: those accounts and slots
/// warm from the start, each entry paid) over `known`; with what the run
/// touched, as an access list (the sender and the precompiles left out).
pub fn run_traced(
    block: &BlockContext,
    spec: SpecId,
    args: &CallArgs,
    known: &KnownState,
    access_list: &AccessList,
) -> (Outcome, Touched) {
    let (outcome, touched, _) = run_named(block, spec, args, known, access_list);
    (outcome, touched)
}

/// [`run_traced`], with what the call names ([`Naming`]): which of the
/// reads it lacked name its wallet.
pub fn run_named(
    block: &BlockContext,
    spec: SpecId,
    args: &CallArgs,
    known: &KnownState,
    access_list: &AccessList,
) -> (Outcome, Touched, Naming) {
    run_named_until(block, spec, args, known, access_list, None)
}

/// [`run_named`], halted once `deadline` passes ([`Outcome::TimedOut`]):
/// geth's `--rpc.evmtimeout`.
pub fn run_named_until(
    block: &BlockContext,
    spec: SpecId,
    args: &CallArgs,
    known: &KnownState,
    access_list: &AccessList,
    deadline: Option<std::time::Instant>,
) -> (Outcome, Touched, Naming) {
    let trace = Rc::new(RefCell::new(inner::Trace::default()));
    let round = db::RoundDb::new(known, block, trace.clone()).no_hash_past_block();
    let env = block_env(block, spec, args);
    // The block's rules as its overridden number and time make them.
    let spec = match &args.block_overrides {
        Some(_) => spec_for(
            block.chain_id,
            env.number.saturating_to(),
            env.timestamp.saturating_to(),
            spec,
        ),
        None => spec,
    };
    let call = CallRun {
        spec,
        cfg: call_cfg(block, spec),
        env,
        tx: tx_env(block, args, access_list),
        inspector: call_inspectors(block, spec, args, known, access_list, deadline, &trace),
    };
    // Without overrides the round's state is read as it is: a cache over
    // it would answer a second inner call's read of what the first lacked
    // without noting it again (so without setting that call apart too).
    let (result, touched, naming) = match args.overrides.is_empty() {
        true => call.run(round, precompiles::BlockPrecompiles::new(spec)),
        false => {
            let mut db = revm::database::CacheDB::new(round);
            match overrides::apply_state(spec, &args.overrides, &mut db, args.override_rules) {
                Ok(precompiles) => call.run(&mut db, precompiles),
                Err(refused) => {
                    let outcome = refused_overrides(refused, trace.take());
                    return (outcome, Touched::new(), Naming::of_call(args));
                }
            }
        }
    };
    (outcome_of(trace.take(), result), touched, naming)
}

/// What a run whose overrides were refused gives: the reads it lacked
/// first (a refusal after a read it lacked may be another with it), then
/// geth's refusal, or what is not done here.
fn refused_overrides(refused: overrides::OverrideError, trace: inner::Trace) -> Outcome {
    match refused {
        _ if !trace.misses.is_empty() => outcome_of::<String>(trace, Err(String::new())),
        overrides::OverrideError::Refused(message) => {
            Outcome::Done(CallResult::Invalid { message })
        }
        overrides::OverrideError::Unsupported(what) => {
            Outcome::Unanswerable(Unanswerable::Unsupported(what))
        }
    }
}

/// A call's inspectors: the inner calls it may set apart, what it touches
/// (its access list) and what it names.
fn call_inspectors<'a>(
    block: &BlockContext,
    spec: SpecId,
    args: &CallArgs,
    known: &'a KnownState,
    access_list: &AccessList,
    deadline: Option<std::time::Instant>,
    trace: &Rc<RefCell<inner::Trace>>,
) -> CallInspectors<'a> {
    // A call that changed state before its inner calls (value sent,
    // delegations applied, overrides, a creation), runs in a block of its
    // own (block overrides) or whose frames read its blobs cannot have one
    // answered apart: the node would run it without them.
    let apart_differs = !args.value.is_zero()
        || args.authorizations.is_some()
        || args.blob_hashes.is_some()
        || !args.overrides.is_empty()
        || args.block_overrides.is_some()
        || args.to.is_none();
    let excess = block
        .header
        .as_ref()
        .and_then(|h| h.excess_blob_gas)
        .unwrap_or(0);
    let blob_fee_known = excess == 0 || spec::blob_schedule_known(block.chain_id);
    let inner = inner::InnerCalls::new(known, trace.clone(), apart_differs, block.header.is_some())
        .blob_fee_known(blob_fee_known)
        .deadline(deadline);
    let fork_precompiles =
        revm::precompile::Precompiles::new(revm::precompile::PrecompileSpecId::from_spec_id(spec));
    // As reth and anvil list it (revm's inspectors): the recipient and its
    // slots included (geth leaves the recipient out).
    // (Authorities are listed, as anvil lists them; geth leaves them out.)
    let excluded =
        std::iter::once(args.from.unwrap_or_default()).chain(fork_precompiles.addresses().copied());
    // As geth's tracer, the list a run starts with is in what it lists.
    let recorder = access::AccessRecorder::new(excluded).seeded(&warm_set(access_list));
    let naming = naming::NamingWatch {
        naming: Naming::of_call(args),
    };
    (inner, (recorder, naming))
}

/// A call's inspectors ([`call_inspectors`]).
type CallInspectors<'a> = (
    inner::InnerCalls<'a>,
    (access::AccessRecorder, naming::NamingWatch),
);

/// One call's run: its rules, environment, transaction and inspectors.
struct CallRun<'a> {
    spec: SpecId,
    cfg: CfgEnv,
    env: BlockEnv,
    tx: TxEnv,
    inspector: CallInspectors<'a>,
}

/// A run's result (revm's error in words), what it touched and what it
/// named.
type Ran = (
    Result<revm::context::result::ExecResultAndState<ExecutionResult>, String>,
    Touched,
    Naming,
);

impl CallRun<'_> {
    /// Runs over `db` with `precompiles`.
    fn run<DB: revm::Database>(self, db: DB, precompiles: precompiles::BlockPrecompiles) -> Ran {
        let context = Context::mainnet()
            .with_db(db)
            .with_cfg(self.cfg)
            .with_block(self.env);
        let mut evm = revm::context::Evm::new_with_inspector(
            context,
            self.inspector,
            revm::handler::instructions::EthInstructions::new_mainnet_with_spec(self.spec),
            precompiles,
        );
        let result = evm.inspect_tx(self.tx).map_err(|e| e.to_string());
        let touched = std::mem::take(&mut evm.inspector.1 .0.touched);
        let naming = std::mem::take(&mut evm.inspector.1 .1.naming);
        (result, touched, naming)
    }
}

/// What a run's trace and result say: a timeout first (the run was cut
/// short), then reads (a run that lacked any is thrown away), then what is
/// unanswerable, then the inner calls to answer apart, then the answer.
fn outcome_of<E: std::fmt::Display>(
    trace: inner::Trace,
    result: Result<revm::context::result::ExecResultAndState<ExecutionResult>, E>,
) -> Outcome {
    if trace.timed_out {
        return Outcome::TimedOut;
    }
    if !trace.misses.is_empty() {
        return Outcome::Needs {
            reads: trace.misses,
            inner: Vec::new(),
        };
    }
    if let Some(why) = trace.unanswerable {
        return Outcome::Unanswerable(why);
    }
    if trace.gas_after_inner {
        return Outcome::Unanswerable(Unanswerable::GasAfterInner);
    }
    if !trace.inner_unanswerable.is_empty() {
        return Outcome::Needs {
            reads: Vec::new(),
            inner: trace.inner_unanswerable,
        };
    }
    Outcome::Done(match result {
        Ok(done) => call_result(done.result),
        Err(e) => CallResult::Invalid {
            message: invalid_message(&e.to_string()),
        },
    })
}

/// geth's `eth_call` settings.
fn call_cfg(block: &BlockContext, spec: SpecId) -> CfgEnv {
    let mut cfg = CfgEnv::new_with_spec(spec);
    cfg.chain_id = block.chain_id;
    cfg.disable_nonce_check = true;
    cfg.disable_base_fee = true;
    cfg.disable_eip3607 = true;
    cfg.disable_block_gas_limit = true;
    // The gas cap is the call's own (GAS_CAP), not a transaction's.
    cfg.tx_gas_limit_cap = Some(u64::MAX);
    cfg
}

/// The block as its header says; a call that names no gas price sees a
/// zero base fee (as geth gives it, so that it pays nothing). Without a
/// header, the facts only it has are zero (and reading them is
/// unanswerable, see [`inner`]).
fn block_env(block: &BlockContext, spec: SpecId, args: &CallArgs) -> BlockEnv {
    let priced = args.gas_price.is_some() || args.max_fee_per_gas.is_some();
    let mut env = BlockEnv {
        number: U256::from(block.number),
        timestamp: U256::from(block.timestamp),
        gas_limit: GAS_CAP,
        basefee: 0,
        prevrandao: spec.is_enabled_in(SpecId::MERGE).then_some(B256::ZERO),
        ..Default::default()
    };
    let blobs = spec.is_enabled_in(SpecId::CANCUN);
    let excess = block.header.as_ref().and_then(|h| h.excess_blob_gas);
    env.blob_excess_gas_and_price = None;
    if blobs {
        let fraction = spec::blob_schedule(block.chain_id, spec, block.timestamp).update_fraction;
        env.set_blob_excess_gas_and_price(excess.unwrap_or(0), fraction);
    }
    if let Some(header) = &block.header {
        env.beneficiary = header.coinbase;
        env.gas_limit = header.gas_limit;
        env.difficulty = header.difficulty;
        env.basefee = header.base_fee.unwrap_or(0);
        if spec.is_enabled_in(SpecId::MERGE) {
            env.prevrandao = Some(header.mix_hash);
        }
    }
    if let Some(overrides) = &args.block_overrides {
        overrides.apply(&mut env);
    }
    // geth's `NoBaseFee`: a call that names no price sees a base fee of
    // zero, overridden or not; and one whose blob fee cap is 0 (named so,
    // or left out with blobs' hashes) a blob base fee of 0, so that it
    // pays none.
    if !priced {
        env.basefee = 0;
    }
    let no_blob_cap = match args.max_fee_per_blob_gas {
        Some(cap) => cap == 0,
        None => args.blob_hashes.is_some(),
    };
    if no_blob_cap {
        if let Some(price) = env.blob_excess_gas_and_price.as_mut() {
            price.blob_gasprice = 0;
        }
    }
    env
}

fn tx_env(block: &BlockContext, args: &CallArgs, access_list: &AccessList) -> TxEnv {
    // As geth: blob fields count only with blobs' hashes.
    let blobs = args.blob_hashes.is_some();
    let delegates = args.authorizations.is_some();
    let named_1559 = args.max_fee_per_gas.is_some() || args.max_priority_fee_per_gas.is_some();
    let dynamic = named_1559 || blobs || delegates;
    // A typed call naming only `gasPrice` pays it as fee cap and tip
    // alike (geth's reading).
    let (cap, tip) = match named_1559 {
        true => (args.max_fee_per_gas, args.max_priority_fee_per_gas),
        false => (args.gas_price, args.gas_price),
    };
    let mut env = TxEnv {
        tx_type: tx_type(named_1559, !access_list.is_empty(), blobs, delegates),
        access_list: access_list.clone(),
        caller: args.from.unwrap_or_default(),
        gas_limit: args.gas.unwrap_or(GAS_CAP).min(GAS_CAP),
        gas_price: match dynamic {
            true => cap.unwrap_or(0),
            false => args.gas_price.unwrap_or(0),
        },
        gas_priority_fee: dynamic.then(|| tip.unwrap_or(0)),
        kind: args.to.map_or(TxKind::Create, TxKind::Call),
        value: args.value,
        data: args.input.clone(),
        chain_id: Some(block.chain_id),
        blob_hashes: args.blob_hashes.clone().unwrap_or_default(),
        max_fee_per_blob_gas: match blobs {
            true => args.max_fee_per_blob_gas.unwrap_or(0),
            false => 0,
        },
        ..Default::default()
    };
    env.set_recovered_authorization(args.authorizations.clone().unwrap_or_default());
    env
}

/// The transaction type a call runs as: the newest its fields need (an
/// access list needs a typed transaction, EIP-2930's or a later one).
fn tx_type(dynamic: bool, listed: bool, blobs: bool, delegates: bool) -> u8 {
    match (delegates, blobs, dynamic, listed) {
        (true, ..) => 4,
        (_, true, ..) => 3,
        (_, _, true, _) => 2,
        (_, _, _, true) => 1,
        _ => 0,
    }
}

fn call_result(result: ExecutionResult) -> CallResult {
    match result {
        ExecutionResult::Success { output, gas, .. } => CallResult::Success {
            output: output.into_data(),
            gas_used: gas.tx_gas_used(),
        },
        ExecutionResult::Revert { output, gas, .. } => CallResult::Revert {
            output,
            gas_used: gas.tx_gas_used(),
        },
        ExecutionResult::Halt { reason, gas, .. } => CallResult::Halt {
            message: halt_message(&reason),
            gas_used: gas.tx_gas_used(),
        },
    }
}

/// geth's words for a halt.
fn halt_message(reason: &HaltReason) -> String {
    match reason {
        HaltReason::OutOfGas(_) => OUT_OF_GAS.into(),
        HaltReason::OpcodeNotFound | HaltReason::InvalidFEOpcode => "invalid opcode".into(),
        HaltReason::StackUnderflow => "stack underflow".into(),
        HaltReason::StackOverflow => "stack limit reached 1024".into(),
        HaltReason::InvalidJump => "invalid jump destination".into(),
        HaltReason::CallTooDeep => "max call depth exceeded".into(),
        HaltReason::StateChangeDuringStaticCall => "write protection".into(),
        HaltReason::OutOfOffset => "return data out of bounds".into(),
        other => format!("{other:?}"),
    }
}

/// geth's words for a refused call, where revm's say the same thing.
fn invalid_message(revm: &str) -> String {
    if revm.contains("lack of funds") {
        "insufficient funds for gas * price + value".into()
    } else if revm.contains("empty authorization list") {
        "EIP-7702 transaction with empty auth list".into()
    } else if revm.contains("empty blobs") {
        "blob transaction missing blob hashes".into()
    } else {
        revm.to_string()
    }
}

#[cfg(test)]
mod tests;
