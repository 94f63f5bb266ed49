//! Proxy settings: `configs/proxy.toml` documents every field.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

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
    /// Seconds before a request to the PIR server or upstream gives up.
    pub request_timeout_secs: u64,
    /// What a PIR server's setup may ask of this proxy.
    pub limits: Limits,
    /// Allow a plain `http://` PIR server that is not on loopback.
    pub allow_insecure_transport: bool,
    /// Which methods may go to the upstream.
    pub upstream_methods: UpstreamMethods,
    /// Every batch of queries sent to the PIR server has exactly this many
    /// (real lookups topped up with lookups of random addresses, larger
    /// batches split), so the server cannot count a wallet's addresses.
    /// 1: no padding.
    pub pad_batches_to: usize,
    /// Lookups of random addresses at random times, sent exactly like real
    /// ones, so the server cannot tell when the user acts. 0: none.
    pub cover_lookups_per_hour: f64,
    /// A SOCKS5 proxy for all traffic to the PIR server
    /// (`socks5h://127.0.0.1:9050` for Tor), so the server does not see the
    /// wallet's IP address.
    pub pir_proxy: Option<String>,
    /// Open a new connection to the PIR server for every request, so that
    /// lookups cannot be linked by their connection.
    pub fresh_connection_per_lookup: bool,
}

/// Which methods may go to the upstream node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamMethods {
    /// Every method the proxy does not answer itself.
    #[default]
    All,
    /// Not the reads that name an address ([`ADDRESS_READS`]): they would
    /// tell the upstream which accounts the wallet holds. Sends and block
    /// or transaction reads still pass.
    NoAddressReads,
}

/// Forwarded reads whose parameters name an address (or, for `eth_call`
/// and `eth_estimateGas`, usually do: `balanceOf(addr)`).
pub const ADDRESS_READS: [&str; 8] = [
    "eth_call",
    "eth_estimateGas",
    "eth_createAccessList",
    "eth_getCode",
    "eth_getStorageAt",
    "eth_getProof",
    "eth_getLogs",
    "eth_newFilter",
];

/// Geometry limits on setups (`[limits]`): a setup beyond any of them is
/// refused, and counts as a verification failure of the server.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Database rows of one snapshot.
    pub max_rows: u64,
    /// Partitions laid side by side (k).
    pub max_partitions: u32,
    /// Setup data (hint) of one snapshot, MiB.
    pub max_setup_mib: u64,
    /// One prepared query, MiB.
    pub max_prepared_query_mib: u64,
}

impl Default for Limits {
    fn default() -> Self {
        let d = pir_core::ClientLimits::default();
        Limits {
            max_rows: d.max_rows,
            max_partitions: d.max_partitions,
            max_setup_mib: d.max_setup_bytes >> 20,
            max_prepared_query_mib: d.max_prepared_bytes >> 20,
        }
    }
}

impl Limits {
    pub fn client_limits(&self) -> pir_core::ClientLimits {
        pir_core::ClientLimits {
            max_rows: self.max_rows,
            max_partitions: self.max_partitions,
            max_setup_bytes: self.max_setup_mib.saturating_mul(1 << 20),
            max_prepared_bytes: self.max_prepared_query_mib.saturating_mul(1 << 20),
        }
    }
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: "127.0.0.1:8545".parse().expect("valid address"),
            pir_server: "http://127.0.0.1:8546".into(),
            upstream: None,
            private_fallback_to_upstream: false,
            chain_id: None,
            cache_dir: default_cache_dir(),
            prepared_pool: 4,
            refresh_secs: 1.0,
            request_timeout_secs: 30,
            limits: Limits::default(),
            allow_insecure_transport: false,
            upstream_methods: UpstreamMethods::All,
            pad_batches_to: 1,
            cover_lookups_per_hour: 0.0,
            pir_proxy: None,
            fresh_connection_per_lookup: false,
        }
    }
}

fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ethpir")
}

impl ProxyConfig {
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Self> {
        Ok(protocol::config::load_toml(path)?)
    }

    /// Refuses a plain-HTTP PIR server off loopback unless allowed: anyone
    /// on the path could rewrite responses and their checksums.
    pub fn check_transport(&self) -> anyhow::Result<()> {
        if !self.pir_server.starts_with("http://") {
            return Ok(());
        }
        let url = url::Url::parse(&self.pir_server).map_err(|e| {
            anyhow::anyhow!(
                "pir_server {}: {e}",
                protocol::url::redact(&self.pir_server)
            )
        })?;
        let host = url.host_str().unwrap_or("");
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(name)) => name == "localhost",
            None => false,
        };
        // An onion service through Tor is authenticated and encrypted end
        // to end by Tor itself.
        let onion = host.ends_with(".onion") && self.pir_proxy.is_some();
        if loopback || onion || self.allow_insecure_transport {
            return Ok(());
        }
        anyhow::bail!(
            "the PIR server {} is plain http:// off this machine: anyone on the path could rewrite its answers. Use https://, or --allow-insecure-transport (allow_insecure_transport = true) if you accept that",
            protocol::url::redact(&self.pir_server)
        )
    }

    /// The HTTP client for the PIR server: through `pir_proxy` when set,
    /// and without connection reuse when `fresh_connection_per_lookup`.
    pub fn pir_http_client(&self) -> anyhow::Result<reqwest::Client> {
        let mut b = reqwest::Client::builder().timeout(self.timeout());
        if let Some(url) = &self.pir_proxy {
            if !url.starts_with("socks5://") && !url.starts_with("socks5h://") {
                anyhow::bail!("pir_proxy must be a socks5:// or socks5h:// URL (socks5h resolves names at the proxy, as Tor needs)");
            }
            b = b.proxy(reqwest::Proxy::all(url.as_str()).map_err(|e| {
                anyhow::anyhow!(
                    "pir_proxy {}: {}",
                    protocol::url::redact(url),
                    e.without_url()
                )
            })?);
        }
        if self.fresh_connection_per_lookup {
            b = b.pool_max_idle_per_host(0);
        }
        Ok(b.build()?)
    }

    pub fn refresh_interval(&self) -> Duration {
        Duration::from_secs_f64(self.refresh_secs.max(0.05))
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn plain_http_off_loopback_is_refused_unless_allowed() {
        let with = |url: &str, allow: bool| ProxyConfig {
            pir_server: url.into(),
            allow_insecure_transport: allow,
            ..Default::default()
        };
        for ok in [
            "http://127.0.0.1:8546",
            "http://localhost:8546",
            "http://[::1]:8546",
            "https://pir.example",
        ] {
            assert!(with(ok, false).check_transport().is_ok(), "{ok}");
        }
        assert!(with("http://pir.example:8546/x", false)
            .check_transport()
            .is_err());
        assert!(with("http://10.0.0.2", false).check_transport().is_err());
        assert!(with("http://pir.example", true).check_transport().is_ok());
    }

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
