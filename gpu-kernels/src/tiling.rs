//! The tiled hint driver shared by the CUDA backend and the host emulator:
//! for each row tile of the database, expand the matching columns of `A` on
//! the device, upload the tile of `D` (panel by panel), and add `A_tile .
//! D_tile` into the hint with the answer kernels: each row of `A` is a
//! "query" over the tile's rows (crate::answer), so the hint's product runs
//! on the tensor cores too.

use pir_core::matrix::{PublicMatrix, BLOCK_COLS};
use pir_core::EncodedDb;

use crate::answer::{add_products, AnswerBackend, AnswerShape};
use crate::backend::{expand, upload_rows};
use crate::GpuError;

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
        upload_rows(backend, db, t0..t0 + krows, &mut d)?;
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
