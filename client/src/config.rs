//! What a [`crate::PrivateReader`] needs to know: the server, the chain,
//! the cache, the pool, the traffic shape, and the bounds on everything
//! the server may send.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Settings of a private reader.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The PIR server (ethpir-server).
    pub pir_server: String,
    /// Chain to read when the PIR server has snapshots of several.
    pub chain_id: Option<u64>,
    /// Where setup data is cached, checked against its digest on load.
    pub cache_dir: PathBuf,
    /// Prepared queries kept ready per snapshot.
    pub prepared_pool: usize,
    /// Between catalog refreshes.
    pub refresh: Duration,
    pub timeouts: Timeouts,
    /// What a PIR server's setup may ask of this client.
    pub limits: Limits,
    /// Allow a plain `http://` PIR server that is not on loopback.
    pub allow_insecure_transport: bool,
    /// Every batch of queries has exactly this many (1: no padding).
    pub pad_batches_to: usize,
    /// Queries of keys whose answer is known mixed into every request, so
    /// that a server altering answers is caught (docs/security.md, "Blind
    /// shifts"). With padding, the fillers are canaries too.
    pub canaries_per_request: usize,
    /// Of each base, the codes most of its accounts have, downloaded when
    /// it is opened (0: none; see docs/security.md, "Code").
    pub prefetch_codes: usize,
    /// Lookups of random addresses at Poisson times (0: none).
    pub cover_lookups_per_hour: f64,
    /// A SOCKS5 proxy for all traffic to the PIR server.
    pub pir_proxy: Option<String>,
    /// A new connection to the PIR server for every request.
    pub fresh_connection_per_lookup: bool,
    /// Whose signatures a snapshot needs before it is read.
    pub attest: AttestPolicy,
}

/// The attestations a snapshot needs before it is read: `quorum` valid
/// signatures (EIP-712, [`protocol::attest`]) over its manifest by
/// distinct `attesters`. No attesters: none needed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttestPolicy {
    pub attesters: Vec<alloy_primitives::Address>,
    pub quorum: usize,
}

impl AttestPolicy {
    /// Whether the policy asks for anything.
    pub fn required(&self) -> bool {
        !self.attesters.is_empty() && self.quorum > 0
    }

    /// How many distinct listed attesters signed `entry`'s manifest
    /// validly.
    pub fn signed(&self, entry: &protocol::CatalogEntry) -> usize {
        let mut seen = Vec::new();
        for a in &entry.attestations {
            if self.attesters.contains(&a.signer)
                && !seen.contains(&a.signer)
                && a.verify(&entry.manifest).is_ok()
            {
                seen.push(a.signer);
            }
        }
        seen.len()
    }

    /// Whether `entry` carries the quorum.
    pub fn holds(&self, entry: &protocol::CatalogEntry) -> bool {
        self.short_of_quorum(entry).is_none()
    }

    /// How many valid signatures `entry` carries when they are short of
    /// the quorum (each checked once); `None` when it holds.
    pub fn short_of_quorum(&self, entry: &protocol::CatalogEntry) -> Option<usize> {
        if !self.required() {
            return None;
        }
        let signed = self.signed(entry);
        (signed < self.quorum).then_some(signed)
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            pir_server: "http://127.0.0.1:8546".into(),
            chain_id: None,
            cache_dir: default_cache_dir(),
            prepared_pool: 4,
            refresh: Duration::from_secs(1),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            allow_insecure_transport: false,
            pad_batches_to: 1,
            canaries_per_request: 1,
            prefetch_codes: 16,
            cover_lookups_per_hour: 0.0,
            pir_proxy: None,
            fresh_connection_per_lookup: false,
            attest: AttestPolicy::default(),
        }
    }
}

/// How long a peer may take. Each bounds one stage of a request, so that
/// a server that stalls, or sends one byte a second, is given up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// To open the TCP (and TLS) connection.
    pub connect: Duration,
    /// From sending the request to the response's headers.
    pub first_byte: Duration,
    /// The whole of a small request: catalog, query, upstream call.
    pub request: Duration,
    /// The whole of a setup or table download (they may be hundreds of
    /// MiB).
    pub download: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(30),
            request: Duration::from_secs(30),
            download: Duration::from_secs(600),
        }
    }
}

/// The cache directory when none is configured: `$XDG_CACHE_HOME/ethpir`
/// or `~/.cache/ethpir`.
pub fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("ethpir")
}

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

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("pir_server {url}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("the PIR server {0} is plain http:// off this machine: anyone on the path could rewrite its answers. Use https://, or --allow-insecure-transport (allow_insecure_transport = true) if you accept that")]
    Insecure(String),
    #[error("pir_proxy must be a socks5:// or socks5h:// URL (socks5h resolves names at the proxy, as Tor needs)")]
    ProxyScheme,
    #[error("pir_proxy {url}: {reason}")]
    BadProxy { url: String, reason: String },
    #[error("HTTP client: {0}")]
    Http(String),
}

impl ClientConfig {
    /// Refuses a plain-HTTP PIR server off loopback unless allowed: anyone
    /// on the path could rewrite responses and their checksums.
    pub fn check_transport(&self) -> Result<(), ConfigError> {
        if !self.pir_server.starts_with("http://") {
            return Ok(());
        }
        let redacted = protocol::url::redact(&self.pir_server);
        let url = url::Url::parse(&self.pir_server).map_err(|e| ConfigError::BadUrl {
            url: redacted.clone(),
            reason: e.to_string(),
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
        Err(ConfigError::Insecure(redacted))
    }

    /// The HTTP client for the PIR server: the connect timeout, through
    /// `pir_proxy` when set, and without connection reuse when
    /// `fresh_connection_per_lookup`. Body limits and the other timeouts
    /// are [`crate::fetch`]'s, per request.
    pub fn pir_http_client(&self) -> Result<reqwest::Client, ConfigError> {
        let mut b = api_client::http_builder().connect_timeout(self.timeouts.connect);
        if let Some(url) = &self.pir_proxy {
            if !url.starts_with("socks5://") && !url.starts_with("socks5h://") {
                return Err(ConfigError::ProxyScheme);
            }
            let proxy = reqwest::Proxy::all(url.as_str()).map_err(|e| ConfigError::BadProxy {
                url: protocol::url::redact(url),
                reason: e.without_url().to_string(),
            })?;
            b = b.proxy(proxy);
        }
        if self.fresh_connection_per_lookup {
            b = b.pool_max_idle_per_host(0);
        }
        b.build()
            .map_err(|e| ConfigError::Http(e.without_url().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signature counts only when it is a listed attester's, over this
    /// very manifest, once per attester.
    #[test]
    fn attestations_count_for_their_manifest_and_listed_signers() {
        use alloy_signer::SignerSync;
        let signer: alloy_signer_local::PrivateKeySigner =
            "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
                .parse()
                .unwrap();
        let mut entry = protocol::testing::entry(1, 9, protocol::SnapshotKind::Full, &[]);
        entry.manifest.block_hash = Some(alloy_primitives::B256::repeat_byte(1));
        entry.manifest.state_root = Some(alloy_primitives::B256::repeat_byte(2));
        let hash = protocol::attest::signing_hash(&entry.manifest).unwrap();
        let signed = protocol::attest::Attestation {
            signer: signer.address(),
            signature: signer.sign_hash_sync(&hash).unwrap(),
        };
        let policy = AttestPolicy {
            attesters: vec![signer.address()],
            quorum: 1,
        };
        assert!(!policy.holds(&entry), "no attestation");
        entry.attestations = vec![signed.clone(), signed.clone()];
        assert!(policy.holds(&entry));
        assert_eq!(policy.signed(&entry), 1, "once per attester");
        let two = AttestPolicy {
            quorum: 2,
            ..policy.clone()
        };
        assert!(!two.holds(&entry));
        // The same signature relayed on a forged snapshot (other records,
        // the same block hash and root) does not count.
        let mut forged = entry.clone();
        forged.manifest.content_digest = protocol::sha3_hex(b"forged records");
        assert!(!policy.holds(&forged));
        let stranger = AttestPolicy {
            attesters: vec![alloy_primitives::Address::repeat_byte(7)],
            quorum: 1,
        };
        assert!(!stranger.holds(&entry));
        assert!(AttestPolicy::default().holds(&forged), "nothing required");
    }

    #[test]
    fn plain_http_off_loopback_is_refused_unless_allowed() {
        let with = |url: &str, allow: bool| ClientConfig {
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
}
