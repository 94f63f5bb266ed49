//! Vector x database products over Z_2^32: the hot loop of answers and of
//! the hint (whose "vectors" are the rows of the public matrix).
//!
//! A vector is first byte-sliced ([`SlicedVec`]): for each group of 4 rows
//! and each byte position t, the t-th bytes of the 4 entries are packed in a
//! u32. Then `v . d = sum_t 2^(8t) (v_t . d)` where each `v_t . d` is a
//! u8 x i8 dot product with 32-bit wrapping accumulation, which AVX-512 VNNI
//! (`vpdpbusd`) does 64 at a time. Wrapping mod 2^32 is exactly the ring we
//! work in, so every path gives bit-identical results.

use std::ops::Range;

use crate::db::{EncodedDb, LANE_COLS};

/// Groups of 4 rows processed per cache tile.
pub const TILE_GROUPS: usize = 128;

/// A vector of database length in byte-sliced form.
#[derive(Clone, Debug, Default)]
pub struct SlicedVec {
    planes: Vec<[u32; 4]>,
}

impl SlicedVec {
    /// Slices `v` (length a multiple of 4).
    pub fn new(v: &[u32]) -> Self {
        let mut s = SlicedVec::default();
        s.refill(v);
        s
    }

    /// Re-slices into the existing allocation.
    pub fn refill(&mut self, v: &[u32]) {
        debug_assert_eq!(v.len() % 4, 0);
        self.planes.clear();
        self.planes.extend(v.chunks_exact(4).map(slice_group));
    }

    pub fn planes(&self) -> &[[u32; 4]] {
        &self.planes
    }
}

#[inline]
fn slice_group(q: &[u32]) -> [u32; 4] {
    let word = |t: u32| {
        let b = |i: usize| (q[i] >> (8 * t)) & 0xFF;
        b(0) | (b(1) << 8) | (b(2) << 16) | (b(3) << 24)
    };
    [word(0), word(1), word(2), word(3)]
}

#[inline]
fn unslice_group(p: &[u32; 4]) -> [u32; 4] {
    std::array::from_fn(|i| {
        let b = |t: usize| (p[t] >> (8 * i)) & 0xFF;
        b(0) | (b(1) << 8) | (b(2) << 16) | (b(3) << 24)
    })
}

/// Which implementation of the inner loop runs on this CPU.
pub fn kernel_name() -> &'static str {
    if has_vnni() {
        "avx512-vnni"
    } else {
        "portable"
    }
}

fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static VNNI: OnceLock<bool> = OnceLock::new();
        *VNNI.get_or_init(|| {
            std::env::var_os("ETHPIR_PORTABLE_KERNEL").is_none()
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Adds `vec . D[groups, panel]` into `out` (the panel's columns) for each
/// vector. `vecs[q]` holds the sliced entries of the groups in `groups`
/// (index 0 = `groups.start`). The D tile is reused across vectors.
pub fn accumulate_panel(
    db: &EncodedDb,
    panel: usize,
    groups: Range<usize>,
    vecs: &[&[[u32; 4]]],
    outs: &mut [&mut [u32]],
) {
    let (_, width) = db.panel_columns(panel);
    let data = db.panel(panel);
    let group_bytes = width * 4;
    let mut start = groups.start;
    while start < groups.end {
        let end = (start + TILE_GROUPS).min(groups.end);
        let tile = &data[start * group_bytes..end * group_bytes];
        for (v, out) in vecs.iter().zip(outs.iter_mut()) {
            let planes = &v[start - groups.start..end - groups.start];
            tile_product(tile, width, planes, out);
        }
        start = end;
    }
}

/// `out += planes . tile` for one tile of one panel.
fn tile_product(tile: &[i8], width: usize, planes: &[[u32; 4]], out: &mut [u32]) {
    debug_assert_eq!(tile.len(), planes.len() * width * 4);
    debug_assert_eq!(width % LANE_COLS, 0);
    #[cfg(target_arch = "x86_64")]
    if has_vnni() {
        // SAFETY: the CPU supports the features (checked above) and the
        // slices have the lengths the kernel reads (asserted above).
        unsafe {
            match width / LANE_COLS {
                1 => vnni::tile::<1>(tile, planes, out),
                2 => vnni::tile::<2>(tile, planes, out),
                3 => vnni::tile::<3>(tile, planes, out),
                _ => vnni::tile::<4>(tile, planes, out),
            }
        }
        return;
    }
    portable_tile(tile, width, planes, out);
}

fn portable_tile(tile: &[i8], width: usize, planes: &[[u32; 4]], out: &mut [u32]) {
    for (g, p) in planes.iter().enumerate() {
        let v = unslice_group(p);
        let rows = &tile[g * width * 4..(g + 1) * width * 4];
        for (o, d) in out[..width].iter_mut().zip(rows.chunks_exact(4)) {
            let dot = v[0]
                .wrapping_mul(d[0] as i32 as u32)
                .wrapping_add(v[1].wrapping_mul(d[1] as i32 as u32))
                .wrapping_add(v[2].wrapping_mul(d[2] as i32 as u32))
                .wrapping_add(v[3].wrapping_mul(d[3] as i32 as u32));
            *o = o.wrapping_add(dot);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    /// `out[..NB*16] += planes . tile` with NB lane groups of 16 columns.
    #[allow(clippy::needless_range_loop)] // explicit indices keep the accumulators in registers
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn tile<const NB: usize>(tile: &[i8], planes: &[[u32; 4]], out: &mut [u32]) {
        let mut acc = [[_mm512_setzero_si512(); NB]; 4];
        let mut ptr = tile.as_ptr();
        for p in planes {
            let b0 = _mm512_set1_epi32(p[0] as i32);
            let b1 = _mm512_set1_epi32(p[1] as i32);
            let b2 = _mm512_set1_epi32(p[2] as i32);
            let b3 = _mm512_set1_epi32(p[3] as i32);
            for blk in 0..NB {
                let d = _mm512_loadu_si512(ptr.add(blk * 64) as *const _);
                acc[0][blk] = _mm512_dpbusd_epi32(acc[0][blk], b0, d);
                acc[1][blk] = _mm512_dpbusd_epi32(acc[1][blk], b1, d);
                acc[2][blk] = _mm512_dpbusd_epi32(acc[2][blk], b2, d);
                acc[3][blk] = _mm512_dpbusd_epi32(acc[3][blk], b3, d);
            }
            ptr = ptr.add(NB * 64);
        }
        for blk in 0..NB {
            let sum = _mm512_add_epi32(
                _mm512_add_epi32(acc[0][blk], _mm512_slli_epi32::<8>(acc[1][blk])),
                _mm512_add_epi32(
                    _mm512_slli_epi32::<16>(acc[2][blk]),
                    _mm512_slli_epi32::<24>(acc[3][blk]),
                ),
            );
            let o = out.as_mut_ptr().add(blk * 16) as *mut __m512i;
            _mm512_storeu_si512(o, _mm512_add_epi32(_mm512_loadu_si512(o as *const _), sum));
        }
    }
}

/// Reference product `v . D` straight from element accessors; tests use it
/// to check the fast paths.
pub fn reference_product(db: &EncodedDb, v: &[u32]) -> Vec<u32> {
    let cols = db.shape().cols();
    let mut out = vec![0u32; cols];
    for (r, &x) in v.iter().enumerate().take(db.shape().rows()) {
        for (j, o) in out.iter_mut().enumerate() {
            *o = o.wrapping_add(x.wrapping_mul(db.get(r, j) as i32 as u32));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slicing_round_trips() {
        let v = [0x0102_0304u32, 0xA0B0_C0D0, 7, u32::MAX];
        assert_eq!(unslice_group(&slice_group(&v)), v);
    }

    #[test]
    fn portable_and_vnni_tiles_agree() {
        let width = 48;
        let groups = 37;
        let tile: Vec<i8> = (0..groups * width * 4)
            .map(|i| (i * 7919 % 256) as u8 as i8)
            .collect();
        let v: Vec<u32> = (0..groups * 4)
            .map(|i| (i as u32).wrapping_mul(0x9E37_79B9))
            .collect();
        let planes = SlicedVec::new(&v);
        let mut fast = vec![3u32; width];
        tile_product(&tile, width, planes.planes(), &mut fast);
        let mut slow = vec![3u32; width];
        portable_tile(&tile, width, planes.planes(), &mut slow);
        assert_eq!(fast, slow);
    }
}
