//! The CUDA kernels run on the host by the C++ emulator (feature
//! `host-emulator`): same source, same tiling driver, no GPU. Slow; for
//! tests.

use pir_core::matrix::{Expansion, PublicMatrix};
use pir_core::params::SEED_BYTES;
use pir_core::EncodedDb;

use crate::answer::{AnswerBackend, AnswerShape, DeviceDb};
use crate::backend::{expand as checked_expand, Backend};
use crate::tiling::run_tiled;
use crate::GpuError;

extern "C" {
    fn ethpir_emu_expand(
        aes: u32,
        blocks: u32,
        key: *const u8,
        n: u32,
        col0: u32,
        ncols: u32,
        out: *mut u32,
    );
    fn ethpir_emu_answer_slice(
        q: *const u32,
        count: u32,
        groups: u32,
        stride: u32,
        planes: *mut u32,
    );
    #[allow(clippy::too_many_arguments)]
    fn ethpir_emu_answer(
        kernel: u32,
        blocks: u32,
        threads: u32,
        planes: *const u32,
        m_rows: u32,
        stride: u32,
        d: *const i8,
        groups: u32,
        cols_pad: u32,
        chunk_groups: u32,
        out: *mut u32,
    );
}

/// Host memory standing in for device memory.
pub struct Emulator;

impl Backend for Emulator {
    type U32Buf = Vec<u32>;
    type I8Buf = Vec<i8>;
    type KeyBuf = [u8; SEED_BYTES];

    fn alloc_u32(&self, len: usize) -> Result<Vec<u32>, GpuError> {
        Ok(vec![0; len])
    }

    fn alloc_i8(&self, len: usize) -> Result<Vec<i8>, GpuError> {
        Ok(vec![0; len])
    }

    fn upload_key(&self, key: &[u8; SEED_BYTES]) -> Result<[u8; SEED_BYTES], GpuError> {
        Ok(*key)
    }

    /// The emulator runs everything in order, on the caller's thread.
    fn beside(&self) -> Result<Self, GpuError> {
        Ok(Emulator)
    }

    fn upload_i8(&self, dst: &mut Vec<i8>, offset: usize, src: &[i8]) -> Result<(), GpuError> {
        dst[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn u32_len(buf: &Vec<u32>) -> usize {
        buf.len()
    }

    fn i8_len(buf: &Vec<i8>) -> usize {
        buf.len()
    }

    unsafe fn expand_unchecked(
        &self,
        key: &[u8; SEED_BYTES],
        expansion: Expansion,
        n: u32,
        col0: u32,
        ncols: u32,
        out: &mut Vec<u32>,
    ) -> Result<(), GpuError> {
        let aes = u32::from(expansion == Expansion::Aes128Ctr);
        let (_, blocks) = crate::backend::expand_launch(expansion, n, ncols);
        // SAFETY: the caller guarantees `out` holds n x ncols entries; the
        // key is 32 bytes by type.
        unsafe {
            ethpir_emu_expand(
                aes,
                blocks as u32,
                key.as_ptr(),
                n,
                col0,
                ncols,
                out.as_mut_ptr(),
            )
        };
        Ok(())
    }

    fn download(&self, m: &Vec<u32>, len: usize) -> Result<Vec<u32>, GpuError> {
        Ok(m[..len].to_vec())
    }
}

impl AnswerBackend for Emulator {
    fn upload_u32(&self, dst: &mut Vec<u32>, offset: usize, src: &[u32]) -> Result<(), GpuError> {
        dst[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn multiprocessors(&self) -> u32 {
        1
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        Ok(())
    }

    unsafe fn slice_unchecked(
        &self,
        q: &Vec<u32>,
        count: u32,
        groups: u32,
        stride: u32,
        planes: &mut Vec<u32>,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller guarantees q holds count x 4 x groups elements
        // and planes count x 4 x stride, all the kernel touches.
        unsafe { ethpir_emu_answer_slice(q.as_ptr(), count, groups, stride, planes.as_mut_ptr()) };
        Ok(())
    }

    unsafe fn answer_unchecked(
        &self,
        planes: &Vec<u32>,
        d: &Vec<i8>,
        out: &mut Vec<u32>,
        shape: AnswerShape,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller guarantees the sizes of the contract, which
        // bound every index the kernel touches; the block count fits a u32.
        unsafe {
            ethpir_emu_answer(
                shape.kernel.index() as u32,
                shape.blocks() as u32,
                shape.kernel.threads(),
                planes.as_ptr(),
                4 * shape.queries,
                shape.plane_stride(),
                d.as_ptr(),
                shape.groups,
                shape.cols_pad,
                shape.chunk_groups,
                out.as_mut_ptr(),
            )
        };
        Ok(())
    }
}

/// A database's served rows in emulated device memory.
pub fn device_db(db: &EncodedDb) -> DeviceDb<Emulator> {
    DeviceDb::upload(Emulator, db).expect("host memory")
}

/// Expands columns `col0 .. col0 + ncols` of rows `0 .. n` with the kernel.
pub fn expand(matrix: &PublicMatrix, n: u32, col0: u32, ncols: u32) -> Vec<u32> {
    let mut out = vec![0u32; n as usize * ncols as usize];
    let key = matrix.kernel_key();
    checked_expand(
        &Emulator,
        &key,
        matrix.expansion(),
        n,
        col0,
        ncols,
        &mut out,
    )
    .expect("host memory");
    out
}

/// The hint built by the emulated kernels, `tile_rows` rows at a time.
pub fn hint(db: &EncodedDb, matrix: &PublicMatrix, tile_rows: usize) -> Vec<u32> {
    run_tiled(&Emulator, db, matrix, tile_rows, &|_| {}).expect("host memory")
}
