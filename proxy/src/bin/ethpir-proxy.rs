//! `ethpir-proxy`: private eth_getBalance / eth_getTransactionCount for any wallet.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use proxy::ProxyConfig;

#[derive(Parser)]
#[command(
    name = "ethpir-proxy",
    version,
    about = "A local JSON-RPC endpoint that reads balances and nonces privately (PIR)",
    long_about = "A local JSON-RPC endpoint for wallets, scripts and cast. eth_getBalance and \
eth_getTransactionCount are answered with private information retrieval queries to an \
ethpir-server, which never learns which address was read. eth_chainId, net_version and \
web3_clientVersion are answered locally; every other method goes to the upstream node you \
configure, or gets -32601. A private method is never sent upstream unless you opt in \
(private_fallback_to_upstream).\n\n\
Quick start (no node needed): the demo binary runs a PIR server over the bundled mainnet \
genesis plus this proxy:\n  cargo run -p demo --profile demo --bin ethpir-demo\n\n\
Then:\n  cast balance --block 0 0x756f45e3fa69347a9a973a725e3c98bc4db0b5a0 --rpc-url http://127.0.0.1:8545"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Log filter.
    #[arg(long, global = true, default_value = "info", env = "ETHPIR_LOG")]
    log: String,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy (the default).
    Serve(ServeArgs),
    /// Answer a file of `address,block` lines privately into a CSV of answers.
    Replay {
        /// Input: one `address,block` per line (block: number, 0x number, tag or hash).
        #[arg(long)]
        input: PathBuf,
        /// Output CSV: address,block,snapshot,balance_wei,nonce,error.
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        serve: ServeArgs,
    },
    /// Let a running proxy send private queries again after it stopped them
    /// on a verification failure (only once you trust the PIR server again).
    TrustReset {
        /// The running proxy's address.
        #[arg(long, default_value = "127.0.0.1:8545")]
        listen: SocketAddr,
    },
}

#[derive(Args, Clone, Default)]
struct ServeArgs {
    /// TOML config file (configs/proxy.toml documents every setting).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address wallets connect to (default 127.0.0.1:8545).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// PIR server URL (default http://127.0.0.1:8546).
    #[arg(long)]
    pir_server: Option<String>,
    /// Upstream JSON-RPC node for the non-private methods.
    #[arg(long)]
    upstream: Option<String>,
    /// Setup-data cache directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Chain to serve when the PIR server has several.
    #[arg(long)]
    chain_id: Option<u64>,
    /// A SOCKS5 proxy for all traffic to the PIR server, e.g.
    /// socks5h://127.0.0.1:9050 for Tor (hides your IP address from it).
    #[arg(long)]
    pir_proxy: Option<String>,
    /// A SOCKS5 proxy for the upstream and the send endpoint, e.g.
    /// socks5h://127.0.0.1:9050 for Tor; reads and sends go through it
    /// with credentials of their own (separate Tor circuits).
    #[arg(long)]
    upstream_proxy: Option<String>,
    /// Allow a plain http:// PIR server, or a plain http:// or ws://
    /// upstream, that is not on loopback (anyone on the path could then
    /// rewrite their answers; use https:// and wss://).
    #[arg(long)]
    allow_insecure_transport: bool,
    /// Read snapshots the upstream cannot confirm (no block hash, a block
    /// it does not have after a 12-s wait, no answer) all the same.
    #[arg(long)]
    read_unconfirmed_views: bool,
    /// Which methods may go upstream: auto (the default: only methods that
    /// read no state by address until the PIR server's view is known,
    /// while it holds the whole state and once it was seen holding it),
    /// no-address-reads (only those, always), or all.
    #[arg(long)]
    upstream_methods: Option<proxy::config::UpstreamMethods>,
    /// A web origin (`https://app.example`) whose pages may call the
    /// proxy (granted CORS); repeat for several. Any other page is
    /// refused; browser extension wallets always pass.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// The BalanceChecker contract whose balances(users, tokens) calls are
    /// private when every token is listed or ETH (default: MetaMask's on
    /// mainnet, none on other chains).
    #[arg(long, value_name = "ADDRESS")]
    balance_checker: Option<alloy_primitives::Address>,
    /// An operator whose signature a snapshot needs before it is read
    /// (`ethpir-snapshot attest`); repeat for several.
    #[arg(long = "attester", value_name = "ADDRESS")]
    attesters: Vec<alloy_primitives::Address>,
    /// How many of the attesters must have signed a snapshot (default 1;
    /// 1 to the number of attesters).
    #[arg(long, value_name = "N")]
    attest_quorum: Option<usize>,
}

impl ServeArgs {
    fn config(&self) -> Result<ProxyConfig> {
        let mut c = match &self.config {
            Some(p) => ProxyConfig::from_file(p)?,
            None => ProxyConfig::default(),
        };
        if let Some(v) = self.listen {
            c.listen = v;
        }
        if let Some(v) = &self.pir_server {
            c.pir_server = v.clone();
        }
        if let Some(v) = &self.upstream {
            c.upstream = Some(v.clone());
        }
        if let Some(v) = &self.cache_dir {
            c.cache_dir = v.clone();
        }
        if let Some(v) = self.chain_id {
            c.chain_id = Some(v);
        }
        if self.allow_insecure_transport {
            c.allow_insecure_transport = true;
        }
        if self.read_unconfirmed_views {
            c.read_unconfirmed_views = true;
        }
        if let Some(v) = &self.pir_proxy {
            c.pir_proxy = Some(v.clone());
        }
        if let Some(v) = &self.upstream_proxy {
            c.upstream_proxy = Some(v.clone());
        }
        if let Some(v) = self.upstream_methods {
            c.upstream_methods = v;
        }
        if !self.cors_origins.is_empty() {
            c.cors_origins = self.cors_origins.clone();
        }
        if let Some(v) = self.balance_checker {
            c.balance_checker = Some(v);
        }
        if !self.attesters.is_empty() {
            c.attesters = self.attesters.clone();
        }
        if let Some(v) = self.attest_quorum {
            c.attest_quorum = v;
        }
        Ok(c)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    protocol::logging::init(&cli.log)?;
    let kernel = pir_core::kernel::init_from_env().context(pir_core::kernel::KERNEL_ENV)?;
    tracing::debug!(%kernel, "PIR product kernel");
    match cli.command {
        None => serve(cli.serve).await,
        Some(Command::Serve(args)) => serve(args).await,
        Some(Command::TrustReset { listen }) => trust_reset(listen).await,
        Some(Command::Replay {
            input,
            output,
            serve,
        }) => {
            let config = serve.config()?;
            config.check_transport()?;
            let reader = ethpir_client::PrivateReader::start(&config.client()).await?;
            if reader.views().is_empty() {
                bail!("no snapshots available from {}", config.pir_server);
            }
            let summary =
                proxy::replay::replay(&reader, &input, &output, &mut progress_lines()).await?;
            eprintln!(
                "replay: {} answered, {} failed -> {}",
                summary.answered,
                summary.failed,
                output.display()
            );
            if summary.failed > 0 {
                std::process::exit(2);
            }
            Ok(())
        }
    }
}

/// `trust-reset`: asks the running proxy to trust its PIR server again
/// (`ethpir_trustReset` over its WebSocket endpoint).
async fn trust_reset(listen: SocketAddr) -> Result<()> {
    use proxy::api::EthpirApiClient;
    let client = jsonrpsee::ws_client::WsClientBuilder::default()
        .build(format!("ws://{listen}"))
        .await
        .with_context(|| format!("no proxy answers on {listen}"))?;
    let reply = client.trust_reset().await.context("the proxy refused")?;
    match reply.was_distrusted {
        Some(reason) => println!("private reads resumed (they had stopped: {reason})"),
        None => println!("private reads were not stopped"),
    }
    Ok(())
}

/// Replay progress on stderr: a line at most every 2 seconds, and the last.
fn progress_lines() -> impl FnMut(usize, usize) + Send {
    let start = std::time::Instant::now();
    let mut shown = start;
    move |done, total| {
        let now = std::time::Instant::now();
        if done == total || now.duration_since(shown).as_secs_f64() >= 2.0 {
            shown = now;
            let pct = if total == 0 {
                100.0
            } else {
                100.0 * done as f64 / total as f64
            };
            eprintln!(
                "replay: {done}/{total} queries ({pct:.0}%), {:.1} s",
                now.duration_since(start).as_secs_f64()
            );
        }
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let config = args.config()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    proxy::serve_on(listener, config, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
