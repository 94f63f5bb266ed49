//! The RPC middleware in front of the proxy's own methods:
//!
//! - a method the proxy does not answer goes to the upstream (or gets
//!   -32601 when there is none);
//! - the private calls of a batch are read together first, one PIR batch
//!   per snapshot, a lone private call on its own; each call then finds its
//!   answer in its extensions;
//! - `params` that is neither an array nor an object is an invalid request
//!   (jsonrpsee would pass it to the handler);
//! - with `private_fallback_to_upstream`, a private call the snapshots
//!   cannot answer ([`ethpir_client::ReadError::is_unanswerable`]) goes
//!   upstream (this reveals the address: opt-in only).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use alloy_primitives::Address;
use jsonrpsee::core::middleware::{Batch, BatchEntry, Notification, RpcServiceT};
use jsonrpsee::core::server::{BatchResponseBuilder, MethodResponse};
use jsonrpsee::types::{Id, Request};
use jsonrpsee::ResponsePayload;
use serde_json::value::RawValue;

use crate::activity::{Activity, Reason, WarningKind};
use crate::calls::Answerable;
use crate::config::MAX_RESPONSE_BYTES;
use crate::error::ProxyError;
use crate::execute;
use crate::rpc::{private_params, Prefetched};
use crate::storage;
use crate::upstream::Upstream;
use ethpir_client::reader::counting_requests;
use protocol::redact::Redacted;
use protocol::storage::PrivateStorage;

/// The methods the proxy runs itself (their call executed over privately
/// read state).
#[derive(Clone, Copy)]
enum RunHere {
    Call,
    EstimateGas,
    AccessList,
}

impl RunHere {
    fn of(method: &str) -> Option<Self> {
        match method {
            "eth_call" => Some(RunHere::Call),
            "eth_estimateGas" => Some(RunHere::EstimateGas),
            "eth_createAccessList" => Some(RunHere::AccessList),
            _ => None,
        }
    }

    /// Whose rules its state overrides follow.
    fn override_rules(self) -> call_exec::overrides::OverrideRules {
        use call_exec::overrides::OverrideRules;
        match self {
            RunHere::Call => OverrideRules::Call,
            RunHere::EstimateGas => OverrideRules::Estimate,
            RunHere::AccessList => OverrideRules::AccessList,
        }
    }

    /// The parameters geth takes: the call, the block, the state
    /// overrides, and (but for an access list) the block overrides.
    fn most_params(self) -> usize {
        match self {
            RunHere::Call | RunHere::EstimateGas => 4,
            RunHere::AccessList => 3,
        }
    }
}

/// Why a call is not run here.
enum Refusal {
    /// Private reads are stopped: the call fails (closed).
    Distrusted(ProxyError),
    /// No view at the block: the fallback.
    NoView,
}

/// A storage read a rule planned, and its keys' results when a batch
/// read them ahead.
type Planned = (
    storage::StorageRead,
    Option<Vec<Result<ethpir_client::KeyState, ReadError>>>,
);
use ethpir_client::PrivateReader;
use ethpir_client::{BlockSelector, ReadError};

/// What the middleware needs besides the service it wraps.
pub struct ForwardPolicy {
    pub reader: Arc<PrivateReader>,
    pub upstream: Option<Arc<Upstream>>,
    /// Where sends go instead of the upstream (`send_upstream`:
    /// [`SEND_METHODS`]); nothing else goes there.
    pub sends: Option<Arc<Upstream>>,
    /// Methods the proxy answers itself.
    pub local: HashSet<&'static str>,
    /// Of those, the ones read by PIR (`api::PrivateReadApi`'s).
    pub private: HashSet<&'static str>,
    pub private_fallback: bool,
    /// The token list the catalog's must agree with (the user's, or the
    /// shipped one).
    pub trusted_tokens: protocol::tokens::TokenList,
    /// The BalanceChecker's address set by the user (else the chain's
    /// known one, see [`protocol::tokens::known_balance_checker`]).
    pub balance_checker: Option<Address>,
    /// Runs `eth_call`s over privately read state.
    pub executor: crate::execute::Executor,
    /// Log filters naming an address, widened upstream and filtered here.
    pub logs: crate::logs::Logs,
    /// The wallet's sends, whose receipts are found in whole blocks.
    pub own_sends: crate::own_sends::OwnSends,
    /// What was answered privately and what went upstream (the page).
    pub activity: Arc<Activity>,
    /// Until when a request waits for the PIR server's first catalog
    /// (the proxy's start plus `start_wait_secs`).
    pub start_wait_until: tokio::time::Instant,
}

impl ForwardPolicy {
    /// What the view at `sel` can answer: the contracts whose storage it
    /// holds, as far as this proxy trusts it (see
    /// [`storage::checked_list`]), and the chain's BalanceChecker.
    fn answerable(&self, sel: &BlockSelector) -> Option<Answerable> {
        let catalog = self.reader.private_storage(sel)?;
        let chain = self.reader.chain_id().ok().flatten();
        Some(Answerable {
            storage: storage::checked_list(catalog, &self.trusted_tokens),
            balance_checker: self
                .balance_checker
                .or_else(|| chain.and_then(protocol::tokens::known_balance_checker)),
        })
    }

    /// At start (until `start_wait_until`), waits for the PIR server's
    /// first catalog to settle what a read finds (a view, or none for good),
    /// so that a wallet's first requests are answered rather than told
    /// "not ready": what the proxy answers and what the gate lets upstream
    /// both depend on the view. Past the start, never waits.
    async fn settle_at_start(&self) {
        if tokio::time::Instant::now() >= self.start_wait_until {
            return;
        }
        if !self.reader.settled_by(self.start_wait_until).await {
            tracing::debug!(
                "nothing settled within the start wait: a request answered as things are"
            );
        }
    }

    /// Whether `method` would be sent upstream now (the gate's say).
    fn may_forward(&self, method: &str) -> bool {
        self.upstream
            .as_ref()
            .is_some_and(|u| u.gate().would_admit(method))
    }
}

/// The layer that wraps the proxy's method service.
#[derive(Clone)]
pub struct ForwardLayer(pub Arc<ForwardPolicy>);

impl<S> tower::Layer<S> for ForwardLayer {
    type Service = Forward<S>;

    fn layer(&self, inner: S) -> Forward<S> {
        Forward {
            inner,
            policy: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Forward<S> {
    inner: S,
    policy: Arc<ForwardPolicy>,
}

/// The parts of a call kept to forward it after the handler has run.
struct CallCopy {
    id: Id<'static>,
    method: String,
    params: Option<Box<RawValue>>,
}

impl CallCopy {
    fn of(req: &Request<'_>) -> Self {
        CallCopy {
            id: req.id.clone().into_owned(),
            method: req.method.to_string(),
            params: req.params.as_ref().map(|p| p.as_ref().to_owned()),
        }
    }
}

/// A JSON-RPC response of `answer`.
fn respond(id: Id<'static>, answer: Result<serde_json::Value, ProxyError>) -> MethodResponse {
    match answer {
        Ok(value) => {
            MethodResponse::response(id, ResponsePayload::success(value), MAX_RESPONSE_BYTES)
        }
        Err(e) => MethodResponse::error(id, e),
    }
}

/// The proxy's own methods (its status): answered at once, even at start.
fn is_own(method: &str) -> bool {
    method.starts_with("ethpir_")
}

/// The methods that carry a transaction to be sent: to `send_upstream`
/// where one is set, never to the upstream that serves the reads.
const SEND_METHODS: [&str; 6] = [
    "eth_sendRawTransaction",
    "eth_sendTransaction",
    "eth_sendRawTransactionSync",
    "eth_sendRawTransactionConditional",
    "eth_sendBundle",
    "eth_sendPrivateTransaction",
];

impl ForwardPolicy {
    /// Where `method` goes: a send to the send endpoint when there is one,
    /// everything else to the upstream.
    fn upstream_for(&self, method: &str) -> Option<&Arc<Upstream>> {
        match &self.sends {
            Some(sends) if SEND_METHODS.contains(&method) => Some(sends),
            _ => self.upstream.as_ref(),
        }
    }
}

/// Methods only the user may call: never run for a request from a
/// browser ([`crate::browser::FromBrowser`]).
const USER_ONLY: [&str; 1] = ["ethpir_trustReset"];

/// Why a request is refused before anything else: a method only the user
/// may call, from a browser; params that are neither an array nor an
/// object.
fn refused_at_entry(req: &Request<'_>, call: &CallCopy) -> Option<ProxyError> {
    let from_browser = req
        .extensions()
        .get::<crate::browser::FromBrowser>()
        .is_some();
    if from_browser && USER_ONLY.contains(&call.method.as_str()) {
        return Some(ProxyError::UserOnly(call.method.clone()));
    }
    (!params_shape_ok(call.params.as_deref())).then_some(ProxyError::InvalidRequest(
        "params must be an array or an object",
    ))
}

fn params_shape_ok(params: Option<&RawValue>) -> bool {
    params.is_none_or(|p| matches!(p.get().trim_start().as_bytes().first(), Some(b'[' | b'{')))
}

impl<S> Forward<S>
where
    S: RpcServiceT<MethodResponse = MethodResponse> + Send + Sync + Clone + 'static,
{
    async fn route(&self, mut req: Request<'_>) -> MethodResponse {
        let copy = CallCopy::of(&req);
        if let Some(upstream) = &self.policy.upstream {
            upstream.gate().observe();
        }
        if let Some(e) = refused_at_entry(&req, &copy) {
            return MethodResponse::error(copy.id, e);
        }
        if let Some(e) = storage::refused_params(&copy.method, copy.params.as_deref()) {
            return MethodResponse::error(copy.id, e);
        }
        let planned = match req.extensions_mut().remove::<storage::PrefetchedSlots>() {
            Some(ahead) => Some((ahead.read, Some(ahead.results))),
            None => {
                let answerable = |sel: &BlockSelector| self.policy.answerable(sel);
                storage::plan(&copy.method, copy.params.as_deref(), answerable).map(|r| (r, None))
            }
        };
        if let Some(kind) = RunHere::of(&copy.method) {
            match execute::call_of(copy.params.as_deref(), kind.most_params()) {
                Some(Ok((args, sel))) => {
                    return self.run_method(kind, copy, args, sel, planned).await
                }
                Some(Err(refused)) => return MethodResponse::error(copy.id, refused.into_object()),
                None => {}
            }
        }
        if copy.method == "eth_simulateV1" {
            return self.simulate(copy).await;
        }
        if let Some((read, ahead)) = planned {
            return self.answer_storage(copy, read, ahead).await;
        }
        if copy.method == "eth_blockNumber" {
            return self.block_number(copy).await;
        }
        if !self.policy.local.contains(copy.method.as_str()) {
            return self.forward_other(copy).await;
        }
        if self.policy.private.contains(copy.method.as_str()) {
            return self.private_read(req, copy).await;
        }
        self.inner.call(req).await
    }

    /// A private read (a balance, a nonce, a code), read here so that
    /// the fallback is decided on its typed error, padded as a call is
    /// where it read on its own, then answered by its handler.
    async fn private_read(&self, mut req: Request<'_>, copy: CallCopy) -> MethodResponse {
        let (read, sent) = counting_requests(self.read_ahead(&req)).await;
        if let Some((read, own)) = read {
            if let Some(sel) = own {
                self.policy.executor.pad_direct_read(&sel, &sent).await;
            }
            // A level that does not say which code accounts have
            // cannot answer eth_getCode, though it read the account.
            let code_unknown = copy.method == "eth_getCode"
                && matches!(&read.0, Ok(s) if s.code == protocol::CodeRef::Unknown);
            let unanswerable = matches!(&read.0, Err(e) if e.is_unanswerable()) || code_unknown;
            if unanswerable && self.policy.private_fallback && self.policy.upstream.is_some() {
                tracing::warn!(method = %copy.method, "private answer unavailable; forwarding upstream as configured (reveals the address)");
                return self.forward(copy, Reason::ConfiguredFallback).await;
            }
            if read.0.is_ok() && !code_unknown {
                self.policy.activity.private(&copy.method);
            }
            req.extensions_mut().insert(read);
        }
        self.inner.call(req).await
    }

    /// The answer to a private call, read here so that the fallback is
    /// decided on its typed error: the batch's read when there was one,
    /// else its own (with the block it was read at, to be padded there).
    /// None leaves the call to its handler: malformed params (the handler
    /// says why) or private reads stopped (the handler says so).
    async fn read_ahead(&self, req: &Request<'_>) -> Option<(Prefetched, Option<BlockSelector>)> {
        if let Some(done) = req.extensions().get::<Prefetched>() {
            return Some((done.clone(), None));
        }
        if self.policy.reader.distrusted().is_some() {
            return None;
        }
        let (address, selector) = private_params(&req.params()).ok()?;
        let mut results = self.policy.reader.lookup(&selector, &[address]).await;
        results.pop().map(|r| (Prefetched(r), Some(selector)))
    }

    /// A storage read of a listed contract, answered by PIR: fail closed
    /// while private reads are stopped; what the snapshots cannot answer
    /// (a word too wide for them, no view at the block) goes upstream only
    /// with `private_fallback_to_upstream`.
    async fn answer_storage(
        &self,
        call: CallCopy,
        read: storage::StorageRead,
        ahead: Option<Vec<Result<ethpir_client::KeyState, ReadError>>>,
    ) -> MethodResponse {
        let reader = &self.policy.reader;
        if let Some(reason) = reader.distrusted() {
            return MethodResponse::error(call.id, ProxyError::from(ReadError::Distrusted(reason)));
        }
        let own = ahead.is_none();
        let (facts, sent) = counting_requests(storage::read_facts(reader, &read, ahead)).await;
        if own {
            self.policy
                .executor
                .pad_direct_read(&read.block, &sent)
                .await;
        }
        match facts {
            Ok(found) => {
                let answer = match storage::answer(&read, &found) {
                    Ok(answer) => answer,
                    Err(e) => {
                        tracing::info!(method = %call.method, error = %Redacted(&e), "private answer not made");
                        return MethodResponse::error(
                            call.id,
                            ProxyError::NotAnswerable(e.to_string()),
                        );
                    }
                };
                tracing::info!(method = %call.method, keys = read.keys.len(), snapshot = %found.snapshot, "answered privately");
                self.policy.activity.private(&call.method);
                MethodResponse::response(
                    call.id,
                    ResponsePayload::success(answer),
                    MAX_RESPONSE_BYTES,
                )
            }
            Err(e)
                if e.is_unanswerable()
                    && self.policy.private_fallback
                    && self.policy.upstream.is_some() =>
            {
                tracing::warn!(method = %call.method, error = %Redacted(&e), "private answer unavailable; forwarding upstream as configured (reveals the read)");
                self.forward(call, Reason::ConfiguredFallback).await
            }
            Err(e) => {
                tracing::info!(method = %call.method, error = %Redacted(&e), "private read failed");
                MethodResponse::error(call.id, ProxyError::from(e))
            }
        }
    }

    /// An `eth_call` run here over privately read state: the node's answer
    /// (its return data, or its revert); what cannot be answered privately
    /// takes `eth_call`'s fallback (upstream when `upstream_methods`
    /// allows it, else an error). A rule's plan (`planned`) only says which
    /// keys to read first, or gives them read with a batch's.
    async fn execute_call(
        &self,
        call: CallCopy,
        args: call_exec::CallArgs,
        sel: BlockSelector,
        planned: Option<Planned>,
    ) -> MethodResponse {
        let (first, ahead) = match planned {
            Some((read, Some(results))) => {
                let read_ok = read.keys.into_iter().zip(results);
                (
                    Vec::new(),
                    read_ok.filter_map(|(k, r)| Some((k, r.ok()?))).collect(),
                )
            }
            Some((read, None)) => (read.keys, Vec::new()),
            None => (Vec::new(), Vec::new()),
        };
        let executor = &self.policy.executor;
        let run = |held| async {
            let executed = executor.execute(&args, &sel, held, first, ahead).await?;
            Ok(match executed {
                execute::Executed::Answered(done) => Ok(done),
                execute::Executed::NotPrivate(why) => Err(why),
            })
        };
        // (Its cost is logged where it was run: execute::log_cost.)
        let answer = |done: execute::Answered| {
            execute::node_answer(&done.result).map(|data| serde_json::json!(data))
        };
        self.run_here(call, args.to, &sel, run, answer).await
    }

    /// `eth_simulateV1` run here over privately read state
    /// ([`execute::Executor::simulate`]): geth's answer, or geth's error;
    /// what cannot be answered privately takes the fallback, as a call
    /// does (the upstream where the gate admits the method: not while the
    /// view holds the whole state, unless the user opened it).
    async fn simulate(&self, call: CallCopy) -> MethodResponse {
        let request = match execute::simulation_of(call.params.as_deref()) {
            Ok(request) => request,
            Err(e) => return MethodResponse::error(call.id, e.into_object()),
        };
        let executor = &self.policy.executor;
        let at = request.at.clone();
        let run = |held| async move { executor.simulate(&request, held).await };
        let answer = |simulated| execute::simulate_answer(&simulated);
        self.run_here(call, None, &at, run, answer).await
    }

    /// A call run here (`run`, given the contracts whose storage it may
    /// read) answered as `answer` makes it; what cannot be answered
    /// privately takes the fallback (the upstream, or an error with
    /// private-only settings); private reads stopped fail it (closed).
    async fn run_here<T, Fut>(
        &self,
        call: CallCopy,
        contract: Option<Address>,
        sel: &BlockSelector,
        run: impl FnOnce(PrivateStorage) -> Fut,
        answer: impl FnOnce(T) -> Result<serde_json::Value, jsonrpsee::types::ErrorObjectOwned>,
    ) -> MethodResponse
    where
        Fut: Future<Output = Result<Result<T, String>, ReadError>>,
    {
        let held = match self.held_at(sel) {
            Ok(held) => held,
            Err(Refusal::Distrusted(e)) => return MethodResponse::error(call.id, e),
            Err(Refusal::NoView) => match self.past_the_head(sel).await {
                Some(e) => return MethodResponse::error(call.id, e),
                None => return self.forward(call, Reason::NoView).await,
            },
        };
        let why = match run(held).await {
            Ok(Ok(done)) => {
                self.policy.activity.private(&call.method);
                return match answer(done) {
                    Ok(value) => MethodResponse::response(
                        call.id,
                        ResponsePayload::success(value),
                        MAX_RESPONSE_BYTES,
                    ),
                    Err(error) => MethodResponse::error(call.id, error),
                };
            }
            Ok(Err(why)) => why,
            Err(e) if e.is_unanswerable() => e.to_string(),
            Err(e) => {
                tracing::debug!(method = %call.method, ?contract, error = %e, "private read failed");
                tracing::info!(method = %call.method, error = %Redacted(&e), "private read failed");
                return MethodResponse::error(call.id, ProxyError::from(e));
            }
        };
        tracing::debug!(method = %call.method, ?contract, %why, "not answerable privately; taking the fallback");
        tracing::info!(method = %call.method, why = %Redacted(&why), "not answerable privately; taking the fallback");
        let taken = match self.policy.may_forward(&call.method) {
            true => "went upstream",
            false => "failed (private-only)",
        };
        let of = contract.map(|c| format!(" of {c}")).unwrap_or_default();
        self.policy.activity.warn(
            WarningKind::Fallback,
            format!("{}{of} {taken}: {why}", call.method),
        );
        self.forward(call, Reason::NotHeld).await
    }

    /// geth's answer to a call at a block past the upstream's head
    /// ("header not found"), where `sel` names one: no view has it, and
    /// the node has none either (its head names no address).
    async fn past_the_head(
        &self,
        sel: &BlockSelector,
    ) -> Option<jsonrpsee::types::ErrorObjectOwned> {
        let BlockSelector::Number(n) = sel else {
            return None;
        };
        let head = self.policy.upstream.as_ref()?.head().await?;
        (*n > head).then(|| {
            jsonrpsee::types::ErrorObjectOwned::owned(
                execute::EXECUTION_FAILED,
                "header not found",
                None::<()>,
            )
        })
    }

    /// The contracts whose storage a call at `sel` may read privately;
    /// or why it is not run here.
    fn held_at(&self, sel: &BlockSelector) -> Result<PrivateStorage, Refusal> {
        if let Some(reason) = self.policy.reader.distrusted() {
            return Err(Refusal::Distrusted(ProxyError::from(
                ReadError::Distrusted(reason),
            )));
        }
        let Some(answerable) = self.policy.answerable(sel) else {
            tracing::info!("no view at that block; taking the fallback");
            return Err(Refusal::NoView);
        };
        Ok(answerable.storage)
    }

    /// A method the proxy runs itself: `eth_call` (see
    /// [`Self::execute_call`]), `eth_estimateGas` as geth estimates
    /// ([`execute::Executor::estimate`]), `eth_createAccessList` as reth and
    /// anvil make it ([`execute::Executor::access_list`]).
    async fn run_method(
        &self,
        kind: RunHere,
        call: CallCopy,
        mut args: call_exec::CallArgs,
        sel: BlockSelector,
        planned: Option<Planned>,
    ) -> MethodResponse {
        let executor = &self.policy.executor;
        args.override_rules = kind.override_rules();
        match kind {
            RunHere::Call => self.execute_call(call, args, sel, planned).await,
            RunHere::EstimateGas => {
                let run = |held| executor.estimate(&args, &sel, held, Vec::new());
                let answer = |estimated| execute::estimate_answer(&estimated);
                self.run_here(call, args.to, &sel, run, answer).await
            }
            RunHere::AccessList => {
                let run = |held| executor.access_list(&args, &sel, held);
                let answer = |(list, result)| execute::access_list_answer(&list, &result);
                self.run_here(call, args.to, &sel, run, answer).await
            }
        }
    }

    /// `eth_blockNumber`: the upstream's head, but never past the newest
    /// view, so that a wallet that pins its reads to the number it was
    /// given (MetaMask rewrites `latest` so) finds a view there. Without
    /// an upstream (or when it fails), the newest view's block.
    async fn block_number(&self, call: CallCopy) -> MethodResponse {
        let view = self.policy.reader.newest_view().map(|v| v.block);
        let Some(view) = view else {
            return self.forward(call, Reason::NoView).await;
        };
        let head = match &self.policy.upstream {
            Some(upstream) => upstream.head().await,
            None => None,
        };
        let block = head.map_or(view, |head| head.min(view));
        let answer = alloy_primitives::U64::from(block);
        MethodResponse::response(
            call.id,
            ResponsePayload::success(answer),
            MAX_RESPONSE_BYTES,
        )
    }

    /// A method the proxy does not answer itself: a log filter naming an
    /// address, read widened ([`crate::logs`]); a sender's part of the
    /// pool, picked from the whole pool ([`crate::txpool`]); anything else
    /// forwarded.
    async fn forward_other(&self, call: CallCopy) -> MethodResponse {
        if let Some(upstream) = &self.policy.upstream {
            let params = call.params.as_deref();
            let logs = &self.policy.logs;
            if let Some(answer) = logs.answer(upstream, &call.method, params).await {
                return respond(call.id, answer);
            }
            let pool = crate::txpool::content_from(upstream, &call.method, params).await;
            if let Some(answer) = pool {
                return respond(call.id, answer);
            }
            let own = self.policy.own_sends.answer(upstream, &call.method, params);
            if let Some(answer) = own.await {
                return respond(call.id, answer);
            }
        }
        self.forward(call, Reason::NotPrivateMethod).await
    }

    /// Sends `call` upstream (recorded, with why) where the gate admits
    /// it.
    async fn forward(&self, call: CallCopy, reason: Reason) -> MethodResponse {
        let Some(upstream) = self.policy.upstream_for(&call.method) else {
            return MethodResponse::error(call.id, ProxyError::NoUpstream(call.method));
        };
        tracing::debug!(method = %call.method, "forwarding upstream");
        let own = &self.policy.own_sends;
        let reads = self.policy.upstream.as_deref();
        let head = own.head_before_send(reads, &call.method).await;
        let sent = SEND_METHODS
            .contains(&call.method.as_str())
            .then(|| call.params.clone());
        match upstream.call(&call.method, call.params, reason).await {
            Ok(result) => {
                let noted = sent.and_then(|p| own.note(head, &call.method, p.as_deref(), &result));
                // The transaction's own hash where the endpoint answered another.
                let corrected = noted.and_then(|hash| serde_json::value::to_raw_value(&hash).ok());
                let answer = ResponsePayload::success(corrected.unwrap_or(result));
                MethodResponse::response(call.id, answer, MAX_RESPONSE_BYTES)
            }
            Err(e) => MethodResponse::error(call.id, e),
        }
    }

    /// Reads the well-formed private calls of a batch together: one PIR
    /// request per block asked about. Malformed calls, and a block asked
    /// about by a single call, are left to their handler.
    async fn prefetch(&self, batch: &mut Batch<'_>) {
        let ((accounts_at, storage_at), sent) = counting_requests(async {
            let accounts_at = self.prefetch_accounts(batch).await;
            (accounts_at, self.prefetch_storage(batch).await)
        })
        .await;
        // The batch's direct reads, padded as one read (the calls among
        // them are padded by their own sessions).
        if let Some(sel) = storage_at.or(accounts_at) {
            self.policy.executor.pad_direct_read(&sel, &sent).await;
        }
    }

    /// Reads the private account reads of a batch together: one PIR
    /// request per block asked about by several; a block it read at.
    async fn prefetch_accounts(&self, batch: &mut Batch<'_>) -> Option<BlockSelector> {
        let mut groups: HashMap<BlockSelector, Vec<(usize, Address)>> = HashMap::new();
        for (i, entry) in batch.iter().enumerate() {
            let Ok(BatchEntry::Call(req)) = entry else {
                continue;
            };
            if !self.policy.private.contains(req.method.as_ref()) {
                continue;
            }
            let Ok((address, selector)) = private_params(&req.params()) else {
                continue;
            };
            groups.entry(selector).or_default().push((i, address));
        }
        let mut read: HashMap<usize, Prefetched> = HashMap::new();
        let mut read_at = None;
        for (selector, members) in groups.into_iter().filter(|g| g.1.len() > 1) {
            let addresses: Vec<Address> = members.iter().map(|(_, a)| *a).collect();
            let results = self.policy.reader.lookup(&selector, &addresses).await;
            for ((i, _), result) in members.iter().zip(results) {
                read.insert(*i, Prefetched(result));
            }
            read_at = Some(selector);
        }
        attach(batch, read);
        read_at
    }

    /// Reads the private storage reads of a batch together: one PIR
    /// request per block asked about, when a block has several.
    async fn prefetch_storage(&self, batch: &mut Batch<'_>) -> Option<BlockSelector> {
        if self.policy.reader.distrusted().is_some() {
            return None;
        }
        let answerable = |sel: &BlockSelector| self.policy.answerable(sel);
        let mut groups: HashMap<BlockSelector, Vec<(usize, storage::StorageRead)>> = HashMap::new();
        for (i, entry) in batch.iter().enumerate() {
            let Ok(BatchEntry::Call(req)) = entry else {
                continue;
            };
            let params = req.params.as_ref().map(|p| p.as_ref());
            if let Some(read) = storage::plan(&req.method, params, answerable) {
                groups
                    .entry(read.block.clone())
                    .or_default()
                    .push((i, read));
            }
        }
        let mut read: HashMap<usize, storage::PrefetchedSlots> = HashMap::new();
        let mut read_at = None;
        for (block, members) in groups.into_iter().filter(|g| g.1.len() > 1) {
            let (entries, reads): (Vec<usize>, Vec<storage::StorageRead>) =
                members.into_iter().unzip();
            let direct = reads.iter().any(|r| r.answer != storage::Answer::Call);
            let results = storage::read_together(&self.policy.reader, &block, reads).await;
            read.extend(entries.into_iter().zip(results));
            read_at = read_at.or(direct.then_some(block));
        }
        attach(batch, read);
        read_at
    }
}

/// Puts each answer read ahead into the extensions of the batch call it
/// belongs to (by position in the batch), where its handler finds it.
fn attach<T: Clone + Send + Sync + 'static>(batch: &mut Batch<'_>, mut answers: HashMap<usize, T>) {
    for (i, entry) in batch.iter_mut().enumerate() {
        if let (Ok(BatchEntry::Call(req)), Some(answer)) = (entry, answers.remove(&i)) {
            req.extensions_mut().insert(answer);
        }
    }
}

impl<S> RpcServiceT for Forward<S>
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            NotificationResponse = MethodResponse,
            BatchResponse = MethodResponse,
        > + Send
        + Sync
        + Clone
        + 'static,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = MethodResponse;
    type BatchResponse = MethodResponse;

    fn call<'a>(&self, req: Request<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let this = self.clone();
        async move {
            if !is_own(&req.method) {
                this.policy.settle_at_start().await;
            }
            this.route(req).await
        }
    }

    fn batch<'a>(&self, mut batch: Batch<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let this = self.clone();
        async move {
            let own = |e: &Result<BatchEntry<'_>, _>| matches!(e, Ok(BatchEntry::Call(r)) if is_own(&r.method));
            if !batch.iter().all(own) {
                this.policy.settle_at_start().await;
            }
            this.prefetch(&mut batch).await;
            let mut got_notification = false;
            let answers = futures_util::future::join_all(batch.into_iter().map(|entry| {
                let this = this.clone();
                async move {
                    match entry {
                        Ok(BatchEntry::Call(req)) => Some(this.route(req).await),
                        Ok(BatchEntry::Notification(n)) => {
                            this.notify(n).await;
                            None
                        }
                        Err(err) => {
                            let (err, id) = err.into_parts();
                            Some(MethodResponse::error(id, err))
                        }
                    }
                }
            }))
            .await;
            let mut out = BatchResponseBuilder::new_with_limit(MAX_RESPONSE_BYTES);
            for answer in answers {
                match answer {
                    Some(a) => {
                        if let Err(too_big) = out.append(a) {
                            return too_big;
                        }
                    }
                    None => got_notification = true,
                }
            }
            if out.is_empty() && got_notification {
                MethodResponse::notification()
            } else {
                MethodResponse::from_batch(out.finish())
            }
        }
    }

    fn notification<'a>(
        &self,
        n: Notification<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        let this = self.clone();
        async move {
            if !is_own(&n.method) {
                this.policy.settle_at_start().await;
            }
            this.notify(n).await;
            MethodResponse::notification()
        }
    }
}

impl<S> Forward<S>
where
    S: RpcServiceT<MethodResponse = MethodResponse> + Send + Sync + Clone + 'static,
{
    /// A notification is answered by nobody; one for a method the proxy
    /// does not know goes upstream (private methods never do, nor filter
    /// methods: their ids are the proxy's own, never the node's).
    async fn notify(&self, n: Notification<'_>) {
        let method = n.method.as_ref();
        if self.policy.local.contains(method) || crate::logs::is_filter_method(method) {
            return;
        }
        if let Some(upstream) = self.policy.upstream_for(method) {
            let params = n.params.as_ref().map(|p| p.as_ref().to_owned());
            upstream.notify(method, params).await;
        }
    }
}
