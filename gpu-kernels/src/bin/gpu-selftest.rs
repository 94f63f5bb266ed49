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

        let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
        // pir-core's pinned test vectors: row 1773, block 5, each expansion.
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
        let mut expansion_ok = true;
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
            expansion_ok &= vector_ok && mismatches == 0;
            println!(
                "{}",
                serde_json::json!({"stage": "expansion", "expansion": expansion.name(), "ok": vector_ok && mismatches == 0, "test_vector": vector_ok, "mismatches": mismatches})
            );
        }

        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let n = 1usize << args.log2_keys;
        let records: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
            .map(|_| {
                let mut k = vec![0u8; 20];
                let mut v = vec![0u8; args.value_bytes];
                rng.fill_bytes(&mut k);
                rng.fill_bytes(&mut v);
                (k, v)
            })
            .collect();
        let packing = if args.packing == 0 {
            Packing::default()
        } else {
            Packing::Fixed(args.packing)
        };
        let db = EncodedDb::encode(
            &records,
            args.value_bytes,
            &EncodeOptions {
                packing,
                ..Default::default()
            },
            &mut rng,
        )?;
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
            serde_json::json!({"stage": "hint", "ok": same, "keys": n, "k": db.shape().partitions, "rows": db.shape().rows(), "expansion": args.expansion.name(),
                "cols": db.shape().cols(), "gpu_s": gpu_s, "cpu_s": cpu_s})
        );
        if !expansion_ok || !same {
            bail!("GPU results differ from the CPU");
        }
        println!("{}", serde_json::json!({"ok": true}));
        Ok(())
    }
}
