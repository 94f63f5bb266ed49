//! Catalog entries for tests (feature `testing`): a manifest with only
//! what views and level choices read (chain, block, kind, files) set.

use crate::api::CatalogEntry;
use crate::manifest::{
    BuildStats, FileDigest, Manifest, PirParams, SnapshotId, SnapshotKind, MANIFEST_FORMAT,
};

/// A listed snapshot of `chain` at `block` of `kind`, with `files`.
pub fn entry(
    chain: u64,
    block: u64,
    kind: SnapshotKind,
    files: &[(&str, FileDigest)],
) -> CatalogEntry {
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        chain_id: chain,
        block_number: block,
        block_hash: None,
        state_root: None,
        block_time: None,
        parent_hash: None,
        kind,
        source: String::new(),
        record_count: 1,
        storage_records: 0,
        storage: Default::default(),
        content_digest: Default::default(),
        codes: None,
        common_codes: Vec::new(),
        canaries: Vec::new(),
        created_at: String::new(),
        pir: PirParams {
            arity: 3,
            partitions: 1,
            ..Default::default()
        },
        build: BuildStats::default(),
        files: files
            .iter()
            .map(|(name, digest)| (name.to_string(), digest.clone()))
            .collect(),
    };
    CatalogEntry {
        id: SnapshotId::new(chain, block, &kind),
        manifest,
        attestations: Vec::new(),
    }
}
