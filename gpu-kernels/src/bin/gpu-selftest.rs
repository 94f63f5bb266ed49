//! `gpu-selftest`: run on a new machine to see whether the GPU hint builder
//! works there: finds the driver and device, compiles the kernels, checks
//! the public-matrix expansion against pir-core's test vector and a GPU hint
//! against the CPU hint, bit for bit, and times both. Prints JSON lines.
#![forbid(unsafe_code)]

use std::time::Instant;

use anyhow::{bail, Result};
use clap::Parser;
use pir_core::{EncodeOptions, EncodedDb, Packing};
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
        let a = gpu.expand_to_host(&seed, 1774, 10240, 2048)?;
        // pir-core's pinned test vector: row 1773, block 5.
        let vector_ok =
            a[1773 * 2048..1773 * 2048 + 4] == [3054147123, 3791263922, 3479251513, 3959923927];
        let mut cpu_block = vec![0u32; 2048];
        let mut mismatches = 0usize;
        for row in [0u32, 1, 1000, 1773] {
            pir_core::matrix::expand_block(&seed, row, 5, &mut cpu_block);
            mismatches += cpu_block
                .iter()
                .zip(&a[row as usize * 2048..(row as usize + 1) * 2048])
                .filter(|(x, y)| x != y)
                .count();
        }
        println!(
            "{}",
            serde_json::json!({"stage": "expansion", "ok": vector_ok && mismatches == 0, "test_vector": vector_ok, "mismatches": mismatches})
        );

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
        let hint_seed: [u8; 32] = rng.random();
        let t = Instant::now();
        let gpu_hint = gpu.build(&db, &hint_seed, &|_| {})?;
        let gpu_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let cpu_hint = pir_core::product::hint_cpu(&db, &hint_seed, &|_| {});
        let cpu_s = t.elapsed().as_secs_f64();
        let same = gpu_hint == cpu_hint;
        println!(
            "{}",
            serde_json::json!({"stage": "hint", "ok": same, "keys": n, "k": db.shape().partitions, "rows": db.shape().rows(),
                "cols": db.shape().cols(), "gpu_s": gpu_s, "cpu_s": cpu_s})
        );
        if !vector_ok || mismatches != 0 || !same {
            bail!("GPU results differ from the CPU");
        }
        println!("{}", serde_json::json!({"ok": true}));
        Ok(())
    }
}
