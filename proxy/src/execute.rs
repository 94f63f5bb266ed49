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
//! calls that cannot be answered go their own way ([`InnerPolicy`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, Bytes, B256, U256};
use call_exec::{
    AccountFacts, BlockContext, CallArgs, CallResult, HeaderFacts, InnerAnswer, InnerCall,
    KnownState, Need, Outcome, SpecId, Touched, Unanswerable,
};
use ethpir_client::levels::ViewClient;
use ethpir_client::{AccountState, BlockSelector, KeyState, PrivateReader, ReadError, ReadKey};
use protocol::CodeRef;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::upstream::Upstream;

/// Most runs of one call (the first included): a proxy slot, an
/// implementation, mappings, nested calls settle well within it.
pub const MAX_ROUNDS: usize = 8;
/// Most keys (accounts and words) one call reads.
pub const MAX_KEYS: usize = 1024;
/// Headers kept (by hash).
const HEADERS_KEPT: usize = 64;

/// How an inner call that cannot be answered privately is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InnerPolicy {
    /// Asked of the upstream on its own (the configured fallback of
    /// `eth_call` is the upstream): only that call is sent.
    Upstream,
    /// It fails (private-only settings): `success = false` inside a
    /// batch, the BalanceChecker's 0.
    Fail,
}

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
    upstream: Option<Arc<Upstream>>,
    inner: InnerPolicy,
    /// Fewest PIR requests of a call that reads anything.
    pad_rounds_to: usize,
    /// The rules of chains other than mainnet.
    latest: SpecId,
    /// Headers checked, with their time, by hash.
    headers: Mutex<HashMap<B256, (HeaderFacts, u64)>>,
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
}

/// A call's state while it runs: what it read, and the accounts whose
/// code it may need.
struct Reads {
    known: KnownState,
    accounts: HashMap<Address, AccountState>,
    keys: usize,
}

impl Executor {
    pub fn new(
        reader: Arc<PrivateReader>,
        upstream: Option<Arc<Upstream>>,
        inner: InnerPolicy,
    ) -> Self {
        Executor {
            reader,
            upstream,
            inner,
            pad_rounds_to: 1,
            latest: SpecId::OSAKA,
            headers: Mutex::new(HashMap::new()),
        }
    }

    /// Every call that reads anything sends at least `n` PIR requests.
    pub fn pad_rounds_to(mut self, n: usize) -> Self {
        self.pad_rounds_to = n.max(1);
        self
    }

    /// Runs `args` at the view `sel` names over contracts `held` (those
    /// whose whole storage the view holds, as far as this proxy trusts
    /// it), reading `first` (the keys a rule predicts) in the first round
    /// with what `ahead` already read.
    pub async fn execute(
        &self,
        args: &CallArgs,
        sel: &BlockSelector,
        held: Vec<Address>,
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
        Ok(Executed::Answered(self.close(session, result).await))
    }

    /// A session over the view `sel` names: its block, and what `ahead`
    /// read of it.
    pub async fn open(
        &self,
        sel: &BlockSelector,
        held: Vec<Address>,
        ahead: Vec<(ReadKey, KeyState)>,
    ) -> Result<Result<Session, String>, ReadError> {
        let view = self.reader.select(sel).await?;
        let block = self.block_context(&view).await?;
        let spec = call_exec::spec_for(block.chain_id, block.number, block.timestamp, self.latest);
        let held: Vec<Address> = held
            .into_iter()
            .filter(|c| view.storage().holds(c))
            .collect();
        let mut session = Session {
            view,
            block,
            spec,
            reads: Reads {
                known: KnownState::new(held),
                accounts: HashMap::new(),
                keys: 0,
            },
            requests_before: self.reader.lookup_requests(),
            rounds: 0,
            inner_apart: 0,
            evm_time: std::time::Duration::ZERO,
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

    /// Runs `args` in `session` until it ends, reading what it lacks in
    /// rounds (`first` in the first): its result, or why it cannot be
    /// answered privately.
    pub async fn run(
        &self,
        session: &mut Session,
        args: &CallArgs,
        first: Vec<ReadKey>,
    ) -> Result<Result<CallResult, String>, ReadError> {
        let traced = self
            .run_traced(session, args, first, &Touched::new())
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
        access_list: &Touched,
    ) -> Result<Result<(CallResult, Touched), String>, ReadError> {
        let mut pending = first;
        pending.push(ReadKey::Account(args.to));
        pending.push(ReadKey::Account(args.from.unwrap_or_default()));
        for _ in 0..MAX_ROUNDS {
            let reads = &mut session.reads;
            if let Some(why) = self.read_round(&session.view, reads, pending).await? {
                return Ok(Err(why));
            }
            session.rounds += 1;
            let known = std::mem::take(&mut reads.known);
            let run = Run {
                block: session.block.clone(),
                spec: session.spec,
                args: args.clone(),
                access_list: access_list.clone(),
            };
            let (outcome, touched, known, took) = run_blocking(run, known).await?;
            session.reads.known = known;
            session.evm_time += took;
            match outcome {
                Outcome::Done(result) => return Ok(Ok((result, touched))),
                Outcome::Unanswerable(why) => return Ok(Err(describe(&why))),
                Outcome::Needs {
                    reads: needs,
                    inner,
                } => {
                    pending = self.keys_of(&mut session.reads, needs).await?;
                    session.inner_apart += inner.len();
                    // Asked together (a refresh may hold several unlisted
                    // tokens).
                    let view = &session.view;
                    let answers = futures_util::future::join_all(
                        inner.iter().map(|call| self.answer_apart(call, view)),
                    )
                    .await;
                    for (call, answer) in inner.into_iter().zip(answers) {
                        session.reads.known.add_inner(call, answer?);
                    }
                }
            }
        }
        Ok(Err(format!("more than {MAX_ROUNDS} rounds of reads")))
    }

    /// What a session cost, its PIR requests padded up to
    /// `pad_rounds_to` when it sent any.
    pub async fn close(&self, session: Session, result: CallResult) -> Answered {
        let requests = self.pad_requests(&session).await;
        Answered {
            result,
            rounds: session.rounds,
            keys: session.reads.keys,
            requests,
            evm_time: session.evm_time,
            inner_apart: session.inner_apart,
            snapshot: session.view.top(),
        }
    }

    /// Reads `keys` (those not known yet) in one request, and the code of
    /// each contract account read: `Some(why)` when one cannot be answered
    /// privately.
    async fn read_round(
        &self,
        view: &ViewClient,
        reads: &mut Reads,
        keys: Vec<ReadKey>,
    ) -> Result<Option<String>, ReadError> {
        let mut unread: Vec<ReadKey> = Vec::new();
        for key in keys {
            let known = match key {
                ReadKey::Account(a) => reads.known.account(&a).is_some(),
                ReadKey::Slot { .. } | ReadKey::HighPart { .. } => false,
            };
            if !known && !unread.contains(&key) && view.holds(&key).is_ok() {
                unread.push(key);
            }
        }
        reads.keys += unread.len();
        if reads.keys > MAX_KEYS {
            return Ok(Some(format!("more than {MAX_KEYS} keys")));
        }
        if unread.is_empty() {
            return Ok(None);
        }
        let results = self.reader.read(view, &unread).await;
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
                    let facts = AccountFacts {
                        exists: !a.absent,
                        balance: a.balance,
                        nonce: a.nonce,
                        has_code: a.code != CodeRef::None,
                    };
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
    /// view's block, when the policy allows (only this call is sent);
    /// else a failure.
    async fn answer_apart(
        &self,
        call: &InnerCall,
        view: &ViewClient,
    ) -> Result<InnerAnswer, ReadError> {
        let upstream = match (&self.upstream, self.inner) {
            (Some(upstream), InnerPolicy::Upstream) => upstream,
            _ => {
                tracing::info!(contract = %call.target, "an inner call is not answerable privately: it fails (private-only)");
                return Ok(InnerAnswer::Reverted(Bytes::new()));
            }
        };
        tracing::info!(contract = %call.target, "an inner call is not answerable privately: only it goes upstream");
        let block = self.block_of(view);
        let object =
            serde_json::json!({"from": call.caller, "to": call.target, "input": call.input});
        let params = serde_json::value::to_raw_value(&(object, block))
            .map_err(|e| ReadError::Backend(e.to_string()))?;
        match upstream.call("eth_call", Some(params)).await {
            Ok(raw) => {
                let data: Bytes = serde_json::from_str(raw.get())
                    .map_err(|e| ReadError::Backend(format!("upstream eth_call: {e}")))?;
                Ok(InnerAnswer::Returned(data))
            }
            // The node ran it and it failed (a revert, code 3 with its
            // data; out of gas or another halt, geth's -32000): the inner
            // call fails, with the revert's data where there is one. Other
            // errors (a limit, bad parameters) fail the whole call.
            Err(crate::error::ProxyError::Upstream(e))
                if e.code() == REVERTED || e.code() == EXECUTION_FAILED =>
            {
                let data = e
                    .data()
                    .and_then(|d| serde_json::from_str::<Bytes>(d.get()).ok())
                    .unwrap_or_default();
                Ok(InnerAnswer::Reverted(data))
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
        };
        let mut kept = self.headers.lock().expect("headers");
        if kept.len() >= HEADERS_KEPT {
            kept.clear();
        }
        kept.insert(hash, (facts.clone(), header.timestamp));
        Some((facts, header.timestamp))
    }
}

/// What `eth_estimateGas` gives.
#[derive(Debug)]
pub enum Estimated {
    /// The least gas (within geth's 1.5 %) with which the call succeeds.
    Gas(u64),
    /// It fails at the most gas it may have: the node's error.
    Failed(CallResult),
    /// It runs out of gas even at the most it may have.
    Exceeds(u64),
}

/// Most runs of `eth_createAccessList` (each with the list the last one
/// touched) before it settles.
const ACCESS_LIST_RUNS: usize = 8;

impl Executor {
    /// `eth_createAccessList` as geth makes it: run with the list the last
    /// run touched until a run touches no other; that list, and the gas
    /// the call uses with it (and how it ended).
    pub async fn access_list(
        &self,
        args: &CallArgs,
        sel: &BlockSelector,
        held: Vec<Address>,
    ) -> Result<Result<(Touched, CallResult), String>, ReadError> {
        let mut session = match self.open(sel, held, Vec::new()).await? {
            Ok(session) => session,
            Err(why) => return Ok(Err(why)),
        };
        let mut list = Touched::new();
        let mut settled = None;
        for _ in 0..ACCESS_LIST_RUNS {
            let (result, touched) = match self
                .run_traced(&mut session, args, Vec::new(), &list)
                .await?
            {
                Ok(run) => run,
                Err(why) => return Ok(Err(why)),
            };
            if touched == list {
                settled = Some(result);
                break;
            }
            list = touched;
        }
        self.pad_requests(&session).await;
        Ok(match settled {
            Some(result) => Ok((list, result)),
            None => Err(format!(
                "the access list did not settle in {ACCESS_LIST_RUNS} runs"
            )),
        })
    }
}

/// `eth_estimateGas`'s answer: the gas, or the node's error (a revert
/// as code 3; "gas required exceeds allowance" where even the most gas
/// does not do).
pub fn estimate_answer(estimated: &Estimated) -> Result<Value, jsonrpsee::types::ErrorObjectOwned> {
    use jsonrpsee::types::ErrorObjectOwned;
    let failed = |message: String| ErrorObjectOwned::owned(EXECUTION_FAILED, message, None::<()>);
    match estimated {
        Estimated::Gas(gas) => Ok(serde_json::json!(alloy_primitives::U64::from(*gas))),
        Estimated::Failed(result) => match node_answer(result) {
            Err(error) => Err(error),
            Ok(_) => Err(failed("no estimate".into())),
        },
        Estimated::Exceeds(hi) => Err(failed(format!("gas required exceeds allowance ({hi})"))),
    }
}

/// `eth_createAccessList`'s answer: the list, the gas used with it, and
/// why the call failed where it did (geth's fields).
pub fn access_list_answer(list: &Touched, result: &CallResult) -> Value {
    let items: Vec<Value> = list
        .iter()
        .map(|(address, slots)| serde_json::json!({"address": address, "storageKeys": slots}))
        .collect();
    let (gas, error) = match result {
        CallResult::Success { gas_used, .. } => (*gas_used, None),
        CallResult::Revert { gas_used, output } => (*gas_used, Some(revert_message(output))),
        CallResult::Halt { gas_used, message } => (*gas_used, Some(message.clone())),
        CallResult::Invalid { message } => (0, Some(message.clone())),
    };
    let mut answer = serde_json::json!({
        "accessList": items,
        "gasUsed": alloy_primitives::U64::from(gas),
    });
    if let Some(error) = error {
        answer["error"] = Value::String(error);
    }
    answer
}

/// The most gas an estimate may give: the call's own gas, else the
/// block's gas limit (the gas cap without a header), never past the cap.
fn ceiling(session: &Session, args: &CallArgs) -> u64 {
    let block = session
        .block
        .header
        .as_ref()
        .map_or(call_exec::GAS_CAP, |h| h.gas_limit);
    args.gas
        .filter(|g| *g >= TX_GAS)
        .unwrap_or(block)
        .min(call_exec::GAS_CAP)
}

/// geth's tolerance of an estimate above the least gas that works
/// (wallets add a margin anyway).
const ESTIMATE_ERROR_RATIO: f64 = 0.015;
/// Gas of a plain transfer.
const TX_GAS: u64 = 21_000;
/// Gas a call passes to a value transfer's recipient for free.
const CALL_STIPEND: u64 = 2_300;

impl Executor {
    /// `eth_estimateGas` as geth computes it: the call at the most gas it
    /// may have (the block's limit, the gas cap, what the sender can pay),
    /// then an optimistic guess from the gas it used, then a bisection,
    /// every run over the same privately read state (later runs read
    /// nothing new, or little).
    pub async fn estimate(
        &self,
        args: &CallArgs,
        sel: &BlockSelector,
        held: Vec<Address>,
        first: Vec<ReadKey>,
    ) -> Result<Result<Estimated, String>, ReadError> {
        let mut session = match self.open(sel, held, Vec::new()).await? {
            Ok(session) => session,
            Err(why) => return Ok(Err(why)),
        };
        let estimated = self.estimate_in(&mut session, args, first).await;
        self.pad_requests(&session).await;
        estimated
    }

    async fn estimate_in(
        &self,
        session: &mut Session,
        args: &CallArgs,
        first: Vec<ReadKey>,
    ) -> Result<Result<Estimated, String>, ReadError> {
        let mut hi = ceiling(session, args);
        let mut top = match self.attempt(session, args, hi, first).await? {
            Ok(result) => result,
            Err(why) => return Ok(Err(why)),
        };
        // The sender must afford the gas at its fee cap (its account was
        // read by the first run).
        if let Some(allowance) = self.affordable(session, args).filter(|a| *a < hi) {
            hi = allowance;
            top = match self.attempt(session, args, hi, Vec::new()).await? {
                Ok(result) => result,
                Err(why) => return Ok(Err(why)),
            };
        }
        let plain_transfer = args.input.is_empty()
            && session
                .reads
                .known
                .account(&args.to)
                .is_some_and(|a| !a.has_code);
        if plain_transfer {
            let transfer = self.attempt(session, args, TX_GAS, Vec::new()).await?;
            if let Ok(CallResult::Success { .. }) = transfer {
                return Ok(Ok(Estimated::Gas(TX_GAS)));
            }
        }
        let used = match &top {
            CallResult::Success { gas_used, .. } => *gas_used,
            CallResult::Halt { message, .. } if message == call_exec::OUT_OF_GAS => {
                return Ok(Ok(Estimated::Exceeds(hi)))
            }
            _ => return Ok(Ok(Estimated::Failed(top))),
        };
        Ok(self
            .bisect(session, args, used, hi)
            .await?
            .map(Estimated::Gas))
    }

    /// The least gas (within [`ESTIMATE_ERROR_RATIO`]) between the gas a
    /// run used and `hi`, with which the call succeeds: an optimistic
    /// guess first, then halves, skewed low (geth's search).
    async fn bisect(
        &self,
        session: &mut Session,
        args: &CallArgs,
        used: u64,
        mut hi: u64,
    ) -> Result<Result<u64, String>, ReadError> {
        let mut lo = used.saturating_sub(1);
        let optimistic = used.saturating_add(CALL_STIPEND).saturating_mul(64) / 63;
        if optimistic < hi {
            match self.attempt(session, args, optimistic, Vec::new()).await? {
                Ok(CallResult::Success { .. }) => hi = optimistic,
                Ok(_) => lo = optimistic,
                Err(why) => return Ok(Err(why)),
            }
        }
        while lo + 1 < hi {
            if (hi - lo) as f64 / (hi as f64) < ESTIMATE_ERROR_RATIO {
                break;
            }
            let mid = ((hi + lo) / 2).min(lo.saturating_mul(2));
            match self.attempt(session, args, mid, Vec::new()).await? {
                Ok(CallResult::Success { .. }) => hi = mid,
                Ok(_) => lo = mid,
                Err(why) => return Ok(Err(why)),
            }
        }
        Ok(Ok(hi))
    }

    /// One run of the call with `gas`.
    async fn attempt(
        &self,
        session: &mut Session,
        args: &CallArgs,
        gas: u64,
        first: Vec<ReadKey>,
    ) -> Result<Result<CallResult, String>, ReadError> {
        let args = CallArgs {
            gas: Some(gas),
            ..args.clone()
        };
        self.run(session, &args, first).await
    }

    /// The PIR requests `session` sent, padded up to `pad_rounds_to` with
    /// cover lookups when it sent any.
    async fn pad_requests(&self, session: &Session) -> u64 {
        let sent = self.reader.lookup_requests() - session.requests_before;
        // (Requests of other calls running at the same time count too:
        // under concurrency a call may be padded less.)
        let mut requests = sent;
        if sent > 0 {
            for _ in sent..self.pad_rounds_to as u64 {
                self.reader.cover_lookup().await;
                requests += 1;
            }
        }
        requests
    }

    /// The most gas the sender can pay at the call's fee cap, when it
    /// names one.
    fn affordable(&self, session: &Session, args: &CallArgs) -> Option<u64> {
        let cap = args.max_fee_per_gas.or(args.gas_price).filter(|c| *c > 0)?;
        let from = session
            .reads
            .known
            .account(&args.from.unwrap_or_default())?;
        let left = from.balance.saturating_sub(args.value);
        let allowance = left / U256::from(cap);
        Some(u64::try_from(allowance).unwrap_or(u64::MAX))
    }
}

/// The JSON-RPC code of a reverted call (geth's).
pub const REVERTED: i32 = 3;
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
    access_list: Touched,
}

/// Runs one round off the async runtime (a call may run long: up to the
/// gas cap), handing the state back.
async fn run_blocking(
    run: Run,
    known: KnownState,
) -> Result<(Outcome, Touched, KnownState, std::time::Duration), ReadError> {
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let (outcome, touched) =
            call_exec::run_traced(&run.block, run.spec, &run.args, &known, &run.access_list);
        (outcome, touched, known, started.elapsed())
    })
    .await
    .map_err(|e| ReadError::Backend(format!("the EVM failed: {e}")))
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
    }
}

/// The call object of `eth_call`: what the call runs with. Fields that
/// change state before it runs (overrides) or that this executor does
/// not model (blobs, authorizations) make it not executable here.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallObject {
    from: Option<Address>,
    to: Option<Address>,
    gas: Option<alloy_primitives::U64>,
    gas_price: Option<U256>,
    max_fee_per_gas: Option<U256>,
    max_priority_fee_per_gas: Option<U256>,
    value: Option<U256>,
    data: Option<Bytes>,
    input: Option<Bytes>,
    /// Inert here: a call's type follows from its fee fields.
    #[serde(rename = "type")]
    _type: Option<Value>,
    #[serde(rename = "chainId")]
    _chain_id: Option<Value>,
    #[serde(rename = "nonce")]
    _nonce: Option<Value>,
    #[serde(rename = "accessList")]
    _access_list: Option<Value>,
}

/// The call `eth_call(params)` asks for, and at which block, when it can
/// be executed here: a call (not a creation), no state or block
/// overrides, `data` and `input` the same where both are given.
pub fn call_of(params: Option<&RawValue>) -> Option<(CallArgs, BlockSelector)> {
    let params: Vec<Value> = serde_json::from_str(params?.get()).ok()?;
    if params.is_empty() || params.len() > 2 {
        return None;
    }
    let object: CallObject = serde_json::from_value(params[0].clone()).ok()?;
    let block = crate::storage::block_at(&params, 1)?;
    let input = match (object.data, object.input) {
        (Some(d), Some(i)) if d != i => return None,
        (Some(d), _) | (None, Some(d)) => d,
        (None, None) => Bytes::new(),
    };
    // A fee field past u128 is not a call a node runs either.
    let fee = |v: Option<U256>| match v {
        None => Some(None),
        Some(v) => u128::try_from(v).ok().map(Some),
    };
    let args = CallArgs {
        from: object.from,
        to: object.to?,
        gas: object.gas.map(|g| g.to::<u64>()),
        gas_price: fee(object.gas_price)?,
        max_fee_per_gas: fee(object.max_fee_per_gas)?,
        max_priority_fee_per_gas: fee(object.max_priority_fee_per_gas)?,
        value: object.value.unwrap_or_default(),
        input,
    };
    Some((args, block))
}

/// The node's answer to a call that ended so: its return data, or the
/// error geth gives (a revert: code 3 with its data and reason).
pub fn node_answer(result: &CallResult) -> Result<Bytes, jsonrpsee::types::ErrorObjectOwned> {
    use jsonrpsee::types::ErrorObjectOwned;
    match result {
        CallResult::Success { output, .. } => Ok(output.clone()),
        CallResult::Revert { output, .. } => Err(ErrorObjectOwned::owned(
            REVERTED,
            revert_message(output),
            Some(output.clone()),
        )),
        CallResult::Halt { message, .. } | CallResult::Invalid { message } => Err(
            ErrorObjectOwned::owned(EXECUTION_FAILED, message.clone(), None::<()>),
        ),
    }
}

/// geth's message for a revert: its reason where the data is an
/// `Error(string)` or a `Panic(uint256)`.
fn revert_message(data: &[u8]) -> String {
    use alloy_sol_types::{Panic, Revert, SolError};
    if let Ok(revert) = Revert::abi_decode(data) {
        return format!("execution reverted: {}", revert.reason);
    }
    if let Ok(panic) = Panic::abi_decode(data) {
        let code = panic.code;
        let reason = panic
            .kind()
            .map(|k| k.as_str().to_string())
            .unwrap_or_else(|| format!("unknown panic code: {code:#x}"));
        return format!("execution reverted: {reason}");
    }
    "execution reverted".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    #[test]
    fn call_objects_as_wallets_send_them() {
        let to = Address::repeat_byte(0xaa);
        let (args, block) = call_of(Some(&raw(json!([{"to": to, "input": "0x1234", "gas": "0x5208", "type": "0x2", "maxFeePerGas": "0x10"}, "0x10"])))).unwrap();
        assert_eq!(args.to, to);
        assert_eq!(args.input.as_ref(), [0x12, 0x34]);
        assert_eq!(args.gas, Some(21_000));
        assert_eq!(args.max_fee_per_gas, Some(16));
        assert_eq!(block, BlockSelector::Number(16));
        // Overrides, a creation, differing data and input, unknown fields.
        for params in [
            json!([{"to": to}, "latest", {}]),
            json!([{"data": "0x00"}]),
            json!([{"to": to, "data": "0x00", "input": "0x01"}]),
            json!([{"to": to, "blobVersionedHashes": []}]),
        ] {
            assert!(call_of(Some(&raw(params.clone()))).is_none(), "{params}");
        }
    }

    #[test]
    fn access_lists_read_as_nodes_give_them() {
        let a = Address::repeat_byte(0xaa);
        let list: Touched = [(a, [B256::with_last_byte(1)].into())].into();
        let ok = CallResult::Success {
            output: Bytes::new(),
            gas_used: 0x5208,
        };
        assert_eq!(
            access_list_answer(&list, &ok),
            json!({"accessList": [{"address": a, "storageKeys": [B256::with_last_byte(1)]}], "gasUsed": "0x5208"})
        );
        let halted = CallResult::Halt {
            message: "out of gas".into(),
            gas_used: 7,
        };
        assert_eq!(
            access_list_answer(&Touched::new(), &halted)["error"],
            "out of gas"
        );
        let e = node_answer(&halted).unwrap_err();
        assert_eq!((e.code(), e.message()), (EXECUTION_FAILED, "out of gas"));
    }

    #[test]
    fn reverts_read_as_geth_gives_them() {
        use alloy_sol_types::{Revert, SolError};
        let data = Bytes::from(Revert::from("no").abi_encode());
        let e = node_answer(&CallResult::Revert {
            output: data.clone(),
            gas_used: 1,
        })
        .unwrap_err();
        assert_eq!(e.code(), 3);
        assert_eq!(e.message(), "execution reverted: no");
        assert_eq!(
            e.data().map(|d| d.get().to_string()),
            Some(format!("\"{data}\""))
        );
        let empty = node_answer(&CallResult::Revert {
            output: Bytes::new(),
            gas_used: 1,
        })
        .unwrap_err();
        assert_eq!(empty.message(), "execution reverted");
    }
}
