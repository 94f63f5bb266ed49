//! Proxy settings: `configs/proxy.toml` documents every field.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use ethpir_client::config::{ClientConfig, Limits, Timeouts};
use protocol::config::seconds;
use serde::Deserialize;

/// Largest response the proxy sends or takes from its upstream (a
/// forwarded `eth_getLogs` can be big).
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// Where wallets connect.
    pub listen: SocketAddr,
    /// The PIR server (ethpir-server).
    pub pir_server: String,
    /// An ordinary JSON-RPC node for every method that is not private.
    /// Without one, those methods get -32601.
    pub upstream: Option<String>,
    /// Where `eth_sendRawTransaction` goes instead of the upstream: a
    /// second endpoint (a private transaction relay, another provider),
    /// over a connection of its own, so that the upstream that serves the
    /// reads never sees a raw transaction (and its sender) on the
    /// connection it ties to this machine's other requests. Nothing else
    /// is ever sent there.
    pub send_upstream: Option<String>,
    /// A SOCKS5 proxy for the upstream and the send endpoint
    /// (`socks5h://127.0.0.1:9050` for Tor), so that neither sees this
    /// machine's IP address. Reads and sends go through it on connections
    /// of their own, each with its own credentials (see
    /// `isolate_upstream_circuits`). HTTP(S) upstreams only.
    pub upstream_proxy: Option<String>,
    /// The SOCKS5 proxy sends go through, where it is not `upstream_proxy`
    /// (another Tor, or the same server with credentials of its own).
    pub send_proxy: Option<String>,
    /// Where a proxy's URL names no credentials, give reads and sends
    /// made-up credentials of their own, new at each start, so that Tor
    /// (`IsolateSOCKSAuth`, its default) carries them on separate circuits.
    /// Off for a SOCKS server that takes no credentials; reads and sends
    /// then share whatever route it gives them.
    pub isolate_upstream_circuits: bool,
    /// After a send through the proxy, answer `eth_getTransactionReceipt`,
    /// `eth_getTransactionByHash` and `eth_getRawTransactionByHash` of its
    /// hash here: the transaction from the bytes sent, the receipt from
    /// `eth_getBlockReceipts` of each new block while one is unfound, so
    /// that the reading upstream never sees the hash (which names the
    /// sender). Off: those calls go upstream by hash.
    pub receipts_by_block: bool,
    /// Send eth_getBalance / eth_getTransactionCount upstream when they
    /// cannot be answered privately (a block with no snapshot, say). This
    /// reveals the address to the upstream: off unless you opt in.
    pub private_fallback_to_upstream: bool,
    /// Chain to serve when the PIR server has snapshots of several.
    pub chain_id: Option<u64>,
    /// Where setup data is cached, checked against its digest on load.
    pub cache_dir: PathBuf,
    /// Prepared queries kept ready per snapshot.
    pub prepared_pool: usize,
    /// Seconds between catalog refreshes (new levels are picked up; an
    /// unchanged catalog costs a 304). Fractions allowed.
    pub refresh_secs: f64,
    /// Seconds a wallet's request at start waits for the PIR server's
    /// first view, or a catalog that says for good there is none (then it
    /// gets -32003, "not ready"); later requests never wait for one.
    /// Fractions allowed; 0: no wait.
    pub start_wait_secs: f64,
    /// Seconds to open a connection to the PIR server or upstream.
    pub connect_timeout_secs: u64,
    /// Seconds before a request to the PIR server or upstream (a catalog,
    /// a query, a forwarded call) gives up, headers and body together.
    pub request_timeout_secs: u64,
    /// Seconds a setup or table download may take as a whole.
    pub download_timeout_secs: u64,
    /// What a PIR server's setup may ask of this proxy.
    pub limits: Limits,
    /// Allow a plain `http://` PIR server, or a plain `http://` or
    /// `ws://` upstream, that is not on loopback.
    pub allow_insecure_transport: bool,
    /// Which methods may go to the upstream.
    pub upstream_methods: UpstreamMethods,
    /// Web origins (`https://app.example`, scheme and host and port as a
    /// browser sends them) whose pages may call the proxy, granted CORS.
    /// Every other page is refused (403), WebSocket included; browser
    /// extensions (`chrome-extension://`, `moz-extension://`) always pass.
    /// Empty: no web page.
    pub cors_origins: Vec<String>,
    /// Most blocks a log filter naming an address may span: it is read
    /// from the upstream widened (no address) and filtered here, so each
    /// block's logs are downloaded whole.
    pub logs_max_blocks: u64,
    /// Most MiB of the upstream's answer to such a widened filter.
    pub logs_max_mib: u64,
    /// Every batch of queries sent to the PIR server has exactly this many
    /// (real lookups topped up with lookups of random addresses, larger
    /// batches split), so the server cannot count a wallet's addresses.
    /// 1: no padding.
    pub pad_batches_to: usize,
    /// Without `pad_batches_to`: every request's queries (per PIR level)
    /// are padded up to the next count of the ladder `n, 2n, 4n, ...`
    /// (canaries where answers are known, random fillers where not), so
    /// that a request says only roughly how many keys it reads. 0: off.
    pub pad_queries_ladder: usize,
    /// A private read whose keys were all read before at this view
    /// (answers kept) still sends the request a first read would (random
    /// keys in their place) and answers when it is answered, so that a web
    /// page timing the proxy through a wallet extension cannot tell which
    /// addresses this wallet read. Costs a first read's PIR bytes on every
    /// read (the steady refresh then costs what the first did).
    pub answer_kept_as_fresh: bool,
    /// A round answered from kept answers alone (no request sent) is
    /// released no sooner than a request would have been (a delay drawn
    /// from recent requests' times, at least their tenth percentile), so
    /// that a page timing the proxy through a wallet extension cannot
    /// tell a kept answer from a fresh one. Costs no bytes.
    pub kept_answer_delay: bool,
    /// Queries of keys whose answer the proxy knows (a base's published
    /// canaries, answers read before) mixed into every request at random
    /// positions: a server that alters answers without knowing which query
    /// is which is caught and private reads stop. With padding, the fillers
    /// are canaries too. 0: none.
    pub canaries_per_request: usize,
    /// Of each base, the codes most of its accounts have (its manifest
    /// lists them), downloaded when the base is opened, so that
    /// `eth_getCode` of one of them asks the server nothing. 0: none.
    pub prefetch_codes: usize,
    /// Lookups of random addresses at random times, sent exactly like real
    /// ones, so the server cannot tell when the user acts. 0: none.
    pub cover_lookups_per_hour: f64,
    /// The hot tier (the state every wallet reads, published whole):
    /// `"ahead"` downloads it with each view and reads its keys with no
    /// PIR query; `"off"` reads every key by PIR (docs/security.md, "The
    /// hot tier").
    pub hot_tier: ethpir_client::config::HotTierUse,
    /// Every `eth_call` executed here that reads anything sends at least
    /// this many rounds, or the next of its doublings past what it needed
    /// (padding rounds fill up), so that the server cannot tell a balance
    /// from an allowance, a quote or a refresh (2, the default: the rounds
    /// those take, measured). 1: no padding.
    pub pad_call_rounds_to: usize,
    /// EVM time one run of a call may take, in milliseconds, before the
    /// request is answered with geth's timeout error (geth's
    /// `--rpc.evmtimeout`, 5 s); a request may take four times that over
    /// all its runs. 0: no limit.
    pub evm_timeout_ms: u64,
    /// A SOCKS5 proxy for all traffic to the PIR server
    /// (`socks5h://127.0.0.1:9050` for Tor), so the server does not see the
    /// wallet's IP address.
    pub pir_proxy: Option<String>,
    /// Open a new connection to the PIR server for every request, so that
    /// lookups cannot be linked by their connection.
    pub fresh_connection_per_lookup: bool,
    /// The token list (`[[token]]` entries) this proxy trusts: a getter
    /// (`balanceOf`, ...) is answered privately only when the catalog's
    /// entry for it (chain, address, function, slot, layout) is the same
    /// as this list's, so that a server naming another slot cannot make the
    /// proxy read the wrong word. Unset: the list shipped with the proxy
    /// (configs/tokens-mainnet.toml, built in; no tokens of other chains).
    pub tokens: Option<PathBuf>,
    /// The BalanceChecker contract (`balances(address[],address[])`) whose
    /// calls are answered privately when every token they name is listed
    /// or ETH. Unset: the chain's known one (MetaMask's on mainnet,
    /// 0xb1f8e55c7f64d203c1400b9d8555d050f94adf39), none elsewhere.
    pub balance_checker: Option<alloy_primitives::Address>,
    /// Operators whose signatures (`ethpir-snapshot attest`) a snapshot
    /// needs before it is read; empty: none needed.
    pub attesters: Vec<alloy_primitives::Address>,
    /// How many distinct `attesters` must have signed a snapshot. A read
    /// whose block has no view of signed snapshots gets an error naming the
    /// missing attestation (never an upstream answer); `latest` is the
    /// newest signed view.
    pub attest_quorum: usize,
    /// Read a view the upstream cannot confirm (it does not have the
    /// block yet after a wait, does not answer, or the view names no block
    /// hash). Off: such views are not read (a view the upstream
    /// contradicts, or of another chain, is never read).
    pub read_unconfirmed_views: bool,
    /// Seconds without a private read after which the proxy goes idle: it
    /// downloads no new level (setups, tables) and fetches the catalog only
    /// every `idle_refresh_secs`; the next private read brings it up to
    /// date first. 0: never idle.
    pub idle_secs: f64,
    /// Seconds between catalog fetches while idle.
    pub idle_refresh_secs: f64,
    /// Answer `latest` from a view already loaded when it is at most this
    /// many blocks older than the newest (unset: always the newest).
    pub max_lag_blocks: Option<u64>,
}

/// The bounds on a widened read.
#[derive(Clone, Copy, Debug)]
pub struct LogBounds {
    pub max_blocks: u64,
    pub max_bytes: usize,
}

/// Which methods may go to the upstream node ([`crate::gate`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamMethods {
    /// As `no-address-reads` until the PIR server's view is known, while
    /// it holds the whole state (its manifest claims every slot of every
    /// contract, so every read runs here), and once this server was seen
    /// holding it (remembered in the cache dir) even if it stops; as
    /// `all` over a server that holds a list.
    #[default]
    Auto,
    /// Every method the proxy does not answer itself (the explicit
    /// opt-out: reads by address name those addresses to the upstream).
    All,
    /// Only methods that read no state by address: blocks, transactions,
    /// receipts, fees and gas prices, sends, chain id, filters and
    /// subscriptions that name no address (`newHeads`). Everything else
    /// (eth_call and every method that takes a call object, storage,
    /// proofs, log filters naming an address) is refused.
    NoAddressReads,
}

/// Reads that name an address (or, for `eth_call` and `eth_estimateGas`,
/// usually do: `balanceOf(addr)`); the gate refuses these and every
/// other method not on its allowlist ([`crate::methods::NO_ADDRESS_METHODS`]).
pub const ADDRESS_READS: [&str; 8] = [
    "eth_call",
    "eth_estimateGas",
    "eth_createAccessList",
    "eth_getStorageAt",
    "eth_getStorageValues",
    "eth_getProof",
    "eth_getLogs",
    "eth_newFilter",
];

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: "127.0.0.1:8545".parse().expect("valid address"),
            pir_server: "http://127.0.0.1:8546".into(),
            upstream: None,
            send_upstream: None,
            upstream_proxy: None,
            send_proxy: None,
            isolate_upstream_circuits: true,
            receipts_by_block: true,
            private_fallback_to_upstream: false,
            chain_id: None,
            cache_dir: ethpir_client::config::default_cache_dir(),
            prepared_pool: 4,
            refresh_secs: 1.0,
            start_wait_secs: 5.0,
            connect_timeout_secs: 10,
            request_timeout_secs: 30,
            download_timeout_secs: 600,
            limits: Limits::default(),
            allow_insecure_transport: false,
            upstream_methods: UpstreamMethods::Auto,
            cors_origins: Vec::new(),
            logs_max_blocks: 256,
            logs_max_mib: 32,
            pad_batches_to: 1,
            pad_queries_ladder: 2,
            answer_kept_as_fresh: false,
            kept_answer_delay: true,
            canaries_per_request: 1,
            prefetch_codes: 16,
            cover_lookups_per_hour: 0.0,
            hot_tier: ethpir_client::config::HotTierUse::Ahead,
            pad_call_rounds_to: 2,
            evm_timeout_ms: 5_000,
            pir_proxy: None,
            fresh_connection_per_lookup: false,
            tokens: None,
            balance_checker: None,
            attesters: Vec::new(),
            attest_quorum: 1,
            read_unconfirmed_views: false,
            idle_secs: 600.0,
            idle_refresh_secs: 60.0,
            max_lag_blocks: None,
        }
    }
}

impl ProxyConfig {
    pub fn from_file(path: &std::path::Path) -> Result<Self, protocol::config::ConfigError> {
        protocol::config::load_toml(path)
    }

    /// Refuses a plain-HTTP PIR server off loopback unless allowed: anyone
    /// on the path could rewrite responses and their checksums. The same for a plain-HTTP (or WebSocket) upstream.
    pub fn check_transport(&self) -> Result<(), ethpir_client::config::ConfigError> {
        use ethpir_client::config::{plain_off_loopback, ConfigError};
        self.client().check_transport()?;
        for url in self.upstream.iter().chain(&self.send_upstream) {
            if !self.allow_insecure_transport && plain_off_loopback(url)? {
                return Err(ConfigError::InsecureUpstream(protocol::url::redact(url)));
            }
        }
        Ok(())
    }

    /// The private reader's part of the settings.
    pub fn client(&self) -> ClientConfig {
        ClientConfig {
            pir_server: self.pir_server.clone(),
            chain_id: self.chain_id,
            cache_dir: self.cache_dir.clone(),
            prepared_pool: self.prepared_pool,
            refresh: self.refresh_interval(),
            timeouts: self.timeouts(),
            limits: self.limits,
            allow_insecure_transport: self.allow_insecure_transport,
            pad_batches_to: self.pad_batches_to,
            pad_queries_ladder: self.pad_queries_ladder,
            answer_kept_as_fresh: self.answer_kept_as_fresh,
            kept_answer_delay: self.kept_answer_delay,
            canaries_per_request: self.canaries_per_request,
            prefetch_codes: self.prefetch_codes,
            cover_lookups_per_hour: self.cover_lookups_per_hour,
            hot_tier: self.hot_tier,
            pir_proxy: self.pir_proxy.clone(),
            fresh_connection_per_lookup: self.fresh_connection_per_lookup,
            attest: ethpir_client::config::AttestPolicy {
                attesters: self.attesters.clone(),
                quorum: self.attest_quorum,
            },
            read_unconfirmed_views: self.read_unconfirmed_views,
            idle_after: (self.idle_secs > 0.0).then(|| seconds(self.idle_secs, 0.0, 1e9)),
            idle_refresh: seconds(self.idle_refresh_secs, 0.05, 1e9),
            max_lag: self.max_lag_blocks,
        }
    }

    /// The bounds on a widened log filter.
    pub fn log_bounds(&self) -> LogBounds {
        LogBounds {
            max_blocks: self.logs_max_blocks.max(1),
            max_bytes: (self
                .logs_max_mib
                .clamp(1, (MAX_RESPONSE_BYTES >> 20) as u64)
                << 20) as usize,
        }
    }

    /// The bounds in time on every peer (PIR server and upstream).
    pub fn timeouts(&self) -> Timeouts {
        let request = Duration::from_secs(self.request_timeout_secs.max(1));
        Timeouts {
            connect: Duration::from_secs(self.connect_timeout_secs.max(1)).min(request),
            first_byte: request,
            request,
            download: Duration::from_secs(self.download_timeout_secs.max(1)),
            idle: request,
            ..Timeouts::default()
        }
    }

    /// The token list the catalog's must agree with: the user's file, or
    /// the shipped one.
    pub fn trusted_tokens(
        &self,
    ) -> Result<protocol::tokens::TokenList, protocol::tokens::TokenListError> {
        match &self.tokens {
            Some(path) => protocol::tokens::TokenList::from_file(path),
            None => Ok(protocol::tokens::TokenList::shipped()),
        }
    }

    /// How long a request at start waits for the first view: at most
    /// the request timeout (a wallet gives up about then).
    pub fn start_wait(&self) -> Duration {
        seconds(
            self.start_wait_secs,
            0.0,
            self.request_timeout_secs.max(1) as f64,
        )
    }

    pub fn refresh_interval(&self) -> Duration {
        seconds(self.refresh_secs, 0.05, 1e9)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn example_config_parses() {
        let c = super::ProxyConfig::from_file(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/proxy.toml"
        )))
        .unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8545");
        assert!(!c.private_fallback_to_upstream);
    }
}
