//! The device choice: `cpu` always works, `auto` falls back to the CPU when
//! no GPU is usable and then equals the CPU hint; `cuda` without a GPU is a
//! clear error, never a panic.

use gpu_kernels::{build_hint, Device};
use pir_core::{EncodeOptions, EncodedDb, Expansion, PublicMatrix};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

#[test]
fn auto_and_cpu_agree_and_cuda_fails_cleanly_without_gpu() {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let records: Vec<([u8; 8], [u8; 16])> = (0u64..500)
        .map(|i| (i.to_le_bytes(), [i as u8; 16]))
        .collect();
    let db = EncodedDb::encode(&records, 16, &EncodeOptions::default(), &mut rng).unwrap();
    let matrix = PublicMatrix::new(Expansion::default(), [7u8; 32]);
    let (cpu, report) = build_hint(&db, &matrix, Device::Cpu).unwrap();
    assert_eq!(report.device, Device::Cpu);
    assert_eq!(cpu, pir_core::product::hint_cpu(&db, &matrix, &|_| {}));
    let (auto, report) = build_hint(&db, &matrix, Device::Auto).unwrap();
    assert_eq!(
        auto, cpu,
        "auto must give the same hint on {}",
        report.device
    );
    match build_hint(&db, &matrix, Device::Cuda) {
        Ok((hint, report)) => {
            assert_eq!(report.device, Device::Cuda);
            assert_eq!(hint, cpu, "GPU hint differs from the CPU hint");
        }
        Err(e) => eprintln!("skipping the GPU comparison: {e}"),
    }
    assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda);
    assert!("tpu".parse::<Device>().is_err());
}

#[cfg(feature = "cuda")]
#[test]
fn real_gpu_hint_equals_cpu_over_several_tiles() {
    use gpu_kernels::cuda::{probe, CudaGpu};
    if let Err(why) = probe() {
        eprintln!("skipped: no usable GPU here ({why})");
        return;
    }
    let gpu = CudaGpu::new().expect("GPU present but unusable");
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    for (n, k, arity) in [
        (3000usize, 1u32, pir_core::Arity::Three),
        (20_000, 7, pir_core::Arity::Four),
        (50_000, 40, pir_core::Arity::Three),
    ] {
        let records: Vec<([u8; 8], [u8; 40])> = (0..n as u64)
            .map(|i| (i.to_le_bytes(), [(i * 7) as u8; 40]))
            .collect();
        let opts = EncodeOptions {
            arity,
            packing: pir_core::Packing::Fixed(k),
        };
        let db = EncodedDb::encode(&records, 40, &opts, &mut rng).unwrap();
        let matrix = PublicMatrix::new(Expansion::ALL[k as usize % 2], [n as u8; 32]);
        let cpu = pir_core::product::hint_cpu(&db, &matrix, &|_| {});
        assert!(
            gpu.build(&db, &matrix, &|_| {}).unwrap() == cpu,
            "one tile, n={n}"
        );
        assert!(
            gpu.build_tiled(&db, &matrix, 2048, &|_| {}).unwrap() == cpu,
            "2048-row tiles, n={n}"
        );
    }
}
