//! The proxy's own methods ([`crate::api`]) implemented: the private reads
//! through the PIR reader, a few local ones, and `eth_subscribe` piped to
//! a WebSocket upstream. Everything else is forwarded by [`crate::forward`].

use std::collections::HashSet;
use std::sync::Arc;

use alloy_eips::BlockId;
use alloy_primitives::{Address, Bytes, U256, U64};
use jsonrpsee::core::{async_trait, SubscriptionResult};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use jsonrpsee::{Extensions, PendingSubscriptionSink, RpcModule};
use serde_json::Value;

use crate::api::{
    CheckedAddress, Counters, EthApiServer, EthpirApiServer, LevelRead, LevelStatus,
    NodeInfoApiServer, PrivateReadApiServer, PrivateReads, Status, TrustReset,
};
use crate::error::ProxyError;
use crate::upstream::Upstream;
use ethpir_client::block::{selector, BlockSelector};
use ethpir_client::{AccountState, PrivateReader, ReadError};

/// What the handlers share.
#[derive(Clone)]
pub struct RpcContext {
    pub reader: Arc<PrivateReader>,
    pub upstream: Option<Arc<Upstream>>,
    /// What a widened `logs` subscription may take from the upstream.
    pub log_bounds: crate::config::LogBounds,
}

/// The answer to a private call, read by the middleware before the handler
/// runs (with the batch's other private calls of the same block: one PIR
/// batch), carried in the call's extensions.
#[derive(Clone, Debug)]
pub struct Prefetched(pub Result<AccountState, ReadError>);

/// `[address, block?]` of eth_getBalance / eth_getTransactionCount, read
/// the way the handlers read them.
pub fn private_params(params: &Params) -> Result<(Address, BlockSelector), ErrorObjectOwned> {
    let mut seq = params.sequence();
    let address: CheckedAddress = seq.next()?;
    let block: Option<BlockId> = seq.optional_next()?;
    Ok((address.0, selector(block)))
}

/// The proxy's own methods, one module.
pub fn module(ctx: RpcContext) -> (RpcModule<RpcContext>, HashSet<&'static str>) {
    let mut m = PrivateReadApiServer::into_rpc(ctx.clone());
    let private = m.method_names().collect();
    m.merge(EthApiServer::into_rpc(ctx.clone()))
        .expect("unique method names");
    m.merge(NodeInfoApiServer::into_rpc(ctx.clone()))
        .expect("unique method names");
    m.merge(EthpirApiServer::into_rpc(ctx))
        .expect("unique method names");
    (m, private)
}

#[async_trait]
impl PrivateReadApiServer for RpcContext {
    async fn get_balance(
        &self,
        ext: &Extensions,
        address: CheckedAddress,
        block: Option<BlockId>,
    ) -> Result<U256, ProxyError> {
        let state = self
            .private_read("eth_getBalance", ext, address.0, block)
            .await?;
        Ok(state.balance)
    }

    async fn get_transaction_count(
        &self,
        ext: &Extensions,
        address: CheckedAddress,
        block: Option<BlockId>,
    ) -> Result<U64, ProxyError> {
        let state = self
            .private_read("eth_getTransactionCount", ext, address.0, block)
            .await?;
        Ok(U64::from(state.nonce))
    }

    async fn get_code(
        &self,
        ext: &Extensions,
        address: CheckedAddress,
        block: Option<BlockId>,
    ) -> Result<Bytes, ProxyError> {
        let state = self
            .private_read("eth_getCode", ext, address.0, block)
            .await?;
        Ok(self.reader.code_of(&state).await?)
    }
}

#[async_trait]
impl EthApiServer for RpcContext {
    fn chain_id(&self) -> Result<U64, ProxyError> {
        self.known_chain().map(U64::from)
    }

    async fn subscribe(
        &self,
        pending: PendingSubscriptionSink,
        kind: String,
        options: Option<Value>,
    ) -> SubscriptionResult {
        let Some(upstream) = &self.upstream else {
            pending.reject(ProxyError::SubscriptionsNeedWebSocket).await;
            return Ok(());
        };
        let (params, wanted) = match subscription_params(upstream, kind, options) {
            Ok(asked) => asked,
            Err(e) => {
                pending.reject(e).await;
                return Ok(());
            }
        };
        let mut upstream_sub = match upstream.subscribe(params).await {
            Ok(s) => s,
            Err(e) => {
                pending.reject(e).await;
                return Ok(());
            }
        };
        let sink = pending.accept().await?;
        let mut budget = crate::logs::WidenedBudget::new(self.log_bounds);
        loop {
            tokio::select! {
                item = upstream_sub.next() => match item {
                    Some(Ok(value)) => {
                        // A widened subscription is bounded: past the
                        // budget it is closed with an error, never
                        // thinned out in silence.
                        if wanted.is_some() {
                            budget.take(value.get().len())?;
                        }
                        let asked = wanted.as_ref().is_none_or(|w| {
                            serde_json::from_str::<Value>(value.get()).is_ok_and(|log| w.matches(&log))
                        });
                        if asked {
                            sink.send(value).await?;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "upstream subscription item unreadable");
                        break;
                    }
                    None => break,
                },
                _ = sink.closed() => break,
            }
        }
        Ok(())
    }
}

/// What `eth_subscribe` of `kind` with `options` asks the upstream, and
/// what its notifications are matched against here: a `logs` filter naming
/// an address goes widened where the gate is closed.
fn subscription_params(
    upstream: &Upstream,
    kind: String,
    options: Option<Value>,
) -> Result<(Vec<Value>, Option<crate::logs::LogFilter>), ProxyError> {
    let closed = upstream.gate().openness() != crate::gate::Openness::Open;
    let widened = match (closed, kind.as_str(), &options) {
        (true, "logs", Some(filter)) => {
            crate::logs::widened(filter).map_err(|e| ProxyError::BadParams(e.to_string()))?
        }
        _ => None,
    };
    let (options, wanted) = match widened {
        Some((wide, matcher)) => (Some(wide), Some(matcher)),
        None => (options, None),
    };
    let mut params = vec![Value::String(kind)];
    params.extend(options);
    Ok((params, wanted))
}

impl NodeInfoApiServer for RpcContext {
    fn net_version(&self) -> Result<String, ProxyError> {
        self.known_chain().map(|c| c.to_string())
    }

    fn client_version(&self) -> Result<String, ProxyError> {
        Ok(format!("ethpir-proxy/{}", env!("CARGO_PKG_VERSION")))
    }
}

#[async_trait]
impl EthpirApiServer for RpcContext {
    async fn status(&self, ext: &Extensions) -> Result<Status, ProxyError> {
        let mut status = self.status_now().await;
        // A page reaches the proxy through the wallet extension: what the
        // wallet read shows in the counters, and in which forged tier it
        // caught (the forger chose the key it forged).
        if ext.get::<crate::browser::FromBrowser>().is_some() {
            status.counters = None;
            status.forged_tiers.clear();
        }
        Ok(status)
    }

    fn trust_reset(&self) -> Result<TrustReset, ProxyError> {
        Ok(TrustReset {
            was_distrusted: self.reader.trust_reset(),
        })
    }
}

impl RpcContext {
    /// `ethpir_status`'s answer (also the page's).
    pub async fn status_now(&self) -> Status {
        let chain = self.reader.chain_id().ok().flatten();
        let newest = self.reader.newest_view();
        let status_of = |e: protocol::api::CatalogEntry| LevelStatus {
            id: e.id.url_form(),
            kind: e.manifest.kind.name().to_string(),
            block: e.manifest.block_number,
            records: e.manifest.record_count,
            setup_bytes: e.manifest.pir.hint_bytes,
            read: self.level_read(&e),
        };
        let levels = newest
            .iter()
            .flat_map(|v| v.snapshots.iter().rev())
            .filter_map(|id| self.reader.entry(id))
            .map(status_of)
            .collect();
        let hot = newest
            .as_ref()
            .and_then(|v| self.reader.hot_of(v))
            .map(status_of);
        let (bytes_up, bytes_down) = self.reader.traffic();
        Status {
            chain_id: chain,
            view_block: newest.as_ref().map(|v| v.block),
            complete: newest.as_ref().map(|v| v.complete),
            whole_state: self.reader.holds_whole_state(),
            view_blocks: self.reader.view_blocks(),
            head_block: self.upstream_head().await,
            levels,
            hot,
            forged_tiers: self.reader.forged_tiers(),
            counters: Some(Counters {
                pir_keys: self.reader.pir_keys(),
                bytes_up,
                bytes_down,
                idle: self.reader.is_idle(),
            }),
            private_reads: match self.reader.distrusted() {
                Some(reason) => PrivateReads::Stopped(reason),
                None => PrivateReads::On,
            },
        }
    }

    /// How a level of the newest view is read: as loaded, or (not loaded
    /// yet) as it would be from its size.
    fn level_read(&self, entry: &protocol::api::CatalogEntry) -> LevelRead {
        use ethpir_client::levels::{whole_table_bytes, ReadMode};
        let predicted = || match whole_table_bytes(entry) {
            Some(_) => ReadMode::Whole,
            None => ReadMode::Pir,
        };
        match self.reader.read_mode(&entry.id).unwrap_or_else(predicted) {
            ReadMode::Whole => LevelRead::Whole,
            ReadMode::Merged => LevelRead::Merged,
            ReadMode::Pir => LevelRead::Pir,
        }
    }

    fn known_chain(&self) -> Result<u64, ProxyError> {
        match self.reader.chain_id() {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(ProxyError::ChainUnknown),
            Err(e) => Err(e.into()),
        }
    }

    /// The upstream's head block, if there is an upstream and it answers.
    async fn upstream_head(&self) -> Option<u64> {
        self.upstream.as_ref()?.head().await
    }

    /// One private read: the middleware's answer when it read ahead, else
    /// a lookup of its own.
    async fn private_read(
        &self,
        method: &str,
        ext: &Extensions,
        address: Address,
        block: Option<BlockId>,
    ) -> Result<AccountState, ProxyError> {
        // Fail closed: after a verification failure every private call gets
        // the same error, whatever its block or address.
        if let Some(reason) = self.reader.distrusted() {
            return Err(ReadError::Distrusted(reason).into());
        }
        let outcome = match ext.get::<Prefetched>() {
            Some(done) => done.0.clone(),
            None => self
                .reader
                .lookup(&selector(block), &[address])
                .await
                .pop()
                .expect("one result per address"),
        };
        match &outcome {
            Ok(state) => tracing::info!(snapshot = %state.snapshot, method, "answered privately"),
            Err(e) => {
                tracing::info!(method, error = %protocol::redact::Redacted(e), "private read failed")
            }
        }
        Ok(outcome?)
    }
}
