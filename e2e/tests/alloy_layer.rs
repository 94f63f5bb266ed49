//! The alloy provider layer a Rust wallet embeds: balances and nonces read
//! through it equal the bundled mainnet genesis (which the inner node, a
//! fresh anvil, does not hold: a private answer cannot have come from it),
//! and every other call reaches the inner provider.

use crate::common;

use alloy_eips::BlockId;
use alloy_primitives::{Address, U256};
use alloy_provider::{Provider, ProviderBuilder};
use common::*;
use ethpir_client::provider::PrivateLayer;
use ethpir_client::{ClientConfig, PrivateReader};
use test_support::Anvil;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alloy_layer_reads_privately_and_forwards_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let pir_server = start_genesis_server(dir.path()).await;
    let node = Anvil::start().await;
    let reader = PrivateReader::start(&ClientConfig {
        pir_server,
        cache_dir: dir.path().join("cache"),
        ..Default::default()
    })
    .await
    .unwrap();
    let provider = ProviderBuilder::new()
        .layer(PrivateLayer::new(reader.clone()))
        .connect_http(node.url.parse().unwrap());

    let genesis = BlockId::number(0);
    for (address, wei) in genesis_balances().iter().step_by(211) {
        let address: Address = address.parse().unwrap();
        let wei = U256::from_str_radix(wei.trim_start_matches("0x"), 16).unwrap();
        let got = provider
            .get_balance(address)
            .block_id(genesis)
            .await
            .unwrap();
        assert_eq!(got, wei, "balance of {address} at block 0");
        assert_eq!(provider.get_balance(address).await.unwrap(), wei, "latest");
        let nonce = provider
            .get_transaction_count(address)
            .block_id(genesis)
            .await
            .unwrap();
        assert_eq!(nonce, 0, "nonce of {address}");
        // The inner node holds none of these accounts.
        assert_eq!(
            provider.root().get_balance(address).await.unwrap(),
            U256::ZERO
        );
    }
    let (sent, received) = reader.lookup_traffic();
    assert!(
        sent > 0 && received > 0,
        "the reads went through PIR lookups"
    );

    // Anything else is the inner provider's: anvil's chain id, not mainnet's.
    assert_eq!(provider.get_chain_id().await.unwrap(), 31337);
    assert_eq!(
        provider.get_block_number().await.unwrap(),
        node.head().await
    );
    let accounts = provider.get_accounts().await.unwrap();
    assert_eq!(accounts.len(), 6, "anvil's dev accounts");

    // A block the snapshots cannot answer is an error, never a fallback
    // to the inner node (which would learn the address).
    let beyond = provider
        .get_balance(accounts[0])
        .block_id(BlockId::number(1_000_000))
        .await;
    assert!(beyond.is_err(), "{beyond:?}");
    node.stop().await;
}
