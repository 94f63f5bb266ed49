//! `eth_call` executed here: the contract's own code run in revm
//! ([`call_exec`]) over state read privately from one view, in rounds.
//! Each round reads every account and storage word the last run lacked in
//! one PIR request (padded like any other, with its canaries), and the
//! code of every contract account it read; answers are kept per base
//! (the reader's kept answers), so repeats cost nothing. The block is the
//! view's: its header, fetched from the upstream by the hash the view
//! names and checked against it, gives coinbase, base fee, prevrandao and
//! gas limit (without an upstream, a call that reads them is not
//! answered privately).
//!
//! A call that cannot be answered privately (storage of a contract the
//! view does not hold, another block's hash, the bound on rounds or keys)
//! takes the configured fallback, decided by the caller; the log names the
//! contract, never the caller. Inside a batch (any contract calling
//! others: Multicall3, Multicall2, the BalanceChecker), only the inner
//! calls that cannot be answered go their own way: upstream alone where
//! the gate admits them ([`crate::gate`]); where it does not, or there is
//! no upstream, the whole call takes the fallback (so an error where the
//! gate refuses it too), never a revert, a zero or `success = false`.
//!
//! Here: the rounds of a call over one view ([`Executor::run`]); beside
//! it, `eth_estimateGas` (estimate), `eth_createAccessList` (access_list)
//! and the call objects and answers of the JSON-RPC methods
//! (call_object).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, Bytes, B256, U256};
use call_exec::{
    AccountFacts, BlockContext, CallArgs, CallResult, HeaderFacts, InnerAnswer, InnerCall,
    KnownState, Need, Outcome, SpecId, Touched, Unanswerable,
};
use ethpir_client::levels::ViewClient;
use ethpir_client::{AccountState, BlockSelector, KeyState, PrivateReader, ReadError, ReadKey};
use protocol::storage::PrivateStorage;
use protocol::CodeRef;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::upstream::Upstream;

mod access_list;
mod call_object;
mod estimate;
mod forged;
mod geth;
mod overrides;
mod simulate;

pub use access_list::access_list_answer;
pub use call_object::{call_of, node_answer};
pub use estimate::{estimate_answer, Estimated};
pub use geth::GethError;
pub use simulate::{simulate_answer, simulation_of};

/// Most runs of one call (the first included). A token's balance takes
/// 2-3; issue 48 reports a multisig's owner list at 6, a concentrated-
/// liquidity quote crossing one tick at 7 and a router's swap past 8, and
/// each further pool or tick of a multi-hop swap adds one or two: 24
/// leaves that margin. The keys stay bounded by [`MAX_KEYS`] whatever
/// the rounds, and every round is one padded PIR request.
pub const MAX_ROUNDS: usize = 24;
/// Most keys (accounts and words) one call reads.
pub const MAX_KEYS: usize = 1024;
/// Most accounts named by a call's arguments asked in its first round.
const ARGUMENT_ACCOUNTS: usize = 8;
/// Headers kept (by hash).
const HEADERS_KEPT: usize = 64;
/// geth's default `--rpc.evmtimeout`: the EVM time one run may take before
/// the request is answered with geth's timeout error (and a request
/// [`EVM_TIMEOUTS_PER_REQUEST`] of them over all its runs).
pub const EVM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Inner calls asked elsewhere at once (each is one upstream request).
const INNER_AT_ONCE: usize = 8;
/// Most inner calls one request sets apart over all its runs (each run
/// sets apart at most 64): past them the call takes the fallback whole,
/// one request instead of hundreds.
const MAX_INNER_PER_REQUEST: usize = 256;
/// A request's EVM time over all its runs, in [`EVM_TIMEOUT`]s: geth
/// times each run of an `eth_call` alone (and no estimate's); a request
/// here may take several runs (its rounds, an estimate's attempts), each
/// given the timeout, up to this many in all.
const EVM_TIMEOUTS_PER_REQUEST: u32 = 4;

/// What executing a call gave.
#[derive(Debug)]
pub enum Executed {
    Answered(Answered),
    /// Not answerable privately: why (names a contract, never the caller).
    NotPrivate(String),
}

/// A call answered, and what it cost.
#[derive(Debug)]
pub struct Answered {
    pub result: CallResult,
    pub rounds: usize,
    /// Keys read (accounts and words) over every round.
    pub keys: usize,
    /// PIR requests sent (cover ones included).
    pub requests: u64,
    /// Time spent in the EVM, over every round.
    pub evm_time: std::time::Duration,
    /// Inner calls answered elsewhere.
    pub inner_apart: usize,
    pub snapshot: String,
}

/// Executes calls over a reader's views.
pub struct Executor {
    reader: Arc<PrivateReader>,
    /// Where an inner call that cannot be answered privately is asked on
    /// its own, where the gate admits it (else, or without one, the whole
    /// call takes the fallback: never a revert read into a batch).
    upstream: Option<Arc<Upstream>>,
    /// Fewest PIR requests of a call that reads anything.
    pad_rounds_to: usize,
    /// The rules of chains other than mainnet.
    latest: SpecId,
    /// Headers checked, with their time, by hash.
    headers: Mutex<HashMap<B256, (HeaderFacts, u64)>>,
    /// What the last call of each contract and selector read.
    learned: Learned,
    /// EVM time a run may take ([`EVM_TIMEOUT`]); `None`: no limit.
    evm_timeout: Option<std::time::Duration>,
    /// Runs of the EVM at once: one per core, so that requests from a
    /// page (through a wallet extension) queue instead of filling the
    /// blocking pool that the wallet's own reads prepare their queries in.
    runs: Arc<tokio::sync::Semaphore>,
}

/// One view's state as the runs of a call read it.
pub struct Session {
    view: ViewClient,
    block: BlockContext,
    spec: SpecId,
    reads: Reads,
    requests_before: u64,
    rounds: usize,
    inner_apart: usize,
    evm_time: std::time::Duration,
    /// A run passed the request's EVM time ([`EVM_TIMEOUT`]): the request
    /// is answered with geth's timeout error, whatever it was doing.
    timed_out: bool,
    /// The query count of each round that sent a request.
    rungs: Vec<usize>,
}

/// A call's state while it runs: what it read, and the accounts whose
/// code it may need.
struct Reads {
    known: KnownState,
    accounts: HashMap<Address, AccountState>,
    keys: usize,
    /// Every key asked, in order (what the next call of the same contract
    /// and selector asks in its first round is what of these it used:
    /// [`Learned`]).
    asked: Vec<ReadKey>,
    /// Of `keys`, those asked only because an earlier call used them.
    learned: usize,
    /// The keys that name no one this call names (call_exec's
    /// [`call_exec::Naming`]): they may be read from the hot tier. Every
    /// other key is read as if no tier held it.
    shared: std::collections::HashSet<ReadKey>,
    /// The keys whose value the hot tier gave (audits may yet find one
    /// forged: [`Executor::forged_reads`]).
    from_tier: std::collections::HashSet<ReadKey>,
}

impl Reads {
    /// Notes which of a run's `needs` name no one the call names
    /// (`naming`, of that run): they may be read from the hot tier.
    fn note_shared(&mut self, needs: &[Need], naming: &call_exec::Naming) {
        for need in needs {
            let key = match *need {
                Need::Account(a) | Need::Code(a) => ReadKey::Account(a),
                Need::Slot { contract, slot } => ReadKey::Slot { contract, slot },
            };
            match naming.names(need) {
                true => self.shared.remove(&key),
                false => self.shared.insert(key),
            };
        }
    }
}

/// The keys the last call of each (contract, selector) read, kept here
/// and never sent: the next such call asks them in its first round, so
/// that a deep call (a proxy's implementation, then its code, then
/// mappings; a router's pools, ticks and tokens) settles in fewer rounds
/// than one per level of dependency. Only what the last answered run used
/// and what named no one in it is kept (the keys its EVM touched, not
/// every key asked; never the last holder's word): a `balanceOf` of a
/// holder asks the token's shared keys first whoever it is, so a repeat of
/// the same holder takes the rounds a first read takes, a busy wallet's
/// calls do not grow, and the count of first-round queries says nothing
/// of how many distinct arguments came before.
/// Bounded: [`LEARNED_CALLS`] calls, each at most [`LEARNED_KEYS`] keys
/// (a run that used more, or hit a bound, is not learned from), and the
/// learned keys never count towards a call's [`MAX_KEYS`].
#[derive(Default)]
struct Learned(Mutex<HashMap<CallShape, Vec<ReadKey>>>);

/// A call's contract and selector.
type CallShape = (Address, [u8; 4]);

/// Calls whose keys are kept (all are dropped when full).
const LEARNED_CALLS: usize = 4096;
/// Most keys one call's first round asks from what was learned.
pub const LEARNED_KEYS: usize = 256;

impl Learned {
    /// A call's shape; `None` for what is not learned from: a creation
    /// (its code is its data), a call over overrides (its state is its
    /// own).
    fn of(args: &CallArgs) -> Option<CallShape> {
        let to = args.to.filter(|_| args.overrides.is_empty())?;
        let mut selector = [0u8; 4];
        let n = args.input.len().min(4);
        selector[..n].copy_from_slice(&args.input[..n]);
        Some((to, selector))
    }

    /// The keys learned for `args`'s shape (each named no one in the run
    /// it was learned from).
    fn keys(&self, args: &CallArgs) -> Vec<ReadKey> {
        let Some(shape) = Self::of(args) else {
            return Vec::new();
        };
        let kept = self.0.lock().expect("learned keys");
        kept.get(&shape).cloned().unwrap_or_default()
    }

    /// Keeps what an answered run used of the keys asked (`asked`, in
    /// order) that were `shared`: those of the accounts and slots it
    /// `touched`, its target and its sender. A run that used more than
    /// [`LEARNED_KEYS`] forgets its shape instead.
    fn remember(
        &self,
        args: &CallArgs,
        asked: &[ReadKey],
        touched: &Touched,
        shared: &std::collections::HashSet<ReadKey>,
    ) {
        let used = |key: &ReadKey| match key {
            ReadKey::Account(a) => {
                touched.contains_key(a) || Some(*a) == args.to || Some(*a) == args.from
            }
            ReadKey::Slot { contract, slot } | ReadKey::HighPart { contract, slot } => touched
                .get(contract)
                .is_some_and(|slots| slots.contains(slot)),
        };
        // Only keys that named no one: a key that named the last call's
        // wallet (its balance's slot) asked again in the next call's first
        // round would settle a repeat of the same holder a round sooner
        // than a first read, which the server sees.
        let keys: Vec<ReadKey> = asked
            .iter()
            .filter(|k| used(k) && shared.contains(k))
            .copied()
            .collect();
        let Some(shape) = Self::of(args) else {
            return;
        };
        let mut kept = self.0.lock().expect("learned keys");
        if keys.len() > LEARNED_KEYS {
            kept.remove(&shape);
            return;
        }
        if kept.len() >= LEARNED_CALLS {
            kept.clear();
        }
        kept.insert(shape, keys);
    }
}

impl Executor {
    pub fn new(reader: Arc<PrivateReader>, upstream: Option<Arc<Upstream>>) -> Self {
        Executor {
            reader,
            upstream,
            pad_rounds_to: 1,
            latest: SpecId::OSAKA,
            headers: Mutex::new(HashMap::new()),
            learned: Learned::default(),
            evm_timeout: Some(EVM_TIMEOUT),
            runs: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            )),
        }
    }

    /// The executor `config` asks for: its padding rounds and EVM time.
    pub fn from_config(
        reader: Arc<PrivateReader>,
        upstream: Option<Arc<Upstream>>,
        config: &crate::config::ProxyConfig,
    ) -> Self {
        let evm_timeout = (config.evm_timeout_ms > 0)
            .then(|| std::time::Duration::from_millis(config.evm_timeout_ms));
        Executor::new(reader, upstream)
            .pad_rounds_to(config.pad_call_rounds_to)
            .evm_timeout(evm_timeout)
    }

    /// The EVM time a request may take (`None`: no limit), as geth's
    /// `--rpc.evmtimeout`.
    pub fn evm_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.evm_timeout = timeout;
        self
    }

    /// The EVM time the next run of `session` may take, if limited: the
    /// timeout, within what is left of the request's
    /// [`EVM_TIMEOUTS_PER_REQUEST`].
    fn evm_left(&self, session: &Session) -> Option<std::time::Duration> {
        self.evm_timeout.map(|t| {
            let left = (t * EVM_TIMEOUTS_PER_REQUEST).saturating_sub(session.evm_time);
            left.min(t)
        })
    }

    /// geth's words for a request past its EVM time.
    fn timeout_message(&self) -> String {
        let timeout = self.evm_timeout.unwrap_or_default();
        format!("execution aborted (timeout = {})", go_duration(timeout))
    }

    /// geth's answer to a request past its EVM time, when `session` is.
    fn timed_out(&self, session: &Session) -> Option<CallResult> {
        session.timed_out.then(|| CallResult::Invalid {
            message: self.timeout_message(),
        })
    }

    /// `run` on a blocking thread once one of [`Self::runs`] is free, given
    /// the deadline of what `session` has left of its EVM time; with how
    /// long it took.
    async fn on_evm<T: Send + 'static>(
        &self,
        session: &Session,
        run: impl FnOnce(Option<std::time::Instant>) -> T + Send + 'static,
    ) -> Result<(T, std::time::Duration), ReadError> {
        let left = self.evm_left(session);
        let permit = self
            .runs
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| ReadError::Backend(format!("the EVM's queue closed: {e}")))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let started = std::time::Instant::now();
            let done = run(left.map(|left| started + left));
            (done, started.elapsed())
        })
        .await
        .map_err(|e| ReadError::Backend(format!("the EVM failed: {e}")))
    }

    /// Every call that reads anything sends at least `n` PIR requests.
    pub fn pad_rounds_to(mut self, n: usize) -> Self {
        self.pad_rounds_to = n.max(1);
        self
    }

    /// Runs `args` at the view `sel` names over contracts `held` (those
    /// whose whole storage the view holds, as far as this proxy trusts
    /// it; every contract under a whole-state claim), reading `first` (the
    /// keys a rule predicts) in the first round with what `ahead` already
    /// read.
    pub async fn execute(
        &self,
        args: &CallArgs,
        sel: &BlockSelector,
        held: PrivateStorage,
        first: Vec<ReadKey>,
        ahead: Vec<(ReadKey, KeyState)>,
    ) -> Result<Executed, ReadError> {
        let mut session = match self.open(sel, held, ahead).await? {
            Ok(session) => session,
            Err(why) => return Ok(Executed::NotPrivate(why)),
        };
        let result = match self.run(&mut session, args, first).await? {
            Ok(result) => result,
            Err(why) => return Ok(Executed::NotPrivate(why)),
        };
        Ok(Executed::Answered(self.close(session, args, result).await?))
    }

    /// A session over the view `sel` names: its block, and what `ahead`
    /// read of it.
    pub async fn open(
        &self,
        sel: &BlockSelector,
        held: PrivateStorage,
        ahead: Vec<(ReadKey, KeyState)>,
    ) -> Result<Result<Session, String>, ReadError> {
        let view = self.reader.select(sel).await?;
        let block = self.block_context(&view).await?;
        let spec = call_exec::spec_for(block.chain_id, block.number, block.timestamp, self.latest);
        // A slot of any contract is read (absent: zero) only where both
        // this view's base and the list this proxy trusts claim the whole
        // state; else only the listed contracts' slots are.
        let known = match held.whole_state && view.storage().whole_state {
            true => KnownState::whole_state(),
            false => KnownState::new(
                held.all_contracts()
                    .into_iter()
                    .filter(|c| view.storage().holds(c)),
            ),
        };
        let mut session = Session {
            view,
            block,
            spec,
            reads: Reads {
                known,
                accounts: HashMap::new(),
                keys: 0,
                asked: Vec::new(),
                learned: 0,
                shared: Default::default(),
                from_tier: Default::default(),
            },
            requests_before: self.reader.lookup_requests(),
            rounds: 0,
            inner_apart: 0,
            evm_time: std::time::Duration::ZERO,
            timed_out: false,
            rungs: Vec::new(),
        };
        // Reads made ahead (a JSON-RPC batch's) count only where they are
        // of this view's block: the newest view may have moved since.
        let ahead = ahead
            .into_iter()
            .filter(|(_, state)| state.block() == session.view.view.block)
            .collect();
        if let Some(why) = self.learn(&mut session.reads, ahead).await? {
            return Ok(Err(why));
        }
        Ok(Ok(session))
    }

    /// Runs `args` (its own access list warm) in `session` until it ends,
    /// reading what it lacks in rounds (`first` in the first): its result,
    /// or why it cannot be answered privately.
    pub async fn run(
        &self,
        session: &mut Session,
        args: &CallArgs,
        first: Vec<ReadKey>,
    ) -> Result<Result<CallResult, String>, ReadError> {
        let traced = self
            .run_traced(session, args, first, &args.access_list)
            .await?;
        Ok(traced.map(|(result, _)| result))
    }

    /// [`Self::run`] with `access_list` warm from the start; with what the
    /// run touched, as an access list.
    pub async fn run_traced(
        &self,
        session: &mut Session,
        args: &CallArgs,
        first: Vec<ReadKey>,
        access_list: &call_exec::AccessList,
    ) -> Result<Result<(CallResult, Touched), String>, ReadError> {
        // Past the request's EVM time, no run more (an estimate's attempt,
        // an access list's pass): its answer is geth's timeout error.
        if let Some(timeout) = self.timed_out(session) {
            return Ok(Ok((timeout, Touched::default())));
        }
        let (mut pending, mut learned_from) = self.first_round(first, args, &mut session.reads);
        for _ in 0..MAX_ROUNDS {
            if let Some(why) = self.session_round(session, pending, learned_from).await? {
                return Ok(Err(why));
            }
            learned_from = usize::MAX;
            session.rounds += 1;
            let (outcome, touched, naming) = self.run_once(session, args, access_list).await?;
            match outcome {
                Outcome::TimedOut => {
                    session.timed_out = true;
                    let result = self.timed_out(session).expect("timed out");
                    return Ok(Ok((result, touched)));
                }
                Outcome::Done(result) => {
                    let reads = &session.reads;
                    self.learned
                        .remember(args, &reads.asked, &touched, &reads.shared);
                    return Ok(Ok((result, touched)));
                }
                Outcome::Unanswerable(why) => return Ok(Err(describe(&why))),
                Outcome::Needs {
                    reads: needs,
                    inner,
                } => {
                    session.reads.note_shared(&needs, &naming);
                    pending = self.keys_of(&mut session.reads, needs).await?;
                    if let Some(why) = self.answer_inner(session, inner).await? {
                        return Ok(Err(why));
                    }
                }
            }
        }
        Ok(Err(format!("more than {MAX_ROUNDS} rounds of reads")))
    }

    /// One run of `args` (`access_list` warm) over what `session` read,
    /// on the EVM's pool, its time counted.
    async fn run_once(
        &self,
        session: &mut Session,
        args: &CallArgs,
        access_list: &call_exec::AccessList,
    ) -> Result<(Outcome, Touched, call_exec::Naming), ReadError> {
        let known = std::mem::take(&mut session.reads.known);
        let run = Run {
            block: session.block.clone(),
            spec: session.spec,
            args: args.clone(),
            access_list: access_list.clone(),
        };
        let ((outcome, touched, naming, known), took) = self
            .on_evm(session, move |deadline| run.execute(known, deadline))
            .await?;
        session.reads.known = known;
        session.evm_time += took;
        Ok((outcome, touched, naming))
    }

    /// The inner calls a run set apart, answered elsewhere ([`Self::answer_apart`],
    /// asked together: a refresh may hold several unlisted tokens) and
    /// added to the session's state; `Some(why)` when one is refused: the
    /// whole call then fails, never reading it as a revert (a
    /// BalanceChecker's 0, Multicall3's `success = false`).
    async fn answer_inner(
        &self,
        session: &mut Session,
        inner: Vec<InnerCall>,
    ) -> Result<Option<String>, ReadError> {
        session.inner_apart += inner.len();
        if session.inner_apart > MAX_INNER_PER_REQUEST {
            return Ok(Some(format!(
                "it sets apart more than {MAX_INNER_PER_REQUEST} inner calls"
            )));
        }
        let view = &session.view;
        let mut answers = Vec::with_capacity(inner.len());
        for group in inner.chunks(INNER_AT_ONCE) {
            let asked = group.iter().map(|call| self.answer_apart(call, view));
            answers.extend(futures_util::future::join_all(asked).await);
        }
        for (call, answer) in inner.into_iter().zip(answers) {
            match answer? {
                Ok(answer) => session.reads.known.add_inner(call, answer),
                Err(why) => return Ok(Some(why)),
            }
        }
        Ok(None)
    }

    /// The keys of a call's first round: `first` (a rule's), its target
    /// and sender, then what the last such call used ([`Learned`]); and
    /// where the learned ones begin (`read_round` counts them apart).
    ///
    /// A rule's keys, the target and the sender name the wallet; a
    /// learned key (shared in the run it was learned from) stays shared
    /// unless this call names it.
    fn first_round(
        &self,
        first: Vec<ReadKey>,
        args: &CallArgs,
        reads: &mut Reads,
    ) -> (Vec<ReadKey>, usize) {
        let mut pending = first;
        pending.extend(args.to.map(ReadKey::Account));
        pending.push(ReadKey::Account(args.from.unwrap_or_default()));
        // The accounts its arguments name: read by PIR whatever the tier
        // holds, so asked at once rather than a round later each.
        for account in call_exec::Naming::arguments(args, ARGUMENT_ACCOUNTS) {
            let key = ReadKey::Account(account);
            if !pending.contains(&key) {
                pending.push(key);
            }
        }
        let learned_from = pending.len();
        let named = call_exec::Naming::of_call(args);
        for key in self.learned.keys(args) {
            if pending.contains(&key) {
                continue;
            }
            let names = match key {
                ReadKey::Account(a) => named.names_account(&a),
                ReadKey::Slot { contract, slot } | ReadKey::HighPart { contract, slot } => {
                    named.names(&Need::Slot { contract, slot })
                }
            };
            if !names {
                reads.shared.insert(key);
            }
            pending.push(key);
        }
        (pending, learned_from)
    }

    /// What a session cost, its PIR requests padded up to
    /// `pad_rounds_to` when it sent any; its result made again over the
    /// levels' values where it read a value the hot tier was found
    /// forging meanwhile ([`Self::rerun_corrected`]).
    pub async fn close(
        &self,
        mut session: Session,
        args: &CallArgs,
        mut result: CallResult,
    ) -> Result<Answered, ReadError> {
        let requests = self.pad_session(&session).await?;
        let forged = self.forged_reads(&session);
        // (A timed-out call's answer is geth's error, whatever it read.)
        if !forged.is_empty() && !session.timed_out {
            result = self.rerun_corrected(&mut session, args, &forged).await?;
        }
        log_cost("eth_call", args.to, &session, requests);
        Ok(Answered {
            result,
            rounds: session.rounds,
            keys: session.reads.keys,
            requests,
            evm_time: session.evm_time,
            inner_apart: session.inner_apart,
            snapshot: session.view.top(),
        })
    }

    /// [`Self::read_round`] of `session`, noting the round's query count
    /// when it sent a request (its padding rounds copy the last).
    async fn session_round(
        &self,
        session: &mut Session,
        keys: Vec<ReadKey>,
        learned_from: usize,
    ) -> Result<Option<String>, ReadError> {
        // This round's own requests (cover and other calls run meanwhile).
        let round = self.read_round(&session.view, &mut session.reads, keys, learned_from);
        let (why, sent) = ethpir_client::reader::counting_requests(round).await;
        session.rungs.extend(sent.rungs);
        session.reads.from_tier.extend(sent.from_tier);
        why
    }

    /// Reads `keys` (those not known yet) in one request, and the code of
    /// each contract account read: `Some(why)` when one cannot be answered
    /// privately. The keys from `learned_from` on are the learned ones:
    /// they do not count towards [`MAX_KEYS`].
    async fn read_round(
        &self,
        view: &ViewClient,
        reads: &mut Reads,
        keys: Vec<ReadKey>,
        learned_from: usize,
    ) -> Result<Option<String>, ReadError> {
        let mut unread: Vec<ReadKey> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, key) in keys.into_iter().enumerate() {
            let known = match key {
                ReadKey::Account(a) => reads.known.account(&a).is_some(),
                ReadKey::Slot { .. } | ReadKey::HighPart { .. } => false,
            };
            if !known && view.holds(&key).is_ok() && seen.insert(key) {
                unread.push(key);
                reads.learned += usize::from(i >= learned_from);
            }
        }
        reads.keys += unread.len();
        reads.asked.extend(&unread);
        if reads.keys - reads.learned > MAX_KEYS {
            return Ok(Some(format!("more than {MAX_KEYS} keys")));
        }
        if unread.is_empty() {
            return Ok(None);
        }
        let shared: Vec<bool> = unread.iter().map(|k| reads.shared.contains(k)).collect();
        tracing::debug!(keys = ?unread, ?shared, "a round's reads");
        let results = self.reader.read_sharing(view, &unread, &shared).await;
        let mut states = Vec::with_capacity(unread.len());
        for (key, result) in unread.into_iter().zip(results) {
            match result {
                Ok(state) => states.push((key, state)),
                Err(e) if e.is_unanswerable() => return Ok(Some(e.to_string())),
                Err(e) => return Err(e),
            }
        }
        self.learn(reads, states).await
    }

    /// Adds reads to the state, with the code of each contract account
    /// (downloaded together; each code once per machine).
    async fn learn(
        &self,
        reads: &mut Reads,
        states: Vec<(ReadKey, KeyState)>,
    ) -> Result<Option<String>, ReadError> {
        let mut coded = Vec::new();
        for (key, state) in states {
            match (key, state) {
                (ReadKey::Slot { contract, slot }, KeyState::Slot(s)) => {
                    reads.known.add_slot(contract, slot, s.word);
                }
                (ReadKey::Account(address), KeyState::Account(a)) => {
                    if a.code == CodeRef::Unknown {
                        return Ok(Some(format!(
                            "snapshot {} does not say which code accounts have",
                            a.snapshot
                        )));
                    }
                    let facts = facts_of(&a);
                    if facts.has_code {
                        coded.push(address);
                    }
                    reads.known.add_account(address, facts);
                    reads.accounts.insert(address, a);
                }
                _ => return Err(ReadError::Backend("a key read as another kind".into())),
            }
        }
        self.add_codes(reads, &coded).await?;
        Ok(None)
    }

    /// The codes of accounts read, downloaded together.
    async fn add_codes(&self, reads: &mut Reads, accounts: &[Address]) -> Result<(), ReadError> {
        // Each code beside its own address (an account not read has none
        // to fetch).
        let wanted: Vec<(Address, &AccountState)> = accounts
            .iter()
            .filter_map(|a| Some((*a, reads.accounts.get(a)?)))
            .collect();
        let codes = futures_util::future::join_all(
            wanted.iter().map(|(_, state)| self.reader.code_of(state)),
        )
        .await;
        let addresses: Vec<Address> = wanted.into_iter().map(|(a, _)| a).collect();
        for (address, code) in addresses.into_iter().zip(codes) {
            reads.known.add_code(address, code?);
        }
        Ok(())
    }

    /// The keys of the reads a run lacked (a code is read with its
    /// account, so a code missing is a new account's).
    async fn keys_of(
        &self,
        reads: &mut Reads,
        needs: Vec<Need>,
    ) -> Result<Vec<ReadKey>, ReadError> {
        let mut keys = Vec::with_capacity(needs.len());
        let mut codes = Vec::new();
        for need in needs {
            match need {
                Need::Account(a) => keys.push(ReadKey::Account(a)),
                Need::Slot { contract, slot } => keys.push(ReadKey::Slot { contract, slot }),
                Need::Code(a) if reads.accounts.contains_key(&a) => codes.push(a),
                Need::Code(a) => keys.push(ReadKey::Account(a)),
            }
        }
        self.add_codes(reads, &codes).await?;
        Ok(keys)
    }

    /// An inner call's answer from elsewhere: the upstream's, at the
    /// view's block and with the frame's gas, where the gate admits it
    /// (only this call is sent); else why not (the whole call then takes
    /// the fallback).
    async fn answer_apart(
        &self,
        call: &InnerCall,
        view: &ViewClient,
    ) -> Result<Result<InnerAnswer, String>, ReadError> {
        let Some(upstream) = &self.upstream else {
            return Ok(Err(
                "an inner call is not answerable privately and there is no upstream to ask".into(),
            ));
        };
        let block = self.block_of(view);
        let mut object =
            serde_json::json!({"from": call.caller, "to": call.target, "input": call.input});
        if let Some(gas) = call.upstream_gas() {
            object["gas"] = Value::String(format!("{gas:#x}"));
        }
        let params = serde_json::value::to_raw_value(&(object, block))
            .map_err(|e| ReadError::Backend(e.to_string()))?;
        let reason = crate::activity::Reason::InnerCall;
        match upstream.call("eth_call", Some(params), reason).await {
            Err(e) if e.is_gate_refusal() => Ok(Err(format!(
                "an inner call is not answerable privately and is not sent upstream alone ({e})"
            ))),
            Ok(raw) => {
                let data: Bytes = serde_json::from_str(raw.get())
                    .map_err(|e| ReadError::Backend(format!("upstream eth_call: {e}")))?;
                Ok(Ok(InnerAnswer::Returned(data)))
            }
            // The node ran it and it failed (a revert, code 3 with its
            // data; out of gas or another halt, geth's -32000): the inner
            // call fails, with the revert's data where there is one. Other
            // errors (a limit, bad parameters) fail the whole call.
            Err(crate::error::ProxyError::Upstream(e))
                if e.code() == REVERTED
                    || (e.code() == EXECUTION_FAILED && is_halt(e.message())) =>
            {
                let data = e
                    .data()
                    .and_then(|d| serde_json::from_str::<Bytes>(d.get()).ok())
                    .unwrap_or_default();
                Ok(Ok(InnerAnswer::Reverted(data)))
            }
            Err(e) => Err(ReadError::Backend(format!("upstream eth_call: {e}"))),
        }
    }

    /// The view's block as the upstream names it: by hash where the view
    /// has one (EIP-1898), else by number.
    fn block_of(&self, view: &ViewClient) -> Value {
        match self.manifest_hash(view) {
            Some(hash) => serde_json::json!({"blockHash": hash}),
            None => Value::String(format!("{:#x}", view.view.block)),
        }
    }

    fn manifest_hash(&self, view: &ViewClient) -> Option<B256> {
        top_manifest(view).block_hash
    }

    /// The block a call at `view` runs in: the manifest's number, time and
    /// chain, and the header checked against the view's hash.
    async fn block_context(&self, view: &ViewClient) -> Result<BlockContext, ReadError> {
        let manifest = top_manifest(view);
        let header = match manifest.block_hash {
            Some(hash) => self.header(hash).await,
            None => None,
        };
        let timestamp = match (&header, manifest.block_time) {
            (Some((_, time)), _) => *time,
            (None, Some(time)) => time,
            (None, None) => {
                return Err(ReadError::Backend(format!(
                    "the view at block {} records no time",
                    view.view.block
                )))
            }
        };
        Ok(BlockContext {
            chain_id: view.view.chain_id,
            number: view.view.block,
            timestamp,
            header: header.map(|(facts, _)| facts),
        })
    }

    /// The header whose hash is `hash`, from the upstream, checked; with
    /// its timestamp. None without an upstream or a header that is not
    /// that hash's.
    async fn header(&self, hash: B256) -> Option<(HeaderFacts, u64)> {
        if let Some(kept) = self.headers.lock().expect("headers").get(&hash) {
            return Some(kept.clone());
        }
        let header = self.upstream.as_ref()?.header_by_hash(hash).await?;
        let facts = HeaderFacts {
            base_fee: header.base_fee_per_gas,
            coinbase: header.beneficiary,
            mix_hash: header.mix_hash,
            difficulty: header.difficulty,
            gas_limit: header.gas_limit,
            parent_hash: header.parent_hash,
            excess_blob_gas: header.excess_blob_gas,
            gas_used: header.gas_used,
            blob_gas_used: header.blob_gas_used,
        };
        let mut kept = self.headers.lock().expect("headers");
        if kept.len() >= HEADERS_KEPT {
            kept.clear();
        }
        kept.insert(hash, (facts.clone(), header.timestamp));
        Some((facts, header.timestamp))
    }
}

impl Executor {
    /// The PIR requests `session` sent, padded ([`Self::pad_rounds`]):
    /// its rounds, those answered from kept answers counted, at the
    /// session's view. An error where a value the hot tier gave it was
    /// found forged meanwhile (audits ride in its padding): its answer
    /// was made of that value, and is withheld (the wire is what it would
    /// have been; a retry reads the levels' value). A call's
    /// [`Self::close`] runs again instead.
    async fn pad_requests(&self, session: &Session) -> Result<u64, ReadError> {
        let requests = self.pad_session(session).await?;
        match self.forged_reads(session).is_empty() {
            true => Ok(requests),
            false => Err(self.withheld(session)),
        }
    }

    /// [`Self::pad_rounds`] of `session`: the PIR requests it sent. An
    /// error where a padding round failed while a value the tier gave it
    /// waits for its audit (the round was to carry it: a server failing
    /// padding rounds must not get a forged value answered).
    async fn pad_session(&self, session: &Session) -> Result<u64, ReadError> {
        // In the session's own view: a newer tier at its block (the
        // catalog moved meanwhile) would audit another tier's keys.
        let at = PadAt::View(&session.view);
        let padded = self
            .pad_rounds(at, session.rounds as u64, &session.rungs)
            .await;
        if !padded && !self.tier_reads_audited(session) {
            return Err(ReadError::Backend(
                "a padding round that was to audit what this request read of the hot tier failed: its answer is withheld".into(),
            ));
        }
        Ok(self.reader.lookup_requests() - session.requests_before)
    }

    /// A direct read (a balance, a nonce, a code, storage words, or a
    /// batch of them) padded as a call is ([`Self::pad_rounds`]): its
    /// rounds (one, or two for a wide word's high part; `sent`, its own;
    /// one when kept answers gave it all), at its view.
    pub async fn pad_direct_read(&self, sel: &BlockSelector, sent: &ethpir_client::reader::Sent) {
        let at = PadAt::Block(sel);
        self.pad_rounds(at, sent.rounds.max(1) as u64, &sent.rungs)
            .await;
    }

    /// Pads a private request of `rounds` rounds (`rungs`: the query
    /// counts of those that sent a request) to `pad_rounds_to`, or the
    /// next of its doublings past them (a fixed ladder of round counts,
    /// at most [`MAX_ROUNDS`]), at the view `at` names. Where it sent any,
    /// each padding round asks what a real round that finds one key asks
    /// (the ladder's least count: most calls' last rounds; the first
    /// round's count again, [128], [128], is no call's shape and doubles a
    /// refresh's bytes), one after another, awaited, so that the answer
    /// is released when the schedule has run (a page timing the call
    /// through the wallet extension sees the padded schedule's time), and
    /// the schedule is noted for cover requests to replay. One that sent
    /// nothing waits those rounds' time instead (no bytes).
    async fn pad_rounds(&self, at: PadAt<'_>, rounds: u64, rungs: &[usize]) -> bool {
        let target = round_count(rounds, self.pad_rounds_to as u64).min(MAX_ROUNDS as u64);
        let missing = target.saturating_sub(rounds) as usize;
        if rungs.is_empty() {
            for _ in 0..missing {
                self.reader.wait_as_a_round().await;
            }
            return true;
        }
        let least = self.reader.least_rung();
        let mut padded = true;
        for _ in 0..missing {
            padded &= match at {
                PadAt::View(view) => self.reader.pad_round_in(view, least).await,
                PadAt::Block(sel) => self.reader.pad_round(sel, least).await,
            };
        }
        let mut schedule = rungs.to_vec();
        schedule.extend(std::iter::repeat_n(least, missing));
        self.reader.note_schedule(schedule);
        padded
    }
}

/// Where padding rounds are sent: a session's own view (its tier's
/// audits ride in them), or the view a direct read's block names.
#[derive(Clone, Copy)]
enum PadAt<'a> {
    View(&'a ViewClient),
    Block(&'a BlockSelector),
}

/// The rounds a request that sent `sent` is padded to: `least` (1: no
/// padding), or the next of `2 least, 4 least, ...` that holds them.
fn round_count(sent: u64, least: u64) -> u64 {
    if least <= 1 {
        return sent;
    }
    let mut count = least;
    while count < sent {
        count = count.saturating_mul(2);
    }
    count
}

/// What a method run here cost, logged (names the contract at debug,
/// where there is one; never the caller): its rounds, keys and PIR
/// requests.
fn log_cost(method: &str, contract: Option<Address>, session: &Session, requests: u64) {
    tracing::debug!(method, ?contract, "executed privately");
    tracing::info!(
        method,
        rounds = session.rounds,
        keys = session.reads.keys,
        requests,
        evm_us = session.evm_time.as_micros() as u64,
        inner_apart = session.inner_apart,
        snapshot = %session.view.top(),
        "executed privately"
    );
}

/// Why a gas figure or an access list made in `session` is not the
/// node's: an inner call answered elsewhere spent no gas and touched
/// nothing here, so both answers would be wrong (the whole call takes the
/// fallback instead).
fn apart_taints_gas(session: &Session) -> Option<String> {
    (session.inner_apart > 0).then(|| {
        format!(
            "{} inner call(s) answered elsewhere: their gas and the state they touch are unknown here",
            session.inner_apart
        )
    })
}

/// The JSON-RPC code of a reverted call (geth's).
pub const REVERTED: i32 = 3;

/// Whether a node's -32000 message is an EVM halt (the call ran and
/// failed: out of gas, an invalid opcode, ...), as geth words them. The
/// same code carries the node's own failures ("header not found",
/// "missing trie node", a provider's rate limit), which are no answer of
/// the call and must not be read as its failure.
fn is_halt(message: &str) -> bool {
    const HALTS: &[&str] = &[
        "out of gas",
        "invalid opcode",
        "opcode",
        "stack underflow",
        "stack overflow",
        "stack limit",
        "invalid jump",
        "write protection",
        "return data out of bounds",
        "max call depth",
        "call depth",
        "insufficient balance for transfer",
        "precompile",
        "max code size",
        "max initcode size",
        "gas uint64 overflow",
        "invalid code",
        "nonce uint64 overflow",
        "contract address collision",
    ];
    let message = message.to_ascii_lowercase();
    HALTS.iter().any(|halt| message.contains(halt))
}
/// geth's code for a call that halted (out of gas, an invalid opcode).
pub const EXECUTION_FAILED: i32 = -32000;

/// The manifest of a view's freshest level (its block, hash and time).
fn top_manifest(view: &ViewClient) -> &protocol::manifest::Manifest {
    &view
        .levels
        .last()
        .expect("a view has a level")
        .entry()
        .manifest
}

/// One run's inputs (besides the state).
struct Run {
    block: BlockContext,
    spec: SpecId,
    args: CallArgs,
    access_list: call_exec::AccessList,
}

/// A duration as Go prints it in geth's messages (`5s`, `1.5s`, `250ms`).
fn go_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let seconds = match ms % 60_000 {
        s if s.is_multiple_of(1000) => format!("{}s", s / 1000),
        s => {
            let fraction = format!("{:03}", s % 1000);
            format!("{}.{}s", s / 1000, fraction.trim_end_matches('0'))
        }
    };
    let (minutes, hours) = (ms / 60_000 % 60, ms / 3_600_000);
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

impl Run {
    /// The run over `known` (handed back), halted at `deadline`.
    fn execute(
        self,
        known: KnownState,
        deadline: Option<std::time::Instant>,
    ) -> (Outcome, Touched, call_exec::Naming, KnownState) {
        let (outcome, touched, naming) = call_exec::run_named_until(
            &self.block,
            self.spec,
            &self.args,
            &known,
            &self.access_list,
            deadline,
        );
        (outcome, touched, naming, known)
    }
}

/// What the EVM knows of an account read: whether it exists, its balance
/// and nonce, and whether it has code.
fn facts_of(a: &AccountState) -> AccountFacts {
    AccountFacts {
        exists: !a.absent,
        balance: a.balance,
        nonce: a.nonce,
        has_code: a.code != CodeRef::None,
    }
}

fn describe(why: &Unanswerable) -> String {
    match why {
        Unanswerable::Storage(contract) => {
            format!("it reads storage of {contract}, which the snapshots do not hold")
        }
        Unanswerable::BlockHash(n) => format!("it reads the hash of block {n}"),
        Unanswerable::BlockField(op) => {
            format!("it reads a fact of the block's header (opcode {op:#04x}) and none was had")
        }
        Unanswerable::GasAfterInner => {
            "it observes gas after an inner call answered elsewhere (whose gas is unknown here)"
                .into()
        }
        Unanswerable::Unsupported(what) => format!("{what} is not run here"),
    }
}

#[cfg(test)]
mod tests {
    use super::is_halt;

    /// The timeout's words are geth's: Go's durations.
    #[test]
    fn durations_print_as_go_prints_them() {
        use std::time::Duration;
        for (ms, go) in [
            (5_000, "5s"),
            (1, "1ms"),
            (250, "250ms"),
            (1_500, "1.5s"),
            (2_050, "2.05s"),
            (60_000, "1m0s"),
            (90_500, "1m30.5s"),
            (3_600_000, "1h0m0s"),
        ] {
            assert_eq!(super::go_duration(Duration::from_millis(ms)), go);
        }
    }

    #[test]
    fn only_a_halt_of_the_call_reads_as_its_failure() {
        assert!(is_halt("out of gas"));
        assert!(is_halt("invalid opcode: INVALID"));
        assert!(is_halt("stack underflow (0 <=> 2)"));
        assert!(!is_halt("header not found"));
        assert!(!is_halt("missing trie node 0123 (path )"));
        assert!(!is_halt("rate limit exceeded"));
    }
}
