//! ethereum/execution-apis's rpc-compat suite through the proxy, with
//! hive's comparison rules. geth (archive) runs the suite's chain
//! (`e2e/rpc-compat`: the cases, their licence and the commit they came
//! from); a follower reads its whole state from the suite's genesis and
//! every block's trace, a PIR server serves it, and the proxy answers in
//! front of geth through a recording relay. Each case's answer must be
//! geth's own, and no request relayed to geth may name an address the
//! case names. The project's own cases (`e2e/rpc-cases`: edges of call
//! objects, storage keys and the pool that the suite leaves out) run after
//! the suite's, as its are run.

use std::path::{Path, PathBuf};

use serde_json::Value;
use snapshotter::follow::StorageScope;

use crate::common::{
    follow_config, passthrough, start_proxy, start_recording_relay, start_server, view_reaches,
    Follower, RelayedCalls,
};

/// One `.io` file: requests (`>>`) and the answers recorded (`<<`).
struct Case {
    /// Its path under `tests/`, without `.io`.
    name: String,
    /// Whether the recorded answer is only an example (hive checks its
    /// schema); compared here with geth's own answer all the same.
    speconly: bool,
    exchanges: Vec<(Value, Value)>,
}

fn suite_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rpc-compat/tests")
}

fn own_cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rpc-cases")
}

/// Every case under `root`, in the order hive walks them (by path).
fn load_cases(root: &Path) -> Vec<Case> {
    let mut files = Vec::new();
    for dir in std::fs::read_dir(root).unwrap() {
        let dir = dir.unwrap().path();
        if dir.is_dir() {
            for file in std::fs::read_dir(&dir).unwrap() {
                files.push(file.unwrap().path());
            }
        }
    }
    files.retain(|f| f.extension().is_some_and(|e| e == "io"));
    files.sort();
    let name = |f: &Path| {
        let relative = f.strip_prefix(root).unwrap().with_extension("");
        relative.to_str().unwrap().to_string()
    };
    files
        .iter()
        .map(|f| parse_case(name(f), &std::fs::read_to_string(f).unwrap()))
        .collect()
}

/// hive's reading of a `.io` file: `//` comments before the first
/// request (`speconly:` marks one), then `>>` and `<<` lines in pairs.
fn parse_case(name: String, text: &str) -> Case {
    let mut case = Case {
        name,
        speconly: false,
        exchanges: Vec::new(),
    };
    let mut request = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(comment) = line.strip_prefix("//") {
            case.speconly |= comment.trim_start().starts_with("speconly:");
        } else if let Some(sent) = line.strip_prefix(">>") {
            request = Some(serde_json::from_str(sent.trim()).unwrap());
        } else if let Some(answer) = line.strip_prefix("<<") {
            let sent = request.take().expect("a request before its answer");
            case.exchanges
                .push((sent, serde_json::from_str(answer.trim()).unwrap()));
        } else {
            panic!("{}: not a line of a case: {line}", case.name);
        }
    }
    case
}

/// hive's comparison: error messages are dropped wherever both sides
/// hold an error object (at the top or nested), numbers compare by value,
/// everything else exactly.
fn hive_equal(answer: &Value, expected: &Value) -> bool {
    let (mut answer, mut expected) = (answer.clone(), expected.clone());
    drop_shared_error_messages(&mut answer, &mut expected);
    same_json(&answer, &expected)
}

fn drop_shared_error_messages(answer: &mut Value, expected: &mut Value) {
    match (answer, expected) {
        (Value::Object(a), Value::Object(e)) => {
            for (key, e_child) in e.iter_mut() {
                let Some(a_child) = a.get_mut(key) else {
                    continue;
                };
                if key == "error" {
                    let both = a_child.get("message").is_some() && e_child.get("message").is_some();
                    if let (true, Some(a_err), Some(e_err)) =
                        (both, a_child.as_object_mut(), e_child.as_object_mut())
                    {
                        a_err.remove("message");
                        e_err.remove("message");
                    }
                } else {
                    drop_shared_error_messages(a_child, e_child);
                }
            }
        }
        (Value::Array(a), Value::Array(e)) => {
            for (a_child, e_child) in a.iter_mut().zip(e.iter_mut()) {
                drop_shared_error_messages(a_child, e_child);
            }
        }
        _ => {}
    }
}

fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// Every address a request names: each string of its parameters that is
/// 20 bytes of hex (the zero address too), lowercased, without `0x`.
fn named_addresses(request: &Value) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => {
                let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"));
                let hex = hex.unwrap_or("");
                if hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    out.push(hex.to_ascii_lowercase());
                }
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&request["params"], &mut out);
    out.sort();
    out.dedup();
    out
}

/// Methods whose second sending differs from the first (a transaction
/// already in the pool): compared with the recorded answer, not geth's.
const SENT_ONCE: &[&str] = &["eth_sendRawTransaction"];

/// Methods the proxy refuses by design, with its error and nothing of
/// theirs sent: no trie nodes are held to prove a value (`eth_getProof`);
/// `testing_buildBlockV1` builds blocks, no wallet's method, outside the
/// gate's allowlist (geth here does not offer it either).
const REFUSED_HERE: &[&str] = &["eth_getProof", "testing_buildBlockV1"];

/// Run here: geth's answer but for what a block's state root makes (see
/// [`unrooted`]), but [`SIMULATIONS_REFUSED`].
const SIMULATED: &str = "eth_simulateV1";

/// The `eth_simulateV1` cases refused (-32601, nothing sent), each for
/// its reason; every other case must be geth's answer.
const SIMULATIONS_REFUSED: &[&str] = &[
    // A simulated block's hash (BLOCKHASH past the base block): it holds
    // the block's state root.
    "eth_simulateV1/ethSimulate-add-more-non-defined-BlockStateCalls-than-fit-but-now-with-fit",
    "eth_simulateV1/ethSimulate-blockhash-complex",
    "eth_simulateV1/ethSimulate-blockhash-simple",
    "eth_simulateV1/ethSimulate-blockhash-start-before-head",
    "eth_simulateV1/ethSimulate-overwrite-existing-contract",
    "eth_simulateV1/ethSimulate-use-as-many-features-as-possible",
    // A base block before the merge.
    "eth_simulateV1/ethSimulate-empty-with-block-num-set-firstblock",
];

/// `answer` without what a simulated block's state root makes: its
/// `stateRoot`, its `hash` (of a header that holds it), the next block's
/// `parentHash`, and the `blockHash` of its logs and transactions. The
/// snapshots hold values, not the trie's nodes, so the proxy cannot make
/// the root (docs/operations.md).
fn unrooted(answer: &Value) -> Value {
    let mut answer = answer.clone();
    let Some(blocks) = answer.get_mut("result").and_then(Value::as_array_mut) else {
        return answer;
    };
    for (i, block) in blocks.iter_mut().enumerate() {
        let Some(block) = block.as_object_mut() else {
            continue;
        };
        // (The first block's parent is the base block, the node's own.)
        for field in ["stateRoot", "hash", "parentHash"] {
            if i > 0 || field != "parentHash" {
                block.remove(field);
            }
        }
        let calls = block.get_mut("calls").and_then(Value::as_array_mut);
        let logs = calls
            .into_iter()
            .flatten()
            .filter_map(|c| c.get_mut("logs").and_then(Value::as_array_mut))
            .flatten();
        for log in logs.filter_map(Value::as_object_mut) {
            log.remove("blockHash");
        }
        let txs = block.get_mut("transactions").and_then(Value::as_array_mut);
        for tx in txs.into_iter().flatten().filter_map(Value::as_object_mut) {
            tx.remove("blockHash");
        }
    }
    answer
}

/// What went wrong with one case through the proxy.
enum Finding {
    /// Its answer is not geth's (nor, for [`SENT_ONCE`], the file's; for
    /// [`REFUSED_HERE`], not the proxy's refusal).
    Differs {
        request: Value,
        proxy: Value,
        expected: Value,
    },
    /// A request relayed to geth named an address the case names.
    Named { address: String, relayed: Value },
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Differs {
                request,
                proxy,
                expected,
            } => write!(f, ">> {request}\n<< {proxy}\nexpected {expected}"),
            Finding::Named { address, relayed } => {
                write!(f, "0x{address} reached the node in {relayed}")
            }
        }
    }
}

/// One request's whole JSON answer.
async fn post(http: &reqwest::Client, url: &str, request: &Value) -> Value {
    test_support::rpc_raw(http, url, &request.to_string()).await
}

/// Runs `case` through the proxy (and, first, at geth): what went wrong,
/// and whether geth's own answers differ from the file's.
async fn run_case(
    http: &reqwest::Client,
    case: &Case,
    proxy: &str,
    geth: &str,
    relayed: &RelayedCalls,
) -> (Vec<Finding>, bool, usize) {
    let (mut findings, mut geth_differs_from_file) = (Vec::new(), false);
    let mut simulated = 0;
    for (request, recorded) in &case.exchanges {
        let method = request["method"].as_str().unwrap_or_default();
        let before = relayed.lock().unwrap().len();
        let expected = if SENT_ONCE.contains(&method) {
            recorded.clone()
        } else {
            let direct = post(http, geth, request).await;
            geth_differs_from_file |= !case.speconly && !hive_equal(&direct, recorded);
            direct
        };
        let proxy_answer = post(http, proxy, request).await;
        let sent: Vec<Value> = relayed.lock().unwrap()[before..].to_vec();
        let right = match REFUSED_HERE.contains(&method) {
            true => refused_here(&proxy_answer, method, &sent),
            false if method == SIMULATED => match SIMULATIONS_REFUSED.contains(&case.name.as_str())
            {
                true => refused_here(&proxy_answer, method, &sent),
                false => {
                    let same = hive_equal(&unrooted(&proxy_answer), &unrooted(&expected));
                    simulated += usize::from(same);
                    same
                }
            },
            // The pool's answer may change meanwhile (a transaction
            // promoted): compared with geth's answer after the proxy's too.
            false => {
                hive_equal(&proxy_answer, &expected)
                    || method.starts_with("txpool_")
                        && hive_equal(&proxy_answer, &post(http, geth, request).await)
            }
        };
        if !right {
            findings.push(Finding::Differs {
                request: request.clone(),
                proxy: proxy_answer,
                expected,
            });
        }
        for address in named_addresses(request) {
            let leak = sent
                .iter()
                .find(|c| c.to_string().to_ascii_lowercase().contains(&address));
            if let Some(relayed) = leak {
                findings.push(Finding::Named {
                    address: address.clone(),
                    relayed: relayed.clone(),
                });
            }
        }
    }
    (findings, geth_differs_from_file, simulated)
}

/// The proxy's own refusal of `method` (-32601, the gate's code), with
/// nothing of that method sent to the node.
fn refused_here(answer: &Value, method: &str, sent: &[Value]) -> bool {
    let gate_said_no = answer["error"]["code"] == -32601;
    gate_said_no && !sent.iter().any(|c| c["method"] == method)
}

/// Every request relayed to geth in the whole run, but the transactions
/// sent (their bytes name their recipients), against every address any
/// case names: none may be there (a request the proxy made after
/// answering a case is charged to no case, but is caught here). Short
/// addresses (the zero address, precompiles: 32 leading zero digits or
/// more) are left to each case's own check: hashes and numbers padded
/// with zeros that other cases ask about hold them.
fn named_anywhere(cases: &[Case], relayed: &RelayedCalls) -> Vec<String> {
    let short = "0".repeat(32);
    let named: std::collections::BTreeSet<String> = cases
        .iter()
        .flat_map(|c| &c.exchanges)
        .flat_map(|(request, _)| named_addresses(request))
        .filter(|a| !a.starts_with(&short))
        .collect();
    let sent = relayed.lock().unwrap();
    let texts = sent
        .iter()
        .filter(|c| !SENT_ONCE.contains(&c["method"].as_str().unwrap_or_default()))
        .map(|c| c.to_string().to_ascii_lowercase());
    texts
        .flat_map(|text| {
            let found = named.iter().filter(move |a| text.contains(a.as_str()));
            found.map(|a| format!("0x{a}")).collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rpc_compat_suite_through_the_proxy_is_geths_and_private() {
    let suite = suite_dir();
    let dir = tempfile::tempdir().unwrap();
    let genesis = suite.join("genesis.json");
    let geth = test_support::Node::start_geth_chain(
        dir.path(),
        &genesis,
        &suite.join("chain.rlp"),
        &suite.join("headfcu.json"),
    )
    .await;
    let head = geth.head().await;
    let store = dir.path().join("store");
    let mut config = follow_config(&store, &geth.url, &genesis, 0, 4, 4096);
    config.source.storage = StorageScope::All;
    let follower = Follower::start(config);
    let server = start_server(&store).await;
    let (relay, _, relayed) = start_recording_relay(&geth.url, passthrough()).await;
    let proxy = start_proxy(&server, Some(relay), &dir.path().join("cache")).await;
    view_reaches(&proxy, head).await;

    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let mut cases = load_cases(&suite);
    // Every case of rpc-compat/SOURCE.md's commit that the copy holds.
    assert_eq!(cases.len(), 232, "the suite's cases");
    // After the suite's: its sent transactions are in the pool then.
    cases.extend(load_cases(&own_cases_dir()).into_iter().map(|case| Case {
        name: format!("own/{}", case.name),
        ..case
    }));
    let (mut failed, mut geth_own, mut simulated) = (Vec::new(), Vec::new(), 0);
    for case in &cases {
        let (findings, geth_differs, answered) =
            run_case(&http, case, &proxy, &geth.url, &relayed).await;
        simulated += answered;
        if geth_differs {
            geth_own.push(case.name.clone());
        }
        for finding in &findings {
            eprintln!("{}: {finding}", case.name);
        }
        if !findings.is_empty() {
            failed.push(case.name.clone());
        }
    }
    let by_design = |c: &&Case| REFUSED_HERE.iter().any(|m| c.name.starts_with(m));
    let refused = cases.iter().filter(by_design).count();
    let simulations = cases.iter().filter(|c| c.name.contains(SIMULATED)).count();
    eprintln!(
        "{} cases: {} geth's answer through the proxy, {refused} refused by design ({REFUSED_HERE:?}), \
         {SIMULATED}: {simulated} of {simulations} geth's but for the state root, {} refused; {} failed; \
         geth 1.17.10's own answer differs from the file in {}: {geth_own:?}",
        cases.len(),
        cases.len() - refused - simulations - failed.len(),
        simulations - simulated,
        failed.len(),
        geth_own.len()
    );
    assert_eq!(failed, Vec::<String>::new());
    assert_eq!(simulated + SIMULATIONS_REFUSED.len(), simulations);
    assert_eq!(named_anywhere(&cases, &relayed), Vec::<String>::new());
    follower.stop().await;
}
