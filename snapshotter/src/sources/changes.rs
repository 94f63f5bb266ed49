//! What blocks changed, as a node's tracers tell it: which accounts, which
//! slots, which contracts were destroyed. Two tracers say it:
//!
//! - the `prestateTracer` in `diffMode` (`debug_traceBlockByNumber`: geth,
//!   reth, erigon, nethermind, anvil), the standard path: every account a
//!   transaction modified is in its `pre`, every slot it changed in `pre`
//!   (the old word) or `post` (the new one, when not zero), and an account
//!   in `pre` but not in `post` was deleted;
//! - parity's `trace_block` and `trace_replayBlockTransactions` with state
//!   diffs (reth, erigon, nethermind, anvil), for a node that has only
//!   those.
//!
//! Neither traces what the protocol writes outside transactions (the
//! system calls of EIP-4788 and EIP-2935 before a block's transactions,
//! of EIP-7002 and EIP-7251 after): [`system_slots`] lists those slots
//! from the block's header.

use std::collections::{BTreeMap, BTreeSet};

use alloy_primitives::{Address, B256, U256};

/// Which tracer a follower asks (`[source] changes` in the config).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeTracer {
    /// The prestate tracer if the node answers it, else parity traces.
    #[default]
    Auto,
    /// `debug_traceBlockByNumber` with the `prestateTracer` in `diffMode`.
    Prestate,
    /// `trace_block` and `trace_replayBlockTransactions` (state diffs).
    Parity,
    /// Blocks and receipts only: senders, recipients, created contracts.
    /// Internal transfers and storage are missed (`allow_incomplete`).
    Blocks,
}

/// What blocks changed, of the accounts and the contracts a snapshot holds.
#[derive(Debug, Default)]
pub struct Changed {
    /// Every account whose balance, nonce or code may have changed.
    pub accounts: BTreeSet<Address>,
    pub written: Written,
}

/// What blocks wrote of the contracts a snapshot holds.
#[derive(Debug, Default)]
pub struct Written {
    /// Each contract's slots written, by slot number.
    pub slots: BTreeMap<Address, BTreeSet<B256>>,
    /// Contracts destroyed (pre-Cancun `SELFDESTRUCT`), perhaps created
    /// again since.
    pub destroyed: BTreeSet<Address>,
}

impl Written {
    pub fn add_slots(&mut self, contract: Address, slots: impl IntoIterator<Item = B256>) {
        self.slots.entry(contract).or_default().extend(slots);
    }
}

/// One transaction's entry in `debug_traceBlockByNumber`'s answer.
#[derive(Debug, serde::Deserialize)]
pub struct TxDiff {
    #[serde(default)]
    result: Option<DiffFrame>,
    #[serde(default)]
    error: Option<String>,
}

/// The `prestateTracer`'s frame in `diffMode`: both sides required, so
/// that a node which ignored `diffMode` (a plain prestate, keyed by
/// address) is refused rather than read as "nothing changed".
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffFrame {
    pre: BTreeMap<Address, DiffAccount>,
    post: BTreeMap<Address, DiffAccount>,
}

#[derive(Debug, serde::Deserialize)]
struct DiffAccount {
    #[serde(default)]
    nonce: Option<serde_json::Value>,
    #[serde(default)]
    storage: BTreeMap<B256, serde_json::Value>,
}

impl DiffAccount {
    /// Whether the account did not exist (a zero nonce, which tracers
    /// leave out: every contract's nonce is 1 or more, EIP-161).
    fn is_absent(&self) -> bool {
        match &self.nonce {
            None => true,
            Some(serde_json::Value::Number(n)) => n.as_u64() == Some(0),
            Some(serde_json::Value::String(s)) => s == "0x0" || s == "0",
            Some(_) => false,
        }
    }
}

/// The tracer's configuration asked of the node: codes left out (a
/// created contract's code is read with its account).
pub fn prestate_diff_config() -> serde_json::Value {
    serde_json::json!({
        "tracer": "prestateTracer",
        "tracerConfig": {"diffMode": true, "disableCode": true},
    })
}

/// Adds one block's prestate diffs to `into`; `holds` says whose slots a
/// snapshot keeps. A transaction the tracer failed on is an error: what it
/// changed would be unknown. Returns the held contracts the tracer says a
/// transaction deleted (in its `pre`, not in its `post`), each with
/// whether a later transaction of the block found it absent again
/// (created anew): candidates only, since geth marks a `SELFDESTRUCT`
/// when it starts, even in a frame that reverts ([`Destroyed`]).
pub fn add_prestate_diffs(
    into: &mut Changed,
    traces: Vec<TxDiff>,
    holds: impl Fn(&Address) -> bool,
) -> Result<Vec<Destroyed>, String> {
    let mut deleted: BTreeMap<Address, bool> = BTreeMap::new();
    for (i, tx) in traces.into_iter().enumerate() {
        let frame = match (tx.result, tx.error) {
            (Some(frame), None) => frame,
            (_, Some(error)) => return Err(format!("transaction {i}'s trace failed: {error}")),
            (None, None) => return Err(format!("transaction {i} has no trace")),
        };
        // A contract deleted earlier in the block and created here: its
        // nonce set (a creation's 1) from none (tracers list a created
        // account's prestate as empty, or leave it out). A live contract
        // whose nonce is 0 (before EIP-161, or a genesis alloc's) and
        // that this transaction only writes to is no re-creation.
        for (address, recreated) in deleted.iter_mut() {
            *recreated |= match (frame.pre.get(address), frame.post.get(address)) {
                (before, Some(after)) if after.nonce.is_some() => {
                    before.is_none_or(DiffAccount::is_absent)
                }
                _ => false,
            };
        }
        for (address, before) in &frame.pre {
            into.accounts.insert(*address);
            if !frame.post.contains_key(address) && holds(address) {
                deleted.entry(*address).or_insert(false);
            }
            if holds(address) && !before.storage.is_empty() {
                into.written
                    .add_slots(*address, before.storage.keys().copied());
            }
        }
        for (address, after) in frame.post {
            into.accounts.insert(address);
            if holds(&address) && !after.storage.is_empty() {
                into.written.add_slots(address, after.storage.into_keys());
            }
        }
    }
    Ok(deleted
        .into_iter()
        .map(|(contract, recreated)| Destroyed {
            contract,
            recreated,
        })
        .collect())
}

/// A contract the prestate tracer says a block deleted. Before Cancun it
/// was, if its code is gone at the block's end or it was created anew
/// later in the block; since Cancun (EIP-6780) only a contract created in
/// the same transaction is deleted, which had no earlier slots, so the
/// claim is set aside (older geth marks every `SELFDESTRUCT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Destroyed {
    pub contract: Address,
    pub recreated: bool,
}

/// The EIPs' ring buffers: EIP-4788's beacon roots and EIP-2935's block
/// hashes.
const RING: u64 = alloy_eips::eip2935::HISTORY_SERVE_WINDOW as u64;

/// A block's header, as much as the system calls need.
#[derive(Clone, Copy, Debug)]
pub struct SystemCalls {
    pub number: u64,
    pub timestamp: u64,
    /// The header has a parent beacon root (Cancun on): EIP-4788's call.
    pub beacon_root: bool,
    /// The header has a requests hash (Prague on): EIP-2935's, EIP-7002's
    /// and EIP-7251's calls.
    pub requests: bool,
}

/// The slots the protocol's system calls write in a block, outside its
/// transactions: EIP-4788's timestamp and root (`timestamp % 8191` and
/// 8191 above), EIP-2935's parent hash (`(number - 1) % 8191`), and the
/// request queues' excess, count, head and tail (slots 0 to 3; the
/// queue's own entries are written only by transactions).
pub fn system_slots(block: SystemCalls) -> Vec<(Address, B256)> {
    let slot = |n: u64| B256::from(U256::from(n));
    let mut out = Vec::new();
    if block.beacon_root {
        let index = block.timestamp % RING;
        let roots = alloy_eips::eip4788::BEACON_ROOTS_ADDRESS;
        out.push((roots, slot(index)));
        out.push((roots, slot(index + RING)));
    }
    if block.requests {
        let hashes = alloy_eips::eip2935::HISTORY_STORAGE_ADDRESS;
        out.push((hashes, slot(block.number.saturating_sub(1) % RING)));
        for queue in [
            alloy_eips::eip7002::WITHDRAWAL_REQUEST_PREDEPLOY_ADDRESS,
            alloy_eips::eip7251::CONSOLIDATION_REQUEST_PREDEPLOY_ADDRESS,
        ] {
            out.extend((0..4).map(|n| (queue, slot(n))));
        }
    }
    out
}

/// What a node lacks to be followed, for the refusal at start.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Missing(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    fn diffs(json: serde_json::Value) -> Vec<TxDiff> {
        serde_json::from_value(json).unwrap()
    }

    const C: &str = "0x00000000000000000000000000000000000c0de5";
    const W: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";

    #[test]
    fn written_cleared_and_destroyed_are_read_from_both_sides() {
        let slot = |n: u8| format!("0x{:064x}", n);
        let traces = diffs(serde_json::json!([
            {"txHash": "0x01", "result": {
                "pre": {C: {"balance": "0x0", "storage": {slot(1): slot(5)}}, W: {"balance": "0x9"}},
                "post": {C: {"storage": {slot(3): slot(42)}}, W: {"balance": "0x8", "nonce": 1}},
            }},
            {"txHash": "0x02", "result": {"pre": {C: {"balance": "0x0"}}, "post": {}}},
        ]));
        let mut changed = Changed::default();
        let deleted = add_prestate_diffs(&mut changed, traces, |a| {
            *a == C.parse::<Address>().unwrap()
        })
        .unwrap();
        let c: Address = C.parse().unwrap();
        assert_eq!(changed.accounts.len(), 2);
        let slots: Vec<B256> = changed.written.slots[&c].iter().copied().collect();
        assert_eq!(
            slots,
            vec![B256::with_last_byte(1), B256::with_last_byte(3)]
        );
        let candidate = Destroyed {
            contract: c,
            recreated: false,
        };
        assert_eq!(deleted, vec![candidate]);
        assert_eq!(
            changed.written.slots.len(),
            1,
            "the wallet's slots are not held"
        );
    }

    #[test]
    fn a_contract_deleted_then_found_absent_was_created_anew() {
        let deleted = |later: serde_json::Value| {
            let traces = diffs(serde_json::json!([
                {"result": {"pre": {C: {"balance": "0x0", "nonce": 1}}, "post": {}}},
                {"result": later},
            ]));
            add_prestate_diffs(&mut Changed::default(), traces, |_| true).unwrap()[0].recreated
        };
        let listed_empty =
            serde_json::json!({"pre": {C: {"balance": "0x0"}}, "post": {C: {"nonce": 1}}});
        let left_out = serde_json::json!({"pre": {}, "post": {C: {"nonce": 1}}});
        let live = serde_json::json!({"pre": {C: {"balance": "0x1", "nonce": 1}}, "post": {C: {"balance": "0x2"}}});
        let written =
            serde_json::json!({"pre": {C: {"balance": "0x0"}}, "post": {C: {"storage": {}}}});
        assert!(deleted(listed_empty) && deleted(left_out));
        assert!(
            !deleted(written),
            "a nonce-0 contract written to: not created anew"
        );
        assert!(
            !deleted(live),
            "touched again while alive: not created anew"
        );
    }

    #[test]
    fn a_failed_trace_or_a_plain_prestate_is_refused() {
        let failed = diffs(serde_json::json!([{"error": "execution timeout"}]));
        let err = add_prestate_diffs(&mut Changed::default(), failed, |_| true).unwrap_err();
        assert!(err.contains("execution timeout"), "{err}");
        // A node that ignored diffMode answers the accounts keyed by
        // address: not a diff.
        let plain = serde_json::json!([{"result": {C: {"balance": "0x0"}}}]);
        assert!(serde_json::from_value::<Vec<TxDiff>>(plain).is_err());
    }

    #[test]
    fn system_calls_write_the_eips_slots() {
        let block = SystemCalls {
            number: 8192,
            timestamp: 8191 * 3 + 5,
            beacon_root: true,
            requests: true,
        };
        let slots = system_slots(block);
        let roots = alloy_eips::eip4788::BEACON_ROOTS_ADDRESS;
        assert!(slots.contains(&(roots, B256::with_last_byte(5))));
        assert!(slots.contains(&(roots, B256::from(U256::from(5 + 8191)))));
        let hashes = alloy_eips::eip2935::HISTORY_STORAGE_ADDRESS;
        assert!(slots.contains(&(hashes, B256::with_last_byte(0))));
        assert_eq!(slots.len(), 2 + 1 + 8);
        let shanghai = SystemCalls {
            beacon_root: false,
            requests: false,
            ..block
        };
        assert!(system_slots(shanghai).is_empty());
    }
}
