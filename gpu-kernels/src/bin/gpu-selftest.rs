//! `gpu-selftest`: run on a new machine to see whether the GPU hint builder
//! works there: finds the driver and device, compiles the kernels, checks
//! the public-matrix expansion against pir-core's test vector and a GPU hint
//! against the CPU hint, bit for bit, and times both. Prints JSON lines.
#![forbid(unsafe_code)]

use std::time::Instant;

use anyhow::{bail, Result};
use clap::Parser;
use pir_core::{EncodeOptions, EncodedDb, Expansion, Packing, PublicMatrix};
use rand::{Rng, RngCore, SeedableRng};

#[derive(Parser)]
#[command(
    name = "gpu-selftest",
    about = "Check that the CUDA hint builder works on this machine and matches the CPU bit for bit"
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
}

fn main() -> Result<()> {
    let args = Args::parse();
    #[cfg(not(feature = "cuda"))]
    bail!("this build has no CUDA support (feature `cuda` off)");
    #[cfg(feature = "cuda")]
    {
        use gpu_kernels::cuda::{probe, CudaHint};
        if let Err(why) = probe() {
            println!(
                "{}",
                serde_json::json!({"ok": false, "stage": "probe", "error": why.to_string()})
            );
            bail!("no usable GPU: {why}");
        }
        let gpu = CudaHint::new()?;
        let (free, total) = gpu.memory()?;
        println!(
            "{}",
            serde_json::json!({"stage": "device", "name": gpu.device_name(), "free_bytes": free, "total_bytes": total})
        );
        let expansion_ok = check_expansions(&gpu)?;
        let hint_ok = check_hint(&gpu, &args)?;
        if !expansion_ok || !hint_ok {
            bail!("GPU results differ from the CPU");
        }
        println!("{}", serde_json::json!({"ok": true}));
        Ok(())
    }
}

/// The GPU's expansion of the public matrix against pir-core's pinned test
/// vectors (row 1773, block 5) and the CPU's blocks, for each expansion.
#[cfg(feature = "cuda")]
fn check_expansions(gpu: &gpu_kernels::cuda::CudaHint) -> Result<bool> {
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
        println!(
            "{}",
            serde_json::json!({"stage": "expansion", "expansion": expansion.name(), "ok": ok, "test_vector": vector_ok, "mismatches": mismatches})
        );
    }
    Ok(all_ok)
}

/// A GPU hint of a random database against the CPU's, bit for bit, and
/// both timed.
#[cfg(feature = "cuda")]
fn check_hint(gpu: &gpu_kernels::cuda::CudaHint, args: &Args) -> Result<bool> {
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
