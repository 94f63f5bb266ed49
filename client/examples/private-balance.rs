//! A Rust wallet's private balance read: an alloy provider whose
//! `get_balance` and `get_transaction_count` go to a PIR server, and whose
//! other calls go to an ordinary node.
//!
//! With the demo running (`cargo run -p demo --profile demo --bin
//! ethpir-demo`: a PIR server over the mainnet genesis on 127.0.0.1:8546):
//!
//!     cargo run -p ethpir-client --features alloy --example private-balance -- \
//!         --pir-server http://127.0.0.1:8546 0x756f45e3fa69347a9a973a725e3c98bc4db0b5a0
//!
//! `--node URL` names the node for the other calls (default: the demo's
//! proxy on 127.0.0.1:8545, which answers eth_chainId itself).

use alloy_eips::BlockId;
use alloy_provider::{Provider, ProviderBuilder};
use ethpir_client::provider::PrivateLayer;
use ethpir_client::{ClientConfig, PrivateReader};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut pir_server = "http://127.0.0.1:8546".to_string();
    let mut node = "http://127.0.0.1:8545".to_string();
    let mut addresses = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--pir-server" => pir_server = args.next().ok_or("--pir-server needs a URL")?,
            "--node" => node = args.next().ok_or("--node needs a URL")?,
            address => addresses.push(ethpir_client::parse_address(address)?),
        }
    }
    if addresses.is_empty() {
        return Err("usage: private-balance [--pir-server URL] [--node URL] ADDRESS...".into());
    }
    let reader = PrivateReader::start(&ClientConfig {
        pir_server,
        ..Default::default()
    })
    .await?;
    let provider = ProviderBuilder::new()
        .layer(PrivateLayer::new(reader))
        .connect_http(node.parse()?);
    for address in addresses {
        // The genesis state: block 0 (the demo serves no other block).
        let wei = provider
            .get_balance(address)
            .block_id(BlockId::number(0))
            .await?;
        let nonce = provider
            .get_transaction_count(address)
            .block_id(BlockId::number(0))
            .await?;
        println!("{address}: {wei} wei, nonce {nonce} (read privately)");
    }
    Ok(())
}
