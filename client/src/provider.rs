//! An alloy provider whose `get_balance` and `get_transaction_count` are
//! private: they are answered by a [`PrivateReader`] (PIR queries to an
//! `ethpir-server`, which never learns the address), at any block form the
//! call names. Everything else goes to the inner provider, unchanged.
//!
//! ```
//! # // The demo's data: a PIR server over the bundled mainnet genesis.
//! # #[tokio::main(flavor = "multi_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let store = snapshotter::SnapshotStore::open(dir.path().join("store"))?;
//! # let genesis = snapshotter::sources::genesis::mainnet();
//! # let options = snapshotter::pipeline::BuildOptions { progress: None, ..Default::default() };
//! # snapshotter::pipeline::build_and_publish(&store, genesis, &options)?;
//! # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let pir_server = format!("http://{}", listener.local_addr()?);
//! # let config = server::ServerConfig {
//! #     store: dir.path().join("store"),
//! #     listen: listener.local_addr()?,
//! #     ..Default::default()
//! # };
//! # tokio::spawn(server::serve_on(listener, config, std::future::pending()));
//! # let node = "http://127.0.0.1:9".to_string(); // no node: only private calls below
//! use alloy_eips::BlockId;
//! use alloy_primitives::U256;
//! use alloy_provider::{Provider, ProviderBuilder};
//! use ethpir_client::provider::PrivateLayer;
//! use ethpir_client::{ClientConfig, PrivateReader};
//!
//! let reader = PrivateReader::start(&ClientConfig {
//!     pir_server, // e.g. "http://127.0.0.1:8546", the demo's
//!     cache_dir: dir.path().join("cache"),
//!     ..Default::default()
//! })
//! .await?;
//! let provider = ProviderBuilder::new()
//!     .layer(PrivateLayer::new(reader))
//!     .connect_http(node.parse()?);
//! let who = "0x756f45e3fa69347a9a973a725e3c98bc4db0b5a0".parse()?;
//! let genesis = BlockId::number(0);
//! let wei = provider.get_balance(who).block_id(genesis).await?; // private
//! let nonce = provider.get_transaction_count(who).block_id(genesis).await?; // private
//! assert_eq!(wei, U256::from(200u64) * U256::from(10u64).pow(U256::from(18u64)));
//! assert_eq!(nonce, 0);
//! # Ok(())
//! # }
//! ```
//!
//! A read the snapshots cannot answer fails (it never falls back to the
//! inner provider, which would learn the address).

use std::marker::PhantomData;
use std::sync::Arc;

use alloy_eips::BlockId;
use alloy_primitives::{Address, U256, U64};
use alloy_provider::network::{Ethereum, Network};
use alloy_provider::transport::{TransportErrorKind, TransportResult};
use alloy_provider::{
    PendingTransactionBuilder, Provider, ProviderCall, ProviderLayer, RootProvider, RpcWithBlock,
    SendableTx,
};

use crate::{AccountState, BlockSelector, PrivateReader};

/// The layer: `ProviderBuilder::new().layer(PrivateLayer::new(reader))`.
#[derive(Clone)]
pub struct PrivateLayer {
    reader: Arc<PrivateReader>,
}

impl PrivateLayer {
    pub fn new(reader: Arc<PrivateReader>) -> Self {
        PrivateLayer { reader }
    }
}

impl<P: Provider<N>, N: Network> ProviderLayer<P, N> for PrivateLayer {
    type Provider = PrivateProvider<P, N>;

    fn layer(&self, inner: P) -> Self::Provider {
        PrivateProvider::new(inner, self.reader.clone())
    }
}

/// A provider with private balance and nonce reads.
#[derive(Clone)]
pub struct PrivateProvider<P, N = Ethereum> {
    inner: P,
    reader: Arc<PrivateReader>,
    _network: PhantomData<fn() -> N>,
}

impl<P, N> PrivateProvider<P, N> {
    pub fn new(inner: P, reader: Arc<PrivateReader>) -> Self {
        PrivateProvider {
            inner,
            reader,
            _network: PhantomData,
        }
    }

    /// The reader behind the private calls (status, traffic, trust).
    pub fn reader(&self) -> &Arc<PrivateReader> {
        &self.reader
    }
}

/// Reads one account privately at `block`.
async fn read(
    reader: Arc<PrivateReader>,
    block: BlockId,
    address: Address,
) -> TransportResult<AccountState> {
    let selector = BlockSelector::from(block);
    reader
        .lookup(&selector, &[address])
        .await
        .pop()
        .expect("one result per address")
        .map_err(TransportErrorKind::custom)
}

#[cfg_attr(not(target_family = "wasm"), async_trait::async_trait)]
impl<P: Provider<N>, N: Network> Provider<N> for PrivateProvider<P, N> {
    fn root(&self) -> &RootProvider<N> {
        self.inner.root()
    }

    fn get_balance(&self, address: Address) -> RpcWithBlock<Address, U256, U256> {
        let reader = self.reader.clone();
        RpcWithBlock::new_provider(move |block| {
            let read = read(reader.clone(), block, address);
            ProviderCall::BoxedFuture(Box::pin(async move { read.await.map(|s| s.balance) }))
        })
    }

    fn get_transaction_count(
        &self,
        address: Address,
    ) -> RpcWithBlock<Address, U64, u64, fn(U64) -> u64> {
        let reader = self.reader.clone();
        RpcWithBlock::new_provider(move |block| {
            let read = read(reader.clone(), block, address);
            ProviderCall::BoxedFuture(Box::pin(async move { read.await.map(|s| s.nonce) }))
        })
    }

    /// Sends go through the inner provider's own path (its fillers and
    /// wallet), not straight to the root.
    async fn send_transaction_internal(
        &self,
        tx: SendableTx<N>,
    ) -> TransportResult<PendingTransactionBuilder<N>> {
        self.inner.send_transaction_internal(tx).await
    }
}
