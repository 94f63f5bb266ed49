//! The CUDA kernel source, run by the host emulator, against pir-core: the
//! public-matrix expansion against the pinned test vector and the CPU
//! expansion, and the tiled hint against the CPU hint, bit for bit.
#![cfg(feature = "host-emulator")]

use gpu_kernels::emulated;
use pir_core::matrix::{Expansion, PublicMatrix, BLOCK_COLS};
use pir_core::{Arity, EncodeOptions, EncodedDb, Packing};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// Both expansions: the emulated kernel against pir-core's CPU expansion,
/// whole and partial blocks, and against the pinned test vectors (the
/// numbers of docs/protocol.md, repeated here on purpose).
#[test]
fn expansion_matches_test_vectors_and_cpu() {
    let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
    let vectors = [
        (
            Expansion::TurboShake128,
            [3479173850, 2091432971, 797953290, 1503660024],
            [3054147123, 3791263922, 3479251513, 3959923927],
        ),
        (
            Expansion::Aes128Ctr,
            [326635339, 705127538, 334691788, 3444527338],
            [2675786743, 2591749239, 3741962800, 4152148088],
        ),
    ];
    for (expansion, r0_b0, r1773_b5) in vectors {
        let matrix = PublicMatrix::new(expansion, seed);
        // Columns 2 * 2048 .. 2 * 2048 + 3000 (one whole block and a partial one) of 1774 rows.
        let out = emulated::expand(&matrix, 1774, 2 * BLOCK_COLS as u32, 3000);
        let mut block = vec![0u32; BLOCK_COLS];
        for row in [0usize, 1, 77, 1773] {
            matrix.expand_block(row as u32, 2, &mut block);
            assert_eq!(
                &out[row * 3000..row * 3000 + BLOCK_COLS],
                &block[..],
                "{expansion} row {row}"
            );
            matrix.expand_block(row as u32, 3, &mut block[..952]);
            assert_eq!(
                &out[row * 3000 + BLOCK_COLS..(row + 1) * 3000],
                &block[..952],
                "{expansion} row {row} partial block"
            );
        }
        let vector = emulated::expand(&matrix, 1774, 5 * BLOCK_COLS as u32, 4);
        assert_eq!(vector[1773 * 4..1774 * 4], r1773_b5, "{expansion}");
        let first = emulated::expand(&matrix, 1, 0, 4);
        assert_eq!(first, r0_b0, "{expansion}");
        // A width that is not whole AES blocks.
        let odd = emulated::expand(&matrix, 3, 0, 6);
        matrix.expand_block(2, 0, &mut block[..6]);
        assert_eq!(odd[12..18], block[..6], "{expansion} 6 columns");
    }
}

fn random_db(
    n: usize,
    value_bytes: usize,
    arity: Arity,
    packing: Packing,
    rng: &mut ChaCha20Rng,
) -> EncodedDb {
    let records: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
        .map(|_| {
            let mut k = vec![0u8; 20];
            let mut v = vec![0u8; value_bytes];
            rng.fill_bytes(&mut k);
            rng.fill_bytes(&mut v);
            (k, v)
        })
        .collect();
    EncodedDb::encode(
        &records,
        value_bytes,
        &EncodeOptions { arity, packing },
        rng,
    )
    .unwrap()
}

#[test]
fn emulated_hint_equals_cpu_hint() {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    // (keys, value bytes, arity, packing, tile rows, expansion): k = 1 and
    // k > 1, both arities, both expansions, shapes that are not multiples
    // of the tiles, one tile and three (each adding into the sums before
    // it, the third reusing the first's slot of buffers). Two cases: the product is the answer kernels' (their own test
    // covers their shapes), emulated slowly with the public matrix's 1774
    // rows as vectors.
    let cases = [
        (
            300usize,
            13usize,
            Arity::Four,
            Packing::Fixed(3),
            2048usize,
            Expansion::TurboShake128,
        ),
        (
            4200,
            5,
            Arity::Three,
            Packing::Fixed(1),
            2048,
            Expansion::Aes128Ctr,
        ),
    ];
    for (n, value_bytes, arity, packing, tile, expansion) in cases {
        let db = random_db(n, value_bytes, arity, packing, &mut rng);
        let matrix = PublicMatrix::new(expansion, rng.random());
        let tiles = db.shape().rows().div_ceil(tile);
        assert!(tiles == 1 || tiles >= 3, "{n} keys make {tiles} tiles");
        let cpu = pir_core::product::hint_cpu(&db, &matrix, &|_| {});
        let emu = emulated::hint(&db, &matrix, tile);
        assert!(
            cpu == emu,
            "{expansion} hint differs for n={n} value_bytes={value_bytes} {arity:?} {packing:?}"
        );
    }
}

/// The safe launch API checks every buffer before a kernel runs: an
/// undersized one is a panic with a message, never an out-of-bounds write.
#[test]
fn undersized_buffers_are_refused_before_launch() {
    use gpu_kernels::answer::{add_products, AnswerKernel, AnswerShape};
    use gpu_kernels::emulated::Emulator;
    use gpu_kernels::expand;
    let key = [7u8; 32];
    let refused =
        |f: &mut dyn FnMut()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
    assert!(refused(&mut || {
        let mut out = vec![0u32; 10];
        let _ = expand(&Emulator, &key, Expansion::Aes128Ctr, 4, 0, 100, &mut out);
    }));
    // 3 vectors over 16 row groups (64 rows) of a database 32 columns wide.
    let shape = AnswerShape {
        queries: 3,
        groups: 16,
        cols_pad: 32,
        chunk_groups: 32,
        kernel: AnswerKernel::for_batch(3),
    };
    let q = vec![1u32; 3 * 64];
    let d = vec![1i8; 64 * 32];
    let run = |q: &Vec<u32>, d: &Vec<i8>, out_len: usize, shape: AnswerShape| {
        let mut planes = vec![0u32; q.len()];
        let mut out = vec![0u32; out_len];
        add_products(&Emulator, q, &mut planes, d, &mut out, shape).map(|_| out)
    };
    assert!(refused(&mut || {
        let _ = run(&q, &d, 3 * 32 - 1, shape);
    }));
    assert!(refused(&mut || {
        let _ = run(&q, &d[..100].to_vec(), 3 * 32, shape);
    }));
    assert!(refused(&mut || {
        let _ = run(&q[..64].to_vec(), &d, 3 * 32, shape);
    }));
    assert!(refused(&mut || {
        let _ = run(
            &q,
            &d,
            3 * 32,
            AnswerShape {
                chunk_groups: 48,
                ..shape
            },
        );
    }));
    assert!(refused(&mut || {
        let _ = run(
            &q,
            &d,
            3 * 32,
            AnswerShape {
                cols_pad: 24,
                ..shape
            },
        );
    }));
    // The same call with right-sized buffers runs: every entry is 64 rows
    // of 1 x 1.
    let out = run(&q, &d, 3 * 32, shape).unwrap();
    assert!(out.iter().all(|&x| x == 64));
}

/// The answer kernels, emulated, against pir-core's product, bit for bit:
/// single and batched (every kernel, direct and staged, partial query
/// blocks, stages and panel blocks),
/// every last-panel width (16 to 64 columns), row counts that are not
/// whole steps, one chunk and many, a shard's rows, and the extremes
/// (every element at the bottom of the plaintext range, every query entry
/// 2^32 - 1).
#[test]
fn emulated_answers_equal_cpu_answers() {
    use gpu_kernels::answer::AnswerKernel;
    use pir_core::product::multiply_vectors;
    let mut rng = ChaCha20Rng::seed_from_u64(12);
    let cpu = |db: &EncodedDb, vecs: &[Vec<u32>]| {
        let refs: Vec<&[u32]> = vecs.iter().map(|v| v.as_slice()).collect();
        multiply_vectors(db, &refs)
    };
    // (keys, value bytes, packing): last panels 16, 32, 48 and 64 wide.
    let cases = [
        (300usize, 5usize, Packing::Fixed(1)),
        (500, 13, Packing::Fixed(3)),
        (700, 40, Packing::Fixed(2)),
        (900, 20, Packing::Fixed(6)),
    ];
    let mut widths = std::collections::BTreeSet::new();
    for (n, value_bytes, packing) in cases {
        let db = random_db(n, value_bytes, Arity::Three, packing, &mut rng);
        let pad = db.shape().padded_cols();
        widths.insert(pad - (db.panels() - 1) * 64);
        let device = emulated::device_db(&db);
        let rows = db.shape().rows();
        // One query, one more than a narrow block takes, several blocks'
        // worth with the last one partial (of the widest staged kernel's
        // 32 queries too, on one database).
        let counts: &[usize] = if n == 500 {
            &[1, 5, 17, 40]
        } else {
            &[1, 5, 17]
        };
        for &count in counts {
            let vecs: Vec<Vec<u32>> = (0..count)
                .map(|_| (0..rows).map(|_| rng.random()).collect())
                .collect();
            let refs: Vec<&[u32]> = vecs.iter().map(|v| v.as_slice()).collect();
            let want = cpu(&db, &vecs);
            assert!(
                device.answer(&refs).unwrap() == want,
                "n={n} k={packing:?} batch {count}"
            );
            for kernel in AnswerKernel::ALL {
                let (got, _) = device.answer_with(&refs, kernel, Some(32)).unwrap();
                assert!(
                    got == want,
                    "n={n} k={packing:?} batch {count}, {}, chunks of 32 groups",
                    kernel.name()
                );
            }
        }
    }
    assert_eq!(widths.len(), 4, "every last-panel width: {widths:?}");

    // A shard: rows 4 .. 4 + 4g of the last database.
    let db = random_db(900, 20, Arity::Four, Packing::Fixed(2), &mut rng);
    let bytes: pir_core::db::SharedBytes =
        std::sync::Arc::new(db.data().iter().map(|&b| b as u8).collect::<Vec<u8>>());
    let served = 8..(db.shape().rows() / 8) * 4;
    let shard = EncodedDb::from_shared(db.shape().clone(), bytes, 0, served.clone()).unwrap();
    let vecs: Vec<Vec<u32>> = (0..6)
        .map(|_| (0..served.len()).map(|_| rng.random()).collect())
        .collect();
    let refs: Vec<&[u32]> = vecs.iter().map(|v| v.as_slice()).collect();
    assert!(emulated::device_db(&shard).answer(&refs).unwrap() == cpu(&shard, &vecs));

    // The extremes.
    let limit = 1i16 << (db.shape().lwe.plaintext_bits - 1);
    let low =
        EncodedDb::from_parts(db.shape().clone(), vec![-limit as i8; db.data().len()]).unwrap();
    let ones = vec![vec![u32::MAX; low.shape().rows()]; 2];
    let refs: Vec<&[u32]> = ones.iter().map(|v| v.as_slice()).collect();
    assert!(emulated::device_db(&low).answer(&refs).unwrap() == cpu(&low, &ones));
}
