//! [`RpcSource`]'s side of [`crate::sources::changes`]: asking the node's
//! tracers what blocks changed, and which tracer it has.

use std::future::IntoFuture;

use alloy_eips::BlockId;
use alloy_primitives::U64;
use alloy_provider::ext::TraceApi;
use alloy_provider::Provider;
use alloy_rpc_types_trace::parity::{Delta, TraceResultsWithTransactionHash};
use protocol::storage::PrivateStorage;

use super::{
    answered, block_participants, system_calls_of, RpcSource, RpcSourceError, SYSTEM_CONTRACTS,
};
use crate::sources::changes::{
    add_prestate_diffs, prestate_diff_config, system_slots, ChangeTracer, Changed, Destroyed,
    Missing, SystemCalls, TxDiff, Written,
};

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
            Err(RpcSourceError::Node { message, .. })
                if head == 0 && message.contains("genesis") =>
            {
                Ok(true)
            }
            traced => Ok(answered(traced)?.is_some()),
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
            // Uncles' miners, rewarded outside transactions (before the merge).
            changed.accounts.extend(self.uncle_miners(&block).await?);
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
            let deleted = add_prestate_diffs(&mut changed, traces, |c| listed.holds(c)).map_err(
                |message| RpcSourceError::Reply {
                    method: "debug_traceBlockByNumber",
                    message: format!("block {n}: {message}"),
                },
            )?;
            let cancun = block.header.parent_beacon_block_root.is_some();
            for Destroyed {
                contract,
                recreated,
            } in deleted.into_iter().filter(|_| !cancun)
            {
                if recreated || self.code_at(contract, n).await?.is_empty() {
                    changed.written.destroyed.insert(contract);
                }
            }
            // Contracts the block's transactions created: one the tracer
            // drops (created, and marked destroyed in a frame that
            // reverted) is still read.
            changed.accounts.extend(self.created_contracts(n).await?);
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
        Ok(answered(self.state_diffs(head).await)?.is_some())
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
