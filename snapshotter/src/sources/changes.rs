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

use std::future::IntoFuture;

use alloy_eips::BlockId;
use alloy_primitives::{Address, B256, U256, U64};
use alloy_provider::ext::TraceApi;
use alloy_provider::Provider;
use alloy_rpc_types_trace::parity::{Delta, TraceResultsWithTransactionHash};
use protocol::storage::PrivateStorage;

use super::rpc::{
    block_participants, system_calls_of, RpcSource, RpcSourceError, SYSTEM_CONTRACTS,
};

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
    storage: BTreeMap<B256, serde_json::Value>,
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
/// changed would be unknown.
pub fn add_prestate_diffs(
    into: &mut Changed,
    traces: Vec<TxDiff>,
    holds: impl Fn(&Address) -> bool,
) -> Result<(), String> {
    for (i, tx) in traces.into_iter().enumerate() {
        let frame = match (tx.result, tx.error) {
            (Some(frame), None) => frame,
            (_, Some(error)) => return Err(format!("transaction {i}'s trace failed: {error}")),
            (None, None) => return Err(format!("transaction {i} has no trace")),
        };
        for (address, before) in &frame.pre {
            into.accounts.insert(*address);
            if !frame.post.contains_key(address) && holds(address) {
                into.written.destroyed.insert(*address);
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
    Ok(())
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

impl RpcSource {
    /// Which tracer to follow with, checked on the node's head block:
    /// `asked`, or for `Auto` the prestate tracer, else parity traces
    /// (both `trace_block` and, when `needs_slots`, state diffs), else
    /// blocks alone when `allow_incomplete` and no storage is held.
    /// `Err` inside: what the node lacks, for the operator.
    pub async fn probe_changes(
        &self,
        asked: ChangeTracer,
        needs_slots: bool,
        allow_incomplete: bool,
    ) -> Result<Result<ChangeTracer, Missing>, RpcSourceError> {
        use ChangeTracer::*;
        let head = self.head().await?;
        if matches!(asked, Auto | Prestate) && self.answers_prestate(head).await? {
            return Ok(Ok(Prestate));
        }
        let prestate = "debug_traceBlockByNumber with the prestateTracer in diffMode";
        if asked == Prestate {
            return Ok(Err(Missing(format!("no {prestate}"))));
        }
        let parity = match asked {
            Auto | Parity => {
                self.has_traces().await? && (!needs_slots || self.has_state_diffs().await?)
            }
            Prestate | Blocks => false,
        };
        if parity {
            return Ok(Ok(Parity));
        }
        if needs_slots {
            return Ok(Err(Missing(format!("neither {prestate} nor trace_replayBlockTransactions with state diffs, which following contracts' storage takes"))));
        }
        if asked == Blocks || allow_incomplete {
            return Ok(Ok(Blocks));
        }
        Ok(Err(Missing(format!("neither {prestate} nor trace_block, without which internal transfers, selfdestruct beneficiaries and contracts created by contracts are missed (or accept that with --allow-incomplete)"))))
    }

    /// Whether the node answers the prestate tracer in diff mode at block
    /// `head`. At block 0, geth refuses to trace the genesis ("genesis is
    /// not traceable"): the method is there all the same.
    async fn answers_prestate(&self, head: u64) -> Result<bool, RpcSourceError> {
        match self.prestate_diffs(head).await {
            Ok(_) => Ok(true),
            Err(RpcSourceError::Node { message, .. })
                if head == 0 && message.contains("genesis") =>
            {
                Ok(true)
            }
            Err(RpcSourceError::Node { .. } | RpcSourceError::Reply { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Block `n`'s transactions, each with its prestate diff.
    async fn prestate_diffs(&self, n: u64) -> Result<Vec<TxDiff>, RpcSourceError> {
        self.retry("debug_traceBlockByNumber", Some(n), || {
            self.provider.raw_request(
                "debug_traceBlockByNumber".into(),
                (U64::from(n), prestate_diff_config()),
            )
        })
        .await
    }

    /// What blocks `from..=to` changed, by the tracer [`Self::probe_changes`]
    /// chose, with the slots the protocol's system calls wrote.
    pub(super) async fn changed(
        &self,
        listed: &PrivateStorage,
        from: u64,
        to: u64,
    ) -> Result<Changed, RpcSourceError> {
        let (mut changed, blocks) = match self.options.changes {
            ChangeTracer::Prestate => self.prestate_changes(listed, from, to).await?,
            _ => self.parity_changes(listed, from, to).await?,
        };
        for (contract, slot) in blocks.into_iter().flat_map(system_slots) {
            if listed.holds(&contract) {
                changed.written.add_slots(contract, [slot]);
            }
        }
        Ok(changed)
    }

    /// [`Self::changed`] from the prestate tracer: the blocks' own
    /// participants (fee recipients, withdrawals) and every account and
    /// slot a transaction's diff names.
    async fn prestate_changes(
        &self,
        listed: &PrivateStorage,
        from: u64,
        to: u64,
    ) -> Result<(Changed, Vec<SystemCalls>), RpcSourceError> {
        let mut changed = Changed::default();
        changed.accounts.extend(SYSTEM_CONTRACTS);
        let mut blocks = Vec::new();
        for n in from..=to {
            let block = self.block(n, false).await?;
            changed.accounts.extend(block_participants(&block));
            blocks.push(system_calls_of(&block));
            if block.transactions.is_empty() {
                continue;
            }
            let traces = self.prestate_diffs(n).await?;
            if traces.len() != block.transactions.len() {
                return Err(RpcSourceError::Reply {
                    method: "debug_traceBlockByNumber",
                    message: format!(
                        "{} traces for block {n}'s {} transactions",
                        traces.len(),
                        block.transactions.len()
                    ),
                });
            }
            add_prestate_diffs(&mut changed, traces, |c| listed.holds(c)).map_err(|message| {
                RpcSourceError::Reply {
                    method: "debug_traceBlockByNumber",
                    message: format!("block {n}: {message}"),
                }
            })?;
        }
        Ok((changed, blocks))
    }

    /// [`Self::changed`] from parity traces: the participants of the call
    /// traces, the slots of `trace_replayBlockTransactions`'s state diffs,
    /// and the contracts destroyed.
    async fn parity_changes(
        &self,
        listed: &PrivateStorage,
        from: u64,
        to: u64,
    ) -> Result<(Changed, Vec<SystemCalls>), RpcSourceError> {
        let (accounts, lives) = self.touched_traced(from, to).await?;
        let mut written = self.written_slots(listed, from, to).await?;
        for &(n, contract) in &lives.destructs {
            // Before Cancun a SELFDESTRUCT removes the account at the end
            // of its transaction (its code is gone at the block's end, or
            // the contract was created again later in the block: then
            // its earlier slots are gone all the same); since, it only
            // does for a contract created in the same transaction, which
            // had no earlier slots. (A node's state diff may not say so:
            // anvil's reports the account unchanged.)
            if !listed.holds(&contract) {
                continue;
            }
            if lives.created.contains(&(n, contract)) || self.code_at(contract, n).await?.is_empty()
            {
                written.destroyed.insert(contract);
            }
        }
        Ok((Changed { accounts, written }, lives.blocks))
    }

    /// The slots of the contracts `listed` holds (every contract's, for
    /// the whole state) that blocks `from..=to` wrote: the `stateDiff` of
    /// `trace_replayBlockTransactions`, which every slot a transaction
    /// changed appears in; and the contracts destroyed in them, whose
    /// earlier slots the diff does not list (see [`NodeDelta`]).
    async fn written_slots(
        &self,
        listed: &PrivateStorage,
        from: u64,
        to: u64,
    ) -> Result<Written, RpcSourceError> {
        let mut out = Written::default();
        if listed.is_empty() {
            return Ok(out);
        }
        for n in from..=to {
            for replay in self.state_diffs(n).await? {
                let Some(diff) = replay.full_trace.state_diff else {
                    continue;
                };
                for (contract, account) in diff.iter().filter(|(c, _)| listed.holds(c)) {
                    if matches!(account.code, Delta::Removed(_)) {
                        out.destroyed.insert(*contract);
                    }
                    if !account.storage.is_empty() {
                        out.add_slots(*contract, account.storage.keys().copied());
                    }
                }
            }
        }
        Ok(out)
    }

    /// Whether the node answers `trace_replayBlockTransactions` with state
    /// diffs (asked on its head block): what following listed contracts'
    /// storage takes.
    pub async fn has_state_diffs(&self) -> Result<bool, RpcSourceError> {
        let head = self.head().await?;
        match self.state_diffs(head).await {
            Ok(_) => Ok(true),
            Err(RpcSourceError::Node { .. } | RpcSourceError::Reply { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Block `n`'s transactions replayed with their state diffs.
    async fn state_diffs(
        &self,
        n: u64,
    ) -> Result<Vec<TraceResultsWithTransactionHash>, RpcSourceError> {
        self.retry("trace_replayBlockTransactions", Some(n), || {
            self.provider
                .trace_replay_block_transactions(BlockId::number(n))
                .state_diff()
                .into_future()
        })
        .await
    }
}

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
        add_prestate_diffs(&mut changed, traces, |a| {
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
        assert_eq!(changed.written.destroyed, BTreeSet::from([c]));
        assert_eq!(
            changed.written.slots.len(),
            1,
            "the wallet's slots are not held"
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
