//! What a device offers the hint builder and the answers: buffers, copies
//! and the public matrix's expansion, with the one checked launch of the
//! expansion.

use std::ops::Range;

use pir_core::db::PANEL_COLS;
use pir_core::matrix::Expansion;
use pir_core::params::SEED_BYTES;
use pir_core::EncodedDb;

use crate::GpuError;

/// What every device offers (the CUDA backend, the host emulator):
/// buffers, copies and the public matrix's expansion. The launch is
/// `unsafe`: a kernel trusts its buffer sizes. Safe code launches through
/// [`expand`], which checks every length first (and the products through
/// [`crate::answer::add_products`]).
pub trait Backend {
    type U32Buf;
    type I8Buf;
    /// The public matrix's key on the device ([`pir_core::PublicMatrix::kernel_key`]).
    type KeyBuf;
    fn alloc_u32(&self, len: usize) -> Result<Self::U32Buf, GpuError>;
    fn alloc_i8(&self, len: usize) -> Result<Self::I8Buf, GpuError>;
    fn upload_key(&self, key: &[u8; SEED_BYTES]) -> Result<Self::KeyBuf, GpuError>;
    /// The same device with a stream of its own: what is given to it runs
    /// beside this one's work, and the device orders each buffer's uses
    /// across the two (a buffer written on one is read on the other only
    /// once written, and rewritten only once read). The hint's uploads and
    /// expansions run so, beside its products.
    fn beside(&self) -> Result<Self, GpuError>
    where
        Self: Sized;
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

/// Copies `rows` of `db` (whole row groups) into `d` in pir-core's panel
/// layout over those rows alone: panel `p` at byte `p * 64 * rows.len()`.
/// A level held to answer (its served rows) and a hint's row tile are
/// laid out alike.
pub fn upload_rows<B: Backend>(
    backend: &B,
    db: &EncodedDb,
    rows: Range<usize>,
    d: &mut B::I8Buf,
) -> Result<(), GpuError> {
    for p in 0..db.panels() {
        let (_, width) = db.panel_columns(p);
        let src = &db.panel(p)[rows.start / 4 * width * 4..rows.end / 4 * width * 4];
        backend.upload_i8(d, p * PANEL_COLS * rows.len(), src)?;
    }
    Ok(())
}

/// The kernel of an expansion and its blocks (of
/// [`crate::defines::EXPAND_THREADS`] threads) for `n` rows of `ncols`
/// columns: TurboSHAKE128 one thread per (row, block of 2048 columns),
/// AES one thread per [`crate::defines::AES_STEPS`] AES blocks.
pub fn expand_launch(expansion: Expansion, n: u32, ncols: u32) -> (&'static str, u64) {
    use crate::defines::{AES_STEPS, EXPAND_THREADS};
    match expansion {
        Expansion::TurboShake128 => {
            let items = n as u64 * ncols.div_ceil(pir_core::matrix::BLOCK_COLS as u32) as u64;
            (
                "ethpir_expand_turboshake",
                items.div_ceil(EXPAND_THREADS as u64),
            )
        }
        Expansion::Aes128Ctr => {
            let items = n as u64 * ncols.div_ceil(4) as u64;
            (
                "ethpir_expand_aes",
                items.div_ceil(EXPAND_THREADS as u64 * AES_STEPS as u64),
            )
        }
    }
}

/// Expands columns `col0 .. col0 + ncols` of rows `0 .. n` of `A` into
/// `out`, after checking that it is large enough.
pub fn expand<B: Backend>(
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
    // The kernels number TurboSHAKE's blocks and AES's counters from col0.
    assert!(
        (col0 as usize).is_multiple_of(pir_core::matrix::BLOCK_COLS),
        "expansion from column {col0}, not a block's first"
    );
    if n == 0 || ncols == 0 {
        // Nothing to expand (and a launch of no blocks is an error).
        return Ok(());
    }
    // A grid is at most 2^31 - 1 blocks.
    assert!(
        expand_launch(expansion, n, ncols).1 <= i32::MAX as u64,
        "expansion launch too large"
    );
    // SAFETY: the output length was asserted just above.
    unsafe { backend.expand_unchecked(key, expansion, n, col0, ncols, out) }
}
