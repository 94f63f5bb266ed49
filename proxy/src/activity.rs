//! What the proxy did with the wallet's calls, kept in memory for the
//! page (`GET /`) and `GET /status.json`: reads answered privately and
//! requests sent upstream, by method, per minute over the last day; each
//! forwarded request that named an address (its method, contract and
//! reason, never the address); how many distinct addresses left the
//! machine; the bytes moved; warnings an operator or a user should see.
//!
//! The addresses named are counted by a salted hash (the keys are this
//! process's, random): the ledger can say "3 addresses" without holding a
//! list of them.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Mutex;

use std::hash::BuildHasher;

use alloy_primitives::Address;
use serde::Serialize;
use serde_json::Value;

/// Minutes kept (one day).
const MINUTES_KEPT: u64 = 24 * 60;
/// Forwarded requests naming an address listed (newest kept).
const NAMED_KEPT: usize = 200;
/// Warnings listed (newest kept; a repeat counts, it is not listed again).
const WARNINGS_KEPT: usize = 50;
/// Distinct addresses counted (past it, the count says "at least").
const ADDRESSES_COUNTED: usize = 1 << 16;

/// What the page counts a method it does not know as: any name a
/// request carries would otherwise be kept forever.
pub const OTHER_METHOD: &str = "(other)";

/// The name the page counts `method` under: its own where it is a known
/// method, else [`OTHER_METHOD`] (the page's maps stay bounded).
pub fn page_name(method: &str) -> &str {
    match crate::methods::is_known(method) {
        true => method,
        false => OTHER_METHOD,
    }
}

/// Why a request went upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// A method the proxy never answers itself (sending a transaction, a
    /// receipt, logs).
    NotPrivateMethod,
    /// No private view at the block asked about.
    NoView,
    /// Run here, but it read state the view does not hold (a contract
    /// not listed), or it observed gas after an inner call answered
    /// elsewhere: the whole call took the fallback.
    NotHeld,
    /// Only an inner call of a call run here went upstream (its
    /// contract's storage is not held).
    InnerCall,
    /// A private read the snapshots could not answer, sent upstream as
    /// `private_fallback_to_upstream` allows.
    ConfiguredFallback,
}

/// What became of a warning's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarningKind {
    /// A call read a contract the view does not hold.
    UnlistedContract,
    /// A call took the fallback (upstream, or an error).
    Fallback,
    /// A request naming an address was refused (kept private).
    Refused,
    /// The PIR server failed verification: private reads stopped.
    Verification,
    /// The PIR server's hot tier disagreed with its base (a forgery): the
    /// wallet's own keys were answered by PIR.
    ForgedTier,
}

/// A forwarded request that named an address.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Named {
    /// Unix seconds.
    pub at: u64,
    pub method: String,
    /// The contract it was about (a call's `to`, a storage read's
    /// account); `None` for an account's own read, whose address is the
    /// one hidden.
    pub contract: Option<Address>,
    pub reason: Reason,
    /// Distinct addresses the request named.
    pub addresses: usize,
}

/// A warning, with how often it was seen.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Warning {
    /// Unix seconds of the last time.
    pub at: u64,
    pub kind: WarningKind,
    pub text: String,
    pub count: u64,
}

/// Counts by method.
pub type ByMethod = BTreeMap<String, u64>;

/// What became of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Private,
    Upstream,
    Refused,
}

/// Calls by what became of them, by method.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    pub private: ByMethod,
    pub upstream: ByMethod,
    pub refused: ByMethod,
}

impl Counts {
    fn of(&mut self, fate: Fate) -> &mut ByMethod {
        match fate {
            Fate::Private => &mut self.private,
            Fate::Upstream => &mut self.upstream,
            Fate::Refused => &mut self.refused,
        }
    }

    fn count(&mut self, fate: Fate, method: &str) {
        *self.of(fate).entry(method.into()).or_default() += 1;
    }

    fn add(&mut self, other: &Counts) {
        for (into, from) in [
            (&mut self.private, &other.private),
            (&mut self.upstream, &other.upstream),
            (&mut self.refused, &other.refused),
        ] {
            for (method, n) in from {
                *into.entry(method.clone()).or_default() += n;
            }
        }
    }
}

/// What happened in one minute.
#[derive(Clone, Debug, Default)]
struct Minute {
    index: u64,
    counts: Counts,
    /// The reader's byte counters as this minute began.
    traffic_at_start: Traffic,
}

/// Bytes moved: queries up, answers down, and the background (catalogs
/// and hints, both ways).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Traffic {
    pub up: u64,
    pub down: u64,
    pub background: u64,
}

impl Traffic {
    fn since(self, earlier: Traffic) -> Traffic {
        Traffic {
            up: self.up.saturating_sub(earlier.up),
            down: self.down.saturating_sub(earlier.down),
            background: self.background.saturating_sub(earlier.background),
        }
    }
}

/// Counts over a span of time.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    #[serde(flatten)]
    pub counts: Counts,
    pub bytes: Traffic,
}

/// The ledger as the page shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Unix seconds, now and at start.
    pub now: u64,
    pub started: u64,
    pub last_hour: Span,
    pub last_day: Span,
    pub since_start: Span,
    /// Forwarded requests that named an address, newest first.
    pub named: Vec<Named>,
    /// Distinct addresses those requests named.
    pub addresses_named: usize,
    /// Newest first.
    pub warnings: Vec<Warning>,
}

#[derive(Default)]
struct Ledger {
    minutes: VecDeque<Minute>,
    total: Counts,
    named: VecDeque<Named>,
    /// The salted hashes of the addresses named.
    addresses: HashSet<u64>,
    warnings: VecDeque<Warning>,
}

/// Reads the byte counters now.
type TrafficSource = Box<dyn Fn() -> Traffic + Send + Sync>;

/// The proxy's record of what it did (one per proxy, shared).
pub struct Activity {
    ledger: Mutex<Ledger>,
    /// The reader's byte counters, read as each minute begins.
    traffic: TrafficSource,
    /// This process's random hash keys.
    salt: std::collections::hash_map::RandomState,
    started: u64,
}

impl Default for Activity {
    /// A record without byte counters (they read 0).
    fn default() -> Self {
        Self::new(Traffic::default)
    }
}

impl Activity {
    /// A record whose bytes come from `traffic` (the reader's counters).
    pub fn new(traffic: impl Fn() -> Traffic + Send + Sync + 'static) -> Self {
        // The first minute begins now, so that an hour's bytes count
        // from start (the first catalog, the first setups).
        let mut ledger = Ledger::default();
        ledger.minute(&traffic);
        Activity {
            ledger: Mutex::new(ledger),
            traffic: Box::new(traffic),
            salt: std::collections::hash_map::RandomState::new(),
            started: protocol::unix_secs(),
        }
    }

    /// A read answered privately (a balance, a storage word, a call run
    /// here).
    pub fn private(&self, method: &str) {
        drop(self.count(Fate::Private, method));
    }

    /// Counts a call in this minute and in the total; the ledger, still
    /// locked.
    fn count(&self, fate: Fate, method: &str) -> std::sync::MutexGuard<'_, Ledger> {
        let method = page_name(method);
        let mut ledger = self.ledger.lock().expect("activity");
        ledger.minute(&self.traffic).counts.count(fate, method);
        ledger.total.count(fate, method);
        ledger
    }

    /// A request sent upstream: listed when it names an address
    /// (`params` are looked through for them, and for the contract it is
    /// about: [`contract_of`]); `params` as the gate parsed them (`None`:
    /// none, or unreadable).
    pub fn upstream(&self, method: &str, params: Option<&Value>, reason: Reason) {
        let named = params.map(named_addresses).unwrap_or_default();
        let contract = params.and_then(|p| contract_of(method, p));
        let mut ledger = self.count(Fate::Upstream, method);
        if named.is_empty() {
            return;
        }
        for address in &named {
            if ledger.addresses.len() < ADDRESSES_COUNTED {
                ledger.addresses.insert(self.salt.hash_one(address));
            }
        }
        if ledger.named.len() == NAMED_KEPT {
            ledger.named.pop_front();
        }
        ledger.named.push_back(Named {
            at: protocol::unix_secs(),
            method: page_name(method).into(),
            contract,
            reason,
            addresses: named.len(),
        });
    }

    /// A request that may have named an address, refused (kept
    /// private); `why` says what closed the gate.
    pub fn refused(&self, method: &str, why: &str) {
        let method = page_name(method);
        drop(self.count(Fate::Refused, method));
        self.warn(
            WarningKind::Refused,
            format!("{method} may read state by address: not sent upstream ({why})"),
        );
    }

    /// A warning (a repeat of the newest of the same text counts once
    /// more).
    pub fn warn(&self, kind: WarningKind, text: String) {
        let mut ledger = self.ledger.lock().expect("activity");
        let at = protocol::unix_secs();
        if let Some(same) = ledger
            .warnings
            .iter_mut()
            .find(|w| w.kind == kind && w.text == text)
        {
            same.at = at;
            same.count += 1;
            return;
        }
        if ledger.warnings.len() == WARNINGS_KEPT {
            ledger.warnings.pop_front();
        }
        ledger.warnings.push_back(Warning {
            at,
            kind,
            text,
            count: 1,
        });
    }

    /// The ledger now.
    pub fn report(&self) -> Report {
        let traffic = (self.traffic)();
        let mut ledger = self.ledger.lock().expect("activity");
        let now = protocol::unix_secs();
        ledger.minute(&|| traffic);
        let span = |minutes: u64| ledger.span(now / 60 + 1 - minutes, traffic);
        let (last_hour, last_day) = (span(60), span(MINUTES_KEPT));
        let since_start = Span {
            counts: ledger.total.clone(),
            bytes: traffic,
        };
        let mut warnings: Vec<Warning> = ledger.warnings.iter().cloned().collect();
        warnings.sort_by_key(|w| std::cmp::Reverse(w.at));
        Report {
            now,
            started: self.started,
            last_hour,
            last_day,
            since_start,
            named: ledger.named.iter().rev().cloned().collect(),
            addresses_named: ledger.addresses.len(),
            warnings,
        }
    }
}

impl Ledger {
    /// This minute's counts (begun now if need be, at the byte counters
    /// `traffic` reads then).
    fn minute(&mut self, traffic: &dyn Fn() -> Traffic) -> &mut Minute {
        let index = protocol::unix_secs() / 60;
        if self.minutes.back().is_none_or(|m| m.index != index) {
            self.minutes.push_back(Minute {
                index,
                traffic_at_start: traffic(),
                ..Default::default()
            });
            while self
                .minutes
                .front()
                .is_some_and(|m| m.index + MINUTES_KEPT <= index)
            {
                self.minutes.pop_front();
            }
        }
        self.minutes.back_mut().expect("just pushed")
    }

    /// Counts from minute `first` on; bytes from the oldest minute kept in
    /// it to `traffic` (now).
    fn span(&self, first: u64, traffic: Traffic) -> Span {
        let mut span = Span::default();
        let mut oldest = None;
        for m in self.minutes.iter().filter(|m| m.index >= first) {
            oldest.get_or_insert(m.traffic_at_start);
            span.counts.add(&m.counts);
        }
        span.bytes = traffic.since(oldest.unwrap_or(traffic));
        span
    }
}

/// The contract a forwarded request is about: a call's `to`, a storage
/// read's (or code's, or proof's) account, a log filter's single
/// address. `None` for an account's own read (its address is the one
/// hidden) and for requests about no account.
pub fn contract_of(method: &str, params: &Value) -> Option<Address> {
    let first = params.get(0)?;
    let field = match method {
        "eth_call" | "eth_estimateGas" | "eth_createAccessList" => first.get("to")?,
        "eth_getStorageAt" | "eth_getProof" | "eth_getCode" => first,
        "eth_getLogs" | "eth_newFilter" => first.get("address")?,
        _ => return None,
    };
    field.as_str()?.parse().ok()
}

/// The distinct addresses a request's params name: every 20-byte hex
/// string, and every 32-byte word of call data that holds one (12 zero
/// bytes, then 20 not all zero: an ABI-encoded address).
pub fn named_addresses(params: &Value) -> Vec<Address> {
    let mut found = Vec::new();
    collect_addresses(params, &mut found);
    found.sort();
    found.dedup();
    found
}

fn collect_addresses(value: &Value, found: &mut Vec<Address>) {
    match value {
        Value::String(s) => found.extend(addresses_in_hex(s)),
        Value::Array(items) => items.iter().for_each(|v| collect_addresses(v, found)),
        Value::Object(fields) => fields.values().for_each(|v| collect_addresses(v, found)),
        _ => {}
    }
}

fn addresses_in_hex(s: &str) -> Vec<Address> {
    let Some(hex) = s.strip_prefix("0x") else {
        return Vec::new();
    };
    if hex.len() == 40 {
        return hex.parse::<Address>().into_iter().collect();
    }
    let Ok(bytes) = alloy_primitives::hex::decode(hex) else {
        return Vec::new();
    };
    // After a 4-byte selector, or from the start (a constructor's or a
    // raw word's data).
    let words = |from: usize| {
        bytes
            .get(from..)
            .unwrap_or_default()
            .chunks_exact(32)
            .filter(|w| w[..12].iter().all(|b| *b == 0) && w[12..].iter().any(|b| *b != 0))
            .map(|w| Address::from_slice(&w[12..]))
            .collect::<Vec<_>>()
    };
    let mut out = words(4);
    if bytes.len() % 32 == 0 {
        out.extend(words(0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLDER: &str = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

    #[test]
    fn addresses_are_found_in_params_and_call_data() {
        let token = "0x00000000000000000000000000000000000000c1";
        let data = format!("0x70a08231{:0>64}", &HOLDER[2..]);
        let params = serde_json::json!([{"to": token, "data": data}, "latest"]);
        let mut want: Vec<Address> = vec![HOLDER.parse().unwrap(), token.parse().unwrap()];
        want.sort();
        assert_eq!(named_addresses(&params), want);
        assert!(named_addresses(&serde_json::json!(["latest", "0x1", 5])).is_empty());
        let activity = Activity::default();
        let unreadable = serde_json::from_str::<Value>("not json").ok();
        activity.upstream("eth_call", unreadable.as_ref(), Reason::NotHeld);
        assert!(
            activity.report().named.is_empty(),
            "unreadable params name none"
        );
    }

    #[test]
    fn a_requests_contract_is_its_calls_to_or_the_account_read() {
        let c = "0x00000000000000000000000000000000000000c1";
        let call = serde_json::json!([{"from": HOLDER, "to": c}, "latest"]);
        let want = Some(c.parse().unwrap());
        assert_eq!(contract_of("eth_call", &call), want);
        let slot = serde_json::json!([c, "0x0", "latest"]);
        assert_eq!(contract_of("eth_getStorageAt", &slot), want);
        let balance = serde_json::json!([HOLDER, "latest"]);
        assert_eq!(contract_of("eth_getBalance", &balance), None);
        assert_eq!(contract_of("eth_call", &serde_json::json!([])), None);
    }

    #[test]
    fn the_report_counts_by_method_and_never_holds_an_address() {
        let counters = Traffic {
            up: 10,
            down: 20,
            background: 5,
        };
        let activity = Activity::new(move || counters);
        activity.private("eth_getBalance");
        activity.private("eth_getBalance");
        let contract: Address = "0x00000000000000000000000000000000000000c1"
            .parse()
            .unwrap();
        let params = format!(
            r#"[{{"to":"{contract}","data":"0x70a08231{:0>64}"}},"latest"]"#,
            &HOLDER[2..]
        );
        let params: Value = serde_json::from_str(&params).unwrap();
        activity.upstream("eth_call", Some(&params), Reason::NotHeld);
        activity.upstream("eth_blockNumber", None, Reason::NotPrivateMethod);
        activity.warn(WarningKind::Fallback, "x".into());
        activity.warn(WarningKind::Fallback, "x".into());
        // Any name a request carries is not kept: one bucket for them.
        for i in 0..1000 {
            activity.upstream(&format!("made_up_{i}"), None, Reason::NotPrivateMethod);
        }
        let report = activity.report();
        assert_eq!(report.last_hour.counts.private["eth_getBalance"], 2);
        assert_eq!(report.last_day.counts.upstream["eth_call"], 1);
        assert_eq!(report.since_start.counts.upstream["eth_blockNumber"], 1);
        assert_eq!(report.since_start.counts.upstream[OTHER_METHOD], 1000);
        assert_eq!(report.since_start.counts.upstream.len(), 3);
        assert_eq!(report.named.len(), 1, "eth_blockNumber names none");
        assert_eq!(report.named[0].contract, Some(contract));
        assert_eq!(report.addresses_named, 2, "the holder and the token");
        assert_eq!(report.warnings.len(), 1);
        assert_eq!(report.warnings[0].count, 2);
        assert_eq!(report.since_start.bytes.down, 20);
        assert_eq!(
            report.last_hour.bytes.down, 0,
            "from the first minute's start"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["lastHour"]["private"]["eth_getBalance"], 2, "{json}");
        let json = json.to_string().to_lowercase();
        assert!(!json.contains(&HOLDER[2..]), "{json}");
    }
}
