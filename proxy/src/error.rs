//! Every error the proxy answers a wallet with, and its JSON-RPC code: the
//! one place where a failure becomes an error object. The codes of JSON-RPC
//! 2.0 itself are jsonrpsee's; the -3200x ones are the proxy's own
//! (docs/protocol.md lists them).

use ethpir_client::ReadError;
use jsonrpsee::types::error::{INTERNAL_ERROR_CODE, INVALID_REQUEST_CODE, METHOD_NOT_FOUND_CODE};
use jsonrpsee::types::{ErrorObject, ErrorObjectOwned, Id, Response, ResponsePayload};
use serde_json::{json, Value};

pub use jsonrpsee::types::error::{INVALID_PARAMS_CODE, PARSE_ERROR_CODE};

/// No snapshot for the requested block.
pub const NO_SNAPSHOT: i32 = -32001;
/// The account is not in an active/historical snapshot.
pub const NOT_IN_PRIVATE_SET: i32 = -32002;
/// The PIR server could not be reached or refused.
pub const PIR_UNAVAILABLE: i32 = -32003;
/// A private answer did not verify (damaged or altered), now or earlier:
/// private reads from that server are stopped (fail closed).
pub const UNVERIFIABLE: i32 = -32004;
/// geth's code for an error of the method itself ("filter not found").
pub const SERVER_ERROR: i32 = -32000;
/// The upstream node could not be reached.
pub const UPSTREAM_UNAVAILABLE: i32 = -32005;
/// geth's code for a request past one of its limits
/// (`clientLimitExceededError`).
pub const LIMIT_EXCEEDED: i32 = -38026;

/// Why an upstream URL was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("upstream URL must start with http://, https://, ws:// or wss:// (got {0})")]
pub struct UpstreamUrlError(pub(crate) String);

/// Why the upstream's SOCKS5 routes (`upstream_proxy`, `send_proxy`) cannot
/// be used.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamRouteError {
    #[error(transparent)]
    Proxy(#[from] ethpir_client::config::ConfigError),
    #[error("{setting} carries HTTP(S) upstreams only, and {url} is a WebSocket: give its http(s):// URL (heads are then polled, and eth_subscribe is refused)")]
    WebSocket { setting: &'static str, url: String },
    #[error("upstream_proxy and send_proxy name the same SOCKS server with the same credentials: reads and sends would share a circuit. Give send_proxy credentials of its own, or leave both without credentials (each then gets made-up ones)")]
    SharedCredentials,
}

/// Why the proxy cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    File(#[from] protocol::config::ConfigError),
    /// The private reader's settings (the PIR server's URL, transport).
    #[error(transparent)]
    Client(#[from] ethpir_client::config::ConfigError),
    #[error(transparent)]
    Upstream(#[from] UpstreamUrlError),
    #[error(transparent)]
    UpstreamRoute(#[from] UpstreamRouteError),
    #[error(transparent)]
    Tokens(#[from] protocol::tokens::TokenListError),
    #[error("starting the JSON-RPC server: {0}")]
    Listen(#[from] std::io::Error),
}

/// Why the proxy did not answer a call.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A private read failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// No snapshot has been loaded, so the chain is unknown.
    #[error("no snapshot loaded yet: chain unknown")]
    ChainUnknown,
    /// The upstream could not be asked (unreachable, too slow, too big, or
    /// an unreadable reply); the detail is for the wallet's log.
    #[error("upstream unavailable: {0}")]
    UpstreamUnavailable(String),
    /// The upstream answered with this error; it is passed on as sent.
    #[error("upstream error {}: {}", .0.code(), .0.message())]
    Upstream(ErrorObjectOwned),
    /// A method the proxy does not answer, and there is no upstream.
    #[error("method {0} is not available (no upstream configured)")]
    NoUpstream(String),
    /// A method that may read state by address, refused by
    /// `upstream_methods` (only methods that read none are forwarded).
    #[error("{method} is not forwarded: it may read state by address, and upstream_methods = \"{setting}\" forwards only methods that read none (\"all\" forwards it, naming the address to the upstream)")]
    AddressReadRefused {
        method: String,
        setting: &'static str,
    },
    /// `eth_getProof` refused as [`Self::AddressReadRefused`] is: no proof
    /// can be made privately either.
    #[error("eth_getProof is not answered privately: the PIR snapshots hold each account's and slot's value, not the state trie's nodes, so no proof can be made here; and upstream_methods = \"{setting}\" forwards no read naming an address (\"all\" forwards it, naming the address to the upstream)")]
    ProofNotHeld { setting: &'static str },
    /// `upstream_methods = "auto"` before a view is adopted: whether the
    /// PIR server holds the whole state is not known yet.
    #[error("not ready: {0} is not forwarded before the PIR server's view is known (upstream_methods = \"auto\"); try again")]
    UpstreamNotReady(String),
    /// `upstream_methods = "auto"`: the PIR server served the whole state
    /// before and its view does not claim it now.
    #[error("{0} is not forwarded: this PIR server served the whole state before and its view does not claim it now (upstream_methods = \"auto\"; set \"all\" to forward such reads, naming their addresses)")]
    NoLongerWhole(String),
    /// A method only the user may call, asked by a web page or an
    /// extension (the request carried an `Origin`).
    #[error("{0} is not run for a request from a browser (it carried an Origin); the user runs it: `ethpir-proxy trust-reset`, or a request without an Origin")]
    UserOnly(String),
    /// A widened log filter spans more blocks than `logs_max_blocks`.
    #[error("a log filter naming an address is read widened and filtered here: it may span at most {max} blocks (logs_max_blocks), this one spans {blocks}")]
    LogsTooWide { blocks: u64, max: u64 },
    /// The node's answer to a widened log filter is over `logs_max_mib`.
    #[error("a log filter naming an address is read widened and filtered here: the node's answer is {bytes} bytes, over logs_max_mib ({max} bytes); ask fewer blocks")]
    LogsTooBig { bytes: usize, max: usize },
    /// A filter id the proxy did not hand out (or has forgotten): geth's
    /// answer.
    #[error("filter not found")]
    FilterNotFound,
    /// Parameters the proxy must read and cannot.
    #[error("invalid params: {0}")]
    BadParams(String),
    /// A request past a limit the node also keeps (its code and words).
    #[error("{0}")]
    LimitExceeded(String),
    /// `eth_subscribe` without a WebSocket upstream.
    #[error(
        "subscriptions need a WebSocket upstream (upstream = \"ws://...\"); none is configured"
    )]
    SubscriptionsNeedWebSocket,
    /// A request that breaks JSON-RPC 2.0's envelope rules.
    #[error("{0}")]
    InvalidRequest(&'static str),
    /// What was read privately does not make the answer (a fact of the
    /// block the snapshots do not record).
    #[error("not answerable privately: {0}")]
    NotAnswerable(String),
}

impl ProxyError {
    /// The JSON-RPC code a wallet sees.
    pub fn code(&self) -> i32 {
        match self {
            ProxyError::Read(e) => read_code(e),
            ProxyError::ChainUnknown => PIR_UNAVAILABLE,
            ProxyError::UpstreamUnavailable(_) => UPSTREAM_UNAVAILABLE,
            ProxyError::Upstream(e) => e.code(),
            ProxyError::NoUpstream(_)
            | ProxyError::AddressReadRefused { .. }
            | ProxyError::ProofNotHeld { .. }
            | ProxyError::UserOnly(_)
            | ProxyError::SubscriptionsNeedWebSocket => METHOD_NOT_FOUND_CODE,
            ProxyError::UpstreamNotReady(_) | ProxyError::NoLongerWhole(_) => PIR_UNAVAILABLE,
            ProxyError::InvalidRequest(_) => INVALID_REQUEST_CODE,
            ProxyError::LogsTooWide { .. }
            | ProxyError::LogsTooBig { .. }
            | ProxyError::BadParams(_) => INVALID_PARAMS_CODE,
            ProxyError::NotAnswerable(_) => NOT_IN_PRIVATE_SET,
            ProxyError::LimitExceeded(_) => LIMIT_EXCEEDED,
            ProxyError::FilterNotFound => SERVER_ERROR,
        }
    }

    /// Whether this is the gate's refusal (nothing was sent upstream).
    pub fn is_gate_refusal(&self) -> bool {
        matches!(
            self,
            ProxyError::AddressReadRefused { .. }
                | ProxyError::ProofNotHeld { .. }
                | ProxyError::UpstreamNotReady(_)
                | ProxyError::NoLongerWhole(_)
        )
    }

    /// A whole JSON-RPC response carrying this error, for answers made
    /// before jsonrpsee has parsed the request (its id is unknown: null).
    pub fn response_without_id(self) -> Value {
        let response = Response::new(ResponsePayload::<()>::error(self), Id::Null);
        serde_json::to_value(response).expect("a response serialises")
    }
}

fn read_code(e: &ReadError) -> i32 {
    match e {
        ReadError::NoSnapshot { .. }
        | ReadError::NotCanonical { .. }
        | ReadError::Unattested { .. }
        | ReadError::Unreadable { .. }
        | ReadError::Unbound { .. }
        | ReadError::Unconfirmed { .. }
        | ReadError::OtherChain { .. } => NO_SNAPSHOT,
        ReadError::NotInPrivateSet { .. }
        | ReadError::NotListed { .. }
        | ReadError::TooWide { .. }
        | ReadError::CodeUnknown { .. } => NOT_IN_PRIVATE_SET,
        ReadError::Backend(_)
        | ReadError::Retired(_)
        | ReadError::Setup { .. }
        | ReadError::NotReady(_) => PIR_UNAVAILABLE,
        ReadError::Unverifiable(_) | ReadError::Distrusted(_) | ReadError::TierForged { .. } => {
            UNVERIFIABLE
        }
        ReadError::AmbiguousChain(_) => INTERNAL_ERROR_CODE,
    }
}

/// The message and data of a failed private read: the message is short and
/// stable (wallets show it), the data says what exactly.
fn read_message(e: &ReadError) -> (String, Option<Value>) {
    match e {
        ReadError::NoSnapshot {
            requested,
            available,
        } => (
            format!("no private snapshot for {requested}"),
            Some(json!({"available_blocks": available})),
        ),
        ReadError::NotInPrivateSet { snapshot, kind } => (
            "account not in the private set".into(),
            Some(json!({"snapshot": snapshot, "kind": kind})),
        ),
        ReadError::NotListed { contract, snapshot } => (
            "contract storage not in the private set".into(),
            Some(json!({"snapshot": snapshot, "contract": contract})),
        ),
        ReadError::TooWide { contract, snapshot } => (
            "storage word too wide for the private snapshot".into(),
            Some(json!({"snapshot": snapshot, "contract": contract})),
        ),
        ReadError::CodeUnknown { snapshot } => (
            "the private snapshot does not say which code accounts have".into(),
            Some(json!({"snapshot": snapshot})),
        ),
        ReadError::Backend(reason)
        | ReadError::Retired(reason)
        | ReadError::Setup { reason, .. } => ("PIR server unavailable".into(), Some(json!(reason))),
        ReadError::NotReady(reason) => ("not ready; try again".into(), Some(json!(reason))),
        ReadError::Unverifiable(reason) => (
            "private answer failed verification".into(),
            Some(json!(reason)),
        ),
        ReadError::AmbiguousChain(chains) => (e.to_string(), Some(json!(chains))),
        ReadError::TierForged { tier } => (
            "the PIR server's hot tier gave a forged value: answer withheld; ask again".into(),
            Some(json!({"tier": tier})),
        ),
        ReadError::NotCanonical { .. }
        | ReadError::Unattested { .. }
        | ReadError::Unreadable { .. }
        | ReadError::Unbound { .. }
        | ReadError::Unconfirmed { .. }
        | ReadError::OtherChain { .. } => view_refused_message(e),
        ReadError::Distrusted(reason) => (
            "private reads stopped: the PIR server failed verification; restart the proxy or run `ethpir-proxy trust-reset` once you trust it again".into(),
            Some(json!(reason)),
        ),
    }
}

/// [`read_message`] of a view the proxy does not read (not the chain's,
/// not signed, not confirmed, not readable).
fn view_refused_message(e: &ReadError) -> (String, Option<Value>) {
    match e {
        ReadError::NotCanonical { block, view, node } => (
            "the PIR server's view is not the upstream's block: not read".into(),
            Some(json!({"block": block, "view_hash": view, "node_hash": node})),
        ),
        ReadError::Unattested {
            snapshot,
            signed,
            quorum,
            attesters,
        } => (
            "the PIR server's snapshot lacks the attestations this proxy requires: not read".into(),
            Some(
                json!({"snapshot": snapshot, "signed": signed, "quorum": quorum, "attesters": attesters}),
            ),
        ),
        ReadError::Unreadable { snapshot, why } => (
            "the PIR server's snapshot is not read".into(),
            Some(json!({"snapshot": snapshot, "why": why})),
        ),
        ReadError::Unbound { block } => (
            "the PIR server's view names no block hash: the upstream cannot confirm it, not read"
                .into(),
            Some(json!({"block": block})),
        ),
        ReadError::Unconfirmed { block, why } => (
            "the upstream has not confirmed the PIR server's view: not read".into(),
            Some(json!({"block": block, "why": why})),
        ),
        ReadError::OtherChain { chain, catalog } => (
            "the PIR server's snapshots are of another chain: not read".into(),
            Some(json!({"chain": chain, "catalog_chains": catalog})),
        ),
        other => (other.to_string(), None),
    }
}

impl From<ProxyError> for ErrorObjectOwned {
    fn from(e: ProxyError) -> Self {
        let code = e.code();
        match e {
            ProxyError::Read(read) => {
                let (message, data) = read_message(&read);
                ErrorObject::owned(code, message, data)
            }
            ProxyError::Upstream(sent) => sent,
            ProxyError::UpstreamUnavailable(detail) => {
                ErrorObject::owned(code, "upstream unavailable", Some(detail))
            }
            other => ErrorObject::owned(code, other.to_string(), None::<()>),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages() {
        let e: ErrorObjectOwned = ProxyError::from(ReadError::NoSnapshot {
            requested: "block 7".into(),
            available: vec![5],
        })
        .into();
        assert_eq!(e.code(), NO_SNAPSHOT);
        assert_eq!(e.message(), "no private snapshot for block 7");
        let e: ErrorObjectOwned = ProxyError::ChainUnknown.into();
        assert_eq!(e.code(), PIR_UNAVAILABLE);
        let sent = ErrorObject::owned(3, "execution reverted", Some("0x12"));
        let e: ErrorObjectOwned = ProxyError::Upstream(sent.clone()).into();
        assert_eq!(e, sent);
        let v = ProxyError::InvalidRequest("params must be an array or an object")
            .response_without_id();
        assert_eq!(v["error"]["code"], INVALID_REQUEST_CODE);
        assert_eq!(v["id"], Value::Null);
        assert_eq!(v["jsonrpc"], "2.0");
    }
}
