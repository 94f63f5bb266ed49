//! The wire formats: round trips, and no parser panics or accepts damaged
//! input.

use pir_core::wire::{
    decode_db, decode_queries, decode_responses, encode_db, encode_queries, encode_responses,
    SetupData,
};
use pir_core::{
    EncodeOptions, EncodedDb, Expansion, PirServer, PublicMatrix, Query, Response, WireError,
};
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::sync::OnceLock;

fn setup_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let records: Vec<([u8; 4], [u8; 12])> = (0u32..200)
            .map(|i| (i.to_le_bytes(), [i as u8; 12]))
            .collect();
        let db = EncodedDb::encode(&records, 12, &EncodeOptions::default(), &mut rng).unwrap();
        PirServer::build_cpu(db, PublicMatrix::new(Expansion::Aes128Ctr, [9; 32]))
            .setup_bytes()
            .to_vec()
    })
}

#[test]
fn setup_round_trips() {
    let bytes = setup_bytes();
    let setup = SetupData::from_bytes(bytes).unwrap();
    assert_eq!(setup.to_bytes(), bytes);
}

#[test]
fn databases_round_trip_and_damage_is_refused() {
    let mut rng = ChaCha20Rng::seed_from_u64(6);
    let records: Vec<([u8; 4], [u8; 3])> = (0u32..300)
        .map(|i| (i.to_le_bytes(), [i as u8; 3]))
        .collect();
    let db = EncodedDb::encode(&records, 3, &EncodeOptions::default(), &mut rng).unwrap();
    let bytes = encode_db(&db);
    let back = decode_db(&bytes).unwrap();
    assert_eq!(back.shape(), db.shape());
    assert_eq!(back.data(), db.data());
    for cut in [0, 7, 8, 30, bytes.len() - 1] {
        assert!(decode_db(&bytes[..cut]).is_err());
    }
    let mut longer = bytes.clone();
    longer.push(1);
    assert!(decode_db(&longer).is_err());
}

#[test]
fn damaged_responses_fail_their_checksum() {
    let bytes = encode_responses(&[Response {
        elems: vec![1, 2, 3, 0xFFFF_FFFF],
    }]);
    for i in 0..bytes.len() {
        for bit in [0, 7] {
            let mut damaged = bytes.clone();
            damaged[i] ^= 1 << bit;
            assert!(
                decode_responses(&damaged).is_err(),
                "flip of bit {bit} in byte {i} went unnoticed"
            );
        }
    }
}

#[test]
fn every_truncation_and_extension_of_setup_is_refused() {
    let bytes = setup_bytes();
    for cut in 0..bytes.len() {
        assert!(
            SetupData::from_bytes(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert!(matches!(
        SetupData::from_bytes(&longer),
        Err(WireError::Trailing { .. })
    ));
}

/// Offset of the setup's expansion field: header, shape (32 bytes and a
/// filter seed per partition).
fn expansion_offset(setup: &SetupData) -> usize {
    8 + 32 + 8 * setup.shape.filter_seeds.len()
}

/// A version-1 setup (no expansion field) still reads, as TurboSHAKE128;
/// an unknown expansion or a non-zero reserved byte is refused.
#[test]
fn version_one_setups_read_as_turboshake() {
    let v2 = setup_bytes();
    let setup = SetupData::from_bytes(v2).unwrap();
    assert_eq!(setup.matrix.expansion(), Expansion::Aes128Ctr);
    let at = expansion_offset(&setup);
    assert_eq!(v2[at..at + 4], [1, 0, 0, 0]);
    let mut v1 = v2[..at].to_vec();
    v1.extend_from_slice(&v2[at + 4..]);
    v1[4] = 1;
    let old = SetupData::from_bytes(&v1).unwrap();
    assert_eq!(old.matrix.expansion(), Expansion::TurboShake128);
    assert_eq!(old.matrix.seed(), setup.matrix.seed());
    assert_eq!(old.hint, setup.hint);
    for (offset, byte) in [(0, 2), (1, 1), (3, 9)] {
        let mut bad = v2.to_vec();
        bad[at + offset] = byte;
        assert!(
            SetupData::from_bytes(&bad).is_err(),
            "byte {offset} = {byte}"
        );
    }
}

#[test]
fn wrong_version_magic_and_kind_are_refused() {
    for version in [0, 3] {
        let mut bytes = setup_bytes().to_vec();
        bytes[4] = version;
        assert_eq!(
            SetupData::from_bytes(&bytes),
            Err(WireError::Version(version))
        );
    }
    let mut bytes = setup_bytes().to_vec();
    bytes[0] = b'X';
    assert_eq!(SetupData::from_bytes(&bytes), Err(WireError::BadMagic));
    let q = encode_queries(&[Query {
        setup_id: [1; 8],
        vector: vec![1, 2, 3, 4],
    }]);
    assert!(matches!(
        SetupData::from_bytes(&q),
        Err(WireError::Kind { .. })
    ));
    assert!(matches!(decode_responses(&q), Err(WireError::Kind { .. })));
}

#[test]
fn oversized_claims_are_refused_without_allocating() {
    // A query header that claims 2^26 rows x 256 queries but carries none.
    let mut q = encode_queries(&[Query {
        setup_id: [0; 8],
        vector: vec![],
    }]);
    q[16..20].copy_from_slice(&(1u32 << 26).to_le_bytes());
    q[20..24].copy_from_slice(&256u32.to_le_bytes());
    assert!(matches!(
        decode_queries(&q),
        Err(WireError::Truncated { .. })
    ));
    q[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_queries(&q),
        Err(WireError::TooLarge { .. })
    ));
    q[16..20].copy_from_slice(&4u32.to_le_bytes());
    q[20..24].copy_from_slice(&100_000u32.to_le_bytes());
    assert!(matches!(
        decode_queries(&q),
        Err(WireError::TooLarge { .. })
    ));
    let mut setup = setup_bytes().to_vec();
    setup[24..28].copy_from_slice(&u32::MAX.to_le_bytes()); // partitions
    assert!(SetupData::from_bytes(&setup).is_err());
    let mut setup = setup_bytes().to_vec();
    setup[24..28].copy_from_slice(&60_000u32.to_le_bytes()); // partitions, without their seeds
    assert!(SetupData::from_bytes(&setup).is_err());
}

proptest! {
    #[test]
    fn queries_round_trip(rows in 0usize..64, count in 1usize..5, id: [u8; 8], seed: u64) {
        let queries: Vec<Query> = (0..count)
            .map(|c| Query { setup_id: id, vector: (0..rows).map(|r| (seed as u32).wrapping_mul(r as u32 + 1) ^ c as u32).collect() })
            .collect();
        prop_assert_eq!(decode_queries(&encode_queries(&queries)).unwrap(), queries);
    }

    #[test]
    fn responses_round_trip(cols in 0usize..64, count in 0usize..5) {
        let responses: Vec<Response> = (0..count).map(|c| Response { elems: (0..cols as u32).map(|x| x * 7 + c as u32).collect() }).collect();
        prop_assert_eq!(decode_responses(&encode_responses(&responses)).unwrap(), responses);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = SetupData::from_bytes(&bytes);
        let _ = decode_queries(&bytes);
        let _ = decode_responses(&bytes);
    }

    #[test]
    fn random_bytes_after_a_valid_header_never_panic(kind in 1u8..=3, tail in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut bytes = b"EPIR\x01".to_vec();
        bytes.extend_from_slice(&[kind, 0, 0]);
        bytes.extend_from_slice(&tail);
        let _ = SetupData::from_bytes(&bytes);
        let _ = decode_queries(&bytes);
        let _ = decode_responses(&bytes);
    }

    #[test]
    fn corrupted_setup_bytes_never_panic(pos in 0usize..4096, byte: u8) {
        let mut bytes = setup_bytes().to_vec();
        let pos = pos % bytes.len();
        bytes[pos] = byte;
        if let Ok(setup) = SetupData::from_bytes(&bytes) {
            // Whatever parses must also be internally consistent.
            prop_assert_eq!(setup.hint.len(), setup.shape.lwe.dimension as usize * setup.shape.cols());
        }
    }

    #[test]
    fn truncated_queries_are_refused(rows in 1usize..32, cut in 0usize..200) {
        let q = encode_queries(&[Query { setup_id: [3; 8], vector: vec![5; rows] }]);
        let cut = cut % q.len();
        prop_assert!(decode_queries(&q[..cut]).is_err());
    }
}
