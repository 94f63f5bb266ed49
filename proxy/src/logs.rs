//! Logs without the address. Wallets find incoming transfers with
//! `eth_getLogs`, `eth_newFilter` and `eth_subscribe("logs")` filtered on
//! their address (as the `address`, or in a topic: `Transfer`'s `to`).
//! Such a filter is sent upstream widened (no `address`, every topic that
//! holds an address left open), so that it names no address and passes
//! the gate, and the node's logs are filtered here against the filter
//! the wallet sent. Bounded: a widened `eth_getLogs` spans at most
//! `logs_max_blocks` blocks and its answer at most `logs_max_mib`
//! (refused past either, with an error naming the setting). Every
//! filter's id is the proxy's own (an id it did not hand out is not
//! found, never sent to the node).

use std::collections::VecDeque;
use std::sync::Mutex;

use serde_json::value::RawValue;
use serde_json::Value;

use crate::activity::Reason;
use crate::config::LogBounds;
use crate::error::ProxyError;
use crate::gate::{filter_names_no_address, is_address_word, Openness, FILTER_FIELDS};
use crate::upstream::Upstream;

/// Filters kept; past it the oldest is uninstalled upstream (so its id
/// then gets "filter not found", never its wide changes unfiltered).
const FILTERS_KEPT: usize = 256;

/// How much a widened `logs` subscription may take from the upstream: at
/// most `logs_max_mib` in any minute (a widened filter carries every
/// address's logs of its topics).
pub struct WidenedBudget {
    bounds: LogBounds,
    window: std::time::Instant,
    taken: usize,
}

/// A widened subscription over its budget.
#[derive(Debug, thiserror::Error)]
#[error("a logs subscription naming an address is read widened and filtered here: the node sent over logs_max_mib ({max} bytes) of logs in a minute; the subscription is closed (subscribe with a narrower filter, or raise logs_max_mib)")]
pub struct OverBudget {
    max: usize,
}

impl WidenedBudget {
    pub fn new(bounds: LogBounds) -> Self {
        WidenedBudget {
            bounds,
            window: std::time::Instant::now(),
            taken: 0,
        }
    }

    /// Counts `bytes` more from the upstream.
    pub fn take(&mut self, bytes: usize) -> Result<(), OverBudget> {
        if self.window.elapsed() >= std::time::Duration::from_secs(60) {
            self.window = std::time::Instant::now();
            self.taken = 0;
        }
        self.taken = self.taken.saturating_add(bytes);
        match self.taken > self.bounds.max_bytes {
            true => Err(OverBudget {
                max: self.bounds.max_bytes,
            }),
            false => Ok(()),
        }
    }
}

/// A filter made upstream for a wallet.
struct KeptFilter {
    /// The id the proxy handed out (random: never the node's).
    own: String,
    /// The node's id of it.
    node: String,
    /// What its logs are matched against here, for a filter sent
    /// widened; `None`: the node's answer is the wallet's.
    wanted: Option<LogFilter>,
}

/// The proxy's log filters (one per proxy). Every filter a wallet makes
/// through the proxy gets an id of the proxy's own, so that an id it did
/// not hand out (another process's, one from before a restart, one
/// evicted) gets geth's "filter not found" and never reaches the node,
/// whose filter of that id may be a widened one whose changes name
/// others' transfers.
pub struct Logs {
    bounds: LogBounds,
    /// Newest last.
    filters: Mutex<VecDeque<KeptFilter>>,
}

/// The filter methods the proxy answers from its table.
const FILTER_ID_METHODS: &[&str] = &[
    "eth_getFilterChanges",
    "eth_getFilterLogs",
    "eth_uninstallFilter",
];

/// The methods that make a filter.
const NEW_FILTER_METHODS: &[&str] = &[
    "eth_newFilter",
    "eth_newBlockFilter",
    "eth_newPendingTransactionFilter",
];

/// Whether `method` makes a filter or reads one by id (the proxy's own
/// ids: never sent upstream as they are).
pub fn is_filter_method(method: &str) -> bool {
    NEW_FILTER_METHODS.contains(&method) || FILTER_ID_METHODS.contains(&method)
}

impl Logs {
    pub fn new(bounds: LogBounds) -> Self {
        Logs {
            bounds,
            filters: Mutex::new(VecDeque::new()),
        }
    }

    /// Answers the log and filter methods: `eth_getLogs` naming an
    /// address while the gate is closed to address reads (widened
    /// upstream, filtered here), and every filter method (ids of the
    /// proxy's own); `None` for anything else (it goes its usual way).
    pub async fn answer(
        &self,
        upstream: &Upstream,
        method: &str,
        params: Option<&RawValue>,
    ) -> Option<Result<Value, ProxyError>> {
        let filter_method = is_filter_method(method);
        if method != "eth_getLogs" && !filter_method {
            return None;
        }
        let params: Value = match params.map(|p| serde_json::from_str(p.get())) {
            None => Value::Array(Vec::new()),
            Some(Ok(params)) => params,
            Some(Err(e)) if filter_method => {
                return Some(Err(ProxyError::BadParams(format!("{method}: {e}"))))
            }
            Some(Err(_)) => return None,
        };
        let first = params.get(0);
        let closed = upstream.gate().openness() != Openness::Open;
        match (method, first) {
            ("eth_getLogs", Some(filter)) if closed => self.widen(upstream, filter).await,
            ("eth_getLogs", _) => None,
            ("eth_newFilter", Some(filter)) => {
                Some(self.new_log_filter(upstream, filter, closed).await)
            }
            ("eth_newFilter", None) => Some(Err(ProxyError::BadParams(
                "eth_newFilter needs a filter".into(),
            ))),
            ("eth_newBlockFilter" | "eth_newPendingTransactionFilter", _) => {
                Some(self.install(upstream, method, None, None).await)
            }
            (_, id) => {
                let Some(id) = id.and_then(Value::as_str) else {
                    return Some(Err(ProxyError::BadParams(format!(
                        "{method} needs a filter id"
                    ))));
                };
                Some(self.by_id(upstream, method, id).await)
            }
        }
    }

    /// `eth_getLogs` of `filter`, widened where it names an address.
    async fn widen(
        &self,
        upstream: &Upstream,
        filter: &Value,
    ) -> Option<Result<Value, ProxyError>> {
        let (wide, wanted) = match widened(filter) {
            Ok(Some(widened)) => widened,
            Ok(None) => return None,
            Err(e) => return Some(Err(ProxyError::BadParams(e.to_string()))),
        };
        let answered = async {
            self.check_span(upstream, &wide).await?;
            let raw = ask(upstream, "eth_getLogs", Some(wide)).await?;
            self.checked(&raw, &wanted)
        };
        Some(answered.await)
    }

    /// `eth_newFilter` of `filter`: widened where it names an address and
    /// the gate is closed, as sent otherwise.
    async fn new_log_filter(
        &self,
        upstream: &Upstream,
        filter: &Value,
        closed: bool,
    ) -> Result<Value, ProxyError> {
        let widened = match closed {
            true => widened(filter).map_err(|e| ProxyError::BadParams(e.to_string()))?,
            false => None,
        };
        match widened {
            Some((wide, wanted)) => {
                self.check_span(upstream, &wide).await?;
                self.install(upstream, "eth_newFilter", Some(wide), Some(wanted))
                    .await
            }
            None => {
                self.install(upstream, "eth_newFilter", Some(filter.clone()), None)
                    .await
            }
        }
    }

    /// Refuses a widened filter past `logs_max_blocks`.
    async fn check_span(&self, upstream: &Upstream, wide: &Value) -> Result<(), ProxyError> {
        let head = upstream.head().await.ok_or_else(|| {
            ProxyError::UpstreamUnavailable("no head to bound a log filter by".into())
        })?;
        let blocks = span(wide, head)
            .ok_or_else(|| ProxyError::BadParams("a log filter's blocks are unreadable".into()))?;
        if blocks > self.bounds.max_blocks {
            return Err(ProxyError::LogsTooWide {
                blocks,
                max: self.bounds.max_blocks,
            });
        }
        Ok(())
    }

    /// Makes a filter upstream (`method` with `filter`, if any) and hands
    /// out an id of the proxy's own for it.
    async fn install(
        &self,
        upstream: &Upstream,
        method: &str,
        filter: Option<Value>,
        wanted: Option<LogFilter>,
    ) -> Result<Value, ProxyError> {
        let raw = ask(upstream, method, filter).await?;
        let node: String = serde_json::from_str(raw.get())
            .map_err(|e| ProxyError::UpstreamUnavailable(format!("a filter id: {e}")))?;
        let own = own_filter_id();
        let evicted = {
            let mut filters = self.filters.lock().expect("filters");
            filters.push_back(KeptFilter {
                own: own.clone(),
                node,
                wanted,
            });
            (filters.len() > FILTERS_KEPT)
                .then(|| filters.pop_front())
                .flatten()
        };
        if let Some(old) = evicted {
            let _ = ask(
                upstream,
                "eth_uninstallFilter",
                Some(Value::String(old.node)),
            )
            .await;
        }
        Ok(Value::String(own))
    }

    /// A filter's changes or logs (filtered here when it was widened), or
    /// its removal, by the id the proxy handed out: an id it did not hand
    /// out is not found (geth's answers: an error, or `false` for
    /// `eth_uninstallFilter`), and never sent upstream.
    async fn by_id(
        &self,
        upstream: &Upstream,
        method: &str,
        id: &str,
    ) -> Result<Value, ProxyError> {
        let found = {
            let mut filters = self.filters.lock().expect("filters");
            let at = filters.iter().position(|f| f.own == id);
            match (method, at) {
                ("eth_uninstallFilter", Some(at)) => filters.remove(at).map(|f| (f.node, None)),
                (_, Some(at)) => Some((filters[at].node.clone(), filters[at].wanted.clone())),
                (_, None) => None,
            }
        };
        let Some((node, wanted)) = found else {
            return match method {
                "eth_uninstallFilter" => Ok(Value::Bool(false)),
                _ => Err(ProxyError::FilterNotFound),
            };
        };
        let raw = ask(upstream, method, Some(Value::String(node))).await?;
        match wanted {
            Some(wanted) => self.checked(&raw, &wanted),
            None => serde_json::from_str(raw.get())
                .map_err(|e| ProxyError::UpstreamUnavailable(format!("{method}: {e}"))),
        }
    }

    /// The node's logs within the byte bound, filtered.
    fn checked(&self, raw: &RawValue, wanted: &LogFilter) -> Result<Value, ProxyError> {
        if raw.get().len() > self.bounds.max_bytes {
            return Err(ProxyError::LogsTooBig {
                bytes: raw.get().len(),
                max: self.bounds.max_bytes,
            });
        }
        let answer: Value = serde_json::from_str(raw.get())
            .map_err(|e| ProxyError::UpstreamUnavailable(format!("logs: {e}")))?;
        Ok(filtered(wanted, answer))
    }
}

/// A fresh filter id: 16 random bytes, as geth makes its ids.
fn own_filter_id() -> String {
    let bytes: [u8; 16] = rand::random();
    format!("0x{}", alloy_primitives::hex::encode(bytes))
}

/// A log filter as the wallet sent it, to match the node's logs against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFilter {
    /// Lowercase `0x` addresses; empty: any.
    addresses: Vec<String>,
    /// Per position: the lowercase words any of which matches; `None`:
    /// any.
    topics: Vec<Option<Vec<String>>>,
}

/// Why a filter cannot be widened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    #[error("a log filter must be an object")]
    NotAnObject,
    #[error("a log filter has no field {0:?} (address, topics, fromBlock, toBlock, blockHash)")]
    UnknownField(String),
    #[error("a log filter's address must be an address or a list of them")]
    BadAddress,
    #[error("a log filter's topics must be a list of words, lists of words or nulls")]
    BadTopics,
}

fn lower_strings(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::String(s) => Some(vec![s.to_ascii_lowercase()]),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_ascii_lowercase))
            .collect(),
        _ => None,
    }
}

impl LogFilter {
    /// The filter `filter` (a JSON object) asks for.
    pub fn of(filter: &Value) -> Result<Self, FilterError> {
        let object = filter.as_object().ok_or(FilterError::NotAnObject)?;
        if let Some(k) = object.keys().find(|k| !FILTER_FIELDS.contains(&k.as_str())) {
            return Err(FilterError::UnknownField(k.clone()));
        }
        let addresses = match object.get("address") {
            None | Some(Value::Null) => Vec::new(),
            Some(a) => lower_strings(a).ok_or(FilterError::BadAddress)?,
        };
        let topics = match object.get("topics") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(positions)) => positions
                .iter()
                .map(|p| match p {
                    // No alternatives is any word, as `null` (geth's).
                    Value::Null => Ok(None),
                    Value::Array(any) if any.is_empty() => Ok(None),
                    other => lower_strings(other).map(Some).ok_or(FilterError::BadTopics),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(FilterError::BadTopics),
        };
        Ok(LogFilter { addresses, topics })
    }

    /// Whether the node's `log` is one this filter asks for.
    pub fn matches(&self, log: &Value) -> bool {
        let address = log
            .get("address")
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase);
        if !self.addresses.is_empty() && !address.is_some_and(|a| self.addresses.contains(&a)) {
            return false;
        }
        let topics: Vec<String> = log
            .get("topics")
            .and_then(Value::as_array)
            .map(|t| {
                t.iter()
                    .filter_map(|w| w.as_str().map(str::to_ascii_lowercase))
                    .collect()
            })
            .unwrap_or_default();
        // geth's: a log with fewer topics than the filter's positions is
        // not one it asks for, wildcards or not.
        if self.topics.len() > topics.len() {
            return false;
        }
        self.topics
            .iter()
            .enumerate()
            .all(|(i, wanted)| match wanted {
                None => true,
                Some(any) => topics.get(i).is_some_and(|t| any.contains(t)),
            })
    }
}

/// The filter sent upstream instead of `filter`: no `address`, and every
/// topic position but the event's signature left open (and that one too
/// where it holds an address); the blocks as sent; with what the node's
/// logs are matched against here. `None` when `filter` names nothing of
/// a wallet's (it goes as it is).
pub fn widened(filter: &Value) -> Result<Option<(Value, LogFilter)>, FilterError> {
    let wanted = LogFilter::of(filter)?;
    if filter_names_no_address(filter) {
        return Ok(None);
    }
    let mut wide = filter.clone();
    let object = wide.as_object_mut().ok_or(FilterError::NotAnObject)?;
    object.remove("address");
    if let Some(Value::Array(positions)) = object.get_mut("topics") {
        for (i, p) in positions.iter_mut().enumerate() {
            let holds_address = match &*p {
                Value::String(s) => is_address_word(s),
                Value::Array(any) => any.iter().any(|w| w.as_str().is_some_and(is_address_word)),
                _ => false,
            };
            if i > 0 || holds_address {
                *p = Value::Null;
            }
        }
    }
    Ok(Some((wide, wanted)))
}

/// The logs of `answer` (the node's array) that `filter` asks for, in
/// the node's order.
pub fn filtered(filter: &LogFilter, answer: Value) -> Value {
    match answer {
        Value::Array(logs) => {
            Value::Array(logs.into_iter().filter(|l| filter.matches(l)).collect())
        }
        other => other, // a filter's changes may be block hashes: not logs
    }
}

/// The blocks a filter spans, given the head (`from` and `to` as
/// numbers, tags or absent; a `blockHash` is one block): their count, or
/// `None` when a bound cannot be read.
pub fn span(filter: &Value, head: u64) -> Option<u64> {
    if filter.get("blockHash").is_some_and(|h| !h.is_null()) {
        return Some(1);
    }
    let bound = |key: &str| -> Option<u64> {
        match filter.get(key) {
            None | Some(Value::Null) => Some(head),
            Some(Value::String(s)) => match s.as_str() {
                "latest" | "pending" | "safe" | "finalized" => Some(head),
                "earliest" => Some(0),
                hex => u64::from_str_radix(hex.strip_prefix("0x")?, 16).ok(),
            },
            Some(Value::Number(n)) => n.as_u64(),
            _ => None,
        }
    };
    let (from, to) = (bound("fromBlock")?, bound("toBlock")?);
    Some(to.saturating_sub(from) + 1)
}

/// `method` with its one parameter (a filter or a filter's id), if any,
/// asked of the node as a method the proxy does not answer itself (the
/// gate still judges what it names).
async fn ask(
    upstream: &Upstream,
    method: &str,
    param: Option<Value>,
) -> Result<Box<RawValue>, ProxyError> {
    let params = param.map(|p| serde_json::value::to_raw_value(&[p]).expect("JSON serialises"));
    upstream
        .call(method, params, Reason::NotPrivateMethod)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRANSFER: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    const HOLDER: &str = "0x00000000000000000000000070997970C51812dc3A010C7d01b50e0d17dc79C8";
    const OTHER: &str = "0x0000000000000000000000003c44cdddb6a900fa2b585dd299e03d12fa4293bc";

    fn log(address: &str, topics: &[&str]) -> Value {
        json!({"address": address, "topics": topics, "data": "0x"})
    }

    #[test]
    fn a_filter_naming_the_holder_is_widened_and_matched_here() {
        let filter = json!({"fromBlock": "0x1", "address": ["0x00000000000000000000000000000000000000C1"], "topics": [TRANSFER, null, HOLDER]});
        let (wide, _) = widened(&filter).unwrap().unwrap();
        assert_eq!(
            wide,
            json!({"fromBlock": "0x1", "topics": [TRANSFER, null, null]})
        );
        assert!(filter_names_no_address(&wide));
        let f = LogFilter::of(&filter).unwrap();
        let token = "0x00000000000000000000000000000000000000c1";
        let to_holder = log(token, &[TRANSFER, OTHER, &HOLDER.to_lowercase()]);
        let to_other = log(token, &[TRANSFER, HOLDER, OTHER]);
        let elsewhere = log(
            "0x00000000000000000000000000000000000000c2",
            &[TRANSFER, OTHER, HOLDER],
        );
        let answer = json!([to_holder, to_other, elsewhere]);
        assert_eq!(filtered(&f, answer), json!([to_holder]));
        // A filter naming no address goes as it is.
        assert_eq!(widened(&json!({"topics": [TRANSFER]})).unwrap(), None);
        assert_eq!(widened(&json!("x")), Err(FilterError::NotAnObject));
        assert_eq!(widened(&json!({"topics": 5})), Err(FilterError::BadTopics));
        assert_eq!(
            widened(&json!({"Address": "0x00000000000000000000000000000000000000c1"})),
            Err(FilterError::UnknownField("Address".into()))
        );
        // Alternatives in a position: any matches; one an address opens it.
        let either = json!({"topics": [TRANSFER, [HOLDER, OTHER]]});
        assert_eq!(
            widened(&either).unwrap().unwrap().0,
            json!({"topics": [TRANSFER, null]})
        );
        // A topic that names a wallet without being an address (an NFT's
        // token id): opened too, matched here.
        let token_id = format!("0x{:064x}", 1234);
        let nft = json!({"topics": [TRANSFER, null, null, token_id]});
        let (wide, wanted) = widened(&nft).unwrap().unwrap();
        assert_eq!(wide, json!({"topics": [TRANSFER, null, null, null]}));
        assert!(wanted.matches(&log(token, &[TRANSFER, OTHER, HOLDER, &token_id])));
        assert!(!wanted.matches(&log(token, &[TRANSFER, OTHER, HOLDER, TRANSFER])));
        let f = LogFilter::of(&either).unwrap();
        assert!(f.matches(&log(token, &[TRANSFER, OTHER])));
        assert!(!f.matches(&log(token, &[TRANSFER])));
        // No alternatives in a position is any word (rpc-compat's
        // topic-wildcard); a log shorter than the filter's positions is
        // none, wildcards or not.
        let wildcard = LogFilter::of(&json!({"topics": [[], [OTHER]]})).unwrap();
        assert!(wildcard.matches(&log(token, &[TRANSFER, OTHER])));
        let three = LogFilter::of(&json!({"topics": [TRANSFER, null, null]})).unwrap();
        assert!(!three.matches(&log(token, &[TRANSFER, OTHER])));
        assert!(three.matches(&log(token, &[TRANSFER, OTHER, HOLDER])));
    }

    #[test]
    fn a_widened_subscription_is_bounded() {
        let mut budget = WidenedBudget::new(LogBounds {
            max_blocks: 1,
            max_bytes: 1000,
        });
        assert!(budget.take(600).is_ok());
        assert!(budget.take(400).is_ok());
        let over = budget.take(1).unwrap_err().to_string();
        assert!(over.contains("logs_max_mib"), "{over}");
    }

    #[test]
    fn the_span_of_a_filter() {
        assert_eq!(span(&json!({}), 100), Some(1));
        assert_eq!(span(&json!({"fromBlock": "0x0"}), 100), Some(101));
        assert_eq!(
            span(&json!({"fromBlock": "earliest", "toBlock": "0xa"}), 100),
            Some(11)
        );
        assert_eq!(span(&json!({"blockHash": TRANSFER}), 100), Some(1));
        assert_eq!(span(&json!({"fromBlock": "bad"}), 100), None);
    }
}
