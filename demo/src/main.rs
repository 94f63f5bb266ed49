//! `ethpir-demo`: a PIR snapshot of the bundled mainnet genesis, a PIR
//! server and the proxy, all on loopback. README's first command.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use demo::DemoConfig;

#[derive(Parser)]
#[command(
    name = "ethpir-demo",
    version,
    about = "A PIR server over the bundled Ethereum mainnet genesis plus the proxy, on loopback",
    long_about = "Builds (once) a PIR snapshot of the bundled mainnet genesis (8,893 accounts), \
starts an ethpir-server over it and an ethpir-proxy in front of it, all on loopback. Point a \
wallet or cast at the proxy:\n\n  cast balance --block 0 0x756f45e3fa69347a9a973a725e3c98bc4db0b5a0 \
--rpc-url http://127.0.0.1:8545"
)]
struct Cli {
    /// Where the demo keeps its snapshot store and setup cache.
    #[arg(long, default_value = "./ethpir-demo")]
    dir: PathBuf,
    /// Proxy address.
    #[arg(long, default_value = "127.0.0.1:8545")]
    listen: SocketAddr,
    /// PIR server address.
    #[arg(long, default_value = "127.0.0.1:8546")]
    server_listen: SocketAddr,
    /// Upstream node for non-private methods.
    #[arg(long)]
    upstream: Option<String>,
    /// Log filter.
    #[arg(long, default_value = "info", env = "ETHPIR_LOG")]
    log: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    protocol::logging::init(&cli.log)?;
    let kernel = pir_core::kernel::init_from_env().context(pir_core::kernel::KERNEL_ENV)?;
    tracing::debug!(%kernel, "PIR product kernel");
    demo::run(DemoConfig {
        dir: cli.dir,
        proxy_listen: cli.listen,
        server_listen: cli.server_listen,
        upstream: cli.upstream,
    })
    .await
}
