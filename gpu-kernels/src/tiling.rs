//! The tiled hint driver shared by the CUDA backend and the host emulator:
//! for each row tile of the database, expand the matching columns of `A` on
//! the device, upload the tile of `D` (panel by panel), and add `A_tile .
//! D_tile` into the hint with the answer kernels: each row of `A` is a
//! "query" over the tile's rows (crate::answer), so the hint's product runs
//! on the tensor cores too.

use pir_core::db::PANEL_COLS;
use pir_core::matrix::{Expansion, PublicMatrix, BLOCK_COLS};
use pir_core::params::SEED_BYTES;
use pir_core::EncodedDb;

use crate::answer::{add_products, AnswerBackend, AnswerShape};
use crate::GpuError;

/// What a device must offer to build a hint. The launch is `unsafe`: a
/// kernel trusts its buffer sizes. Safe code launches through [`expand`],
/// which checks every length first (and the product through
/// [`crate::answer::add_products`]).
pub trait HintBackend {
    type U32Buf;
    type I8Buf;
    /// The public matrix's key on the device ([`PublicMatrix::kernel_key`]).
    type KeyBuf;
    fn alloc_u32(&self, len: usize) -> Result<Self::U32Buf, GpuError>;
    fn alloc_i8(&self, len: usize) -> Result<Self::I8Buf, GpuError>;
    fn upload_key(&self, key: &[u8; SEED_BYTES]) -> Result<Self::KeyBuf, GpuError>;
    /// Copies `src` into `dst` at `offset` (bounds-checked: panics past the end).
    fn upload_i8(&self, dst: &mut Self::I8Buf, offset: usize, src: &[i8]) -> Result<(), GpuError>;
    /// Elements a buffer holds.
    fn u32_len(buf: &Self::U32Buf) -> usize;
    /// Elements a buffer holds.
    fn i8_len(buf: &Self::I8Buf) -> usize;
    /// Columns `col0 .. col0 + ncols` of all `n` rows of `A` into `out`,
    /// expanded from `key` the way `expansion` says.
    ///
    /// # Safety
    ///
    /// `out` holds at least `n * ncols` elements.
    unsafe fn expand_unchecked(
        &self,
        key: &Self::KeyBuf,
        expansion: Expansion,
        n: u32,
        col0: u32,
        ncols: u32,
        out: &mut Self::U32Buf,
    ) -> Result<(), GpuError>;
    fn download(&self, m: &Self::U32Buf, len: usize) -> Result<Vec<u32>, GpuError>;
}

/// Expands columns `col0 .. col0 + ncols` of rows `0 .. n` of `A` into
/// `out`, after checking that it is large enough.
pub fn expand<B: HintBackend>(
    backend: &B,
    key: &B::KeyBuf,
    expansion: Expansion,
    n: u32,
    col0: u32,
    ncols: u32,
    out: &mut B::U32Buf,
) -> Result<(), GpuError> {
    assert!(
        B::u32_len(out) >= n as usize * ncols as usize,
        "expansion output holds {} elements, needs {n} x {ncols}",
        B::u32_len(out)
    );
    // SAFETY: the output length was asserted just above.
    unsafe { backend.expand_unchecked(key, expansion, n, col0, ncols, out) }
}

/// Database rows per tile when `free` bytes of device memory are available:
/// a multiple of the public-matrix block width, at most the whole database.
pub fn plan_tile_rows(db: &EncodedDb, free: u64) -> Result<usize, GpuError> {
    let shape = db.shape();
    let n = shape.lwe.dimension as u64;
    // The hint (full padded width while it is summed), and per row of a
    // tile: its column of A, A's byte planes, and the row of D.
    let hint = 4 * n * shape.padded_cols() as u64;
    let per_row = 8 * n + shape.padded_cols() as u64;
    let usable = (free as f64 * 0.85) as u64;
    let rows_fit = usable.saturating_sub(hint) / per_row;
    let tile = (rows_fit as usize / BLOCK_COLS) * BLOCK_COLS;
    if tile == 0 {
        return Err(GpuError::OutOfMemory {
            needed: hint + per_row * BLOCK_COLS as u64,
            free,
        });
    }
    Ok(tile.min(shape.rows().next_multiple_of(BLOCK_COLS)))
}

/// Builds the hint with `backend`, `tile_rows` database rows at a time.
pub fn run_tiled<B: AnswerBackend>(
    backend: &B,
    db: &EncodedDb,
    matrix: &PublicMatrix,
    tile_rows: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<u32>, GpuError> {
    assert!(
        tile_rows > 0 && tile_rows.is_multiple_of(BLOCK_COLS),
        "tile rows must be whole public-matrix blocks"
    );
    let shape = db.shape();
    let rows = shape.rows();
    let n = shape.lwe.dimension;
    let cols = shape.cols();
    let cols_pad = shape.padded_cols();
    let tile_rows = tile_rows.min(rows.next_multiple_of(BLOCK_COLS));
    let key = backend.upload_key(&matrix.kernel_key())?;
    // Zeroed by the allocation: every tile adds into it.
    let mut m = backend.alloc_u32(n as usize * cols_pad)?;
    let mut a = backend.alloc_u32(n as usize * tile_rows)?;
    let mut planes = backend.alloc_u32(n as usize * tile_rows)?;
    let mut d = backend.alloc_i8(tile_rows * cols_pad)?;
    for t0 in (0..rows).step_by(tile_rows) {
        let krows = tile_rows.min(rows - t0);
        for p in 0..db.panels() {
            let (_, width) = db.panel_columns(p);
            let src = &db.panel(p)[(t0 / 4) * width * 4..((t0 + krows) / 4) * width * 4];
            backend.upload_i8(&mut d, p * PANEL_COLS * krows, src)?;
        }
        expand(
            backend,
            &key,
            matrix.expansion(),
            n,
            t0 as u32,
            krows as u32,
            &mut a,
        )?;
        let product = AnswerShape::plan(
            n,
            (krows / 4) as u32,
            cols_pad as u32,
            backend.multiprocessors(),
        );
        add_products(backend, &a, &mut planes, &d, &mut m, product)?;
        progress(1);
    }
    let padded = backend.download(&m, n as usize * cols_pad)?;
    Ok(padded
        .chunks_exact(cols_pad)
        .flat_map(|row| row[..cols].iter().copied())
        .collect())
}
