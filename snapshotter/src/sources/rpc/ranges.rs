//! A whole-state base from geth over JSON-RPC: `debug_accountRange` at a
//! block, page by page (geth answers at most 256 accounts a page), each
//! account with its code and storage. geth names accounts and slots by
//! their preimages, which it records only with `--cache.preimages` (from
//! its first block): an account it cannot name is refused with that
//! advice, and so is one whose slots do not make the storage root geth
//! gives it (a slot it could not name, left out). The state root check of
//! the caller ([`RpcSource::export_dump`]) then covers the whole.

use alloy_primitives::{Bytes, B256};
use alloy_provider::Provider;

use super::{RpcSource, RpcSourceError};
use crate::sources::dump::{AccountRangePage, Alloc};

/// Accounts asked per page: geth's own bound (`AccountRangeMaxResults`).
const PAGE_ACCOUNTS: u64 = 256;

/// Most records (accounts and slots) a dump may hold: it is held in
/// memory whole (test and development chains; a larger state comes from
/// a reth datadir, streamed).
pub const MAX_RANGE_RECORDS: usize = 1 << 24;

/// The method, for errors.
const METHOD: &str = "debug_accountRange";

impl RpcSource {
    /// The node's whole state at block `n` (pinned to its hash, `hash`)
    /// from `debug_accountRange`; `None` when the node has no such method.
    /// A node whose pages do not move forward, or that hands over more
    /// than [`MAX_RANGE_RECORDS`], is refused.
    pub(super) async fn account_ranges(
        &self,
        n: u64,
        hash: B256,
    ) -> Result<Option<Alloc>, RpcSourceError> {
        let mut page = match self.account_range(n, hash, Bytes::new()).await {
            Err(RpcSourceError::Node { message, .. }) if is_missing_method(&message) => {
                return Ok(None)
            }
            page => page?,
        };
        let (mut alloc, mut records, mut start) = (Alloc::new(), 0, Bytes::new());
        loop {
            let next = page.next.take().filter(|k| !k.is_empty());
            records += page.records();
            if records > MAX_RANGE_RECORDS {
                return Err(refused(format!(
                    "the state passes {MAX_RANGE_RECORDS} records, more than a dump held in memory may: build the base from a reth datadir"
                )));
            }
            let empty = page.is_empty();
            page.add_to(&mut alloc)
                .map_err(|e| refused(e.to_string()))?;
            tracing::debug!(
                block = n,
                records,
                accounts = alloc.len(),
                "account range read"
            );
            let Some(next) = next else {
                return Ok(Some(alloc));
            };
            if empty || next <= start {
                return Err(refused("the pages do not move forward".into()));
            }
            start = next;
            let after = self.account_range(n, hash, start.clone()).await?;
            if after.first_key().is_some_and(|k| k < start.as_ref()) {
                return Err(refused("a page starts before the key asked".into()));
            }
            page = after;
        }
    }

    /// One page: accounts from key `start` on, at block `hash`, with code
    /// and storage, and accounts without a known address listed too (so
    /// that they are refused, not silently left out).
    async fn account_range(
        &self,
        n: u64,
        hash: B256,
        start: Bytes,
    ) -> Result<AccountRangePage, RpcSourceError> {
        self.retry(METHOD, Some(n), || {
            let (no_code, no_storage, incompletes) = (false, false, true);
            self.provider.raw_request(
                METHOD.into(),
                (
                    hash,
                    start.clone(),
                    PAGE_ACCOUNTS,
                    no_code,
                    no_storage,
                    incompletes,
                ),
            )
        })
        .await
    }
}

/// A reply that is not a usable page of the state.
fn refused(message: String) -> RpcSourceError {
    RpcSourceError::Reply {
        method: METHOD,
        message,
    }
}

/// Whether a node's error says it has no such method (geth's words, or a
/// namespace not enabled).
fn is_missing_method(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("does not exist") || m.contains("not available") || m.contains("method not found")
}
