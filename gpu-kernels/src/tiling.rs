//! The tiled hint driver shared by the CUDA backend and the host emulator:
//! for each row tile of the database, expand the matching columns of `A` on
//! the device, upload the tile of `D` (panel by panel), multiply-accumulate.

use pir_core::db::PANEL_COLS;
use pir_core::matrix::BLOCK_COLS;
use pir_core::params::SEED_BYTES;
use pir_core::EncodedDb;

use crate::GpuError;

/// What a device must offer to build a hint.
pub trait HintBackend {
    type U32Buf;
    type I8Buf;
    type SeedBuf;
    fn alloc_u32(&self, len: usize) -> Result<Self::U32Buf, GpuError>;
    fn alloc_i8(&self, len: usize) -> Result<Self::I8Buf, GpuError>;
    fn upload_seed(&self, seed: &[u8; SEED_BYTES]) -> Result<Self::SeedBuf, GpuError>;
    fn upload_i8(&self, dst: &mut Self::I8Buf, offset: usize, src: &[i8]) -> Result<(), GpuError>;
    /// Columns `col0 .. col0 + ncols` of all `n` rows of `A` into `out`.
    fn expand(
        &self,
        seed: &Self::SeedBuf,
        n: u32,
        col0: u32,
        ncols: u32,
        out: &mut Self::U32Buf,
    ) -> Result<(), GpuError>;
    /// `m += a . d` for one tile.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        a: &Self::U32Buf,
        a_ld: u32,
        n: u32,
        krows: u32,
        d: &Self::I8Buf,
        cols_pad: u32,
        cols: u32,
        m: &mut Self::U32Buf,
    ) -> Result<(), GpuError>;
    fn download(&self, m: &Self::U32Buf, len: usize) -> Result<Vec<u32>, GpuError>;
}

/// Database rows per tile when `free` bytes of device memory are available:
/// a multiple of the public-matrix block width, at most the whole database.
pub fn plan_tile_rows(db: &EncodedDb, free: u64) -> Result<usize, GpuError> {
    let shape = db.shape();
    let n = shape.lwe.dimension as u64;
    let hint = 4 * n * shape.cols() as u64;
    let per_row = 4 * n + shape.padded_cols() as u64;
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
pub fn run_tiled<B: HintBackend>(
    backend: &B,
    db: &EncodedDb,
    seed: &[u8; SEED_BYTES],
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
    let seed_buf = backend.upload_seed(seed)?;
    let mut m = backend.alloc_u32(n as usize * cols)?;
    let mut a = backend.alloc_u32(n as usize * tile_rows)?;
    let mut d = backend.alloc_i8(tile_rows * cols_pad)?;
    for t0 in (0..rows).step_by(tile_rows) {
        let krows = tile_rows.min(rows - t0);
        for p in 0..db.panels() {
            let (_, width) = db.panel_columns(p);
            let src = &db.panel(p)[(t0 / 4) * width * 4..((t0 + krows) / 4) * width * 4];
            backend.upload_i8(&mut d, p * PANEL_COLS * krows, src)?;
        }
        backend.expand(&seed_buf, n, t0 as u32, krows as u32, &mut a)?;
        backend.gemm(
            &a,
            krows as u32,
            n,
            krows as u32,
            &d,
            cols_pad as u32,
            cols as u32,
            &mut m,
        )?;
        progress(1);
    }
    backend.download(&m, n as usize * cols)
}
