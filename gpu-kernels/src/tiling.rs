//! The tiled hint driver shared by the CUDA backend and the host emulator:
//! for each row tile of the database, expand the matching columns of `A` on
//! the device, upload the tile of `D` (panel by panel), and add `A_tile .
//! D_tile` into the hint with the answer kernels: each row of `A` is a
//! "query" over the tile's rows (crate::answer), so the hint's product runs
//! on the tensor cores too.
//!
//! The uploads and the expansions run on streams of their own, into two
//! slots used in turn: the next tile's copy and expansion overlap this
//! tile's product, and the device makes each wait only for the buffers it
//! reuses.

use pir_core::matrix::{PublicMatrix, BLOCK_COLS};
use pir_core::EncodedDb;

use crate::answer::{add_products, AnswerBackend, AnswerShape};
use crate::backend::{expand, upload_rows, Backend};
use crate::GpuError;

/// Tiles a hint is cut into at least when the whole database would fit in
/// one: with a single tile nothing overlaps the product.
pub const PIPELINE_TILES: usize = 4;

/// Tile slots used in turn: one tile's buffers are filled while the
/// other's are multiplied.
const SLOTS: u64 = 2;

/// Database rows per tile when `free` bytes of device memory are available:
/// a multiple of the public-matrix block width, at most a
/// [`PIPELINE_TILES`]th of the database (rounded up to whole blocks).
pub fn plan_tile_rows(db: &EncodedDb, free: u64) -> Result<usize, GpuError> {
    let shape = db.shape();
    let n = shape.lwe.dimension as u64;
    // The hint (full padded width while it is summed), and per row of a
    // tile: in each slot its column of A and its row of D, and A's byte
    // planes once.
    let hint = 4 * n * shape.padded_cols() as u64;
    let per_row = SLOTS * (4 * n + shape.padded_cols() as u64) + 4 * n;
    let usable = (free as f64 * 0.85) as u64;
    let rows_fit = usable.saturating_sub(hint) / per_row;
    let tile = (rows_fit as usize / BLOCK_COLS) * BLOCK_COLS;
    if tile == 0 {
        return Err(GpuError::OutOfMemory {
            needed: hint + per_row * BLOCK_COLS as u64,
            free,
        });
    }
    let pipelined = shape
        .rows()
        .div_ceil(PIPELINE_TILES)
        .next_multiple_of(BLOCK_COLS);
    Ok(tile.min(pipelined))
}

/// One slot's buffers: a tile's columns of `A`, expanded, and its rows of
/// `D`.
struct Slot<B: Backend> {
    a: B::U32Buf,
    d: B::I8Buf,
}

impl<B: Backend> Slot<B> {
    fn new(backend: &B, a_len: usize, d_len: usize) -> Result<Self, GpuError> {
        Ok(Slot {
            a: backend.alloc_u32(a_len)?,
            d: backend.alloc_i8(d_len)?,
        })
    }
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
    let tiles = rows.div_ceil(tile_rows);
    // A device orders a buffer's uses across streams only while there is
    // more than one: the streams are made before the buffers, so that
    // they outlive them (locals drop in reverse), and every use and every
    // free is ordered.
    let copier = backend.beside()?;
    let expander = backend.beside()?;
    let key = backend.upload_key(&matrix.kernel_key())?;
    // Zeroed by the allocation: every tile adds into it.
    let mut m = backend.alloc_u32(n as usize * cols_pad)?;
    let mut planes = backend.alloc_u32(n as usize * tile_rows)?;
    let mut slots = (0..tiles.min(SLOTS as usize))
        .map(|_| Slot::new(backend, n as usize * tile_rows, tile_rows * cols_pad))
        .collect::<Result<Vec<_>, _>>()?;
    for (t, t0) in (0..rows).step_by(tile_rows).enumerate() {
        let krows = tile_rows.min(rows - t0);
        let slot = &mut slots[t % tiles.min(SLOTS as usize)];
        upload_rows(&copier, db, t0..t0 + krows, &mut slot.d)?;
        expand(
            &expander,
            &key,
            matrix.expansion(),
            n,
            t0 as u32,
            krows as u32,
            &mut slot.a,
        )?;
        let product = AnswerShape::plan(
            n,
            (krows / 4) as u32,
            cols_pad as u32,
            backend.multiprocessors(),
        );
        add_products(backend, &slot.a, &mut planes, &slot.d, &mut m, product)?;
        // Queued: the device runs up to two tiles behind.
        progress(1);
    }
    let padded = backend.download(&m, n as usize * cols_pad)?;
    Ok(unpadded(&padded, cols_pad, cols))
}

/// The hint's rows without their padding columns.
fn unpadded(padded: &[u32], cols_pad: usize, cols: usize) -> Vec<u32> {
    padded
        .chunks_exact(cols_pad)
        .flat_map(|row| row[..cols].iter().copied())
        .collect()
}
