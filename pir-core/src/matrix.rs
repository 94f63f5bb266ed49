//! The public LWE matrix `A` (n rows x `rows` columns, entries mod 2^32),
//! expanded on demand from a 32-byte seed, in one of two ways the setup
//! names ([`Expansion`]):
//!
//! - [`Expansion::TurboShake128`]: `A` is cut into blocks of [`BLOCK_COLS`]
//!   columns of one row; block `(row, block)` is the TurboSHAKE128 output
//!   (domain byte [`DOMAIN_A`]) of `seed || row as u32 LE || block as u32
//!   LE`, read as little-endian `u32`s.
//! - [`Expansion::Aes128Ctr`] (as FrodoKEM's AES variant): the key is the
//!   first 16 bytes of TurboSHAKE128 (domain byte [`DOMAIN_AES_KEY`]) of the
//!   seed; entries `4c .. 4c + 4` of row `row` are the AES-128 encryption of
//!   `row as u32 LE || c as u32 LE || 0u64`, read as little-endian `u32`s.
//!   Several times faster wherever the CPU has AES instructions (x86-64
//!   since 2010, ARMv8): see docs/benchmarks.md.
//!
//! Either way any block can be made on any core or GPU thread without
//! making the others, and every implementation (the GPU kernels included)
//! produces the same matrix, pinned by the test vectors below.

use std::fmt;
use std::str::FromStr;

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::{Aes128, Block};
use sha3::digest::{ExtendableOutput, Update, XofReader};
use sha3::{TurboShake128, TurboShake128Core};

use crate::error::ParamError;
use crate::kernel::{active, Kernel};
use crate::params::SEED_BYTES;

/// Columns of `A` per expansion block.
pub const BLOCK_COLS: usize = 2048;
/// TurboSHAKE128 domain separation byte of the public matrix.
pub const DOMAIN_A: u8 = 0x0A;
/// TurboSHAKE128 domain separation byte of the AES key of the public matrix.
pub const DOMAIN_AES_KEY: u8 = 0x0D;
/// Entries of `A` per AES block.
const AES_COLS: usize = 4;
/// AES blocks encrypted per call (the cipher pipelines them).
const AES_BATCH: usize = 64;

/// How the public matrix is expanded from its seed (a field of the setup).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Expansion {
    /// TurboSHAKE128 per 2048-column block (every version-1 setup).
    TurboShake128,
    /// AES-128 in counter mode: the default for new setups.
    #[default]
    Aes128Ctr,
}

impl Expansion {
    pub const ALL: [Expansion; 2] = [Expansion::TurboShake128, Expansion::Aes128Ctr];

    pub fn name(self) -> &'static str {
        match self {
            Expansion::TurboShake128 => "turboshake128",
            Expansion::Aes128Ctr => "aes128-ctr",
        }
    }

    /// The byte the setup carries (and the GPU kernel's mode argument).
    pub fn code(self) -> u8 {
        match self {
            Expansion::TurboShake128 => 0,
            Expansion::Aes128Ctr => 1,
        }
    }

    pub fn from_code(code: u8) -> Result<Self, ParamError> {
        match code {
            0 => Ok(Expansion::TurboShake128),
            1 => Ok(Expansion::Aes128Ctr),
            _ => Err(ParamError::Shape("unknown public-matrix expansion")),
        }
    }
}

impl fmt::Display for Expansion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Expansion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Expansion::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                format!("unknown matrix expansion {s:?} (expected turboshake128 or aes128-ctr)")
            })
    }
}

/// The public matrix of a setup: its seed and how it is expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublicMatrix {
    expansion: Expansion,
    seed: [u8; SEED_BYTES],
    /// The AES key derived from the seed (unused by TurboSHAKE128).
    aes_key: [u8; 16],
}

impl PublicMatrix {
    pub fn new(expansion: Expansion, seed: [u8; SEED_BYTES]) -> Self {
        let mut aes_key = [0u8; 16];
        if expansion == Expansion::Aes128Ctr {
            let mut xof = TurboShake128::from_core(TurboShake128Core::new(DOMAIN_AES_KEY));
            xof.update(&seed);
            xof.finalize_xof().read(&mut aes_key);
        }
        PublicMatrix {
            expansion,
            seed,
            aes_key,
        }
    }

    pub fn expansion(&self) -> Expansion {
        self.expansion
    }

    pub fn seed(&self) -> &[u8; SEED_BYTES] {
        &self.seed
    }

    /// The 32 bytes a device kernel expands from: the seed for
    /// TurboSHAKE128, the AES key (then zeros) for AES-128.
    pub fn kernel_key(&self) -> [u8; SEED_BYTES] {
        match self.expansion {
            Expansion::TurboShake128 => self.seed,
            Expansion::Aes128Ctr => {
                let mut key = [0u8; SEED_BYTES];
                key[..16].copy_from_slice(&self.aes_key);
                key
            }
        }
    }

    /// Fills `out` (at most [`BLOCK_COLS`] entries) with the first
    /// `out.len()` entries of block `block` of row `row`.
    pub fn expand_block(&self, row: u32, block: u32, out: &mut [u32]) {
        debug_assert!(out.len() <= BLOCK_COLS);
        match self.expansion {
            Expansion::TurboShake128 => turboshake_block(&self.seed, row, block, out),
            Expansion::Aes128Ctr => {
                let cipher = AesCtr::new(active(), &self.aes_key);
                cipher.columns(row, block as usize * BLOCK_COLS, out);
            }
        }
    }

    /// Expands blocks: each item `(row, block, out)` gets the first
    /// `out.len()` entries of that block, four TurboSHAKE128 blocks at a
    /// time where `kernel` allows (the same numbers either way: the tests
    /// compare them). AES uses the CPU's AES instructions when it has them
    /// but for the portable kernel ([`AesCtr`]).
    pub fn expand_blocks(&self, kernel: Kernel, items: &mut [(u32, u32, &mut [u32])]) {
        match self.expansion {
            Expansion::TurboShake128 => turboshake_blocks(kernel, &self.seed, items),
            Expansion::Aes128Ctr => {
                let cipher = AesCtr::new(kernel, &self.aes_key);
                for (row, block, out) in items.iter_mut() {
                    cipher.columns(*row, *block as usize * BLOCK_COLS, out);
                }
            }
        }
    }

    /// Fills `out` with columns `start .. start + out.len()` of row `row`.
    /// `start` must be a multiple of [`BLOCK_COLS`].
    pub fn expand_row_segment(&self, row: u32, start: usize, out: &mut [u32]) {
        self.expand_row_segment_with(active(), row, start, out);
    }

    /// [`Self::expand_row_segment`] with a given kernel.
    pub fn expand_row_segment_with(&self, kernel: Kernel, row: u32, start: usize, out: &mut [u32]) {
        let width = out.len();
        self.expand_rows_segment_with(kernel, &[row], start, (width, width), out);
    }

    /// The same `width` columns from `start` of several rows, row `r` at
    /// `out[r * stride..][..width]`: one cipher for all of them, or
    /// TurboSHAKE128's blocks four at a time across rows. `start` must be a
    /// multiple of [`BLOCK_COLS`] for TurboSHAKE128, of 4 for AES.
    pub fn expand_rows_segment_with(
        &self,
        kernel: Kernel,
        rows: &[u32],
        start: usize,
        (width, stride): (usize, usize),
        out: &mut [u32],
    ) {
        assert!(
            stride >= width && out.len() >= rows.len() * stride,
            "a segment per row"
        );
        let segments = out.chunks_exact_mut(stride.max(1)).map(|s| &mut s[..width]);
        if self.expansion == Expansion::Aes128Ctr {
            // One counter run over each segment: no per-block set-up.
            let cipher = AesCtr::new(kernel, &self.aes_key);
            for (&row, segment) in rows.iter().zip(segments) {
                cipher.columns(row, start, segment);
            }
            return;
        }
        assert_eq!(start % BLOCK_COLS, 0, "TurboSHAKE128 expands whole blocks");
        let mut items: Vec<(u32, u32, &mut [u32])> = rows
            .iter()
            .zip(segments)
            .flat_map(|(&row, segment)| {
                segment
                    .chunks_mut(BLOCK_COLS)
                    .enumerate()
                    .map(move |(i, chunk)| (row, (start / BLOCK_COLS + i) as u32, chunk))
            })
            .collect();
        self.expand_blocks(kernel, &mut items);
    }
}

/// The matrix's AES-128 in counter mode: on the CPU's AES instructions
/// ([`crate::aes_ni`]) where it has them, but for the portable kernel
/// (which the tests compare with the others); else the `aes` crate's
/// cipher (its own detection of the instructions included).
enum AesCtr {
    #[cfg(target_arch = "x86_64")]
    Instructions(crate::aes_ni::RoundKeys),
    Crate(Box<Aes128>),
}

impl AesCtr {
    fn new(kernel: Kernel, key: &[u8; 16]) -> Self {
        #[cfg(target_arch = "x86_64")]
        if kernel != Kernel::Portable {
            if let Some(keys) = crate::aes_ni::RoundKeys::new(key) {
                return AesCtr::Instructions(keys);
            }
        }
        let _ = kernel;
        AesCtr::Crate(Box::new(Aes128::new(key.into())))
    }

    /// Columns `start .. start + out.len()` of row `row` (`start` a
    /// multiple of 4).
    fn columns(&self, row: u32, start: usize, out: &mut [u32]) {
        match self {
            #[cfg(target_arch = "x86_64")]
            AesCtr::Instructions(keys) => keys.columns(row, start, out),
            AesCtr::Crate(cipher) => aes_columns(cipher, row, start, out),
        }
    }
}

/// Columns `start .. start + out.len()` of row `row` in AES-128 counter
/// mode (`start` a multiple of 4). The cipher pipelines [`AES_BATCH`]
/// blocks; each block becomes four entries without a byte loop.
fn aes_columns(cipher: &Aes128, row: u32, start: usize, out: &mut [u32]) {
    assert_eq!(
        start % AES_COLS,
        0,
        "AES expands from whole blocks of 4 columns"
    );
    let mut blocks = [Block::default(); AES_BATCH];
    let mut counter = (start / AES_COLS) as u32;
    let mut input = [0u8; 16];
    input[..4].copy_from_slice(&row.to_le_bytes());
    for chunk in out.chunks_mut(AES_COLS * AES_BATCH) {
        let used = chunk.len().div_ceil(AES_COLS);
        for block in &mut blocks[..used] {
            input[4..8].copy_from_slice(&counter.to_le_bytes());
            *block = input.into();
            counter = counter.wrapping_add(1);
        }
        cipher.encrypt_blocks(&mut blocks[..used]);
        for (entries, block) in chunk.chunks_mut(AES_COLS).zip(&blocks) {
            let bytes: [u8; 16] = (*block).into();
            let words: [u32; AES_COLS] = bytemuck::cast(bytes);
            for (dst, word) in entries.iter_mut().zip(words) {
                *dst = u32::from_le(word);
            }
        }
    }
    blocks.iter_mut().for_each(|b| b.fill(0));
}

/// The first `out.len()` entries of TurboSHAKE128 block `block` of row `row`.
fn turboshake_block(seed: &[u8; SEED_BYTES], row: u32, block: u32, out: &mut [u32]) {
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
#[cfg(target_arch = "x86_64")]
fn four_lanes(kernel: Kernel) -> bool {
    matches!(kernel, Kernel::Avx2 | Kernel::Avx512Vnni) && is_x86_feature_detected!("avx2")
}

/// TurboSHAKE128 blocks, four at a time where `kernel` allows.
fn turboshake_blocks(
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
                    turboshake_block(seed, *row, *block, out);
                }
            }
        }
        return;
    }
    let _ = kernel;
    for (row, block, out) in items.iter_mut() {
        turboshake_block(seed, *row, *block, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_seed() -> [u8; 32] {
        std::array::from_fn(|i| i as u8)
    }

    fn wrapping_sum(values: &[u32]) -> u32 {
        values.iter().fold(0u32, |a, &x| a.wrapping_add(x))
    }

    /// The pinned expansion test vectors; `docs/protocol.md` repeats them.
    #[test]
    fn expansion_test_vectors() {
        for (expansion, r0_b0, r1773_b5, r1773_b5_sum) in [
            (
                Expansion::TurboShake128,
                TURBOSHAKE_R0_B0,
                TURBOSHAKE_R1773_B5,
                TURBOSHAKE_R1773_B5_SUM,
            ),
            (
                Expansion::Aes128Ctr,
                AES_R0_B0,
                AES_R1773_B5,
                AES_R1773_B5_SUM,
            ),
        ] {
            let matrix = PublicMatrix::new(expansion, test_seed());
            let mut block = vec![0u32; BLOCK_COLS];
            matrix.expand_block(0, 0, &mut block);
            assert_eq!(block[..4], r0_b0, "{expansion}");
            matrix.expand_block(1773, 5, &mut block);
            assert_eq!(block[..4], r1773_b5, "{expansion}");
            assert_eq!(wrapping_sum(&block), r1773_b5_sum, "{expansion}");
        }
        let aes = PublicMatrix::new(Expansion::Aes128Ctr, test_seed());
        assert_eq!(aes.kernel_key()[..16], AES_KEY);
    }

    /// Several rows at a stride are each row's segment alone, for every
    /// kernel: TurboSHAKE from a whole block, AES from half of one too.
    #[test]
    fn rows_at_a_stride_are_each_rows_segment() {
        let rows = [0u32, 5, 6, 7, 1773];
        for expansion in Expansion::ALL {
            let matrix = PublicMatrix::new(expansion, test_seed());
            let mut starts = vec![0, BLOCK_COLS];
            if expansion == Expansion::Aes128Ctr {
                starts.push(BLOCK_COLS / 2 + 4);
            }
            for kernel in Kernel::supported() {
                for &start in &starts {
                    let (width, stride) = (BLOCK_COLS - 4, BLOCK_COLS + 16);
                    let mut out = vec![7u32; rows.len() * stride];
                    matrix.expand_rows_segment_with(
                        kernel,
                        &rows,
                        start,
                        (width, stride),
                        &mut out,
                    );
                    for (r, &row) in rows.iter().enumerate() {
                        let mut alone = vec![0u32; width];
                        matrix.expand_row_segment_with(Kernel::Portable, row, start, &mut alone);
                        let at = &out[r * stride..(r + 1) * stride];
                        assert!(at[..width] == alone[..], "{expansion}, {kernel}, row {row}");
                        assert!(at[width..].iter().all(|&x| x == 7), "past the width");
                    }
                }
            }
        }
    }

    /// Every kernel the CPU has expands the same matrix, segments of any
    /// length (whole groups of four blocks, a remainder, a partial block),
    /// and a segment equals its blocks made one by one.
    #[test]
    fn every_kernel_expands_the_same_rows() {
        for expansion in Expansion::ALL {
            let matrix = PublicMatrix::new(expansion, test_seed());
            for len in [100, BLOCK_COLS, 5 * BLOCK_COLS + 77, 8 * BLOCK_COLS] {
                let mut reference = vec![0u32; len];
                matrix.expand_row_segment_with(Kernel::Portable, 42, 0, &mut reference);
                for kernel in Kernel::supported() {
                    let mut row = vec![0u32; len];
                    matrix.expand_row_segment_with(kernel, 42, 0, &mut row);
                    assert!(row == reference, "{expansion}, {kernel}, {len} columns");
                }
                for (b, chunk) in reference.chunks(BLOCK_COLS).enumerate() {
                    let mut block = vec![0u32; chunk.len()];
                    matrix.expand_block(42, b as u32, &mut block);
                    assert!(block == chunk, "{expansion}, block {b}");
                }
            }
        }
    }

    #[test]
    fn prefixes_and_segments_agree() {
        for expansion in Expansion::ALL {
            let matrix = PublicMatrix::new(expansion, test_seed());
            let mut full = vec![0u32; 3 * BLOCK_COLS];
            matrix.expand_row_segment(7, 0, &mut full);
            let mut part = vec![0u32; 100];
            matrix.expand_block(7, 2, &mut part);
            assert_eq!(&part[..], &full[2 * BLOCK_COLS..2 * BLOCK_COLS + 100]);
            let mut tail = vec![0u32; BLOCK_COLS];
            matrix.expand_row_segment(7, 2 * BLOCK_COLS, &mut tail);
            assert_eq!(&tail[..], &full[2 * BLOCK_COLS..]);
            let mut other_row = vec![0u32; 100];
            matrix.expand_block(8, 2, &mut other_row);
            assert_ne!(part, other_row);
        }
    }

    #[test]
    fn the_two_expansions_differ_and_names_round_trip() {
        let mut a = vec![0u32; 64];
        let mut b = vec![0u32; 64];
        PublicMatrix::new(Expansion::TurboShake128, test_seed()).expand_block(3, 0, &mut a);
        PublicMatrix::new(Expansion::Aes128Ctr, test_seed()).expand_block(3, 0, &mut b);
        assert_ne!(a, b);
        for e in Expansion::ALL {
            assert_eq!(e.name().parse::<Expansion>(), Ok(e));
            assert_eq!(Expansion::from_code(e.code()), Ok(e));
        }
        assert!(Expansion::from_code(2).is_err());
        assert!("aes".parse::<Expansion>().is_err());
    }

    const TURBOSHAKE_R0_B0: [u32; 4] = [3479173850, 2091432971, 797953290, 1503660024];
    const TURBOSHAKE_R1773_B5: [u32; 4] = [3054147123, 3791263922, 3479251513, 3959923927];
    const TURBOSHAKE_R1773_B5_SUM: u32 = 0xae77_00c5;
    const AES_KEY: [u8; 16] = [
        130, 65, 21, 255, 164, 7, 25, 19, 234, 22, 107, 222, 122, 116, 61, 86,
    ];
    const AES_R0_B0: [u32; 4] = [326635339, 705127538, 334691788, 3444527338];
    const AES_R1773_B5: [u32; 4] = [2675786743, 2591749239, 3741962800, 4152148088];
    const AES_R1773_B5_SUM: u32 = 0x46e0_63cc;
}
