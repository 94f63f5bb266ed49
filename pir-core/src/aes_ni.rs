//! AES-128 in counter mode on the CPU's AES instructions, written straight
//! into a row of the public matrix (see [`crate::matrix`]): eight blocks in
//! flight to cover the instructions' latency, each block stored as its four
//! entries. The same numbers as the `aes` crate's cipher with the matrix's
//! counter blocks (the tests compare them); about twice as fast, since the
//! crate's blocks go through byte arrays on the way in and out.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether this CPU has the instructions.
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("aes") && is_x86_feature_detected!("sse4.1")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The expanded key of one AES-128 key.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub struct RoundKeys([__m128i; 11]);

#[cfg(target_arch = "x86_64")]
impl RoundKeys {
    /// `None` when the CPU lacks the instructions ([`supported`]).
    pub fn new(key: &[u8; 16]) -> Option<Self> {
        // SAFETY: the CPU has AES-NI and SSE4.1 (checked by `supported`).
        supported().then(|| unsafe { expand_key(key) })
    }

    /// Columns `start .. start + out.len()` of row `row`: entries `4c ..
    /// 4c + 4` are the encryption of counter block `c` (the row, then `c`,
    /// little-endian, then zeros). `start` must be a multiple of 4.
    pub fn columns(&self, row: u32, start: usize, out: &mut [u32]) {
        assert_eq!(start % 4, 0, "AES expands from whole blocks of 4 columns");
        let first = (start / 4) as u32;
        if wide() {
            // SAFETY: the CPU has VAES and AVX2 (checked just above);
            // `columns_wide` writes only within `out`.
            let whole = unsafe { columns_wide(&self.0, row, first, out) };
            // SAFETY: as below.
            return unsafe {
                columns(
                    &self.0,
                    row,
                    first.wrapping_add((whole / 4) as u32),
                    &mut out[whole..],
                )
            };
        }
        // SAFETY: a `RoundKeys` exists only where the CPU has the
        // instructions (`new`); `columns` writes only within `out`.
        unsafe { columns(&self.0, row, first, out) }
    }
}

/// # Safety
///
/// The CPU supports AES-NI and SSE4.1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "aes,sse4.1")]
unsafe fn expand_key(key: &[u8; 16]) -> RoundKeys {
    // Each round key: the previous one's words xored in a running sum,
    // then the rotated, substituted last word with the round constant.
    fn step(previous: __m128i, assist: __m128i) -> __m128i {
        // SAFETY: SSE2, which every x86-64 CPU has.
        unsafe {
            let mut k = previous;
            k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
            k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
            k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
            _mm_xor_si128(k, _mm_shuffle_epi32::<0xFF>(assist))
        }
    }
    let mut rk = [_mm_loadu_si128(key.as_ptr() as *const __m128i); 11];
    macro_rules! round {
        ($i:literal, $rcon:literal) => {
            rk[$i] = step(rk[$i - 1], _mm_aeskeygenassist_si128::<$rcon>(rk[$i - 1]));
        };
    }
    round!(1, 0x01);
    round!(2, 0x02);
    round!(3, 0x04);
    round!(4, 0x08);
    round!(5, 0x10);
    round!(6, 0x20);
    round!(7, 0x40);
    round!(8, 0x80);
    round!(9, 0x1B);
    round!(10, 0x36);
    RoundKeys(rk)
}

/// Blocks encrypted together.
#[cfg(target_arch = "x86_64")]
const IN_FLIGHT: usize = 8;

/// Whether the CPU has the 256-bit AES instructions (two blocks each).
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    is_x86_feature_detected!("vaes") && is_x86_feature_detected!("avx2")
}

/// The whole runs of `2 * IN_FLIGHT` blocks at the start of `out`, two
/// blocks a register; returns the entries written.
///
/// # Safety
///
/// The CPU supports VAES and AVX2. (It writes only within `out`.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "vaes,avx2")]
unsafe fn columns_wide(rk: &[__m128i; 11], row: u32, first: u32, out: &mut [u32]) -> usize {
    let keys = rk.map(|k| _mm256_broadcastsi128_si256(k));
    let mut counter = first;
    let whole = out.len() / (8 * IN_FLIGHT) * (8 * IN_FLIGHT);
    for chunk in out[..whole].chunks_exact_mut(8 * IN_FLIGHT) {
        let mut b = [_mm256_setzero_si256(); IN_FLIGHT];
        for (i, b) in b.iter_mut().enumerate() {
            let c = counter.wrapping_add(2 * i as u32);
            let pair = _mm256_set_epi32(
                0,
                0,
                c.wrapping_add(1) as i32,
                row as i32,
                0,
                0,
                c as i32,
                row as i32,
            );
            *b = _mm256_xor_si256(pair, keys[0]);
        }
        for key in &keys[1..10] {
            for b in b.iter_mut() {
                *b = _mm256_aesenc_epi128(*b, *key);
            }
        }
        for (b, entries) in b.iter().zip(chunk.chunks_exact_mut(8)) {
            // SAFETY: `entries` is 8 entries, 32 bytes.
            _mm256_storeu_si256(
                entries.as_mut_ptr() as *mut __m256i,
                _mm256_aesenclast_epi128(*b, keys[10]),
            );
        }
        counter = counter.wrapping_add(2 * IN_FLIGHT as u32);
    }
    whole
}

/// # Safety
///
/// The CPU supports AES-NI and SSE4.1. (It writes only within `out`.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "aes,sse4.1")]
unsafe fn columns(rk: &[__m128i; 11], row: u32, first: u32, out: &mut [u32]) {
    let encrypt = |counter: u32| -> [__m128i; IN_FLIGHT] {
        let mut b = [_mm_setzero_si128(); IN_FLIGHT];
        for (i, b) in b.iter_mut().enumerate() {
            let block = _mm_set_epi32(0, 0, counter.wrapping_add(i as u32) as i32, row as i32);
            *b = _mm_xor_si128(block, rk[0]);
        }
        for key in &rk[1..10] {
            for b in b.iter_mut() {
                *b = _mm_aesenc_si128(*b, *key);
            }
        }
        b.map(|b| _mm_aesenclast_si128(b, rk[10]))
    };
    let mut counter = first;
    let mut chunks = out.chunks_exact_mut(4 * IN_FLIGHT);
    for chunk in &mut chunks {
        for (block, entries) in encrypt(counter).iter().zip(chunk.chunks_exact_mut(4)) {
            // SAFETY: `entries` is 4 entries, 16 bytes.
            _mm_storeu_si128(entries.as_mut_ptr() as *mut __m128i, *block);
        }
        counter = counter.wrapping_add(IN_FLIGHT as u32);
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let mut words = [0u32; 4 * IN_FLIGHT];
        for (block, entries) in encrypt(counter).iter().zip(words.chunks_exact_mut(4)) {
            // SAFETY: `entries` is 4 entries, 16 bytes.
            _mm_storeu_si128(entries.as_mut_ptr() as *mut __m128i, *block);
        }
        rest.copy_from_slice(&words[..rest.len()]);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use aes::cipher::{BlockEncrypt, KeyInit};

    /// The crate's cipher on the matrix's counter blocks, entry by entry.
    fn reference(key: &[u8; 16], row: u32, first: u32, len: usize) -> Vec<u32> {
        let cipher = aes::Aes128::new(key.into());
        (0..len.div_ceil(4) as u32)
            .flat_map(|i| {
                let mut block = [0u8; 16];
                block[..4].copy_from_slice(&row.to_le_bytes());
                block[4..8].copy_from_slice(&first.wrapping_add(i).to_le_bytes());
                let mut block = block.into();
                cipher.encrypt_block(&mut block);
                let bytes: [u8; 16] = block.into();
                let words: [u32; 4] = bytemuck::cast(bytes);
                words.map(u32::from_le)
            })
            .take(len)
            .collect()
    }

    /// The eight-block loop alone (what a CPU without VAES runs), the
    /// sixteen-block one alone, and both as `columns` joins them, over
    /// long runs, tails and a counter that wraps past 2^32 - 1.
    #[test]
    fn each_path_is_the_crates_cipher() {
        let key = [7u8; 16];
        let Some(keys) = RoundKeys::new(&key) else {
            return;
        };
        for first in [0u32, 5, u32::MAX - 40] {
            for len in [0usize, 1, 5, 32, 33, 100, 2048 + 77] {
                let want = reference(&key, 9, first, len);
                let mut got = vec![0u32; len];
                // SAFETY: `RoundKeys::new` found the instructions.
                unsafe { columns(&keys.0, 9, first, &mut got) };
                assert_eq!(got, want, "eight blocks, from {first}, {len} entries");
                if wide() {
                    let mut got = vec![0u32; len];
                    // SAFETY: `wide` found VAES and AVX2.
                    let whole = unsafe { columns_wide(&keys.0, 9, first, &mut got) };
                    assert_eq!(got[..whole], want[..whole], "sixteen, from {first}, {len}");
                }
                let mut got = vec![0u32; len];
                keys.columns(9, first as usize * 4, &mut got);
                assert_eq!(got, want, "joined, from {first}, {len} entries");
            }
        }
    }
}
