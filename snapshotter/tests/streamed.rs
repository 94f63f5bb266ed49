//! Bases built within a small encoder memory, and bases streamed into
//! `records.bin` without ever being held: the same records file, and
//! every sampled account read back right through PIR.

use alloy_primitives::{Address, U256};
use snapshotter::pipeline::{
    build_and_publish, build_and_publish_streamed, BuildOptions, ExportedState,
};
use snapshotter::records::write_account_stream;
use snapshotter::{AccountRecord, SnapshotKind, SnapshotStore};

fn accounts(n: u64) -> Vec<AccountRecord> {
    let mut records: Vec<AccountRecord> = (0..n)
        .map(|i| {
            let address = Address::from_word(alloy_primitives::keccak256(i.to_le_bytes()));
            AccountRecord::new(address, U256::from(i * 1_000_003), i % 977)
        })
        .collect();
    records.sort_unstable_by_key(|r| r.key);
    records
}

fn base(records: Vec<AccountRecord>) -> ExportedState {
    ExportedState {
        chain_id: 1,
        block_number: 7,
        block_hash: None,
        state_root: None,
        block_time: None,
        parent_hash: None,
        kind: SnapshotKind::Full,
        source: "test".into(),
        records,
        storage: Vec::new(),
        listed: Default::default(),
        export_s: 0.0,
        codes: Vec::new(),
    }
}

/// Options whose encoder holds about `bytes` of records at a time.
fn within(bytes: usize) -> BuildOptions {
    BuildOptions {
        encode_memory_bytes: bytes,
        ..Default::default()
    }
}

#[test]
fn a_streamed_base_in_small_groups_reads_back_like_one_built_whole() {
    let n = 60_000;
    let whole_dir = tempfile::tempdir().unwrap();
    let whole_store = SnapshotStore::open(whole_dir.path()).unwrap();
    let whole = build_and_publish(&whole_store, base(accounts(n)), &within(usize::MAX)).unwrap();
    snapshotter::verify::verify(&whole_store, &whole, 64).unwrap();

    // ~100 KiB of records a group: dozens of passes over records.bin.
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let streamed = build_and_publish_streamed(&store, &base(Vec::new()), &within(100 << 10), |w| {
        write_account_stream(n, accounts(n).into_iter(), w)
    })
    .unwrap();
    assert_eq!(
        streamed.manifest.content_digest,
        whole.manifest.content_digest
    );
    assert_eq!(streamed.manifest.record_count, n);
    assert_eq!(
        streamed.manifest.pir.partitions,
        whole.manifest.pir.partitions
    );
    snapshotter::verify::verify(&store, &streamed, 256).unwrap();
}

#[test]
fn a_stream_out_of_order_or_short_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let mut shuffled = accounts(100);
    shuffled.swap(10, 60);
    for (promised, records) in [(100, shuffled), (101, accounts(100)), (99, accounts(100))] {
        let err = build_and_publish_streamed(&store, &base(Vec::new()), &within(1 << 20), |w| {
            write_account_stream(promised, records.into_iter(), w)
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("order") || text.contains("promised"),
            "{text}"
        );
        assert!(store.list().unwrap().is_empty());
    }
    // Nothing left behind under .staging either.
    let staging = dir.path().join(".staging");
    let left = std::fs::read_dir(&staging).map_or(0, |d| d.count());
    assert_eq!(left, 0, "staged folders left");
}
