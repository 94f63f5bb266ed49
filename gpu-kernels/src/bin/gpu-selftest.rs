//! `gpu-selftest`: run on a new machine to see whether the GPU kernels work
//! there: finds the driver and device, compiles the kernels, checks the
//! public-matrix expansion against pir-core's test vector, a GPU hint
//! against the CPU hint and GPU answers against the CPU's (every answer
//! kernel, the extremes), bit for bit, and times them; `--bench-answers`
//! times answers from GPU memory at larger sizes. Prints JSON lines.
#![forbid(unsafe_code)]

use std::time::Instant;

#[cfg(feature = "cuda")]
use gpu_kernels::answer::AnswerKernel;

use anyhow::{bail, Result};
use clap::Parser;
use pir_core::{EncodeOptions, EncodedDb, Expansion, Packing, PublicMatrix};
use rand::{Rng, RngCore, SeedableRng};

#[derive(Parser)]
#[command(
    name = "gpu-selftest",
    about = "Check that the CUDA kernels (expansion, hint, answers) work on this machine and match the CPU bit for bit"
)]
struct Args {
    /// log2 of the number of random records in the comparison database.
    #[arg(long, default_value_t = 16)]
    log2_keys: u32,
    /// Value bytes of the random records.
    #[arg(long, default_value_t = 40)]
    value_bytes: usize,
    /// Packing factor (0 = automatic).
    #[arg(long, default_value_t = 0)]
    packing: u32,
    /// Public-matrix expansion of the compared hint (turboshake128 or
    /// aes128-ctr; both are checked against the test vectors regardless).
    #[arg(long, default_value_t = Expansion::default())]
    expansion: Expansion,
    /// Also time answers from GPU memory on databases of 2^N keys of
    /// --value-bytes, packed as pir-bench packs them (random elements of
    /// the shape, no encoding), e.g. `24,26,28`: batches of 1, 8, 16, 32,
    /// 64 and 256 queries (those under 4 GB of queries), every kernel's
    /// answers compared, and the first 16 checked against the CPU.
    #[arg(long, value_delimiter = ',')]
    bench_answers: Vec<u32>,
    /// Repetitions per answer timing (median reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    #[cfg(not(feature = "cuda"))]
    bail!("this build has no CUDA support (feature `cuda` off)");
    #[cfg(feature = "cuda")]
    {
        use gpu_kernels::cuda::{probe, CudaGpu};
        if let Err(why) = probe() {
            println!(
                "{}",
                serde_json::json!({"ok": false, "stage": "probe", "error": why.to_string()})
            );
            bail!("no usable GPU: {why}");
        }
        let gpu = CudaGpu::new()?;
        let (free, total) = gpu.memory()?;
        println!(
            "{}",
            serde_json::json!({"stage": "device", "name": gpu.device_name(), "free_bytes": free, "total_bytes": total})
        );
        let expansion_ok = check_expansions(&gpu)?;
        let uploads_ok = check_uploads(&gpu)?;
        let hint_ok = check_hint(&gpu, &args)?;
        let answers_ok = check_answers(&gpu, &args)?;
        if !expansion_ok || !uploads_ok || !hint_ok || !answers_ok {
            bail!("GPU results differ from the CPU");
        }
        for &log2 in &args.bench_answers {
            if !bench_answers(&gpu, &args, log2)? {
                bail!("GPU answers differ from the CPU at 2^{log2} keys");
            }
        }
        println!("{}", serde_json::json!({"ok": true}));
        Ok(())
    }
}

/// The GPU's expansion of the public matrix against pir-core's pinned test
/// vectors (row 1773, block 5) and the CPU's blocks, for each expansion.
#[cfg(feature = "cuda")]
fn check_expansions(gpu: &gpu_kernels::cuda::CudaGpu) -> Result<bool> {
    let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
    let vectors = [
        (
            Expansion::TurboShake128,
            [3054147123, 3791263922, 3479251513, 3959923927],
        ),
        (
            Expansion::Aes128Ctr,
            [2675786743, 2591749239, 3741962800, 4152148088],
        ),
    ];
    let mut all_ok = true;
    for (expansion, r1773_b5) in vectors {
        let matrix = PublicMatrix::new(expansion, seed);
        let a = gpu.expand_to_host(&matrix, 1774, 10240, 2048)?;
        let vector_ok = a[1773 * 2048..1773 * 2048 + 4] == r1773_b5;
        let mut cpu_block = vec![0u32; 2048];
        let mut mismatches = 0usize;
        for row in [0u32, 1, 1000, 1773] {
            matrix.expand_block(row, 5, &mut cpu_block);
            mismatches += cpu_block
                .iter()
                .zip(&a[row as usize * 2048..(row as usize + 1) * 2048])
                .filter(|(x, y)| x != y)
                .count();
        }
        let ok = vector_ok && mismatches == 0;
        all_ok &= ok;
        // The whole of A at 2^26 keys' shape (1,774 x 778,240 entries,
        // 5.5 GB), or the columns of it that half the free memory holds.
        let n = 1774u32;
        let (free, _) = gpu.memory()?;
        let fit = (free / 2 / (4 * n as u64)) as u32 / 2048 * 2048;
        let cols = fit.min(778_240);
        let took = gpu.time_expansion(&matrix, n, cols)?;
        println!(
            "{}",
            serde_json::json!({"stage": "expansion", "expansion": expansion.name(), "ok": ok, "test_vector": vector_ok, "mismatches": mismatches,
                "bench_rows": n, "bench_cols": cols, "bench_ms": took.as_secs_f64() * 1e3,
                "bench_gbps": 4.0 * n as f64 * cols as f64 / took.as_secs_f64() / 1e9})
        );
    }
    Ok(all_ok)
}

/// 1 GiB of random bytes uploaded both ways (the driver's pageable copy
/// and the page-locked staging that databases and queries take), each
/// read back and compared, and timed.
#[cfg(feature = "cuda")]
fn check_uploads(gpu: &gpu_kernels::cuda::CudaGpu) -> Result<bool> {
    use gpu_kernels::cuda::UploadPath;
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    // An odd length: the last staging buffer is a partial one.
    let mut bytes = vec![0u8; (1 << 30) + 12_345];
    rand::RngCore::fill_bytes(&mut rng, &mut bytes);
    let src: Vec<i8> = bytes.into_iter().map(|b| b as i8).collect();
    let mut all_ok = true;
    for path in [UploadPath::Pageable, UploadPath::Staged] {
        let (took, ok) = gpu.time_upload(&src, path)?;
        all_ok &= ok;
        println!(
            "{}",
            serde_json::json!({"stage": "upload", "ok": ok, "path": format!("{path:?}").to_lowercase(),
                "bytes": src.len(), "ms": took.as_secs_f64() * 1e3,
                "gb_per_s": src.len() as f64 / took.as_secs_f64() / 1e9})
        );
    }
    Ok(all_ok)
}

/// A GPU hint of a random database against the CPU's, bit for bit, and
/// both timed.
#[cfg(feature = "cuda")]
fn check_hint(gpu: &gpu_kernels::cuda::CudaGpu, args: &Args) -> Result<bool> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let db = random_db(args, &mut rng)?;
    let matrix = PublicMatrix::new(args.expansion, rng.random());
    let t = Instant::now();
    let gpu_hint = gpu.build(&db, &matrix, &|_| {})?;
    let gpu_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let cpu_hint = pir_core::product::hint_cpu(&db, &matrix, &|_| {});
    let cpu_s = t.elapsed().as_secs_f64();
    let same = gpu_hint == cpu_hint;
    println!(
        "{}",
        serde_json::json!({"stage": "hint", "ok": same, "keys": 1u64 << args.log2_keys, "k": db.shape().partitions, "rows": db.shape().rows(), "expansion": args.expansion.name(),
            "cols": db.shape().cols(), "gpu_s": gpu_s, "cpu_s": cpu_s})
    );
    Ok(same)
}

/// 2^`log2_keys` random records of `value_bytes`, encoded.
#[cfg(feature = "cuda")]
fn random_db(args: &Args, rng: &mut rand::rngs::StdRng) -> Result<EncodedDb> {
    let records: Vec<(Vec<u8>, Vec<u8>)> = (0..1usize << args.log2_keys)
        .map(|_| {
            let mut k = vec![0u8; 20];
            let mut v = vec![0u8; args.value_bytes];
            rng.fill_bytes(&mut k);
            rng.fill_bytes(&mut v);
            (k, v)
        })
        .collect();
    let packing = match args.packing {
        0 => Packing::default(),
        k => Packing::Fixed(k),
    };
    let options = EncodeOptions {
        packing,
        ..Default::default()
    };
    Ok(EncodedDb::encode(
        &records,
        args.value_bytes,
        &options,
        rng,
    )?)
}

/// The CPU's answers (all cores, the best kernel) to `vecs`.
#[cfg(feature = "cuda")]
fn cpu_answers(db: &EncodedDb, vecs: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let refs: Vec<&[u32]> = vecs.iter().map(|v| v.as_slice()).collect();
    pir_core::product::multiply_vectors(db, &refs)
}

#[cfg(feature = "cuda")]
fn random_queries(count: usize, rows: usize, rng: &mut rand::rngs::StdRng) -> Vec<Vec<u32>> {
    (0..count)
        .map(|_| (0..rows).map(|_| rng.random()).collect())
        .collect()
}

/// GPU answers against the CPU's, bit for bit: a random database (lone
/// queries and batches of 5 and 64, every kernel) and the extremes (every
/// element at the bottom of the plaintext range, every query entry
/// 2^32 - 1: the largest sums the kernels make).
#[cfg(feature = "cuda")]
fn check_answers(gpu: &gpu_kernels::cuda::CudaGpu, args: &Args) -> Result<bool> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let db = random_db(args, &mut rng)?;
    let held = gpu.hold(&db, 64)?;
    let rows = db.shape().rows();
    let mut all_ok = true;
    for count in [1usize, 5, 64] {
        let vecs = random_queries(count, rows, &mut rng);
        let refs: Vec<&[u32]> = vecs.iter().map(|v| v.as_slice()).collect();
        let want = cpu_answers(&db, &vecs);
        for kernel in AnswerKernel::ALL {
            let (gpu_answers, times) = held.answer_with(&refs, kernel, None)?;
            let ok = gpu_answers == want;
            all_ok &= ok;
            println!(
                "{}",
                serde_json::json!({"stage": "answer", "ok": ok, "kernel": kernel.name(), "queries": count, "rows": rows, "cols": db.shape().cols(),
                    "gpu_ms": times.total().as_secs_f64() * 1e3, "kernel_ms": times.compute.as_secs_f64() * 1e3})
            );
        }
    }
    let limit = 1i16 << (db.shape().lwe.plaintext_bits - 1);
    let low = EncodedDb::from_parts(db.shape().clone(), vec![-limit as i8; db.data().len()])?;
    let ones = vec![vec![u32::MAX; rows]; 5];
    let refs: Vec<&[u32]> = ones.iter().map(|v| v.as_slice()).collect();
    let want = cpu_answers(&low, &ones);
    let held = gpu.hold(&low, 5)?;
    let mut ok = true;
    for kernel in AnswerKernel::ALL {
        ok &= held.answer_with(&refs, kernel, None)?.0 == want;
    }
    all_ok &= ok;
    println!(
        "{}",
        serde_json::json!({"stage": "answer-extremes", "ok": ok})
    );
    Ok(all_ok)
}

/// A database of the shape 2^`log2` keys make, filled with random
/// elements of its plaintext range on all cores.
#[cfg(feature = "cuda")]
fn synthetic_db(args: &Args, log2: u32) -> Result<EncodedDb> {
    use pir_core::db::{plan, DbShape};
    use pir_core::fuse::FuseGeometry;
    use rayon::prelude::*;
    let keys = 1usize << log2;
    // pir-bench's packing (a 32 MiB hint), so that the figures compare.
    let options = EncodeOptions::default();
    let p = plan(keys, args.value_bytes, &options)?;
    // The fullest partition, as pir-core's plan estimates it.
    let per = keys.div_ceil(p.partitions as usize);
    let fullest = per + 3 * (per as f64).sqrt().ceil() as usize + 1;
    let geometry = FuseGeometry::for_keys(options.arity, fullest, 0);
    let shape = DbShape {
        lwe: pir_core::params::LweParams::for_rows(
            geometry.array_length() as u64,
            p.partitions as u64 * p.elems as u64,
        )?,
        geometry,
        partitions: p.partitions,
        value_bytes: args.value_bytes as u32,
        partition_seed: 0,
        filter_seeds: vec![0; p.partitions as usize],
    };
    let bits = shape.lwe.plaintext_bits;
    let mut data = vec![0i8; shape.rows() * shape.padded_cols()];
    data.par_chunks_mut(1 << 20)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
            for x in chunk {
                *x = ((rng.next_u32() >> (32 - bits)) as i32 - (1 << (bits - 1))) as i8;
            }
        });
    Ok(EncodedDb::from_parts(shape, data)?)
}

/// The chosen kernel's answers and phases, every kernel's median time by
/// name, and whether every kernel's answers were the chosen one's.
#[cfg(feature = "cuda")]
type KernelTimes = (
    Vec<Vec<u32>>,
    Vec<gpu_kernels::answer::AnswerTimes>,
    serde_json::Map<String, serde_json::Value>,
    bool,
);

/// Every answer kernel timed on `refs` (the median of `reps`): the
/// answers and phases of `chosen` (the server's choice), each kernel's
/// median time, by name, and whether all kernels answered alike (the CPU
/// checks the chosen one's).
#[cfg(feature = "cuda")]
fn time_kernels(
    held: &gpu_kernels::answer::DeviceDb<gpu_kernels::cuda::CudaGpu>,
    refs: &[&[u32]],
    chosen: AnswerKernel,
    reps: usize,
) -> Result<KernelTimes> {
    let mut times = Vec::new();
    let mut first = None;
    let mut each_first = Vec::new();
    let mut kernels = serde_json::Map::new();
    for kernel in AnswerKernel::ALL {
        let mut compute = Vec::new();
        for rep in 0..reps.max(1) {
            let (answers, phases) = held.answer_with(refs, kernel, None)?;
            if kernel == chosen {
                times.push(phases);
                if rep == 0 {
                    first = Some(answers.clone());
                }
            }
            if rep == 0 {
                each_first.push(answers);
            }
            compute.push(phases.compute.as_secs_f64() * 1e3);
        }
        compute.sort_by(f64::total_cmp);
        kernels.insert(kernel.name(), serde_json::json!(compute[compute.len() / 2]));
    }
    let first = first.ok_or_else(|| anyhow::anyhow!("{} is not a kernel of ALL", chosen.name()))?;
    let agree = each_first.iter().all(|a| *a == first);
    Ok((first, times, kernels, agree))
}

/// Answers timed on the GPU (median of --reps, phases apart) and on all
/// CPU cores, batches of 1 to 256, at 2^`log2` keys.
#[cfg(feature = "cuda")]
fn bench_answers(gpu: &gpu_kernels::cuda::CudaGpu, args: &Args, log2: u32) -> Result<bool> {
    let t = Instant::now();
    let db = synthetic_db(args, log2)?;
    let fill_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let held = gpu.hold(&db, 256)?;
    let upload_s = t.elapsed().as_secs_f64();
    let rows = db.shape().rows();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut all_ok = true;
    // Batches whose queries stay under 4 GB (a query is 4 bytes a row).
    for count in [1usize, 8, 16, 32, 64, 256]
        .into_iter()
        .filter(|&c| c as u64 * 4 * rows as u64 <= 4 << 30)
    {
        let vecs = random_queries(count, rows, &mut rng);
        let refs: Vec<&[u32]> = vecs.iter().map(|v| v.as_slice()).collect();
        let chosen = AnswerKernel::for_batch(count as u32);
        let (first, times, kernels, agree) = time_kernels(&held, &refs, chosen, args.reps)?;
        // The CPU answers at most 16 of them (at 2^30 keys a batch of 256
        // would take it most of a minute): the first ones, compared.
        let checked = count.min(16);
        let t = Instant::now();
        let cpu = cpu_answers(&db, &vecs[..checked]);
        let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
        let ok = first[..checked] == cpu[..] && agree;
        all_ok &= ok;
        let median = |f: &dyn Fn(&gpu_kernels::answer::AnswerTimes) -> f64| {
            let mut v: Vec<f64> = times.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let kernel_ms = median(&|p| p.compute.as_secs_f64() * 1e3);
        let total_ms = median(&|p| p.total().as_secs_f64() * 1e3);
        println!(
            "{}",
            serde_json::json!({"stage": "answer-bench", "ok": ok, "log2_keys": log2, "rows": rows, "cols": db.shape().cols(),
                "db_bytes": db.bytes(), "queries": count, "kernel": chosen.name(), "kernel_ms": kernel_ms,
                "kernel_ms_each": kernels,
                "upload_ms": median(&|p| p.upload.as_secs_f64() * 1e3),
                "download_ms": median(&|p| p.download.as_secs_f64() * 1e3),
                "total_ms": total_ms, "kernel_ms_per_query": kernel_ms / count as f64,
                "kernel_gbps": db.bytes() as f64 / (kernel_ms / 1e3) / 1e9,
                "queries_per_s": count as f64 / (total_ms / 1e3),
                "cpu_queries": checked, "cpu_ms": cpu_ms, "cpu_threads": rayon::current_num_threads(),
                "fill_s": fill_s, "hold_s": upload_s})
        );
    }
    Ok(all_ok)
}
