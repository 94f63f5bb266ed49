//! A database answered from shared bytes (what the server memory-maps)
//! answers exactly as the one built in memory, and row shards' partial
//! answers add up to the whole database's answer, bit for bit, which the
//! client then decodes (or, from the wrong rows, refuses).

use std::sync::Arc;

use pir_core::shard::{combine_answers, shard_rows, slice_query, Shard};
use pir_core::wire::{decode_db_header, encode_db};
use pir_core::{
    AnswerError, ClientError, EncodeOptions, EncodedDb, Expansion, Lookup, PirClient, PirServer,
    PublicMatrix, Query,
};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

struct Fixture {
    records: Vec<(Vec<u8>, Vec<u8>)>,
    whole: PirServer,
    file: Arc<Vec<u8>>,
    rng: ChaCha20Rng,
}

fn fixture(n: usize) -> Fixture {
    let mut rng = ChaCha20Rng::seed_from_u64(n as u64);
    let records: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
        .map(|_| {
            let (mut k, mut v) = (vec![0u8; 20], vec![0u8; 24]);
            rng.fill_bytes(&mut k);
            rng.fill_bytes(&mut v);
            (k, v)
        })
        .collect();
    let db = EncodedDb::encode(&records, 24, &EncodeOptions::default(), &mut rng).unwrap();
    let file = Arc::new(encode_db(&db));
    let whole = PirServer::build_cpu(db, PublicMatrix::new(Expansion::default(), rng.random()));
    Fixture {
        records,
        whole,
        file,
        rng,
    }
}

/// A server over the file's bytes in place, answering `shard`'s rows (or
/// all of them).
fn from_file(f: &Fixture, shard: Option<Shard>) -> PirServer {
    let (shape, offset) = decode_db_header(&f.file).unwrap();
    let rows = match shard {
        Some(s) => s.rows(shape.rows()).unwrap(),
        None => 0..shape.rows(),
    };
    let db = EncodedDb::from_shared(shape, f.file.clone(), offset, rows).unwrap();
    PirServer::from_setup_bytes(db, f.whole.setup_bytes().to_vec()).unwrap()
}

#[test]
fn shared_bytes_answer_exactly_as_memory() {
    let mut f = fixture(3000);
    let mapped = from_file(&f, None);
    let client = PirClient::from_setup_bytes(f.whole.setup_bytes()).unwrap();
    for (key, value) in f.records.iter().take(20) {
        let (query, pending) = client.query(client.prepare(&mut f.rng), key).unwrap();
        let answer = mapped.answer(&query).unwrap();
        assert_eq!(answer, f.whole.answer(&query).unwrap());
        assert_eq!(
            client.decode(pending, &answer).unwrap(),
            Lookup::Found(value.clone())
        );
    }
    // Shared bytes of the wrong length, or rows outside the database, are
    // refused.
    let (shape, offset) = decode_db_header(&f.file).unwrap();
    let rows = shape.rows();
    let short: Arc<Vec<u8>> = Arc::new(f.file[..f.file.len() - 1].to_vec());
    assert!(EncodedDb::from_shared(shape.clone(), short, offset, 0..rows).is_err());
    for bad in [0..rows + 4, 2..rows, 4..4] {
        assert!(EncodedDb::from_shared(shape.clone(), f.file.clone(), offset, bad).is_err());
    }
}

#[test]
fn shards_add_up_to_the_whole_answer() {
    let mut f = fixture(5000);
    let client = PirClient::from_setup_bytes(f.whole.setup_bytes()).unwrap();
    let rows = f.whole.db().shape().rows();
    for count in [1u32, 2, 3, 5] {
        let shards: Vec<(PirServer, std::ops::Range<usize>)> = (0..count)
            .map(|index| {
                let shard = Shard { index, count };
                (from_file(&f, Some(shard)), shard.rows(rows).unwrap())
            })
            .collect();
        for (key, value) in f.records.iter().step_by(997).take(5) {
            let (query, pending) = client.query(client.prepare(&mut f.rng), key).unwrap();
            let parts: Vec<_> = shards
                .iter()
                .map(|(s, r)| s.answer(&slice_query(&query, r.clone())).unwrap())
                .collect();
            let answer = combine_answers(&parts).unwrap();
            assert_eq!(answer, f.whole.answer(&query).unwrap(), "{count} shards");
            assert_eq!(
                client.decode(pending, &answer).unwrap(),
                Lookup::Found(value.clone())
            );
        }
        // A shard takes only queries of its own length.
        let whole_query = Query {
            setup_id: f.whole.setup_id(),
            vector: vec![0; rows],
        };
        if count > 1 {
            assert!(matches!(
                shards[0].0.answer(&whole_query),
                Err(AnswerError::RowCount { .. })
            ));
        }
    }
}

#[test]
fn a_shard_answering_for_other_rows_is_caught() {
    let mut f = fixture(4000);
    let client = PirClient::from_setup_bytes(f.whole.setup_bytes()).unwrap();
    let rows = f.whole.db().shape().rows();
    let (r0, r1) = (
        shard_rows(rows, 0, 3).unwrap(),
        shard_rows(rows, 1, 3).unwrap(),
    );
    assert_eq!(r0.len(), r1.len(), "every shard but the last the same size");
    let shard0 = from_file(&f, Some(Shard { index: 0, count: 3 }));
    let shard1 = from_file(&f, Some(Shard { index: 1, count: 3 }));
    let shard2 = from_file(&f, Some(Shard { index: 2, count: 3 }));
    let (key, _) = &f.records[7];
    let (query, pending) = client.query(client.prepare(&mut f.rng), key).unwrap();
    let r2 = shard_rows(rows, 2, 3).unwrap();
    // Shards 0 and 1 swapped: each answers its slice with the other's rows.
    let parts = [
        shard1.answer(&slice_query(&query, r0.clone())).unwrap(),
        shard0.answer(&slice_query(&query, r1)).unwrap(),
        shard2.answer(&slice_query(&query, r2)).unwrap(),
    ];
    let answer = combine_answers(&parts).unwrap();
    assert_eq!(
        client.decode(pending, &answer),
        Err(ClientError::Corrupted),
        "the sum of wrong rows fails the noise check"
    );
}
