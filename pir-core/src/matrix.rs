//! The public LWE matrix `A` (n rows x `rows` columns, entries mod 2^32),
//! expanded on demand from a 32-byte seed.
//!
//! `A` is cut into blocks of [`BLOCK_COLS`] columns of one row. Block
//! `(row, block)` is the TurboSHAKE128 output (domain byte [`DOMAIN_A`]) of
//! `seed || row as u32 LE || block as u32 LE`, read as little-endian `u32`s.
//! Any block can therefore be made on any core or GPU thread block without
//! making the others, and every implementation (the GPU kernels included)
//! produces the same matrix, pinned by the test vector below.

use sha3::digest::{ExtendableOutput, Update, XofReader};
use sha3::{TurboShake128, TurboShake128Core};

use crate::kernel::{active, Kernel};
use crate::params::SEED_BYTES;

/// Columns of `A` per expansion block.
pub const BLOCK_COLS: usize = 2048;
/// TurboSHAKE128 domain separation byte of the public matrix.
pub const DOMAIN_A: u8 = 0x0A;

/// Fills `out` (at most [`BLOCK_COLS`] entries) with the first `out.len()`
/// entries of block `block` of row `row`.
pub fn expand_block(seed: &[u8; SEED_BYTES], row: u32, block: u32, out: &mut [u32]) {
    debug_assert!(out.len() <= BLOCK_COLS);
    let mut xof = TurboShake128::from_core(TurboShake128Core::new(DOMAIN_A));
    xof.update(seed);
    xof.update(&row.to_le_bytes());
    xof.update(&block.to_le_bytes());
    let mut reader = xof.finalize_xof();
    let mut bytes = [0u8; BLOCK_COLS * 4];
    let bytes = &mut bytes[..out.len() * 4];
    reader.read(bytes);
    for (dst, src) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *dst = u32::from_le_bytes([src[0], src[1], src[2], src[3]]);
    }
}

/// Whether `kernel` expands four blocks at once (the AVX2 TurboSHAKE128
/// of [`crate::keccak_x4`]; the AVX-512 kernel's CPUs have AVX2 too).
fn four_lanes(kernel: Kernel) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(kernel, Kernel::Avx2 | Kernel::Avx512Vnni) && is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kernel;
        false
    }
}

/// Expands blocks: each item `(row, block, out)` gets the first
/// `out.len()` entries of that block, four blocks at a time where `kernel`
/// allows (the same numbers either way: the tests compare them).
pub fn expand_blocks(
    kernel: Kernel,
    seed: &[u8; SEED_BYTES],
    items: &mut [(u32, u32, &mut [u32])],
) {
    #[cfg(target_arch = "x86_64")]
    if four_lanes(kernel) {
        for chunk in items.chunks_mut(4) {
            if let [a, b, c, d] = chunk {
                let padded = |row: u32, block: u32| {
                    let mut message = [0u8; SEED_BYTES + 8];
                    message[..SEED_BYTES].copy_from_slice(seed);
                    message[SEED_BYTES..SEED_BYTES + 4].copy_from_slice(&row.to_le_bytes());
                    message[SEED_BYTES + 4..].copy_from_slice(&block.to_le_bytes());
                    crate::keccak_x4::padded_block(&message, DOMAIN_A)
                };
                let blocks = [
                    padded(a.0, a.1),
                    padded(b.0, b.1),
                    padded(c.0, c.1),
                    padded(d.0, d.1),
                ];
                let outs = [&mut *a.2, &mut *b.2, &mut *c.2, &mut *d.2];
                debug_assert!(outs.iter().all(|o| o.len() <= BLOCK_COLS));
                crate::keccak_x4::squeeze_x4(&blocks, outs);
            } else {
                for (row, block, out) in chunk.iter_mut() {
                    expand_block(seed, *row, *block, out);
                }
            }
        }
        return;
    }
    let _ = kernel;
    for (row, block, out) in items.iter_mut() {
        expand_block(seed, *row, *block, out);
    }
}

/// Fills `out` with columns `start .. start + out.len()` of row `row`.
/// `start` must be a multiple of [`BLOCK_COLS`].
pub fn expand_row_segment(seed: &[u8; SEED_BYTES], row: u32, start: usize, out: &mut [u32]) {
    expand_row_segment_with(active(), seed, row, start, out);
}

/// [`expand_row_segment`] with a given kernel.
pub fn expand_row_segment_with(
    kernel: Kernel,
    seed: &[u8; SEED_BYTES],
    row: u32,
    start: usize,
    out: &mut [u32],
) {
    debug_assert_eq!(start % BLOCK_COLS, 0);
    let mut items: Vec<(u32, u32, &mut [u32])> = out
        .chunks_mut(BLOCK_COLS)
        .enumerate()
        .map(|(i, chunk)| (row, (start / BLOCK_COLS + i) as u32, chunk))
        .collect();
    expand_blocks(kernel, seed, &mut items);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_seed() -> [u8; 32] {
        std::array::from_fn(|i| i as u8)
    }

    /// The pinned expansion test vector; `docs/protocol.md` repeats it.
    #[test]
    fn expansion_test_vector() {
        let seed = test_seed();
        let mut block = vec![0u32; BLOCK_COLS];
        expand_block(&seed, 0, 0, &mut block);
        assert_eq!(&block[..4], &EXPECTED_R0_B0);
        expand_block(&seed, 1773, 5, &mut block);
        assert_eq!(&block[..4], &EXPECTED_R1773_B5);
        let sum = block.iter().fold(0u32, |a, &x| a.wrapping_add(x));
        assert_eq!(sum, EXPECTED_R1773_B5_SUM);
    }

    /// Every kernel the CPU has expands the same matrix, segments of any
    /// length (whole groups of four blocks, a remainder, a partial block).
    #[test]
    fn every_kernel_expands_the_same_rows() {
        let seed = test_seed();
        for len in [100, BLOCK_COLS, 5 * BLOCK_COLS + 77, 8 * BLOCK_COLS] {
            let mut reference = vec![0u32; len];
            expand_row_segment_with(Kernel::Portable, &seed, 42, 0, &mut reference);
            for kernel in Kernel::supported() {
                let mut row = vec![0u32; len];
                expand_row_segment_with(kernel, &seed, 42, 0, &mut row);
                assert!(row == reference, "{kernel}, {len} columns");
            }
        }
    }

    #[test]
    fn prefixes_and_segments_agree() {
        let seed = test_seed();
        let mut full = vec![0u32; 3 * BLOCK_COLS];
        expand_row_segment(&seed, 7, 0, &mut full);
        let mut part = vec![0u32; 100];
        expand_block(&seed, 7, 2, &mut part);
        assert_eq!(&part[..], &full[2 * BLOCK_COLS..2 * BLOCK_COLS + 100]);
        let mut other_row = vec![0u32; 100];
        expand_block(&seed, 8, 2, &mut other_row);
        assert_ne!(part, other_row);
    }

    const EXPECTED_R0_B0: [u32; 4] = [3479173850, 2091432971, 797953290, 1503660024];
    const EXPECTED_R1773_B5: [u32; 4] = [3054147123, 3791263922, 3479251513, 3959923927];
    const EXPECTED_R1773_B5_SUM: u32 = 0xae77_00c5;
}
