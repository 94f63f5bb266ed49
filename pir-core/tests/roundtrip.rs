//! End to end through the engine: encode, hint, prepare, query, answer,
//! decode, over random databases of several shapes.

use pir_core::kernel::{reference_product, Kernel, SlicedVec};
use pir_core::product::{hint_cpu_with, multiply};
use pir_core::wire::{decode_queries, decode_responses, encode_queries, encode_responses};
use pir_core::{
    Arity, EncodeOptions, EncodedDb, Expansion, Lookup, Packing, PirClient, PirServer, PublicMatrix,
};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

fn random_db(
    rng: &mut ChaCha20Rng,
    n: usize,
    key_bytes: usize,
    value_bytes: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..n)
        .map(|_| {
            let mut k = vec![0u8; key_bytes];
            let mut v = vec![0u8; value_bytes];
            rng.fill_bytes(&mut k);
            rng.fill_bytes(&mut v);
            (k, v)
        })
        .collect()
}

fn check(n: usize, value_bytes: usize, arity: Arity, packing: Packing, probes: usize) {
    let mut rng = ChaCha20Rng::seed_from_u64(n as u64 * 31 + value_bytes as u64);
    let records = random_db(&mut rng, n, 20, value_bytes);
    let db = EncodedDb::encode(
        &records,
        value_bytes,
        &EncodeOptions { arity, packing },
        &mut rng,
    )
    .unwrap();
    if let Packing::Fixed(k) = packing {
        assert_eq!(db.shape().partitions, k.min(n as u32).max(1));
    }
    // Both expansions of the public matrix, alternating over the shapes.
    let expansion = Expansion::ALL[n % 2];
    let server = PirServer::build_cpu(db, PublicMatrix::new(expansion, rng.random()));
    let client = PirClient::from_setup_bytes(server.setup_bytes()).unwrap();
    assert_eq!(client.setup_id(), server.setup_id());
    assert_eq!(client.setup().matrix.expansion(), expansion);

    // Present keys, one at a time through the wire formats.
    for (key, value) in records.iter().take(probes) {
        let (query, pending) = client.query(client.prepare(&mut rng), key).unwrap();
        let bytes = encode_queries(&[query]);
        assert_eq!(bytes.len(), server.query_bytes(1));
        let (answer, answered) = server.answer_bytes(&bytes).unwrap();
        assert_eq!(answered, 1);
        let responses = decode_responses(&answer).unwrap();
        assert_eq!(
            client.decode(pending, &responses[0]).unwrap(),
            Lookup::Found(value.clone())
        );
    }
    // Absent keys.
    for _ in 0..probes.min(8) {
        let mut key = vec![0u8; 20];
        rng.fill_bytes(&mut key);
        let (query, pending) = client.query(client.prepare(&mut rng), &key).unwrap();
        let response = server.answer(&query).unwrap();
        assert_eq!(client.decode(pending, &response).unwrap(), Lookup::Absent);
    }
    // A batch answers each query as if alone.
    let batch: Vec<_> = records
        .iter()
        .rev()
        .take(5)
        .map(|(k, _)| client.query(client.prepare(&mut rng), k).unwrap())
        .collect();
    let queries: Vec<_> = batch.iter().map(|(q, _)| q.clone()).collect();
    let parsed = decode_queries(&encode_queries(&queries)).unwrap();
    let responses = server.answer_batch(&parsed).unwrap();
    assert_eq!(
        decode_responses(&encode_responses(&responses)).unwrap(),
        responses
    );
    for ((_, pending), (resp, (_, value))) in batch
        .into_iter()
        .zip(responses.iter().zip(records.iter().rev()))
    {
        assert_eq!(
            client.decode(pending, resp).unwrap(),
            Lookup::Found(value.clone())
        );
    }
}

#[test]
fn tiny_databases() {
    for n in [1, 2, 5] {
        check(n, 40, Arity::Three, Packing::default(), n);
        check(n, 40, Arity::Four, Packing::Fixed(1), n);
    }
}

#[test]
fn plain_chalametpir_layout_k1() {
    check(3000, 40, Arity::Three, Packing::Fixed(1), 40);
    check(3000, 40, Arity::Four, Packing::Fixed(1), 40);
}

#[test]
fn square_layout_k_gt_1() {
    check(5000, 40, Arity::Three, Packing::Fixed(7), 40);
    check(5000, 40, Arity::Four, Packing::Fixed(16), 40);
    check(20_000, 40, Arity::Three, Packing::default(), 60);
}

#[test]
fn large_values_and_odd_sizes() {
    check(700, 1024, Arity::Three, Packing::default(), 20);
    check(999, 3, Arity::Four, Packing::Fixed(3), 30);
    check(1001, 0, Arity::Three, Packing::Fixed(2), 30);
}

#[test]
fn fast_product_matches_reference() {
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    for (n, k) in [(300usize, 1u32), (2000, 5), (4000, 30)] {
        let records = random_db(&mut rng, n, 20, 40);
        let db = EncodedDb::encode(
            &records,
            40,
            &EncodeOptions {
                arity: Arity::Three,
                packing: Packing::Fixed(k),
            },
            &mut rng,
        )
        .unwrap();
        let v: Vec<u32> = (0..db.shape().rows()).map(|_| rng.random()).collect();
        let w: Vec<u32> = (0..db.shape().rows()).map(|_| rng.random()).collect();
        let want = [reference_product(&db, &v), reference_product(&db, &w)];
        for kernel in Kernel::supported() {
            let sv = SlicedVec::for_kernel(kernel, &v);
            let sw = SlicedVec::for_kernel(kernel, &w);
            assert_eq!(multiply(&db, &[&sv])[0], want[0], "{kernel}, n {n}, k {k}");
            assert_eq!(
                multiply(&db, &[&sv, &sw]),
                want,
                "{kernel} batch, n {n}, k {k}"
            );
        }
    }
}

/// The hint is the same bytes whichever kernel builds it.
#[test]
fn every_kernel_builds_the_same_hint() {
    let mut rng = ChaCha20Rng::seed_from_u64(8);
    for (n, k, arity) in [(900usize, 1u32, Arity::Three), (2500, 6, Arity::Four)] {
        let records = random_db(&mut rng, n, 20, 40);
        let options = EncodeOptions {
            arity,
            packing: Packing::Fixed(k),
        };
        let db = EncodedDb::encode(&records, 40, &options, &mut rng).unwrap();
        let matrix = PublicMatrix::new(Expansion::ALL[k as usize % 2], rng.random());
        let hints: Vec<(Kernel, Vec<u32>)> = Kernel::supported()
            .into_iter()
            .map(|kernel| (kernel, hint_cpu_with(kernel, &db, &matrix, &|_| {})))
            .collect();
        for (kernel, hint) in &hints[1..] {
            assert!(
                hint == &hints[0].1,
                "{kernel} hint differs from {}",
                hints[0].0
            );
        }
    }
}

#[test]
fn tampered_responses_never_decode_to_a_value() {
    let mut rng = ChaCha20Rng::seed_from_u64(99);
    let records = random_db(&mut rng, 500, 20, 40);
    let db = EncodedDb::encode(&records, 40, &EncodeOptions::default(), &mut rng).unwrap();
    let server = PirServer::build_cpu(db, PublicMatrix::new(Expansion::default(), rng.random()));
    let client = PirClient::from_setup_bytes(server.setup_bytes()).unwrap();
    let delta = client.setup().shape.lwe.delta();
    for trial in 0..40u32 {
        let (key, value) = &records[trial as usize];
        let (query, pending) = client.query(client.prepare(&mut rng), key).unwrap();
        let mut response = server.answer(&query).unwrap();
        let i = rng.random_range(0..response.elems.len());
        // Alternate random noise with a shift by whole plaintext steps.
        let shift = if trial % 2 == 0 {
            rng.random::<u32>() | 1
        } else {
            delta
        };
        response
            .elems
            .iter_mut()
            .skip(i % 3)
            .step_by(3)
            .for_each(|e| *e = e.wrapping_add(shift));
        match client.decode(pending, &response) {
            Ok(Lookup::Found(v)) => {
                assert_eq!(&v, value, "tampering must never yield another value")
            }
            Ok(Lookup::Absent) | Err(_) => {}
        }
    }
}

/// `plan` predicts what `encode` builds: the packing, the plaintext bits and
/// (within the estimate's margin) the rows.
#[test]
fn the_plan_predicts_the_encoded_shape() {
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let records = random_db(&mut rng, 30_000, 20, 24);
    for packing in [
        Packing::Fixed(3),
        Packing::Auto {
            hint_budget_bytes: 4 << 20,
        },
        Packing::ForLookup {
            lookup_bytes: 48 << 10,
            hint_floor_bytes: 1 << 20,
            hint_cap_bytes: 64 << 20,
        },
    ] {
        let options = EncodeOptions {
            arity: Arity::Three,
            packing,
        };
        let plan = pir_core::db::plan(records.len(), 24, &options).unwrap();
        let db = EncodedDb::encode(&records, 24, &options, &mut rng).unwrap();
        let shape = db.shape();
        assert_eq!(plan.partitions, shape.partitions, "{packing:?}");
        assert_eq!(plan.plaintext_bits, shape.lwe.plaintext_bits, "{packing:?}");
        assert_eq!(plan.elems, shape.record_elems(), "{packing:?}");
        let rows = shape.rows() as f64;
        assert!(
            (plan.rows as f64) >= rows && (plan.rows as f64) < rows * 1.1,
            "{packing:?}: planned {} rows, built {rows}",
            plan.rows
        );
    }
}

/// A blind shift (every element of an answer moved by the same multiple
/// of Delta, which the noise check cannot see) is caught on a present
/// key, never read as "absent"; an absent key stays absent.
#[test]
fn blind_shifts_are_caught_not_read_as_absent() {
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let records = random_db(&mut rng, 400, 20, 24);
    let db = EncodedDb::encode(&records, 24, &EncodeOptions::default(), &mut rng).unwrap();
    let server = PirServer::build_cpu(db, PublicMatrix::new(Expansion::default(), rng.random()));
    let client = PirClient::from_setup_bytes(server.setup_bytes()).unwrap();
    let delta = client.setup().shape.lwe.delta();
    let steps = 1u32 << client.setup().shape.lwe.plaintext_bits;
    for trial in 0..20u32 {
        let shift = delta.wrapping_mul(1 + trial % (steps - 1));
        let (key, _) = &records[trial as usize];
        let (query, pending) = client.query(client.prepare(&mut rng), key).unwrap();
        let mut response = server.answer(&query).unwrap();
        response
            .elems
            .iter_mut()
            .for_each(|e| *e = e.wrapping_add(shift));
        assert_eq!(
            client.decode(pending, &response),
            Err(pir_core::ClientError::Shifted),
            "trial {trial}"
        );
        let absent = rng.random::<[u8; 20]>();
        let (query, pending) = client.query(client.prepare(&mut rng), &absent).unwrap();
        let mut response = server.answer(&query).unwrap();
        response
            .elems
            .iter_mut()
            .for_each(|e| *e = e.wrapping_add(shift));
        assert_eq!(client.decode(pending, &response), Ok(Lookup::Absent));
    }
}
