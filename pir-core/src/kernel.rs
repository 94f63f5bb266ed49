//! Vector x database products over Z_2^32: the hot loop of answers and of
//! the hint (whose "vectors" are the rows of the public matrix).
//!
//! The database holds `i8` entries; vectors hold `u32` entries. Every kernel
//! computes `out[c] += sum_r v[r] * d[r][c]` with wrapping 32-bit
//! arithmetic, which is exactly the ring Z_2^32 we work in, so every kernel
//! gives bit-identical results. They differ in how a vector is split before
//! the loop ([`SlicedVec`]), 16 bytes per group of 4 rows either way:
//!
//! - [`Kernel::Avx512Vnni`]: byte slices. For each byte position t the t-th
//!   bytes of the group's 4 entries are packed in a u32; then
//!   `v . d = sum_t 2^(8t) (v_t . d)` where each `v_t . d` is a u8 x i8 dot
//!   product (`vpdpbusd`, 64 at a time, no saturation).
//! - [`Kernel::Avx2`] and [`Kernel::Portable`]: signed 16-bit halves.
//!   `v = lo + 2^16 hi (mod 2^32)` with `lo, hi` in `[-2^15, 2^15)`; then
//!   `v . d = lo . d + 2^16 (hi . d)`. Each product `|lo * d| <= 2^22`, so a
//!   pair sum (`vpmaddwd`) never overflows i32: no saturation anywhere
//!   (`vpmaddubsw` on byte slices would saturate at 255 * -128 * 2).
//!
//! The kernel is chosen once per process: the best the CPU has, or the one
//! named by the `ETHPIR_KERNEL` environment variable (or [`select`]), which
//! must be one the CPU supports.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::db::{EncodedDb, LANE_COLS, PANEL_COLS};

/// Groups of 4 rows processed per cache tile.
pub const TILE_GROUPS: usize = 128;

/// Environment variable that forces a kernel (`avx512-vnni`, `avx2`,
/// `portable`).
pub const KERNEL_ENV: &str = "ETHPIR_KERNEL";

/// An implementation of the inner product loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// AVX-512 F/BW/VNNI: `vpdpbusd` on byte slices, 64 products a step.
    Avx512Vnni,
    /// AVX2: `vpmaddwd` on 16-bit halves, 16 products a step.
    Avx2,
    /// Plain Rust in the 16-bit-halves form, vectorised by the compiler for
    /// the baseline target.
    Portable,
}

/// Why a kernel name was refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum KernelError {
    #[error("unknown kernel {0:?} (expected one of: avx512-vnni, avx2, portable)")]
    Unknown(String),
    #[error("this CPU does not support the {0} kernel (it supports: {1})")]
    Unsupported(Kernel, String),
}

impl Kernel {
    /// Every kernel, fastest first.
    pub const ALL: [Kernel; 3] = [Kernel::Avx512Vnni, Kernel::Avx2, Kernel::Portable];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512Vnni => "avx512-vnni",
            Kernel::Avx2 => "avx2",
            Kernel::Portable => "portable",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx512Vnni | Kernel::Avx2 => false,
            Kernel::Portable => true,
        }
    }

    /// The kernels this CPU supports, fastest first.
    pub fn supported() -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_supported())
            .collect()
    }

    /// The fastest kernel this CPU supports.
    pub fn best() -> Kernel {
        Kernel::supported()[0]
    }

    /// `name` as a kernel this CPU supports.
    pub fn parse_supported(name: &str) -> Result<Kernel, KernelError> {
        let kernel: Kernel = name.parse()?;
        if !kernel.is_supported() {
            let names: Vec<&str> = Kernel::supported().iter().map(|k| k.name()).collect();
            return Err(KernelError::Unsupported(kernel, names.join(", ")));
        }
        Ok(kernel)
    }

    fn slicing(self) -> Slicing {
        match self {
            Kernel::Avx512Vnni => Slicing::Bytes,
            Kernel::Avx2 | Kernel::Portable => Slicing::Halves,
        }
    }

    fn code(self) -> u8 {
        match self {
            Kernel::Avx512Vnni => 1,
            Kernel::Avx2 => 2,
            Kernel::Portable => 3,
        }
    }

    fn from_code(code: u8) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.code() == code)
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kernel {
    type Err = KernelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| KernelError::Unknown(s.to_string()))
    }
}

/// The process-wide kernel (0 = not chosen yet).
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// Forces `kernel` for the rest of the process. Refuses one the CPU lacks.
pub fn select(kernel: Kernel) -> Result<(), KernelError> {
    let kernel = Kernel::parse_supported(kernel.name())?;
    ACTIVE.store(kernel.code(), Ordering::Relaxed);
    Ok(())
}

/// Reads [`KERNEL_ENV`]: the kernel it names (checked against the CPU), or
/// `None` when it is unset or empty. Binaries call this at start so that a
/// bad value is a clear error rather than a surprise.
pub fn kernel_from_env() -> Result<Option<Kernel>, KernelError> {
    match std::env::var(KERNEL_ENV) {
        Ok(name) if !name.trim().is_empty() => Kernel::parse_supported(&name).map(Some),
        _ => Ok(None),
    }
}

/// Chooses the process's kernel from [`KERNEL_ENV`] (or the best this CPU
/// has) and returns it: what a binary calls at start, so that a bad value is
/// a clear error and the log can say which kernel runs.
pub fn init_from_env() -> Result<Kernel, KernelError> {
    let kernel = kernel_from_env()?.unwrap_or_else(Kernel::best);
    select(kernel)?;
    Ok(kernel)
}

/// The kernel products use: the one [`select`]ed, else the one
/// [`KERNEL_ENV`] names, else the best this CPU has.
///
/// # Panics
///
/// When [`KERNEL_ENV`] names an unknown kernel or one this CPU lacks and
/// nothing was [`select`]ed: forcing a kernel is a test and benchmark
/// setting, and silently running another one would make its figures lie.
pub fn active() -> Kernel {
    if let Some(k) = Kernel::from_code(ACTIVE.load(Ordering::Relaxed)) {
        return k;
    }
    let chosen = match kernel_from_env() {
        Ok(forced) => forced.unwrap_or_else(Kernel::best),
        Err(e) => panic!("{KERNEL_ENV}: {e}"),
    };
    ACTIVE.store(chosen.code(), Ordering::Relaxed);
    chosen
}

/// Name of the kernel products use (see [`active`]).
pub fn kernel_name() -> &'static str {
    active().name()
}

/// How a vector is split for its kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slicing {
    /// `[w0, w1, w2, w3]`: word t packs byte t of the group's 4 entries.
    Bytes,
    /// `[lo01, lo23, hi01, hi23]`: 16-bit halves, two entries a word.
    Halves,
}

/// A vector of database length, split for one kernel: 16 bytes per group
/// of 4 entries.
#[derive(Clone, Debug)]
pub struct SlicedVec {
    kernel: Kernel,
    planes: Vec<[u32; 4]>,
}

impl SlicedVec {
    /// Splits `v` (length a multiple of 4) for the [`active`] kernel.
    pub fn new(v: &[u32]) -> Self {
        SlicedVec::for_kernel(active(), v)
    }

    /// Splits `v` (length a multiple of 4) for `kernel`.
    pub fn for_kernel(kernel: Kernel, v: &[u32]) -> Self {
        let mut s = SlicedVec::empty(kernel);
        s.refill(v);
        s
    }

    /// An empty vector for `kernel`, to [`refill`](Self::refill).
    pub fn empty(kernel: Kernel) -> Self {
        SlicedVec {
            kernel,
            planes: Vec::new(),
        }
    }

    /// Re-splits into the existing allocation.
    pub fn refill(&mut self, v: &[u32]) {
        assert_eq!(v.len() % 4, 0, "vector length must be a multiple of 4");
        self.planes.clear();
        match self.kernel.slicing() {
            Slicing::Bytes => self.planes.extend(v.chunks_exact(4).map(slice_bytes)),
            Slicing::Halves => self.planes.extend(v.chunks_exact(4).map(slice_halves)),
        }
    }

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    pub fn planes(&self) -> &[[u32; 4]] {
        &self.planes
    }
}

#[inline]
fn slice_bytes(q: &[u32]) -> [u32; 4] {
    let word = |t: u32| {
        let b = |i: usize| (q[i] >> (8 * t)) & 0xFF;
        b(0) | (b(1) << 8) | (b(2) << 16) | (b(3) << 24)
    };
    [word(0), word(1), word(2), word(3)]
}

/// `v = lo + 2^16 hi (mod 2^32)`, both halves signed 16-bit.
#[inline]
fn split_halves(v: u32) -> (u16, u16) {
    let lo = v as u16;
    let hi = (v.wrapping_sub(lo as i16 as i32 as u32) >> 16) as u16;
    (lo, hi)
}

#[inline]
fn slice_halves(q: &[u32]) -> [u32; 4] {
    let h: [(u16, u16); 4] = std::array::from_fn(|i| split_halves(q[i]));
    let pack = |a: u16, b: u16| a as u32 | ((b as u32) << 16);
    [
        pack(h[0].0, h[1].0),
        pack(h[2].0, h[3].0),
        pack(h[0].1, h[1].1),
        pack(h[2].1, h[3].1),
    ]
}

/// Adds `vec . D[groups, panel]` into `out` (the panel's columns) for each
/// vector. `vecs[q]` holds the sliced entries of the groups in `groups`
/// (index 0 = `groups.start`), all split for `kernel`. The D tile is reused
/// across vectors while it is in cache.
pub fn accumulate_panel(
    kernel: Kernel,
    db: &EncodedDb,
    panel: usize,
    groups: Range<usize>,
    vecs: &[&[[u32; 4]]],
    outs: &mut [&mut [u32]],
) {
    let (_, width) = db.panel_columns(panel);
    let data = db.panel(panel);
    let group_bytes = width * 4;
    assert!(
        groups.end * group_bytes <= data.len(),
        "groups out of range"
    );
    assert_eq!(vecs.len(), outs.len(), "one output per vector");
    let mut start = groups.start;
    while start < groups.end {
        let end = (start + TILE_GROUPS).min(groups.end);
        let tile = &data[start * group_bytes..end * group_bytes];
        let range = start - groups.start..end - groups.start;
        let planes = |q: usize| &vecs[q][range.clone()];
        let mut q = 0;
        while q < vecs.len() {
            if q + 1 < vecs.len() {
                let (first, second) = outs.split_at_mut(q + 1);
                let pair = [planes(q), planes(q + 1)];
                tile_product_pair(kernel, tile, width, pair, [&mut *first[q], &mut *second[0]]);
                q += 2;
            } else {
                tile_product(kernel, tile, width, planes(q), outs[q]);
                q += 1;
            }
        }
        start = end;
    }
}

/// [`tile_product`] for two vectors at once: on AVX2 each group's entries
/// are widened to 16 bits once for both vectors (5.5 instructions for 16
/// multiply-adds of a vector instead of 6: about 15 % faster on a Zen 3
/// core); on the other kernels, one vector after the other.
pub fn tile_product_pair(
    kernel: Kernel,
    tile: &[i8],
    width: usize,
    planes: [&[[u32; 4]]; 2],
    outs: [&mut [u32]; 2],
) {
    let [first, second] = outs;
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            assert!(kernel.is_supported(), "avx2 kernel on a CPU without it");
            assert!(
                width > 0 && width.is_multiple_of(LANE_COLS) && width <= PANEL_COLS,
                "panel width {width} is not a whole number of lane groups"
            );
            for (p, out) in planes.iter().zip([&*first, &*second]) {
                assert_eq!(tile.len(), p.len() * width * 4, "tile size");
                assert!(out.len() >= width, "output shorter than the panel");
            }
            // SAFETY: the CPU has AVX2; both vectors cover the tile's
            // groups and both outputs the panel's width (asserted above).
            unsafe { avx2::tile_pair(tile, width, planes, [first, second]) }
        }
        _ => {
            tile_product(kernel, tile, width, planes[0], first);
            tile_product(kernel, tile, width, planes[1], second);
        }
    }
}

/// `out[..width] += planes . tile` for one tile of one panel (`width` a
/// multiple of [`LANE_COLS`], at most [`PANEL_COLS`]).
pub fn tile_product(
    kernel: Kernel,
    tile: &[i8],
    width: usize,
    planes: &[[u32; 4]],
    out: &mut [u32],
) {
    assert!(
        width > 0 && width.is_multiple_of(LANE_COLS) && width <= PANEL_COLS,
        "panel width {width} is not a whole number of lane groups"
    );
    assert_eq!(tile.len(), planes.len() * width * 4, "tile size");
    assert!(out.len() >= width, "output shorter than the panel");
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Vnni => {
            assert!(
                kernel.is_supported(),
                "avx512-vnni kernel on a CPU without it"
            );
            // SAFETY: the CPU has the features (asserted above); the tile
            // holds `planes.len()` groups of `width` columns and `out` has
            // `width` elements (asserted above), which is all the kernel
            // reads and writes.
            unsafe {
                match width / LANE_COLS {
                    1 => vnni::tile::<1>(tile, planes, out),
                    2 => vnni::tile::<2>(tile, planes, out),
                    3 => vnni::tile::<3>(tile, planes, out),
                    _ => vnni::tile::<4>(tile, planes, out),
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            assert!(kernel.is_supported(), "avx2 kernel on a CPU without it");
            // SAFETY: as above, for AVX2.
            unsafe { avx2::tile(tile, width, planes, out) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Avx512Vnni | Kernel::Avx2 => {
            unreachable!("{kernel} is never supported off x86-64")
        }
        Kernel::Portable => portable::tile(tile, width, planes, out),
    }
}

/// `tiles[q] += row` where `signs[q]` is 1, `-= row` where it is -1
/// (`tiles` holds `signs.len()` tiles of `row.len()` entries, one after
/// another): one expanded row of `A` added into each query of a group
/// being prepared. Plain Rust, compiled again for the kernel's vector width
/// (the baseline target would use 128-bit vectors only).
pub fn add_signed_row(kernel: Kernel, tiles: &mut [u32], signs: &[i8], row: &[u32]) {
    assert_eq!(tiles.len(), signs.len() * row.len(), "one tile per sign");
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Vnni => {
            assert!(kernel.is_supported(), "avx512 kernel on a CPU without it");
            // SAFETY: the CPU has AVX-512 F (asserted above); the body is
            // safe Rust, every access bounds-checked.
            unsafe { signed::add_avx512(tiles, signs, row) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            assert!(kernel.is_supported(), "avx2 kernel on a CPU without it");
            // SAFETY: as above, for AVX2.
            unsafe { signed::add_avx2(tiles, signs, row) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Avx512Vnni | Kernel::Avx2 => {
            unreachable!("{kernel} is never supported off x86-64")
        }
        Kernel::Portable => signed::add(tiles, signs, row),
    }
}

/// Rows of `A` added into the queries being prepared, a block of rows at a
/// time: `accs[q] += sum_r signs[r * queries + q] * rows[r]` for each of the
/// `queries = accs.len() / width` accumulators (one after another, `width`
/// entries each), every sign -1, 0 or 1. `rows` holds one row per
/// `queries` signs, row `r` at `rows[r * stride..][..width]`: a stride
/// that is no multiple of 4 KiB keeps the rows' same columns out of one
/// L1 cache set. The same numbers as [`add_signed_row`] row after row; but
/// where that one loads and stores every accumulator for every row
/// (traffic between the cache levels that a batch of 96 queries' tiles,
/// 768 KiB, made the bound), this one keeps a few accumulators' columns in
/// registers through the whole block.
pub fn add_signed_rows(
    kernel: Kernel,
    accs: &mut [u32],
    width: usize,
    signs: &[i8],
    rows: &[u32],
    stride: usize,
) {
    assert!(width > 0, "rows of no columns");
    assert_eq!(accs.len() % width, 0, "whole accumulators");
    let queries = accs.len() / width;
    let count = signs.len().checked_div(queries).unwrap_or(0);
    assert_eq!(signs.len(), count * queries, "one sign per row and query");
    assert!(
        signs.iter().all(|s| (-1..=1).contains(s)),
        "a sign other than -1, 0 or 1"
    );
    let rows = Rows::new(rows, width, stride, count);
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Vnni | Kernel::Avx2 if queries >= TABLES_FROM => {
            assert!(kernel.is_supported(), "{kernel} kernel on a CPU without it");
            assert!(is_x86_feature_detected!("avx2"), "AVX2 for the tables");
            // SAFETY: the CPU has AVX2 (asserted just above); the lengths
            // the kernel relies on are asserted above and again inside.
            unsafe { signs_avx2::add_rows(accs, signs, rows) }
        }
        _ => {
            for (r, signs) in signs.chunks_exact(queries.max(1)).enumerate() {
                add_signed_row(kernel, accs, signs, rows.row(r));
            }
        }
    }
}

/// Queries from which [`add_signed_rows`] makes tables of signed sums
/// (their cost, shared by the queries, is about one add per entry).
pub const TABLES_FROM: usize = 8;

/// The rows of [`add_signed_rows`].
#[derive(Clone, Copy)]
struct Rows<'a> {
    data: &'a [u32],
    width: usize,
    stride: usize,
    count: usize,
}

impl<'a> Rows<'a> {
    /// # Panics
    ///
    /// When rows overlap (`stride < width`) or would lie past `data`'s
    /// end (checked without overflow).
    fn new(data: &'a [u32], width: usize, stride: usize, count: usize) -> Self {
        let rows = Rows {
            data,
            width,
            stride,
            count,
        };
        assert!(stride >= width, "overlapping rows");
        assert!(rows.fit(), "rows past their data");
        rows
    }

    /// Whether every row lies within `data`.
    fn fit(&self) -> bool {
        let span = match self.count {
            0 => Some(0),
            count => (count - 1)
                .checked_mul(self.stride)
                .and_then(|start| start.checked_add(self.width)),
        };
        span.is_some_and(|span| span <= self.data.len())
    }

    fn row(&self, r: usize) -> &'a [u32] {
        &self.data[r * self.stride..][..self.width]
    }
}

/// [`add_signed_row`]'s body, and its copies for wider vectors.
mod signed {
    #[inline(always)]
    pub(super) fn add(tiles: &mut [u32], signs: &[i8], row: &[u32]) {
        for (tile, &sign) in tiles.chunks_exact_mut(row.len()).zip(signs) {
            match sign {
                1 => tile
                    .iter_mut()
                    .zip(row)
                    .for_each(|(a, &x)| *a = a.wrapping_add(x)),
                -1 => tile
                    .iter_mut()
                    .zip(row)
                    .for_each(|(a, &x)| *a = a.wrapping_sub(x)),
                _ => {}
            }
        }
    }

    /// # Safety
    ///
    /// The CPU supports AVX-512 F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn add_avx512(tiles: &mut [u32], signs: &[i8], row: &[u32]) {
        add(tiles, signs, row)
    }

    /// # Safety
    ///
    /// The CPU supports AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn add_avx2(tiles: &mut [u32], signs: &[i8], row: &[u32]) {
        add(tiles, signs, row)
    }
}

/// [`add_signed_rows`] on AVX2 by tables ("four Russians"): the rows are
/// taken three at a time, and for each eight columns the 27 signed sums of
/// a triple (`-r0 - r1 - r2` to `r0 + r1 + r2`) are made once; then each
/// query adds the one its three signs pick, one load-and-add for 24 of its
/// entries instead of three row additions. The tables cost about one add
/// per entry, shared by every query, so this pays from [`super::TABLES_FROM`]
/// queries.
#[cfg(target_arch = "x86_64")]
mod signs_avx2 {
    use std::arch::x86_64::*;

    use zeroize::Zeroize;

    /// Accumulators kept in registers at once (of AVX2's 16).
    const HELD: usize = 8;

    /// Rows per table, and its entries.
    const TRIPLE: usize = 3;
    const ENTRIES: usize = 27;

    /// # Safety
    ///
    /// The CPU supports AVX2; `accs.len()` is a whole multiple of
    /// `rows.width > 0`; `signs.len()` is `rows.count` times the
    /// accumulators; every row lies within `rows.data`. All are checked
    /// with `assert!` here. (A sign outside -1, 0 and 1, refused by
    /// [`super::add_signed_rows`], would pick a wrong entry or panic on
    /// the tables' bounds, never reach past them.)
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn add_rows(accs: &mut [u32], signs: &[i8], rows: super::Rows) {
        let width = rows.width;
        assert!(width > 0 && accs.len().is_multiple_of(width));
        let queries = accs.len() / width;
        assert_eq!(
            signs.len(),
            rows.count * queries,
            "one sign per row and query"
        );
        assert!(rows.fit(), "rows past their data");
        let triples = rows.count.div_ceil(TRIPLE);
        let mut picks = picks(signs, queries, rows.count);
        let mut tables = vec![_mm256_setzero_si256(); triples * ENTRIES];
        let vector_cols = width / 8 * 8;
        for col in (0..vector_cols).step_by(8) {
            fill_tables(&mut tables, rows, col);
            let mut first = 0;
            while first < queries {
                let held = (queries - first).min(HELD);
                let block = Block {
                    accs: &mut *accs,
                    width,
                    queries,
                    first,
                    col,
                    tables: &tables,
                    picks: &picks,
                };
                match held {
                    8 => block.run::<8>(),
                    7 => block.run::<7>(),
                    6 => block.run::<6>(),
                    5 => block.run::<5>(),
                    4 => block.run::<4>(),
                    3 => block.run::<3>(),
                    2 => block.run::<2>(),
                    _ => block.run::<1>(),
                }
                first += held;
            }
        }
        // The picks spell the secrets' signs.
        picks.zeroize();
        if vector_cols == width {
            return;
        }
        // The columns past the last whole vector, one by one.
        for (r, signs) in signs.chunks_exact(queries.max(1)).enumerate() {
            let row = rows.row(r);
            for (acc, &sign) in accs.chunks_exact_mut(width).zip(signs) {
                for (a, &x) in acc[vector_cols..].iter_mut().zip(&row[vector_cols..]) {
                    *a = a.wrapping_add(x.wrapping_mul(sign as i32 as u32));
                }
            }
        }
    }

    /// `picks[t * queries + q]`: the entry of triple `t`'s table that query
    /// `q`'s signs choose, as an index into all the tables (rows past the
    /// last count as sign 0).
    fn picks(signs: &[i8], queries: usize, count: usize) -> Vec<u32> {
        let triples = count.div_ceil(TRIPLE);
        let mut picks = vec![0u32; triples * queries];
        for (t, picks) in picks.chunks_exact_mut(queries.max(1)).enumerate() {
            for (q, pick) in picks.iter_mut().enumerate() {
                let digit = |j: usize| {
                    let r = t * TRIPLE + j;
                    if r < count {
                        (signs[r * queries + q] + 1) as u32
                    } else {
                        1
                    }
                };
                *pick = (t * ENTRIES) as u32 + digit(0) + 3 * digit(1) + 9 * digit(2);
            }
        }
        picks
    }

    /// Entry `d0 + 3 d1 + 9 d2` of triple `t`'s table: `(d0 - 1) r0 +
    /// (d1 - 1) r1 + (d2 - 1) r2` for columns `col..col + 8`.
    ///
    /// # Safety
    ///
    /// AVX2; `col + 8 <= rows.width`; the rows lie within `rows.data`
    /// (asserted by [`add_rows`]); `tables` holds every triple's table
    /// (asserted here).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn fill_tables(tables: &mut [__m256i], rows: super::Rows, col: usize) {
        assert!(tables.len() >= rows.count.div_ceil(TRIPLE) * ENTRIES && col + 8 <= rows.width);
        let zero = _mm256_setzero_si256();
        let load = |r: usize| {
            if r < rows.count {
                _mm256_loadu_si256(rows.data.as_ptr().add(r * rows.stride + col) as *const __m256i)
            } else {
                zero
            }
        };
        for (t, table) in tables
            .chunks_exact_mut(ENTRIES)
            .enumerate()
            .take(rows.count.div_ceil(TRIPLE))
        {
            let signed = |r: __m256i| [_mm256_sub_epi32(zero, r), zero, r];
            let [r0, r1, r2] = [0, 1, 2].map(|j| signed(load(t * TRIPLE + j)));
            for (d2, &c2) in r2.iter().enumerate() {
                for (d1, &c1) in r1.iter().enumerate() {
                    let partial = _mm256_add_epi32(c2, c1);
                    for (d0, &c0) in r0.iter().enumerate() {
                        table[d0 + 3 * d1 + 9 * d2] = _mm256_add_epi32(partial, c0);
                    }
                }
            }
        }
    }

    /// Accumulators `first..first + N`, columns `col..col + 8`.
    struct Block<'a> {
        accs: &'a mut [u32],
        width: usize,
        queries: usize,
        first: usize,
        col: usize,
        tables: &'a [__m256i],
        picks: &'a [u32],
    }

    impl Block<'_> {
        /// # Safety
        ///
        /// AVX2, and the lengths of [`add_rows`] (asserted here).
        #[inline]
        #[target_feature(enable = "avx2")]
        unsafe fn run<const N: usize>(self) {
            let Block {
                accs,
                width,
                queries,
                first,
                col,
                tables,
                picks,
            } = self;
            assert!(first + N <= queries && col + 8 <= width && accs.len() >= queries * width);
            assert!(picks.len().is_multiple_of(queries));
            let acc_ptr = accs.as_mut_ptr().add(first * width + col);
            let mut acc = [_mm256_setzero_si256(); N];
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_loadu_si256(acc_ptr.add(k * width) as *const __m256i);
            }
            for picks in picks.chunks_exact(queries) {
                let picks = &picks[first..first + N];
                for (a, &p) in acc.iter_mut().zip(picks) {
                    *a = _mm256_add_epi32(*a, tables[p as usize]);
                }
            }
            for (k, a) in acc.iter().enumerate() {
                _mm256_storeu_si256(acc_ptr.add(k * width) as *mut __m256i, *a);
            }
        }
    }
}

/// The 16-bit-halves product in plain Rust. Written as fixed-size
/// multiply-accumulates over 4 columns (16 bytes) so that the compiler turns
/// them into SIMD multiplies on any target.
mod portable {
    use crate::db::PANEL_COLS;

    /// The plain-Rust product. On x86-64 with SSE4.1 (every x86-64 CPU
    /// since 2008) the same source is compiled a second time with 32-bit
    /// SIMD multiplies available, which is what lets the vectoriser use it.
    pub(super) fn tile(tile: &[i8], width: usize, planes: &[[u32; 4]], out: &mut [u32]) {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("sse4.1") {
            // SAFETY: the CPU has SSE4.1 (checked just above); the function
            // is safe Rust otherwise, with every access bounds-checked.
            unsafe { tile_sse41(tile, width, planes, out) };
            return;
        }
        tile_generic(tile, width, planes, out);
    }

    /// # Safety
    ///
    /// The CPU supports SSE4.1.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.1")]
    unsafe fn tile_sse41(tile: &[i8], width: usize, planes: &[[u32; 4]], out: &mut [u32]) {
        tile_generic(tile, width, planes, out);
    }

    /// The low halves need full 32-bit sums; the high halves are shifted
    /// left by 16 at the end, so only their sums mod 2^16 matter and they
    /// run in 16-bit wrapping arithmetic, twice as many lanes a step.
    #[inline(always)]
    fn tile_generic(tile: &[i8], width: usize, planes: &[[u32; 4]], out: &mut [u32]) {
        let group_bytes = width * 4;
        // Element k of a group row is row k % 4 of column k / 4.
        let mut lo = [0i32; 4 * PANEL_COLS];
        let mut hi = [0i16; 4 * PANEL_COLS];
        for (g, p) in planes.iter().enumerate() {
            let row = &tile[g * group_bytes..(g + 1) * group_bytes];
            let (l, h) = patterns(p);
            for ((a, b), d) in lo[..group_bytes]
                .chunks_exact_mut(16)
                .zip(hi[..group_bytes].chunks_exact_mut(16))
                .zip(row.chunks_exact(16))
            {
                for k in 0..16 {
                    // |row * lo| <= 2^22: no overflow before the wrapping add.
                    a[k] = a[k].wrapping_add(i32::from(d[k]) * l[k]);
                    b[k] = b[k].wrapping_add(i16::from(d[k]).wrapping_mul(h[k]));
                }
            }
        }
        for (c, o) in out[..width].iter_mut().enumerate() {
            let low = lo[4 * c..4 * c + 4]
                .iter()
                .fold(0u32, |s, &x| s.wrapping_add(x as u32));
            let high = hi[4 * c..4 * c + 4]
                .iter()
                .fold(0u32, |s, &x| s.wrapping_add(x as u16 as u32));
            *o = o.wrapping_add(low.wrapping_add(high << 16));
        }
    }

    /// The group's low and high halves, repeated for four columns.
    #[inline(always)]
    fn patterns(p: &[u32; 4]) -> ([i32; 16], [i16; 16]) {
        let l = [
            p[0] as i16,
            (p[0] >> 16) as i16,
            p[1] as i16,
            (p[1] >> 16) as i16,
        ];
        let h = [
            p[2] as i16,
            (p[2] >> 16) as i16,
            p[3] as i16,
            (p[3] >> 16) as i16,
        ];
        (
            std::array::from_fn(|k| i32::from(l[k % 4])),
            std::array::from_fn(|k| h[k % 4]),
        )
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// `out[..width] += planes . tile` on 16-bit halves.
    ///
    /// Each pass covers 32 columns (128 contiguous bytes of every group row,
    /// two cache lines). For each group, eight 16-byte loads are
    /// sign-extended to 16 i16 (4 columns x 4 rows) and multiplied and
    /// pair-summed (`vpmaddwd`) with the group's low and high halves
    /// broadcast as `[v0 v1 v2 v3]`; `lo + (hi << 16)` goes into one
    /// accumulator per load, whose i32 lanes hold rows 0+1 or 2+3 of one
    /// column, folded at the end.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX2; `width` is a multiple of 16;
    /// `tile.len() == planes.len() * width * 4`; `out.len() >= width`.
    /// All are checked with `assert!` here.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn tile(tile: &[i8], width: usize, planes: &[[u32; 4]], out: &mut [u32]) {
        assert!(width.is_multiple_of(16), "width must be whole lane groups");
        assert_eq!(tile.len(), planes.len() * width * 4, "tile size");
        assert!(out.len() >= width, "output length");
        let group_bytes = width * 4;
        let mut col = 0;
        while col < width {
            // The first pass also prefetches whole group rows ahead, so the
            // later passes over the same rows find them in cache.
            let prefetch = col == 0 && width > 32;
            let base = tile.as_ptr().add(col * 4);
            if width - col >= 32 {
                pass::<8>(base, group_bytes, prefetch, planes, &mut out[col..col + 32]);
                col += 32;
            } else {
                pass::<4>(base, group_bytes, prefetch, planes, &mut out[col..col + 16]);
                col += 16;
            }
        }
    }

    /// Both vectors' `out[..width] += planes . tile`, 16 columns a pass:
    /// four 16-byte loads a group, each widened once and multiplied with
    /// both vectors' halves, into four accumulators per vector.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX2; `width` is a multiple of 16; `tile.len() ==
    /// planes[i].len() * width * 4` and `outs[i].len() >= width` for both.
    /// All are checked with `assert!` here.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn tile_pair(
        tile: &[i8],
        width: usize,
        planes: [&[[u32; 4]]; 2],
        outs: [&mut [u32]; 2],
    ) {
        assert!(width.is_multiple_of(16), "width must be whole lane groups");
        let [a, b] = planes;
        assert!(
            a.len() == b.len() && tile.len() == a.len() * width * 4,
            "tile size"
        );
        assert!(outs.iter().all(|o| o.len() >= width), "output length");
        let [out_a, out_b] = outs;
        let group_bytes = width * 4;
        for col in (0..width).step_by(16) {
            let prefetch = col == 0 && width > 32;
            let mut acc = [[_mm256_setzero_si256(); 4]; 2];
            let mut ptr = tile.as_ptr().add(col * 4);
            for (p, q) in a.iter().zip(b) {
                if prefetch {
                    prefetch_ahead(ptr, group_bytes);
                }
                let halves = [halves(p), halves(q)];
                for j in 0..4 {
                    let d = _mm256_cvtepi8_epi16(_mm_loadu_si128(ptr.add(16 * j) as *const _));
                    for (acc, &(vl, vh)) in acc.iter_mut().zip(&halves) {
                        acc[j] = _mm256_add_epi32(acc[j], product(d, vl, vh));
                    }
                }
                ptr = ptr.add(group_bytes);
            }
            fold(&acc[0], &mut out_a[col..col + 16]);
            fold(&acc[1], &mut out_b[col..col + 16]);
        }
    }

    /// Groups ahead that the first pass prefetches.
    const PREFETCH_GROUPS: usize = 6;

    /// `out[..LOADS * 4] += planes . D` for the `LOADS * 4` columns starting
    /// at `base` of every group row.
    ///
    /// # Safety
    ///
    /// AVX2; `base + g * group_bytes + LOADS * 16` is within the tile for
    /// every group `g < planes.len()`; `out.len() >= LOADS * 4` (asserted).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn pass<const LOADS: usize>(
        base: *const i8,
        group_bytes: usize,
        prefetch: bool,
        planes: &[[u32; 4]],
        out: &mut [u32],
    ) {
        assert!(out.len() >= LOADS * 4, "output length");
        let mut acc = [_mm256_setzero_si256(); LOADS];
        let mut ptr = base;
        for p in planes {
            if prefetch {
                prefetch_ahead(ptr, group_bytes);
            }
            let (vl, vh) = halves(p);
            for (j, a) in acc.iter_mut().enumerate() {
                let d = _mm256_cvtepi8_epi16(_mm_loadu_si128(ptr.add(16 * j) as *const _));
                *a = _mm256_add_epi32(*a, product(d, vl, vh));
            }
            ptr = ptr.add(group_bytes);
        }
        fold(&acc, out);
    }

    /// Prefetches the group row [`PREFETCH_GROUPS`] ahead of `ptr`, so that
    /// the later passes over the same rows find them in cache.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn prefetch_ahead(ptr: *const i8, group_bytes: usize) {
        // A hint only: an address past the tile is never read.
        let ahead = ptr.wrapping_add(PREFETCH_GROUPS * group_bytes);
        for line in (0..group_bytes).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
        }
    }

    /// Sixteen widened entries (4 columns x 4 rows) times a group's halves:
    /// `lo . d + 2^16 (hi . d)`, a column's rows 0+1 and 2+3 in adjacent
    /// lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn product(d: __m256i, vl: __m256i, vh: __m256i) -> __m256i {
        let lo = _mm256_madd_epi16(d, vl);
        let hi = _mm256_slli_epi32::<16>(_mm256_madd_epi16(d, vh));
        _mm256_add_epi32(lo, hi)
    }

    /// A group's low and high halves, each broadcast as `[v0 v1 v2 v3]`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn halves(p: &[u32; 4]) -> (__m256i, __m256i) {
        (
            _mm256_set1_epi64x(((p[1] as u64) << 32 | p[0] as u64) as i64),
            _mm256_set1_epi64x(((p[3] as u64) << 32 | p[2] as u64) as i64),
        )
    }

    /// Adds accumulator `j`'s lanes into columns `4 j .. 4 j + 4` of `out`
    /// (a column's rows 0+1 and 2+3 sit in adjacent lanes).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn fold(acc: &[__m256i], out: &mut [u32]) {
        assert!(out.len() >= acc.len() * 4, "output length");
        for (j, a) in acc.iter().enumerate() {
            let mut lanes = [0u32; 8];
            // SAFETY: `lanes` holds the 32 bytes stored.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, *a) };
            for c in 0..4 {
                let o = &mut out[j * 4 + c];
                *o = o.wrapping_add(lanes[2 * c].wrapping_add(lanes[2 * c + 1]));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    /// `out[..NB*16] += planes . tile` with NB lane groups of 16 columns.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX-512 F, BW and VNNI;
    /// `tile.len() == planes.len() * NB * 64`; `out.len() >= NB * 16`.
    /// The lengths are checked with `assert!` here.
    #[allow(clippy::needless_range_loop)] // explicit indices keep the accumulators in registers
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn tile<const NB: usize>(tile: &[i8], planes: &[[u32; 4]], out: &mut [u32]) {
        assert_eq!(tile.len(), planes.len() * NB * 64, "tile size");
        assert!(out.len() >= NB * 16, "output length");
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

/// Reference tile product, row by row from the panel layout.
#[cfg(test)]
fn reference_tile(tile: &[i8], width: usize, v: &[u32], out: &mut [u32]) {
    for (g, q) in v.chunks_exact(4).enumerate() {
        for (c, o) in out[..width].iter_mut().enumerate() {
            for (r, &x) in q.iter().enumerate() {
                let d = tile[g * width * 4 + c * 4 + r] as i32 as u32;
                *o = o.wrapping_add(x.wrapping_mul(d));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    /// Every kernel adds and subtracts rows as the portable one does,
    /// odd widths (vector tails) included.
    #[test]
    fn signed_rows_agree_across_kernels() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        for width in [1usize, 15, 16, 17, 100, 2048] {
            let row: Vec<u32> = (0..width).map(|_| rng.random()).collect();
            let signs: Vec<i8> = (0..7).map(|_| rng.random_range(-1..=1)).collect();
            let start: Vec<u32> = (0..width * signs.len()).map(|_| rng.random()).collect();
            let mut want = start.clone();
            add_signed_row(Kernel::Portable, &mut want, &signs, &row);
            for (q, &sign) in signs.iter().enumerate() {
                let got = &want[q * width..(q + 1) * width];
                let first = &start[q * width..(q + 1) * width];
                for ((g, f), r) in got.iter().zip(first).zip(&row) {
                    assert_eq!(*g, f.wrapping_add(r.wrapping_mul(sign as i32 as u32)));
                }
            }
            for kernel in Kernel::supported() {
                let mut got = start.clone();
                add_signed_row(kernel, &mut got, &signs, &row);
                assert_eq!(got, want, "{kernel} at width {width}");
            }
        }
    }

    /// Two vectors at once give what each gives alone, for every kernel,
    /// every panel width and group counts past a tile.
    #[test]
    fn a_pair_of_vectors_gives_what_each_gives() {
        let mut rng = ChaCha20Rng::seed_from_u64(13);
        for kernel in Kernel::supported() {
            for width in [16usize, 32, 48, 64] {
                for groups in [1usize, 7, TILE_GROUPS + 3] {
                    let tile: Vec<i8> = (0..groups * width * 4).map(|_| rng.random()).collect();
                    let v: [Vec<u32>; 2] =
                        std::array::from_fn(|_| (0..groups * 4).map(|_| rng.random()).collect());
                    let start: [Vec<u32>; 2] =
                        std::array::from_fn(|_| (0..width).map(|_| rng.random()).collect());
                    let mut want = start.clone();
                    for (v, out) in v.iter().zip(&mut want) {
                        reference_tile(&tile, width, v, out);
                    }
                    let sliced = v.each_ref().map(|v| SlicedVec::for_kernel(kernel, v));
                    let [mut a, mut b] = start;
                    let planes = [sliced[0].planes(), sliced[1].planes()];
                    tile_product_pair(kernel, &tile, width, planes, [&mut a, &mut b]);
                    assert_eq!([a, b], want, "{kernel}, width {width}, {groups} groups");
                }
            }
        }
    }

    /// Blocks of rows add what the rows add one by one, for every kernel:
    /// query counts on both sides of [`TABLES_FROM`] and past a register
    /// block, row counts that leave a partial triple, widths with a tail
    /// past the last vector, and strides wider than the rows.
    #[test]
    fn blocks_of_rows_add_what_rows_add() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        for (queries, count, width, stride) in [
            (1usize, 3usize, 16usize, 16usize),
            (TABLES_FROM - 1, 7, 24, 40),
            (TABLES_FROM, 1, 8, 8),
            (TABLES_FROM, 2, 13, 29),
            (17, 5, 100, 116),
            (96, 96, 64, 80),
            (33, 0, 16, 16),
        ] {
            let rows: Vec<u32> = (0..count * stride).map(|_| rng.random()).collect();
            let signs: Vec<i8> = (0..count * queries)
                .map(|_| rng.random_range(-1..=1))
                .collect();
            let start: Vec<u32> = (0..queries * width).map(|_| rng.random()).collect();
            let mut want = start.clone();
            for r in 0..count {
                let row = &rows[r * stride..][..width];
                add_signed_row(
                    Kernel::Portable,
                    &mut want,
                    &signs[r * queries..][..queries],
                    row,
                );
            }
            for kernel in Kernel::supported() {
                let mut got = start.clone();
                add_signed_rows(kernel, &mut got, width, &signs, &rows, stride);
                assert_eq!(
                    got, want,
                    "{kernel}: {queries} queries, {count} rows, width {width}"
                );
            }
        }
    }

    /// A stride so large that the rows' span wraps around is refused, not
    /// read from wherever the wrapped sum points.
    #[test]
    #[should_panic(expected = "rows past their data")]
    fn rows_whose_span_wraps_are_refused() {
        let stride = (usize::MAX - 1) / 3 + 1;
        add_signed_rows(
            Kernel::best(),
            &mut [0u32; 64],
            8,
            &[0i8; 32],
            &[0u32; 10],
            stride,
        );
    }

    #[test]
    fn halves_recombine() {
        for v in [
            0u32,
            1,
            0x7FFF,
            0x8000,
            0xFFFF,
            0x1_0000,
            0x8000_8000,
            u32::MAX,
            0x7FFF_8000,
        ] {
            let (lo, hi) = split_halves(v);
            let back = (lo as i16 as i32 as u32).wrapping_add((hi as i16 as i32 as u32) << 16);
            assert_eq!(back, v, "{v:#x}");
        }
    }

    #[test]
    fn kernel_names_round_trip_and_portable_is_always_there() {
        for k in Kernel::ALL {
            assert_eq!(k.name().parse::<Kernel>().unwrap(), k);
        }
        assert!(matches!(
            "sse9".parse::<Kernel>(),
            Err(KernelError::Unknown(_))
        ));
        assert!(Kernel::supported().contains(&Kernel::Portable));
        assert_eq!(Kernel::best(), Kernel::supported()[0]);
        for k in Kernel::ALL.into_iter().filter(|k| !k.is_supported()) {
            assert!(matches!(
                Kernel::parse_supported(k.name()),
                Err(KernelError::Unsupported(..))
            ));
        }
    }

    /// Every kernel this CPU has equals the reference on random tiles:
    /// every panel width, odd group counts, entries at the edges of i8 and
    /// of u32, and non-zero starting outputs.
    #[test]
    fn every_supported_kernel_equals_the_reference() {
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let edges_i8 = [i8::MIN, i8::MIN + 1, -1, 0, 1, i8::MAX - 1, i8::MAX];
        let edges_u32 = [
            0u32,
            1,
            0x7FFF,
            0x8000,
            0xFFFF,
            0x8000_0000,
            u32::MAX - 1,
            u32::MAX,
        ];
        for kernel in Kernel::supported() {
            for width in [16usize, 32, 48, 64] {
                for groups in [1usize, 3, 37, TILE_GROUPS, TILE_GROUPS + 5] {
                    for mode in 0..3 {
                        let tile: Vec<i8> = (0..groups * width * 4)
                            .map(|_| match mode {
                                0 => rng.random(),
                                1 => edges_i8[rng.random_range(0..edges_i8.len())],
                                _ => i8::MIN,
                            })
                            .collect();
                        let v: Vec<u32> = (0..groups * 4)
                            .map(|_| match mode {
                                0 => rng.random(),
                                1 => edges_u32[rng.random_range(0..edges_u32.len())],
                                _ => u32::MAX >> 1,
                            })
                            .collect();
                        let start: Vec<u32> = (0..width).map(|_| rng.random()).collect();
                        let mut want = start.clone();
                        reference_tile(&tile, width, &v, &mut want);
                        let mut got = start.clone();
                        let sliced = SlicedVec::for_kernel(kernel, &v);
                        tile_product(kernel, &tile, width, sliced.planes(), &mut got);
                        assert_eq!(
                            got, want,
                            "{kernel}, width {width}, {groups} groups, mode {mode}"
                        );
                    }
                }
            }
        }
    }
}
