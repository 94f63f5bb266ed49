//! Snapshot metadata (`manifest.json`) and snapshot ids.

use std::fmt;
use std::str::FromStr;

use alloy_primitives::B256;
use serde::{Deserialize, Serialize};

/// What a snapshot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SnapshotKind {
    /// Every account at the block.
    Full,
    /// The accounts touched in the last `window` blocks up to the block.
    Active { window: u64 },
    /// Chosen accounts at an older block (kept for historical queries).
    Historical,
    /// Every account whose balance or nonce changed in blocks
    /// `(from, block]`, at `block` (emptied accounts as 0/0). It answers
    /// only on top of the view at `from` (see [`crate::view`]).
    Delta { from: u64 },
    /// The hot tier: the current value at `block` of the state many
    /// wallets read (accounts and slots touched by the transactions of at
    /// least `min_senders` distinct senders in the `window` blocks up to
    /// the block, most senders first, ties by key, within `max_mib`), a
    /// rule anyone with the chain's traces can apply again (an attester
    /// does, and signs only the same keys). Every client downloads it whole, so reading
    /// it names nothing. It answers on top of a view's level at its block
    /// (see [`crate::view::hot_for`]), under the deltas above that level;
    /// absent from it means nothing (the levels below are asked).
    Hot {
        window: u64,
        min_senders: u32,
        max_mib: u64,
    },
}

/// A snapshot kind without its parameters: what a snapshot id names.
/// Declared in name order, so ids sort as their names do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KindTag {
    Active,
    Delta,
    Full,
    Historical,
    Hot,
}

impl KindTag {
    pub const ALL: [KindTag; 5] = [
        KindTag::Active,
        KindTag::Delta,
        KindTag::Full,
        KindTag::Historical,
        KindTag::Hot,
    ];

    /// The short name used in directory names, URLs and the catalog.
    pub fn name(self) -> &'static str {
        match self {
            KindTag::Active => "active",
            KindTag::Delta => "delta",
            KindTag::Full => "full",
            KindTag::Historical => "historical",
            KindTag::Hot => "hot",
        }
    }
}

impl fmt::Display for KindTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KindTag {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        KindTag::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!("unknown snapshot kind '{s}' (full, delta, active, historical or hot)")
            })
    }
}

impl SnapshotKind {
    /// Whether a snapshot of this kind is, with its base when a delta, the
    /// whole state at its block (an active set or a historical snapshot
    /// holds a part).
    pub fn is_whole_state(&self) -> bool {
        matches!(self, SnapshotKind::Full | SnapshotKind::Delta { .. })
    }

    /// The kind without its parameters.
    pub fn tag(&self) -> KindTag {
        match self {
            SnapshotKind::Full => KindTag::Full,
            SnapshotKind::Active { .. } => KindTag::Active,
            SnapshotKind::Historical => KindTag::Historical,
            SnapshotKind::Delta { .. } => KindTag::Delta,
            SnapshotKind::Hot { .. } => KindTag::Hot,
        }
    }

    /// The short name used in directory names and the catalog.
    pub fn name(&self) -> &'static str {
        self.tag().name()
    }

    /// Whether an address absent from the snapshot alone has balance 0 and
    /// nonce 0 (a delta is complete only with the view below it).
    pub fn is_complete(&self) -> bool {
        matches!(self, SnapshotKind::Full)
    }
}

/// `<chain id>/<block>-<kind>` (`-<from>` after a delta's kind, since a
/// merged delta ends at the same block as the one-block delta below it):
/// the snapshot's directory below the store root.
///
/// Ids come from peers (a catalog, a URL), so parsing is strict: the
/// canonical form only (decimal numbers without sign or leading zeros),
/// at most [`crate::multi::MAX_ID_LEN`] bytes in URL form, so that a
/// parsed id is always a valid part of a multi-snapshot request, a URL
/// segment and a file name. Serialised in URL form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotId {
    pub chain_id: u64,
    pub block: u64,
    pub kind: KindTag,
    /// A delta's `from` block.
    pub from: Option<u64>,
}

impl SnapshotId {
    pub fn new(chain_id: u64, block: u64, kind: &SnapshotKind) -> Self {
        SnapshotId {
            chain_id,
            block,
            kind: kind.tag(),
            from: match kind {
                SnapshotKind::Delta { from } => Some(*from),
                _ => None,
            },
        }
    }

    /// `<block>-<kind>[-<from>]`: the folder below the chain's.
    pub fn folder(&self) -> String {
        match self.from {
            Some(from) => format!("{}-{}-{from}", self.block, self.kind),
            None => format!("{}-{}", self.block, self.kind),
        }
    }

    /// The id in URLs: `<chain>-<block>-<kind>[-<from>]`.
    pub fn url_form(&self) -> String {
        format!("{}-{}", self.chain_id, self.folder())
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.chain_id, self.folder())
    }
}

impl FromStr for SnapshotId {
    type Err = String;
    /// Accepts `<chain>/<block>-<kind>[-<from>]` and the URL form, each
    /// only as [`SnapshotId`]'s `Display` and `url_form` write it.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            let shown: String = s.chars().take(80).collect();
            format!("'{shown}' is not a snapshot id (<chain>/<block>-<kind>[-<from>])")
        };
        let (chain, rest) = s
            .split_once('/')
            .or_else(|| s.split_once('-'))
            .ok_or_else(bad)?;
        let (block, kind) = rest.split_once('-').ok_or_else(bad)?;
        let (kind, from) = match kind.split_once('-') {
            Some((kind, from)) => (kind, Some(number(from).ok_or_else(bad)?)),
            None => (kind, None),
        };
        let kind: KindTag = kind.parse().map_err(|_| bad())?;
        if (kind == KindTag::Delta) != from.is_some() {
            return Err(bad());
        }
        let id = SnapshotId {
            chain_id: number(chain).ok_or_else(bad)?,
            block: number(block).ok_or_else(bad)?,
            kind,
            from,
        };
        let canonical = id.url_form();
        let as_written = s == canonical || s == id.to_string();
        if !as_written || canonical.len() > crate::multi::MAX_ID_LEN {
            return Err(bad());
        }
        Ok(id)
    }
}

/// A decimal number as ids write it: digits only (no sign), within u64.
fn number(s: &str) -> Option<u64> {
    match !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) {
        true => s.parse().ok(),
        false => None,
    }
}

impl Serialize for SnapshotId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.url_form())
    }
}

/// From the URL form only (what the catalog and views carry).
impl<'de> Deserialize<'de> for SnapshotId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.contains('/') {
            return Err(serde::de::Error::custom(format!(
                "'{s}' is not a snapshot id in URL form"
            )));
        }
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Digest and size of one file of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    pub bytes: u64,
    pub sha3_256: crate::Sha3Digest,
}

/// PIR parameters of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PirParams {
    pub lwe_dimension: u32,
    pub plaintext_bits: u32,
    pub arity: u8,
    /// Packing factor k.
    pub partitions: u32,
    pub rows: u64,
    pub cols: u64,
    pub value_bytes: u32,
    pub segment_length: u32,
    pub segment_count: u32,
    /// SHA3-256 of `setup.bin`: the setup id clients check.
    pub setup_digest: crate::Sha3Digest,
    pub hint_bytes: u64,
    pub query_bytes: u64,
    pub response_bytes: u64,
}

/// Build timings, for operators.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BuildStats {
    pub export_s: f64,
    pub encode_s: f64,
    pub hint_s: f64,
    pub write_s: f64,
    /// `cpu` or `cuda`, and why.
    pub hint_device: String,
}

/// A record of a level published in its manifest: its PIR key and value.
/// A client mixes queries of such keys (canaries) into its requests,
/// indistinguishable from the real ones, and fails closed when one reads
/// anything but this value (docs/security.md, "Blind shifts").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Canary {
    pub key: B256,
    pub value: alloy_primitives::Bytes,
}

/// Canaries a level publishes, chosen from its records by its content
/// digest (the same state gives the same canaries).
pub const CANARIES_PER_BASE: usize = 16;

/// The indices of the canaries among `records` records sorted by key,
/// drawn from the records' digest: distinct, at most
/// [`CANARIES_PER_BASE`].
pub fn canary_indices(content_digest: &crate::Sha3Digest, records: u64) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    for j in 0..(4 * CANARIES_PER_BASE as u64) {
        if out.len() == CANARIES_PER_BASE || out.len() as u64 == records {
            break;
        }
        let mut seed = content_digest.as_str().as_bytes().to_vec();
        seed.extend_from_slice(&j.to_le_bytes());
        let h = alloy_primitives::keccak256(&seed);
        let i = u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) % records.max(1);
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// The name of a level's whole table in a manifest's file list.
pub const TABLE_FILE: &str = "table.bin";

/// What a build's seeds are drawn from: the fields of its manifest that
/// decide how a client reads it.
pub struct SeedInput<'a> {
    pub format: u32,
    pub chain_id: u64,
    pub block_number: u64,
    pub block_hash: Option<B256>,
    pub id: SnapshotId,
    pub records_digest: &'a crate::Sha3Digest,
    pub storage: &'a crate::storage::PrivateStorage,
    pub codes: Option<crate::codes::CodeTable>,
    /// The digest of the level's whole table, when it has one.
    pub table: Option<&'a crate::Sha3Digest>,
}

/// Every seed of a build, drawn from what is built: the same state at the
/// same block gives byte for byte the same database and setup on any
/// machine (anyone with a node can rebuild a snapshot and compare
/// digests). The public matrix's seed is published in the setup, so a
/// client recomputes it from the manifest and compares: a manifest whose
/// format, contracts held, code table, table digest, records digest, chain,
/// block, hash or kind was changed after the build names another seed than
/// its setup has (docs/security.md, "What binds a manifest").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildSeeds {
    /// The root all seeds derive from.
    pub root: B256,
    /// The public matrix's seed (in the setup).
    pub matrix: B256,
}

impl BuildSeeds {
    pub fn of(input: &SeedInput<'_>) -> Self {
        let mut bytes = b"ethpir build seeds v2".to_vec();
        bytes.extend_from_slice(&input.format.to_le_bytes());
        bytes.extend_from_slice(&input.chain_id.to_le_bytes());
        bytes.extend_from_slice(&input.block_number.to_le_bytes());
        bytes.extend_from_slice(input.block_hash.unwrap_or_default().as_slice());
        let id = input.id.to_string();
        bytes.extend_from_slice(&(id.len() as u64).to_le_bytes());
        bytes.extend_from_slice(id.as_bytes());
        bytes.extend_from_slice(input.records_digest.as_str().as_bytes());
        let storage = serde_json::to_vec(input.storage).expect("a contract list serialises");
        bytes.extend_from_slice(alloy_primitives::keccak256(storage).as_slice());
        let (count, root) = input.codes.map_or((0, B256::ZERO), |c| (c.count, c.root));
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(root.as_slice());
        match input.table {
            Some(digest) => {
                bytes.push(1);
                bytes.extend_from_slice(digest.as_str().as_bytes());
            }
            None => bytes.push(0),
        }
        let root = alloy_primitives::keccak256(&bytes);
        let matrix = alloy_primitives::keccak256([root.as_slice(), b"matrix"].concat());
        BuildSeeds { root, matrix }
    }
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub chain_id: u64,
    pub block_number: u64,
    pub block_hash: Option<B256>,
    /// A delta's parent: the hash of block `from`, the block of the level
    /// it stands on, as the node had it when the delta was read. A client
    /// chains a delta only onto a level of that hash ([`crate::view`]), so
    /// that a delta of a new fork never stands on an orphaned level. None
    /// for other kinds, and for deltas of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_hash: Option<B256>,
    pub state_root: Option<B256>,
    /// Block timestamp, seconds since the epoch.
    pub block_time: Option<u64>,
    #[serde(flatten)]
    pub kind: SnapshotKind,
    /// Where the state came from (`genesis:...`, `rpc:...`, `reth:...`).
    pub source: String,
    /// Records of the database: accounts and storage slots together.
    pub record_count: u64,
    /// Of `record_count`, the storage slots.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub storage_records: u64,
    /// The contracts whose storage the snapshot holds (empty: none).
    #[serde(
        default,
        skip_serializing_if = "crate::storage::PrivateStorage::is_empty"
    )]
    pub storage: crate::storage::PrivateStorage,
    /// SHA3-256 of the sorted records (`records.bin`).
    pub content_digest: crate::Sha3Digest,
    /// The distinct codes of the snapshot's accounts, which its values
    /// name by place (format 2; none when no account has code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codes: Option<crate::codes::CodeTable>,
    /// The places in `codes` of the codes most accounts have, most first
    /// (at most [`crate::codes::MAX_COMMON_CODES`]): what a client may
    /// download ahead, so that reading one of them asks nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub common_codes: Vec<u32>,
    /// Records of the level published as canaries (every level from
    /// format 3 on; bases only before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<Canary>,
    /// RFC 3339.
    pub created_at: String,
    pub pir: PirParams,
    pub build: BuildStats,
    pub files: std::collections::BTreeMap<String, FileDigest>,
}

/// Format 4: as format 3, whose build seeds bind the fields that decide
/// how the snapshot is read ([`BuildSeeds`]) and whose every level
/// publishes canaries; a storage word wider than a compact value is held
/// whole, its high part in a record of its own
/// ([`crate::storage::high_part_record`]; format 3 marked it "too wide").
/// Account values are laid out as format 2's
/// ([`crate::account::ValueLayout`]).
pub const MANIFEST_FORMAT: u32 = 4;
/// The oldest format a store still opens (to list, prune or serve it): 1,
/// whose account values carry no code reference
/// ([`crate::account::ValueLayout::Plain`]).
pub const OLDEST_MANIFEST_FORMAT: u32 = 1;
/// The oldest format a client reads: 3. Older manifests leave the fields
/// that decide decoding (the format itself, the contracts held) bound to
/// nothing a client can check, and publish no canaries for deltas.
pub const OLDEST_READ_FORMAT: u32 = 3;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Manifest {
    pub fn id(&self) -> SnapshotId {
        SnapshotId::new(self.chain_id, self.block_number, &self.kind)
    }

    /// The digest of everything a client reads of the manifest: keccak256
    /// of its canonical JSON (fields in declaration order, the file list
    /// sorted) without the build timings (`build`: floats, which JSON does
    /// not carry bit for bit, and read by no client). What an attestation
    /// signs ([`crate::attest`]), so that no field a client acts on can be
    /// changed under a signature.
    pub fn signed_digest(&self) -> B256 {
        let mut canonical = self.clone();
        canonical.build = BuildStats::default();
        let bytes = serde_json::to_vec(&canonical).expect("a manifest serialises");
        alloy_primitives::keccak256(bytes)
    }

    /// The seeds a build of this manifest drew ([`BuildSeeds`]), from the
    /// manifest's own fields: what its setup's public matrix seed must be.
    pub fn build_seeds(&self) -> BuildSeeds {
        BuildSeeds::of(&SeedInput {
            format: self.format,
            chain_id: self.chain_id,
            block_number: self.block_number,
            block_hash: self.block_hash,
            id: self.id(),
            records_digest: &self.content_digest,
            storage: &self.storage,
            codes: self.codes,
            table: self.files.get(TABLE_FILE).map(|f| &f.sha3_256),
        })
    }

    /// How the snapshot's account values are laid out.
    pub fn layout(&self) -> crate::account::ValueLayout {
        crate::account::ValueLayout::of_format(self.format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_both_forms() {
        let id: SnapshotId = "1/0-full".parse().unwrap();
        assert_eq!(id, SnapshotId::new(1, 0, &SnapshotKind::Full));
        assert_eq!(id.url_form().parse::<SnapshotId>().unwrap(), id);
        assert!("1/0-half".parse::<SnapshotId>().is_err());
        assert!("x/0-full".parse::<SnapshotId>().is_err());
        assert!("".parse::<SnapshotId>().is_err());
    }

    #[test]
    fn only_canonical_ids_parse() {
        for bad in [
            "1-+0-full",
            "1-00-full",
            "01-0-full",
            "1-0-full_x",
            "1_0-full",
            "1-0-full/..",
            "../1-0-full",
            "1-0-Full",
            "1-9-delta-+7",
            " 1-0-full",
            "1-0-full ",
            "1/0/full",
            "1-0--full",
            "18446744073709551616-0-full",
        ] {
            assert!(bad.parse::<SnapshotId>().is_err(), "{bad}");
        }
        // Numbers that fit u64 but make the id longer than the wire allows.
        let long = format!("{m}-{m}-delta-{m}", m = u64::MAX);
        assert!(long.parse::<SnapshotId>().is_err());
        let id: SnapshotId = "1-9-delta-7".parse().unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"1-9-delta-7\"");
        assert_eq!(
            serde_json::from_str::<SnapshotId>("\"1-9-delta-7\"").unwrap(),
            id
        );
        assert!(serde_json::from_str::<SnapshotId>("\"1/9-delta-7\"").is_err());
    }

    #[test]
    fn kind_serialises_flat() {
        let v = serde_json::to_value(SnapshotKind::Active { window: 64 }).unwrap();
        assert_eq!(v, serde_json::json!({"kind": "active", "window": 64}));
        let v = serde_json::to_value(SnapshotKind::Delta { from: 7 }).unwrap();
        assert_eq!(v, serde_json::json!({"kind": "delta", "from": 7}));
        let id: SnapshotId = "1/9-delta-7".parse().unwrap();
        assert_eq!(id, SnapshotId::new(1, 9, &SnapshotKind::Delta { from: 7 }));
        assert_eq!(id.url_form(), "1-9-delta-7");
        assert_eq!(id.url_form().parse::<SnapshotId>().unwrap(), id);
        assert!("1/9-delta".parse::<SnapshotId>().is_err());
        assert!("1/9-full-3".parse::<SnapshotId>().is_err());
    }
}
