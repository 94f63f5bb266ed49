//! # protocol
//!
//! What the operator's side (snapshotter, server) and the user's side
//! (proxy) must agree on, and nothing else: the HTTP API's JSON types
//! ([`api`]), snapshot manifests and kinds ([`manifest`]), and the account
//! record encoding with its PIR key ([`account`]), the code table its
//! values name codes by ([`codes`]), how snapshots chain
//! into views ([`view`]), small levels published whole ([`table`]) and the framing of a query to several snapshots
//! ([`multi`]), ERC-20 balance slots and the token list ([`tokens`]),
//! storage records of listed contracts beside the accounts ([`storage`]); and the small policies
//! every program shares, each in one place: config loading ([`config`]),
//! URL redaction ([`url`]), what a log line may hold of a wallet's reads
//! ([`redact`]), retry backoff ([`retry`]), logging set-up
//! ([`logging`]). No networking and no
//! PIR math (that is `pir-core`).
#![forbid(unsafe_code)]

pub mod account;
pub mod api;
pub mod attest;
pub mod codes;
#[cfg(feature = "config")]
pub mod config;
pub mod digest;
#[cfg(feature = "logging")]
pub mod logging;
pub mod manifest;
pub mod multi;
pub mod page;
pub mod redact;
pub mod retry;
pub mod routes;
pub mod storage;
pub mod table;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tokens;
pub mod url;
pub mod view;

pub use account::{decode_value, encode_value, pir_key, AccountRecord, AccountValue, CodeRef};
pub use api::{ApiError, Catalog, CatalogEntry};
pub use digest::Sha3Digest;
pub use manifest::{KindTag, Manifest, SnapshotId, SnapshotKind};

/// Seconds since the Unix epoch now (0 on a clock before it): the time
/// stamps of the pages, the proxy's activity and the follower's mark.
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Hex SHA3-256: how manifests name their files' contents, and the
/// catalog's ETag. One definition for the store, the server and the proxy.
pub fn sha3_hex(bytes: &[u8]) -> Sha3Digest {
    Sha3Digest::of(bytes)
}

/// [`sha3_hex`] of everything `reader` yields, read in 1 MiB pieces (a
/// file of gigabytes is hashed without being held), and its length.
pub fn sha3_hex_of_reader(reader: impl std::io::Read) -> std::io::Result<(Sha3Digest, u64)> {
    let mut hashed = Sha3Writer::new(std::io::sink());
    std::io::copy(
        &mut std::io::BufReader::with_capacity(1 << 20, reader),
        &mut hashed,
    )?;
    let (_, digest, bytes) = hashed.finish();
    Ok((digest, bytes))
}

/// A writer that hashes (SHA3-256) and counts what passes through it: a
/// file of gigabytes gets its digest as it is written, never held whole.
pub struct Sha3Writer<W> {
    inner: W,
    hasher: sha3::Sha3_256,
    bytes: u64,
}

impl<W: std::io::Write> Sha3Writer<W> {
    pub fn new(inner: W) -> Self {
        use sha3::Digest;
        Sha3Writer {
            inner,
            hasher: sha3::Sha3_256::new(),
            bytes: 0,
        }
    }

    /// The inner writer, the hex digest and the byte count.
    pub fn finish(self) -> (W, Sha3Digest, u64) {
        use sha3::Digest;
        let digest = Sha3Digest::from_bytes(&self.hasher.finalize().into());
        (self.inner, digest, self.bytes)
    }
}

impl<W: std::io::Write> std::io::Write for Sha3Writer<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use sha3::Digest;
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
