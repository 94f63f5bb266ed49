//! Four TurboSHAKE128 instances at once on AVX2: the expansion of the
//! public matrix (see [`crate::matrix`]) with four of its blocks side by
//! side, one per 64-bit lane of 25 `__m256i` registers. The same bytes as
//! the scalar `sha3` path (the tests compare them), about 2-3x the
//! throughput of one scalar instance per core.
//!
//! TurboSHAKE128 (RFC 9861): Keccak-p[1600, 12 rounds] (the last 12 round
//! constants of Keccak-f), rate 168 bytes; the message is followed by the
//! domain byte and the last byte of the rate block gets `0x80`. A matrix
//! block's message (seed, row, block: 40 bytes) fits one rate block.

// Only x86-64 runs the kernel; elsewhere the tables are unused.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Lanes of the rate (168 bytes).
pub const RATE_LANES: usize = 21;

/// Round constants of Keccak-f rounds 12..24 (TurboSHAKE's 12 rounds).
const ROUND_CONSTANTS: [u64; 12] = [
    0x0000_0000_8000_808B,
    0x8000_0000_0000_008B,
    0x8000_0000_0000_8089,
    0x8000_0000_0000_8003,
    0x8000_0000_0000_8002,
    0x8000_0000_0000_0080,
    0x0000_0000_0000_800A,
    0x8000_0000_8000_000A,
    0x8000_0000_8000_8081,
    0x8000_0000_0000_8080,
    0x0000_0000_8000_0001,
    0x8000_0000_8000_8008,
];

/// Rotation of lane `x + 5y` (rho).
const RHO: [u32; 25] = [
    0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39, 41, 45, 15, 21, 8, 18, 2, 61, 56, 14,
];

/// Where lane `x + 5y` goes (pi): lane `y + 5((2x + 3y) mod 5)`.
const PI: [usize; 25] = {
    let mut to = [0usize; 25];
    let mut i = 0;
    while i < 25 {
        let (x, y) = (i % 5, i / 5);
        to[i] = y + 5 * ((2 * x + 3 * y) % 5);
        i += 1;
    }
    to
};

/// The first rate block of TurboSHAKE128 over `message` (at most 167
/// bytes) with domain byte `domain`, as little-endian lanes.
pub fn padded_block(message: &[u8], domain: u8) -> [u64; RATE_LANES] {
    assert!(message.len() < RATE_LANES * 8, "one rate block only");
    let mut bytes = [0u8; RATE_LANES * 8];
    bytes[..message.len()].copy_from_slice(message);
    bytes[message.len()] ^= domain;
    bytes[RATE_LANES * 8 - 1] ^= 0x80;
    std::array::from_fn(|i| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap()))
}

/// Squeezes four TurboSHAKE128 instances whose messages fit one rate
/// block (`blocks`, from [`padded_block`]) into `outs` as little-endian
/// `u32`s: `outs[j]` gets the first `outs[j].len() * 4` output bytes of
/// instance `j`.
///
/// # Panics
///
/// When the CPU lacks AVX2 (callers choose this path only where
/// [`crate::kernel::Kernel::Avx2`] is supported).
#[cfg(target_arch = "x86_64")]
pub fn squeeze_x4(blocks: &[[u64; RATE_LANES]; 4], outs: [&mut [u32]; 4]) {
    assert!(
        is_x86_feature_detected!("avx2"),
        "the 4-lane TurboSHAKE128 needs AVX2"
    );
    // SAFETY: AVX2 is present (asserted above); every memory access in
    // `squeeze_x4_avx2` is through bounds-checked slices.
    unsafe { squeeze_x4_avx2(blocks, outs) }
}

/// # Safety
///
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn squeeze_x4_avx2(blocks: &[[u64; RATE_LANES]; 4], mut outs: [&mut [u32]; 4]) {
    let mut state = [_mm256_setzero_si256(); 25];
    for (i, lane) in state.iter_mut().enumerate().take(RATE_LANES) {
        *lane = _mm256_set_epi64x(
            blocks[3][i] as i64,
            blocks[2][i] as i64,
            blocks[1][i] as i64,
            blocks[0][i] as i64,
        );
    }
    let longest = outs.iter().map(|o| o.len()).max().unwrap_or(0);
    let mut written = 0;
    while written < longest {
        permute_x4(&mut state);
        // Lanes 0..20 four at a time, transposed so that each instance's
        // four lanes (eight output words) are one store.
        for group in 0..RATE_LANES / 4 {
            let i = 4 * group;
            let cols = transpose(&state[i..i + 4]);
            for (out, col) in outs.iter_mut().zip(cols) {
                store_words(out, written + 2 * i, col);
            }
        }
        // Lane 20, the last of the rate.
        let mut last = [0u64; 4];
        // SAFETY: `last` is 32 bytes; storeu has no alignment need.
        unsafe { _mm256_storeu_si256(last.as_mut_ptr().cast(), state[RATE_LANES - 1]) };
        for (out, word) in outs.iter_mut().zip(last) {
            let at = written + 2 * (RATE_LANES - 1);
            for (k, half) in [word as u32, (word >> 32) as u32].into_iter().enumerate() {
                if let Some(slot) = out.get_mut(at + k) {
                    *slot = half;
                }
            }
        }
        written += 2 * RATE_LANES;
    }
}

/// Four registers of four lanes (one per instance) to four registers of
/// one instance's four lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn transpose(rows: &[__m256i]) -> [__m256i; 4] {
    let t0 = _mm256_unpacklo_epi64(rows[0], rows[1]);
    let t1 = _mm256_unpackhi_epi64(rows[0], rows[1]);
    let t2 = _mm256_unpacklo_epi64(rows[2], rows[3]);
    let t3 = _mm256_unpackhi_epi64(rows[2], rows[3]);
    [
        _mm256_permute2x128_si256::<0x20>(t0, t2),
        _mm256_permute2x128_si256::<0x20>(t1, t3),
        _mm256_permute2x128_si256::<0x31>(t0, t2),
        _mm256_permute2x128_si256::<0x31>(t1, t3),
    ]
}

/// Writes the eight little-endian words of `words` at `out[at..]`, as many
/// as fit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn store_words(out: &mut [u32], at: usize, words: __m256i) {
    if let Some(slot) = out.get_mut(at..at + 8) {
        // SAFETY: `slot` is exactly 8 u32s (32 bytes), the store's size;
        // storeu has no alignment need.
        unsafe { _mm256_storeu_si256(slot.as_mut_ptr().cast(), words) };
        return;
    }
    let mut all = [0u32; 8];
    // SAFETY: `all` is 32 bytes.
    unsafe { _mm256_storeu_si256(all.as_mut_ptr().cast(), words) };
    for (k, word) in all.into_iter().enumerate() {
        if let Some(slot) = out.get_mut(at + k) {
            *slot = word;
        }
    }
}

/// Rho, pi and chi for plane `Y` of the output.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn plane<const Y: usize>(a: &[__m256i; 25], d: &[__m256i; 5], out: &mut [__m256i; 25]) {
    let b: [__m256i; 5] = std::array::from_fn(|x| {
        let from = PI_SOURCE[x + 5 * Y];
        rotl(_mm256_xor_si256(a[from], d[from % 5]), RHO[from])
    });
    for x in 0..5 {
        out[x + 5 * Y] =
            _mm256_xor_si256(b[x], _mm256_andnot_si256(b[(x + 1) % 5], b[(x + 2) % 5]));
    }
}

/// `x` rotated left by `n` in each 64-bit lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn rotl(x: __m256i, n: u32) -> __m256i {
    if n == 0 {
        return x;
    }
    let left = _mm256_set1_epi64x(i64::from(n));
    let right = _mm256_set1_epi64x(i64::from(64 - n));
    _mm256_or_si256(_mm256_sllv_epi64(x, left), _mm256_srlv_epi64(x, right))
}

/// The lane whose rotation lands at lane `x + 5y` (pi inverted): lane
/// `(x + 3y) mod 5 + 5x`.
const PI_SOURCE: [usize; 25] = {
    let mut from = [0usize; 25];
    let mut i = 0;
    while i < 25 {
        from[PI[i]] = i;
        i += 1;
    }
    from
};

/// Keccak-p[1600, 12] on four states, two rounds a step (`a` to a scratch
/// state and back), rho, pi and chi fused per plane so that each lane is
/// loaded and stored once a round.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn permute_x4(a: &mut [__m256i; 25]) {
    let mut e = [_mm256_setzero_si256(); 25];
    for pair in ROUND_CONSTANTS.chunks_exact(2) {
        round(a, &mut e, pair[0]);
        round(&e, a, pair[1]);
    }
}

/// One round from `a` into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn round(a: &[__m256i; 25], out: &mut [__m256i; 25], rc: u64) {
    let c: [__m256i; 5] = std::array::from_fn(|x| {
        _mm256_xor_si256(
            _mm256_xor_si256(a[x], a[x + 5]),
            _mm256_xor_si256(_mm256_xor_si256(a[x + 10], a[x + 15]), a[x + 20]),
        )
    });
    let d: [__m256i; 5] =
        std::array::from_fn(|x| _mm256_xor_si256(c[(x + 4) % 5], rotl(c[(x + 1) % 5], 1)));
    // One call per plane: the plane is a constant, so its lanes, sources
    // and rotations are too (immediate shifts, no table reads).
    plane::<0>(a, &d, out);
    plane::<1>(a, &d, out);
    plane::<2>(a, &d, out);
    plane::<3>(a, &d, out);
    plane::<4>(a, &d, out);
    out[0] = _mm256_xor_si256(out[0], _mm256_set1_epi64x(rc as i64));
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use sha3::digest::{ExtendableOutput, Update, XofReader};
    use sha3::{TurboShake128, TurboShake128Core};

    fn reference(message: &[u8], domain: u8, words: usize) -> Vec<u32> {
        let mut xof = TurboShake128::from_core(TurboShake128Core::new(domain));
        xof.update(message);
        let mut bytes = vec![0u8; words * 4];
        xof.finalize_xof().read(&mut bytes);
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn four_lanes_equal_four_scalar_instances() {
        if !is_x86_feature_detected!("avx2") {
            return; // the path is never chosen here
        }
        let messages: Vec<Vec<u8>> = (0..4u8)
            .map(|j| (0..40 - j).map(|i| i.wrapping_mul(31) ^ j).collect())
            .collect();
        // Lengths around the rate (42 words) and a whole matrix block.
        for lengths in [[1, 42, 43, 2048], [2048, 2048, 2048, 2048], [0, 84, 85, 7]] {
            let blocks: [[u64; RATE_LANES]; 4] =
                std::array::from_fn(|j| padded_block(&messages[j], 0x0A));
            let mut outs: Vec<Vec<u32>> = lengths.iter().map(|&n| vec![0; n]).collect();
            let [o0, o1, o2, o3] = &mut outs[..] else {
                unreachable!()
            };
            squeeze_x4(&blocks, [o0, o1, o2, o3]);
            for j in 0..4 {
                assert_eq!(
                    outs[j],
                    reference(&messages[j], 0x0A, lengths[j]),
                    "lane {j}"
                );
            }
        }
    }
}
