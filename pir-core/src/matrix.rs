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

/// Fills `out` with columns `start .. start + out.len()` of row `row`.
/// `start` must be a multiple of [`BLOCK_COLS`].
pub fn expand_row_segment(seed: &[u8; SEED_BYTES], row: u32, start: usize, out: &mut [u32]) {
    debug_assert_eq!(start % BLOCK_COLS, 0);
    for (i, chunk) in out.chunks_mut(BLOCK_COLS).enumerate() {
        expand_block(seed, row, (start / BLOCK_COLS + i) as u32, chunk);
    }
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
