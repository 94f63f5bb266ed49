//! A whole-state base from geth over JSON-RPC: `debug_accountRange` at a
//! block, page by page (geth answers at most 256 accounts a page), each
//! account with its code and storage. geth names accounts and slots by
//! their preimages, which it records only with `--cache.preimages` (from
//! its first block): an account it cannot name is refused with that
//! advice; a slot it cannot name it leaves out, and the state root check
//! of the caller ([`RpcSource::export_dump`]) refuses the base.

use alloy_primitives::{Bytes, U64};
use alloy_provider::Provider;

use super::{answered, RpcSource, RpcSourceError};
use crate::sources::dump::{AccountRangePage, Alloc};

/// Accounts asked per page: geth's own bound (`AccountRangeMaxResults`).
const PAGE_ACCOUNTS: u64 = 256;

/// The method, for errors.
const METHOD: &str = "debug_accountRange";

impl RpcSource {
    /// The node's whole state at block `n` from `debug_accountRange`;
    /// `None` when the node has no such method (or refuses it, as
    /// without the `debug` namespace).
    pub(super) async fn account_ranges(&self, n: u64) -> Result<Option<Alloc>, RpcSourceError> {
        let Some(mut page) = answered(self.account_range(n, Bytes::new()).await)? else {
            return Ok(None);
        };
        let mut alloc = Alloc::new();
        loop {
            let next = page.next.take().filter(|k| !k.is_empty());
            let read = page.len();
            page.add_to(&mut alloc).map_err(|e| RpcSourceError::Reply {
                method: METHOD,
                message: e.to_string(),
            })?;
            tracing::debug!(
                block = n,
                read,
                accounts = alloc.len(),
                "account range read"
            );
            let Some(start) = next else {
                return Ok(Some(alloc));
            };
            page = self.account_range(n, start).await?;
        }
    }

    /// One page: accounts from key `start` on, with code and storage, and
    /// accounts without a known address listed too (so that they are
    /// refused, not silently left out).
    async fn account_range(
        &self,
        n: u64,
        start: Bytes,
    ) -> Result<AccountRangePage, RpcSourceError> {
        self.retry(METHOD, Some(n), || {
            let (no_code, no_storage, incompletes) = (false, false, true);
            self.provider.raw_request(
                METHOD.into(),
                (
                    U64::from(n),
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
