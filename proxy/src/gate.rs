//! The one gate for what leaves for the upstream node. Every request the
//! proxy sends upstream (a forwarded method, a call's fallback, an inner
//! call answered apart, a subscription, a notification, the proxy's own
//! header reads) is admitted here first ([`crate::upstream::Upstream`]
//! asks before it sends), and what a wallet's request let through or was
//! refused is recorded on the page.
//!
//! Under `upstream_methods = "no-address-reads"`, and under `"auto"`
//! while the view holds the whole state, before any view is adopted, or
//! once this PIR server was seen serving the whole state (remembered in
//! the cache dir, so a restart does not open the door), only methods
//! that read no state by address pass: an allowlist, never a denylist,
//! so that the next method that takes a call object (`eth_simulateV1`,
//! `debug_traceCall`, ...) is refused rather than forwarded. A log filter
//! or a `logs` subscription passes only when it names no address (the
//! proxy widens one that does and filters here: [`crate::logs`]).
//! `"all"` is the explicit opt-out.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use alloy_primitives::keccak256;
use ethpir_client::PrivateReader;
use serde_json::Value;

use crate::activity::{Activity, Reason};
use crate::config::UpstreamMethods;
use crate::error::ProxyError;
use crate::methods::{NO_ADDRESS_METHODS, TRACE_METHODS};

/// What `private_fallback_to_upstream` may send upstream, whatever the
/// setting: the account reads it names (a storage word's fallback stays
/// with the gate).
const FALLBACK_METHODS: &[&str] = &["eth_getBalance", "eth_getTransactionCount", "eth_getCode"];

/// Methods whose filter decides: they pass when it names no address.
const FILTER_METHODS: &[&str] = &["eth_getLogs", "eth_newFilter"];

/// Subscriptions that name no address.
const NO_ADDRESS_SUBSCRIPTIONS: &[&str] = &["newHeads", "newPendingTransactions", "syncing"];

/// Why the gate holds address reads back now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// `upstream_methods = "no-address-reads"`.
    Setting,
    /// `auto`, and the newest view holds the whole state.
    WholeState,
    /// `auto`, and no view is adopted yet: what the server serves is not
    /// known.
    NotReady,
    /// `auto`: this server served the whole state before (remembered) and
    /// its newest view does not claim it now.
    NoLongerWhole,
}

impl Closed {
    /// What closed the gate, as the page says it.
    pub fn describe(self) -> &'static str {
        match self {
            Closed::Setting => "upstream_methods = \"no-address-reads\"",
            Closed::WholeState => "upstream_methods = \"auto\", and the view holds the whole state",
            Closed::NotReady => "upstream_methods = \"auto\", and the PIR server's view is not known yet",
            Closed::NoLongerWhole => "upstream_methods = \"auto\": this PIR server served the whole state before and does not claim it now; set \"all\" to forward",
        }
    }
}

/// Whether the gate lets address reads through now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Openness {
    Open,
    Closed(Closed),
}

/// The gate (one per proxy).
pub struct Gate {
    setting: UpstreamMethods,
    /// `private_fallback_to_upstream`: the user's opt-in for a private
    /// read the snapshots cannot answer.
    private_fallback: bool,
    reader: Option<Arc<PrivateReader>>,
    memory: WholeStateMemory,
    activity: Arc<Activity>,
}

impl Gate {
    /// The gate of a proxy with these settings, over `reader`'s views.
    pub fn new(
        setting: UpstreamMethods,
        private_fallback: bool,
        reader: Arc<PrivateReader>,
        memory: WholeStateMemory,
        activity: Arc<Activity>,
    ) -> Self {
        Gate {
            setting,
            private_fallback,
            reader: Some(reader),
            memory,
            activity,
        }
    }

    /// A gate with no views behind it (tools without a reader): as the
    /// setting says, `auto` as closed until ready (it never is).
    pub fn without_views(setting: UpstreamMethods) -> Self {
        Gate {
            setting,
            private_fallback: false,
            reader: None,
            memory: WholeStateMemory::none(),
            activity: Arc::default(),
        }
    }

    /// Looks at the newest view, so that a whole-state one is remembered
    /// as soon as a wallet's request meets it, even one answered
    /// privately that never reaches the gate.
    pub fn observe(&self) {
        let _ = self.openness();
    }

    /// Whether address reads may go upstream now, and if not why.
    pub fn openness(&self) -> Openness {
        match self.setting {
            UpstreamMethods::All => Openness::Open,
            UpstreamMethods::NoAddressReads => Openness::Closed(Closed::Setting),
            UpstreamMethods::Auto => self.auto_openness(),
        }
    }

    fn auto_openness(&self) -> Openness {
        let Some(reader) = &self.reader else {
            return Openness::Closed(Closed::NotReady);
        };
        if reader.newest_view().is_none() {
            return Openness::Closed(Closed::NotReady);
        }
        let chain = reader.chain_id().ok().flatten();
        if reader.holds_whole_state() {
            if let Some(chain) = chain {
                self.memory.remember(chain);
            }
            return Openness::Closed(Closed::WholeState);
        }
        match chain {
            Some(chain) if self.memory.remembers(chain) => Openness::Closed(Closed::NoLongerWhole),
            _ => Openness::Open,
        }
    }

    /// Admits a wallet's request (`method` with its raw `params`) sent
    /// upstream for `reason`, or refuses it; either is recorded on the
    /// page.
    pub fn admit(
        &self,
        method: &str,
        params: Option<&str>,
        reason: Reason,
    ) -> Result<(), ProxyError> {
        let parsed: Option<Value> = params.and_then(|p| serde_json::from_str(p).ok());
        match self.judge(method, parsed.as_ref(), reason) {
            Ok(()) => {
                self.activity.upstream(method, parsed.as_ref(), reason);
                Ok(())
            }
            Err((closed, e)) => {
                self.activity.refused(method, closed.describe());
                Err(e)
            }
        }
    }

    /// Whether `method` (its params unknown) would be admitted now;
    /// nothing is recorded.
    pub fn would_admit(&self, method: &str) -> bool {
        self.judge(method, None, Reason::NotHeld).is_ok()
    }

    /// Admits one of the proxy's own reads (headers, the head, the chain
    /// id): never recorded, but held to the same allowlist.
    pub fn admit_own(&self, method: &str) -> Result<(), ProxyError> {
        match NO_ADDRESS_METHODS.contains(&method) {
            true => Ok(()),
            false => Err(refusal(method, Closed::Setting, self.setting)),
        }
    }

    /// Whether a request may go: the error and why the gate is closed.
    fn judge(
        &self,
        method: &str,
        params: Option<&Value>,
        reason: Reason,
    ) -> Result<(), (Closed, ProxyError)> {
        let opted_in = reason == Reason::ConfiguredFallback
            && self.private_fallback
            && FALLBACK_METHODS.contains(&method);
        if opted_in {
            return Ok(()); // the user's explicit opt-in (logged at start)
        }
        let closed = match self.openness() {
            Openness::Open => return Ok(()),
            Openness::Closed(closed) => closed,
        };
        if names_no_state_by_address(method, params) {
            return Ok(());
        }
        Err((closed, refusal(method, closed, self.setting)))
    }
}

/// The error a refused request gets: it names the setting, and what to
/// change.
fn refusal(method: &str, closed: Closed, setting: UpstreamMethods) -> ProxyError {
    let setting = match setting {
        UpstreamMethods::Auto => "auto",
        UpstreamMethods::All => "all",
        UpstreamMethods::NoAddressReads => "no-address-reads",
    };
    match closed {
        Closed::Setting | Closed::WholeState if method == "eth_getProof" => {
            ProxyError::ProofNotHeld { setting }
        }
        Closed::Setting | Closed::WholeState => ProxyError::AddressReadRefused {
            method: method.to_string(),
            setting,
        },
        Closed::NotReady => ProxyError::UpstreamNotReady(method.to_string()),
        Closed::NoLongerWhole => ProxyError::NoLongerWhole(method.to_string()),
    }
}

/// Whether `method` with `params` reads no state by address: on the
/// allowlist, or a log filter or subscription that names no address.
pub fn names_no_state_by_address(method: &str, params: Option<&Value>) -> bool {
    if NO_ADDRESS_METHODS.contains(&method) {
        return true;
    }
    let first = params.and_then(|p| p.get(0));
    if TRACE_METHODS.contains(&method) {
        // A block's number or tag, or a block's or transaction's hash.
        let target = first.and_then(Value::as_str).is_some_and(|t| t.len() <= 66);
        let count = params.and_then(Value::as_array).map_or(0, Vec::len);
        let options = params.and_then(|p| p.get(1));
        return target && count <= 2 && trace_options_read_no_state(options);
    }
    if FILTER_METHODS.contains(&method) {
        return first.is_some_and(|filter| filter.is_object() && filter_names_no_address(filter));
    }
    if method == "eth_subscribe" {
        let kind = first.and_then(Value::as_str);
        return match kind {
            Some(kind) if NO_ADDRESS_SUBSCRIPTIONS.contains(&kind) => true,
            Some("logs") => params
                .and_then(|p| p.get(1))
                .is_none_or(|f| f.is_object() && filter_names_no_address(f)),
            _ => false,
        };
    }
    false
}

/// geth's tracers written in Go: each reports on the transactions traced
/// and reads no account of the caller's choosing.
const BUILT_IN_TRACERS: [&str; 5] = [
    "callTracer",
    "prestateTracer",
    "4byteTracer",
    "flatCallTracer",
    "noopTracer",
];

/// The built-in tracers' settings (`tracerConfig`), each a flag.
const TRACER_FLAGS: [&str; 7] = [
    "onlyTopCall",
    "withLog",
    "diffMode",
    "disableCode",
    "disableStorage",
    "includePrecompiles",
    "convertParityErrors",
];

/// Whether a trace's options (absent, or geth's `TraceConfig`) read no
/// state by address: a built-in tracer or the struct logger, and only
/// known keys, written exactly (geth's decoding ignores case: `Tracer`
/// would be read as the tracer, so any key not here is refused).
fn trace_options_read_no_state(options: Option<&Value>) -> bool {
    let Some(options) = options.filter(|o| !o.is_null()) else {
        return true;
    };
    let Some(options) = options.as_object() else {
        return false;
    };
    options.iter().all(|(key, value)| match key.as_str() {
        "tracer" => value
            .as_str()
            .is_some_and(|t| BUILT_IN_TRACERS.contains(&t)),
        "tracerConfig" => {
            value.is_null()
                || value.as_object().is_some_and(|config| {
                    config
                        .iter()
                        .all(|(flag, on)| TRACER_FLAGS.contains(&flag.as_str()) && on.is_boolean())
                })
        }
        // A duration ("5s").
        "timeout" => value.as_str().is_some_and(|t| {
            t.len() <= 16 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
        }),
        // (`reexec`: older geths'; `limit`: the struct logger's steps.)
        "reexec" | "limit" => value.is_u64(),
        "disableStorage" | "disableStack" | "enableMemory" | "enableReturnData" => {
            value.is_boolean()
        }
        _ => false,
    })
}

/// The fields a log filter may have (as geth reads them, whose JSON
/// decoding ignores case: a filter with any other key, `Address` say, is
/// not judged to name no address).
pub const FILTER_FIELDS: [&str; 5] = ["address", "topics", "fromBlock", "toBlock", "blockHash"];

/// Whether a log filter names nothing of a wallet's: only known fields,
/// no `address`, and no topic but the event's signature (position 0, a
/// word that holds no address). A topic past it may name a wallet without
/// being an address (an NFT's token id, an ENS node, a hash of an
/// account): while the gate is closed, such a filter goes upstream
/// widened and is matched here.
pub fn filter_names_no_address(filter: &Value) -> bool {
    let Some(object) = filter.as_object() else {
        return false;
    };
    if object.keys().any(|k| !FILTER_FIELDS.contains(&k.as_str())) {
        return false;
    }
    let no_address = match object.get("address") {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    let plain = |w: &Value| w.as_str().is_some_and(|s| word_of(s) == Some(false));
    let signature_only = match object.get("topics") {
        None | Some(Value::Null) => true,
        Some(Value::Array(topics)) => topics.iter().enumerate().all(|(i, t)| match t {
            Value::Null => true,
            Value::Array(any) => i == 0 && any.iter().all(plain),
            other => i == 0 && plain(other),
        }),
        Some(_) => false,
    };
    no_address && signature_only
}

/// A topic's reading: `Some(true)` a 32-byte word holding an address (12
/// zero bytes, then 20 not all zero), `Some(false)` any other word,
/// `None` not a word (`0x` or `0X` and 64 hex digits).
fn word_of(topic: &str) -> Option<bool> {
    let bytes = topic.as_bytes();
    if bytes.len() != 66 || bytes[0] != b'0' || !matches!(bytes[1], b'x' | b'X') {
        return None;
    }
    let hex = &bytes[2..];
    if !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    Some(hex[..24].iter().all(|b| *b == b'0') && hex[24..].iter().any(|b| *b != b'0'))
}

/// Whether a topic may hold an address: a word that does, or anything
/// that is not a plain word (judged as naming one).
pub fn is_address_word(topic: &str) -> bool {
    word_of(topic) != Some(false)
}

/// What the proxy remembers across restarts: the chains on which its PIR
/// server served the whole state (one empty file each under
/// `<cache_dir>/whole-state/`, named by a hash of the server's URL and
/// the chain id: the cache holds no URL, which may carry an API key).
pub struct WholeStateMemory {
    /// `None`: nothing is remembered (no cache dir).
    dir: Option<PathBuf>,
    server: String,
    known: Mutex<HashSet<u64>>,
}

impl WholeStateMemory {
    /// The memory of `server` kept under `cache_dir`, read now.
    pub fn open(cache_dir: &std::path::Path, server: &str) -> Self {
        let memory = WholeStateMemory {
            dir: Some(cache_dir.join("whole-state")),
            server: server.trim_end_matches('/').to_ascii_lowercase(),
            known: Mutex::new(HashSet::new()),
        };
        if let Some(dir) = &memory.dir {
            let prefix = memory.prefix();
            let chains = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    name.strip_prefix(&prefix)?.parse::<u64>().ok()
                });
            memory.known.lock().expect("memory").extend(chains);
        }
        memory
    }

    fn none() -> Self {
        WholeStateMemory {
            dir: None,
            server: String::new(),
            known: Mutex::new(HashSet::new()),
        }
    }

    /// The file name's prefix for this server.
    fn prefix(&self) -> String {
        let hash = keccak256(self.server.as_bytes());
        format!("{}-", alloy_primitives::hex::encode(&hash[..12]))
    }

    /// Whether the server served the whole state of `chain` before.
    pub fn remembers(&self, chain: u64) -> bool {
        self.known.lock().expect("memory").contains(&chain)
    }

    /// Whether the server served the whole state of any chain before.
    pub fn remembers_any(&self) -> bool {
        !self.known.lock().expect("memory").is_empty()
    }

    /// Records that the server serves the whole state of `chain` (written
    /// once; a write that fails is logged and kept in memory).
    pub fn remember(&self, chain: u64) {
        if !self.known.lock().expect("memory").insert(chain) {
            return;
        }
        let Some(dir) = &self.dir else {
            return;
        };
        let path = dir.join(format!("{}{chain}", self.prefix()));
        let written = std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, b""));
        match written {
            Ok(()) => tracing::info!(chain, "the PIR server serves the whole state: remembered (upstream_methods = \"auto\" keeps refusing address reads if it stops)"),
            Err(e) => tracing::warn!(chain, error = %e, path = %path.display(), "cannot remember that the PIR server serves the whole state"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOLDER_WORD: &str = "0x00000000000000000000000070997970c51812dc3a010c7d01b50e0d17dc79c8";
    const TRANSFER: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

    /// A trace by hash or number passes with a built-in tracer; a
    /// JavaScript tracer (which reads any account: `db.getBalance`), an
    /// unknown option or a key written in another case does not.
    #[test]
    fn traces_pass_with_built_in_tracers_only() {
        let tx = format!("0x{}", "ab".repeat(32));
        let passes = |method: &str, params: Value| names_no_state_by_address(method, Some(&params));
        for options in [
            json!(null),
            json!({}),
            json!({"tracer": "callTracer", "tracerConfig": {"onlyTopCall": true, "withLog": false}}),
            json!({"tracer": "prestateTracer", "tracerConfig": {"diffMode": true}, "timeout": "5s"}),
            json!({"disableStorage": true, "enableMemory": false, "reexec": 128}),
        ] {
            assert!(
                passes("debug_traceTransaction", json!([tx, options])),
                "{options}"
            );
            assert!(
                passes("debug_traceBlockByNumber", json!(["0x3", options])),
                "{options}"
            );
        }
        assert!(passes("debug_traceBlockByHash", json!([tx])));
        let js = "{result: function(ctx, db) { return db.getBalance(toAddress('0x70997970c51812dc3a010c7d01b50e0d17dc79c8')); }, fault: function() {}}";
        for options in [
            json!({"tracer": js}),
            json!({"Tracer": "callTracer"}),
            json!({"tracer": "callTracer", "tracerConfig": {"onlyTopCall": "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"}}),
            json!({"tracer": "callTracer", "stateOverrides": {}}),
            json!({"timeout": "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"}),
            json!("callTracer"),
        ] {
            assert!(
                !passes("debug_traceTransaction", json!([tx, options])),
                "{options}"
            );
        }
        assert!(!passes("debug_traceBlockByNumber", json!([{"number": 3}])));
        assert!(!passes("debug_traceTransaction", json!([tx, {}, {}])));
        assert!(!passes("debug_traceTransaction", json!([])));
    }

    #[test]
    fn only_methods_that_read_no_state_by_address_pass() {
        for method in [
            "eth_call",
            "eth_simulateV1",
            "debug_traceCall",
            "trace_call",
            "eth_callMany",
            "eth_getProof",
            "eth_getStorageAt",
            "eth_getBalance",
            "anything_new",
        ] {
            let params = json!([{"to": "0x00000000000000000000000000000000000000c1"}]);
            assert!(
                !names_no_state_by_address(method, Some(&params)),
                "{method}"
            );
        }
        for method in [
            "eth_blockNumber",
            "eth_getTransactionReceipt",
            "eth_sendRawTransaction",
        ] {
            assert!(names_no_state_by_address(method, None), "{method}");
        }
    }

    #[test]
    fn filters_and_subscriptions_pass_only_when_they_name_no_address() {
        let logs = |filter: Value| names_no_state_by_address("eth_getLogs", Some(&json!([filter])));
        assert!(logs(json!({"fromBlock": "0x1", "topics": [TRANSFER]})));
        assert!(logs(json!({"topics": [TRANSFER, null, null]})));
        assert!(!logs(
            json!({"address": "0x00000000000000000000000000000000000000c1"})
        ));
        assert!(!logs(json!({"topics": [TRANSFER, null, HOLDER_WORD]})));
        assert!(!logs(
            json!({"topics": [TRANSFER, [TRANSFER, HOLDER_WORD]]})
        ));
        assert!(!names_no_state_by_address(
            "eth_getLogs",
            Some(&json!(["x"]))
        ));
        let sub = |p: Value| names_no_state_by_address("eth_subscribe", Some(&p));
        assert!(sub(json!(["newHeads"])));
        assert!(sub(json!(["logs", {"topics": [TRANSFER]}])));
        assert!(!sub(
            json!(["logs", {"topics": [TRANSFER, null, HOLDER_WORD]}])
        ));
        assert!(!sub(json!(["somethingElse"])));
    }

    #[test]
    fn the_gate_follows_the_setting_and_records_what_it_refused() {
        let strict = Gate::without_views(UpstreamMethods::NoAddressReads);
        let e = strict
            .admit("eth_simulateV1", Some("[{}]"), Reason::NotPrivateMethod)
            .unwrap_err();
        assert!(e.to_string().contains("no-address-reads"), "{e}");
        strict
            .admit("eth_blockNumber", None, Reason::NotPrivateMethod)
            .unwrap();
        let report = strict.activity.report();
        assert_eq!(report.since_start.counts.refused["eth_simulateV1"], 1);
        assert_eq!(report.since_start.counts.upstream["eth_blockNumber"], 1);
        let all = Gate::without_views(UpstreamMethods::All);
        all.admit("eth_simulateV1", Some("[{}]"), Reason::NotPrivateMethod)
            .unwrap();
        // Auto without a view: not ready (-32003), never forwarded.
        let auto = Gate::without_views(UpstreamMethods::Auto);
        let e = auto
            .admit("eth_call", Some("[{}]"), Reason::NoView)
            .unwrap_err();
        assert_eq!(e.code(), crate::error::PIR_UNAVAILABLE, "{e}");
        assert!(auto.admit_own("eth_getBlockByHash").is_ok());
        assert!(auto.admit_own("eth_call").is_err());
    }

    #[test]
    fn the_memory_outlives_a_restart_and_is_per_server_and_chain() {
        let dir = std::env::temp_dir().join(format!("ethpir-gate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let memory = WholeStateMemory::open(&dir, "http://pir.example/KEY");
        assert!(!memory.remembers(1));
        memory.remember(1);
        let again = WholeStateMemory::open(&dir, "http://pir.example/KEY");
        assert!(again.remembers(1));
        assert!(!again.remembers(5));
        assert!(!WholeStateMemory::open(&dir, "http://other.example").remembers(1));
        assert!(WholeStateMemory::open(&dir, "http://pir.example/KEY/").remembers_any());
        let names: Vec<String> = std::fs::read_dir(dir.join("whole-state"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains("KEY")), "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
