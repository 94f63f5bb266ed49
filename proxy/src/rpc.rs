//! The JSON-RPC methods the proxy answers itself, as typed jsonrpsee
//! handlers: the private reads (`eth_getBalance`, `eth_getTransactionCount`)
//! through the PIR reader, a few local ones, and `eth_subscribe` piped to a
//! WebSocket upstream. Everything else is forwarded by [`crate::forward`].

use std::sync::Arc;

use alloy_eips::BlockId;
use alloy_primitives::{Address, U64};
use jsonrpsee::types::{ErrorObject, ErrorObjectOwned, Params};
use jsonrpsee::{Extensions, PendingSubscriptionSink, RpcModule};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::upstream::Upstream;
use ethpir_client::block::{selector, BlockSelector};
use ethpir_client::{AccountState, PrivateReader, ReadError};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// No snapshot for the requested block.
pub const NO_SNAPSHOT: i64 = -32001;
/// The account is not in an active/historical snapshot.
pub const NOT_IN_PRIVATE_SET: i64 = -32002;
/// The PIR server could not be reached or refused.
pub const PIR_UNAVAILABLE: i64 = -32003;
/// A private answer did not verify (damaged or altered), now or earlier:
/// private reads from that server are stopped (fail closed).
pub const UNVERIFIABLE: i64 = -32004;
/// The upstream node could not be reached.
pub const UPSTREAM_UNAVAILABLE: i64 = -32005;

/// Methods answered privately.
pub const PRIVATE_METHODS: [&str; 2] = ["eth_getBalance", "eth_getTransactionCount"];

/// A JSON-RPC error object.
pub fn rpc_error(code: i64, message: impl Into<String>, data: Option<Value>) -> ErrorObjectOwned {
    ErrorObject::owned(code as i32, message.into(), data)
}

/// What the handlers share.
pub struct RpcContext {
    pub reader: Arc<PrivateReader>,
    pub upstream: Option<Arc<Upstream>>,
}

/// The answer to a private call of a batch, read ahead of time together
/// with the batch's other private calls of the same snapshot (one PIR
/// batch), carried in the call's extensions.
#[derive(Clone, Debug)]
pub struct Prefetched(pub Result<AccountState, ReadError>);

/// An address parameter: 20 hex bytes in any case; a mixed-case one must
/// carry a valid EIP-55 checksum (alloy's `Address` alone does not check it).
#[derive(Clone, Copy, Debug)]
pub struct CheckedAddress(pub Address);

impl<'de> Deserialize<'de> for CheckedAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_address(&s)
            .map(CheckedAddress)
            .map_err(serde::de::Error::custom)
    }
}

/// `[address, block?]` of eth_getBalance / eth_getTransactionCount.
pub fn private_params(params: &Params) -> Result<(Address, BlockSelector), ErrorObjectOwned> {
    let mut seq = params.sequence();
    let address: CheckedAddress = seq.next()?;
    let block: Option<BlockId> = seq.optional_next()?;
    Ok((address.0, selector(block)))
}

/// The proxy's own methods.
pub fn module(ctx: RpcContext) -> RpcModule<RpcContext> {
    let mut m = RpcModule::new(ctx);
    m.register_async_method("eth_getBalance", |params, ctx, ext| async move {
        ctx.private_read("eth_getBalance", &params, &ext)
            .await
            .map(|s| s.balance)
    })
    .expect("unique method");
    m.register_async_method("eth_getTransactionCount", |params, ctx, ext| async move {
        ctx.private_read("eth_getTransactionCount", &params, &ext)
            .await
            .map(|s| U64::from(s.nonce))
    })
    .expect("unique method");
    m.register_method("eth_chainId", |_, ctx, _| {
        ctx.chain_id().map(|c| format!("{c:#x}"))
    })
    .expect("unique method");
    m.register_method("net_version", |_, ctx, _| {
        ctx.chain_id().map(|c| c.to_string())
    })
    .expect("unique method");
    m.register_async_method(
        "ethpir_status",
        |_, ctx, _| async move { ctx.status().await },
    )
    .expect("unique method");
    m.register_method(
        "ethpir_trustReset",
        |_, ctx, _| json!({ "wasDistrusted": ctx.reader.trust_reset() }),
    )
    .expect("unique method");
    m.register_method("web3_clientVersion", |_, _, _| {
        format!("ethpir-proxy/{}", env!("CARGO_PKG_VERSION"))
    })
    .expect("unique method");
    m.register_subscription(
        "eth_subscribe",
        "eth_subscription",
        "eth_unsubscribe",
        |params, pending, ctx, _| async move { ctx.pipe_subscription(params, pending).await },
    )
    .expect("unique method");
    m
}

impl RpcContext {
    fn chain_id(&self) -> Result<u64, ErrorObjectOwned> {
        match self.reader.chain_id() {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(rpc_error(
                PIR_UNAVAILABLE,
                "no snapshot loaded yet: chain unknown",
                None,
            )),
            Err(e) => Err(rpc_error(INTERNAL_ERROR, e.to_string(), None)),
        }
    }

    /// `ethpir_status`: the block `latest` answers from and the levels of
    /// that view, the blocks other views answer, the upstream's head, the
    /// bytes moved and whether private reads are on. Loads nothing.
    async fn status(&self) -> Result<Value, ErrorObjectOwned> {
        let chain = self.reader.chain_id().ok().flatten();
        let views = self.reader.views();
        let newest = protocol::view::newest(&views, chain);
        let head_block = match &self.upstream {
            Some(u) => u
                .call("eth_blockNumber", None)
                .await
                .ok()
                .and_then(|raw| serde_json::from_str::<U64>(raw.get()).ok())
                .map(|n| n.to::<u64>()),
            None => None,
        };
        let levels: Vec<Value> = newest
            .into_iter()
            .flat_map(|v| v.snapshots.iter().rev())
            .filter_map(|id| self.reader.entry(id))
            .map(|e| {
                let m = &e.manifest;
                json!({
                    "id": e.id,
                    "kind": m.kind.name(),
                    "block": m.block_number,
                    "records": m.record_count,
                    "setupBytes": m.pir.hint_bytes,
                    // How the proxy reads it: downloaded whole (a small
                    // delta, no query) or by PIR queries.
                    "read": match ethpir_client::levels::whole_table_bytes(&e) {
                        Some(_) => "whole",
                        None => "pir",
                    },
                })
            })
            .collect();
        let view_blocks: Vec<u64> = views
            .iter()
            .filter(|v| chain.is_none_or(|c| v.chain_id == c))
            .map(|v| v.block)
            .collect();
        let (up, down) = self.reader.traffic();
        Ok(json!({
            "chainId": chain,
            "viewBlock": newest.map(|v| v.block),
            "complete": newest.map(|v| v.complete),
            "viewBlocks": view_blocks,
            "headBlock": head_block,
            "levels": levels,
            "bytesUp": up,
            "bytesDown": down,
            "privateReads": match self.reader.distrusted() {
                Some(reason) => json!({"stopped": reason}),
                None => json!("on"),
            },
        }))
    }

    async fn private_read(
        &self,
        method: &str,
        params: &Params<'_>,
        ext: &Extensions,
    ) -> Result<AccountState, ErrorObjectOwned> {
        let (address, selector) = private_params(params)?;
        // Fail closed: after a verification failure every private call gets
        // the same error, whatever its block or address.
        if let Some(reason) = self.reader.distrusted() {
            return Err(read_error(&ReadError::Distrusted(reason)));
        }
        let outcome = match ext.get::<Prefetched>() {
            Some(done) => done.0.clone(),
            None => self
                .reader
                .lookup(&selector, &[address])
                .await
                .pop()
                .expect("one result per address"),
        };
        match outcome {
            Ok(state) => {
                tracing::info!(snapshot = %state.snapshot, method, "answered privately");
                Ok(state)
            }
            Err(e) => {
                tracing::info!(method, error = %e, "private read failed");
                Err(read_error(&e))
            }
        }
    }

    /// `eth_subscribe`: the same subscription opened upstream, its
    /// notifications relayed until either side closes.
    async fn pipe_subscription(
        &self,
        params: Params<'static>,
        pending: PendingSubscriptionSink,
    ) -> jsonrpsee::core::SubscriptionResult {
        let Some(upstream) = &self.upstream else {
            pending
                .reject(crate::upstream::subscriptions_unavailable())
                .await;
            return Ok(());
        };
        let raw = params
            .as_str()
            .and_then(|s| RawValue::from_string(s.to_string()).ok());
        let mut upstream_sub = match upstream.subscribe(raw).await {
            Ok(s) => s,
            Err(e) => {
                pending.reject(e).await;
                return Ok(());
            }
        };
        let sink = pending.accept().await?;
        loop {
            tokio::select! {
                item = upstream_sub.next() => match item {
                    Some(Ok(value)) => sink.send(value).await?,
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

/// The JSON-RPC error of a failed private read.
pub fn read_error(e: &ReadError) -> ErrorObjectOwned {
    match e {
        ReadError::NoSnapshot {
            requested,
            available,
        } => rpc_error(
            NO_SNAPSHOT,
            format!("no private snapshot for {requested}"),
            Some(json!({"available_blocks": available})),
        ),
        ReadError::NotInPrivateSet { snapshot, kind } => rpc_error(
            NOT_IN_PRIVATE_SET,
            "account not in the private set",
            Some(json!({"snapshot": snapshot, "kind": kind})),
        ),
        ReadError::Backend(reason)
        | ReadError::Retired(reason)
        | ReadError::Setup { reason, .. } => rpc_error(
            PIR_UNAVAILABLE,
            "PIR server unavailable",
            Some(json!(reason)),
        ),
        ReadError::Unverifiable(reason) => rpc_error(
            UNVERIFIABLE,
            "private answer failed verification",
            Some(json!(reason)),
        ),
        ReadError::AmbiguousChain(chains) => {
            rpc_error(INTERNAL_ERROR, e.to_string(), Some(json!(chains)))
        }
        ReadError::Distrusted(reason) => rpc_error(
            UNVERIFIABLE,
            "private reads stopped: the PIR server failed verification; restart the proxy or run `ethpir-proxy trust-reset` once you trust it again",
            Some(json!(reason)),
        ),
    }
}

pub use ethpir_client::parse_address;
