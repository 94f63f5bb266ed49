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
    /// Prepared queries kept ready per snapshot (a new snapshot is first
    /// filled to the largest request so far: `pool`).
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
    /// Without `pad_batches_to`, every request's queries per level are
    /// padded up to the next count of the ladder `n, 2n, 4n, ...` (canaries
    /// where answers are known, random fillers where not), so that its
    /// size says only roughly how many keys it reads (0: no ladder).
    pub pad_queries_ladder: usize,
    /// A read whose keys were all answered before (kept answers) still
    /// sends the request a first read would, random keys in their place,
    /// and answers when it is answered: a page that times the proxy
    /// through a wallet extension cannot tell a kept answer from a fresh
    /// one. Costs a first read's bytes on every read.
    pub answer_kept_as_fresh: bool,
    /// A round answered from kept answers alone waits about as long as a
    /// request would have taken (a delay drawn from recent requests'
    /// times, at least their tenth percentile), so that a page timing the
    /// proxy through a wallet extension cannot tell a kept answer from a
    /// fresh one. Costs no bytes.
    pub kept_answer_delay: bool,
    /// Queries of keys whose answer is known mixed into every request, so
    /// that a server altering answers is caught (docs/security.md, "Blind
    /// shifts"). With padding, the fillers are canaries too.
    pub canaries_per_request: usize,
    /// Of each base, the codes most of its accounts have, downloaded when
    /// it is opened (0: none; see docs/security.md, "Code").
    pub prefetch_codes: usize,
    /// Lookups of random addresses at Poisson times (0: none).
    pub cover_lookups_per_hour: f64,
    /// Whether the hot tier (the state every client reads, published
    /// whole) is downloaded with each view and read with no query.
    pub hot_tier: HotTierUse,
    /// A SOCKS5 proxy for all traffic to the PIR server.
    pub pir_proxy: Option<String>,
    /// A new connection to the PIR server for every request.
    pub fresh_connection_per_lookup: bool,
    /// Whose signatures a snapshot needs before it is read.
    pub attest: AttestPolicy,
    /// With a header source (the proxy's upstream): read a view it cannot
    /// confirm (it does not have the block yet, does not answer, or the
    /// view names no block hash) all the same. Off: such views are not
    /// read (see [`crate::canonical`]).
    pub read_unconfirmed_views: bool,
    /// After this long without a private read the reader goes idle: it
    /// loads no new view (no setup, table or code table downloaded) and
    /// fetches the catalog only every `idle_refresh`; the next read brings
    /// it up to date before it answers. `None`: never idle.
    pub idle_after: Option<Duration>,
    /// Between catalog fetches while idle.
    pub idle_refresh: Duration,
    /// A read of `latest` may be answered from a view already loaded when
    /// it is at most this many blocks older than the catalog's newest
    /// (`None`: always the newest): a wallet back from idle then answers
    /// at once, from a slightly older view, while the newest loads.
    pub max_lag: Option<u64>,
}

/// Whether a reader uses the hot tier (docs/security.md, "The hot
/// tier").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HotTierUse {
    /// Downloaded whole with the view it stands under (as its small
    /// deltas are: every client the same bytes, while not idle), and every
    /// key it holds read from it with no PIR query.
    #[default]
    Ahead,
    /// Never downloaded: every key read by PIR.
    Off,
}

/// When a reader goes idle and what it does then (see
/// [`ClientConfig::idle_after`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    pub after: Option<Duration>,
    pub refresh: Duration,
    pub max_lag: Option<u64>,
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
        !self.attesters.is_empty()
    }

    /// A quorum of 0 with attesters listed (which would read anything) or
    /// one above the distinct attesters listed (which no snapshot can
    /// meet) is a mistake, refused. Without attesters the quorum is unused.
    pub fn check(&self) -> Result<(), ConfigError> {
        let distinct: std::collections::BTreeSet<_> = self.attesters.iter().collect();
        match (distinct.len(), self.quorum) {
            (0, _) => Ok(()),
            (n, q) if q >= 1 && q <= n => Ok(()),
            (n, q) => Err(ConfigError::Quorum {
                quorum: q,
                attesters: n,
            }),
        }
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
            pad_queries_ladder: 2,
            answer_kept_as_fresh: false,
            kept_answer_delay: true,
            canaries_per_request: 1,
            prefetch_codes: 16,
            cover_lookups_per_hour: 0.0,
            hot_tier: HotTierUse::Ahead,
            pir_proxy: None,
            fresh_connection_per_lookup: false,
            attest: AttestPolicy::default(),
            read_unconfirmed_views: false,
            idle_after: Some(Duration::from_secs(600)),
            idle_refresh: Duration::from_secs(60),
            max_lag: None,
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
    /// MiB), at most: a download of `n` bytes is given `first_byte` and
    /// `n` at `min_download_rate`, within this.
    pub download: Duration,
    /// Longest a download may go without a byte (a server that stalls it
    /// is given up on at once, not after `download`).
    pub idle: Duration,
    /// Bytes a second a download is given time for.
    pub min_download_rate: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(30),
            request: Duration::from_secs(30),
            download: Duration::from_secs(600),
            idle: Duration::from_secs(30),
            min_download_rate: 128 * 1024,
        }
    }
}

/// The cache directory when none is configured: `$XDG_CACHE_HOME/ethpir`
/// or `~/.cache/ethpir`; empty when neither variable is set (no shared
/// fallback: the reader then asks for `cache_dir`, see
/// [`ClientConfig::prepare_cache_dir`]).
pub fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|dir| dir.join("ethpir"))
        .unwrap_or_default()
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
    /// Setup data (and whole tables) of all the levels of one view, MiB: a
    /// catalog whose view needs more is not read (it could otherwise ask
    /// for its depth times `max_setup_mib`).
    pub max_view_setup_mib: u64,
}

impl Default for Limits {
    fn default() -> Self {
        let d = pir_core::ClientLimits::default();
        Limits {
            max_rows: d.max_rows,
            max_partitions: d.max_partitions,
            max_setup_mib: d.max_setup_bytes >> 20,
            max_prepared_query_mib: d.max_prepared_bytes >> 20,
            max_view_setup_mib: 1024,
        }
    }
}

impl Limits {
    /// [`Self::max_view_setup_mib`] in bytes.
    pub fn max_view_setup_bytes(&self) -> u64 {
        self.max_view_setup_mib.saturating_mul(1 << 20)
    }

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
    #[error("{setting} must be a socks5:// or socks5h:// URL (socks5h resolves names at the proxy, as Tor needs)")]
    ProxyScheme { setting: &'static str },
    #[error("{setting} {url}: {reason}")]
    BadProxy {
        setting: &'static str,
        url: String,
        reason: String,
    },
    #[error("the upstream {0} is plain http:// or ws:// off this machine: anyone on the path could read the calls and rewrite the block hashes views are checked against. Use https:// or wss://, or --allow-insecure-transport (allow_insecure_transport = true) if you accept that")]
    InsecureUpstream(String),
    #[error("attest_quorum {quorum} with {attesters} distinct attester(s): the quorum must be 1 to the number of attesters")]
    Quorum { quorum: usize, attesters: usize },
    #[error(
        "no cache directory: neither XDG_CACHE_HOME nor HOME is set; set cache_dir (--cache-dir)"
    )]
    NoCacheDir,
    #[error("cache directory {dir}: {reason}")]
    CacheDir { dir: String, reason: String },
    #[error("HTTP client: {0}")]
    Http(String),
}

/// The host of `url` (a parse error names the URL redacted).
fn host_of(url: &str) -> Result<url::Host<String>, ConfigError> {
    let bad = |reason: String| ConfigError::BadUrl {
        url: protocol::url::redact(url),
        reason,
    };
    let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    parsed
        .host()
        .map(|h| h.to_owned())
        .ok_or_else(|| bad("no host".into()))
}

fn is_loopback(host: &url::Host<String>) -> bool {
    match host {
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
        url::Host::Domain(name) => name == "localhost",
    }
}

/// Whether `url` is plain (`http://`, `ws://`) to a host off this machine:
/// anyone on the path could read and rewrite what it carries. The one
/// policy for the PIR server and the proxy's upstream.
pub fn plain_off_loopback(url: &str) -> Result<bool, ConfigError> {
    let plain = url.starts_with("http://") || url.starts_with("ws://");
    Ok(plain && !is_loopback(&host_of(url)?))
}

impl ClientConfig {
    /// The idle settings together.
    pub fn idle_policy(&self) -> IdlePolicy {
        IdlePolicy {
            after: self.idle_after,
            refresh: self.idle_refresh,
            max_lag: self.max_lag,
        }
    }

    /// Creates the cache folder readable by its owner only (mode 0700: the
    /// answers and codes kept there say which accounts the user read), and
    /// narrows an existing one to that; refuses an unset one.
    pub fn prepare_cache_dir(&self) -> Result<(), ConfigError> {
        let dir = &self.cache_dir;
        if dir.as_os_str().is_empty() {
            return Err(ConfigError::NoCacheDir);
        }
        let failed = |e: std::io::Error| ConfigError::CacheDir {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        };
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            builder.mode(0o700);
            builder.create(dir).map_err(failed)?;
            let mode = std::fs::metadata(dir).map_err(failed)?.permissions().mode();
            if mode & 0o077 != 0 {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(failed)?;
            }
        }
        #[cfg(not(unix))]
        builder.create(dir).map_err(failed)?;
        Ok(())
    }

    /// Refuses a plain-HTTP PIR server off loopback unless allowed: anyone
    /// on the path could rewrite responses and their checksums.
    pub fn check_transport(&self) -> Result<(), ConfigError> {
        let url = &self.pir_server;
        if !url.starts_with("http://") {
            return Ok(());
        }
        let host = host_of(url)?;
        // An onion service through Tor is authenticated and encrypted end
        // to end by Tor itself.
        let onion = matches!(&host, url::Host::Domain(name) if name.ends_with(".onion"))
            && self.pir_proxy.is_some();
        if is_loopback(&host) || onion || self.allow_insecure_transport {
            return Ok(());
        }
        Err(ConfigError::Insecure(protocol::url::redact(url)))
    }

    /// The HTTP client for the PIR server: the connect timeout, through
    /// `pir_proxy` when set, and without connection reuse when
    /// `fresh_connection_per_lookup`. Body limits and the other timeouts
    /// are [`crate::fetch`]'s, per request.
    pub fn pir_http_client(&self) -> Result<reqwest::Client, ConfigError> {
        let mut b = api_client::http_builder().connect_timeout(self.timeouts.connect);
        if let Some(url) = &self.pir_proxy {
            b = b.proxy(socks_proxy("pir_proxy", url, None)?);
        }
        if self.fresh_connection_per_lookup {
            b = b.pool_max_idle_per_host(0);
        }
        b.build()
            .map_err(|e| ConfigError::Http(e.without_url().to_string()))
    }
}

/// A SOCKS5 proxy from the URL of `setting`: `socks5://` or `socks5h://`
/// only (never an HTTP proxy, which would see the requests), with
/// `credentials` in place of any the URL names. Tor puts each distinct
/// username and password on a circuit of its own (`IsolateSOCKSAuth`).
pub fn socks_proxy(
    setting: &'static str,
    url: &str,
    credentials: Option<(&str, &str)>,
) -> Result<reqwest::Proxy, ConfigError> {
    let bad = |reason: String| ConfigError::BadProxy {
        setting,
        url: protocol::url::redact(url),
        reason,
    };
    let mut parsed = reqwest::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    if !matches!(parsed.scheme(), "socks5" | "socks5h") {
        return Err(ConfigError::ProxyScheme { setting });
    }
    if let Some((user, password)) = credentials {
        let unusable = || bad("the URL cannot carry credentials".into());
        parsed.set_username(user).map_err(|()| unusable())?;
        parsed
            .set_password(Some(password))
            .map_err(|()| unusable())?;
    }
    reqwest::Proxy::all(parsed.as_str()).map_err(|e| bad(e.without_url().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_must_be_one_to_the_attesters_listed() {
        let a = alloy_primitives::Address::repeat_byte(1);
        let b = alloy_primitives::Address::repeat_byte(2);
        let policy = |attesters: Vec<_>, quorum| AttestPolicy { attesters, quorum };
        assert!(policy(vec![], 0).check().is_ok());
        assert!(policy(vec![a], 1).check().is_ok());
        assert!(policy(vec![a, b], 2).check().is_ok());
        assert!(
            policy(vec![a], 0).check().is_err(),
            "quorum 0 reads anything"
        );
        assert!(policy(vec![a, b], 3).check().is_err(), "never met");
        assert!(policy(vec![a, a], 2).check().is_err(), "one attester twice");
        assert!(policy(vec![], 1).check().is_ok(), "nothing required");
    }

    #[cfg(unix)]
    #[test]
    fn the_cache_folder_is_its_owners_only_and_must_be_set() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        let with = |dir: PathBuf| ClientConfig {
            cache_dir: dir,
            ..Default::default()
        };
        with(dir.clone()).prepare_cache_dir().unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode();
        assert_eq!(mode(&dir) & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        with(dir.clone()).prepare_cache_dir().unwrap();
        assert_eq!(mode(&dir) & 0o777, 0o700, "narrowed");
        assert!(matches!(
            with(PathBuf::new()).prepare_cache_dir(),
            Err(ConfigError::NoCacheDir)
        ));
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
        for (url, plain) in [
            ("http://127.0.0.1:8545", false),
            ("ws://localhost:8545", false),
            ("https://rpc.example/KEY", false),
            ("wss://rpc.example/KEY", false),
            ("http://rpc.example/KEY", true),
            ("ws://10.0.0.2:8546", true),
        ] {
            assert_eq!(plain_off_loopback(url).unwrap(), plain, "{url}");
        }
    }
}
