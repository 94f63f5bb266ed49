//! The server's answers on a device: the served rows of a database are
//! uploaded once ([`DeviceDb::upload`]) and every batch of queries is
//! answered from device memory in one pass over them
//! (`kernels/ethpir.cu`, `ethpir_answer_*`), bit for bit
//! [`pir_core::product::multiply`]. Shared by the CUDA backend and the host
//! emulator, like the hint's tiling driver.

use std::time::{Duration, Instant};

use pir_core::db::PANEL_COLS;
use pir_core::EncodedDb;

use crate::backend::{upload_rows, Backend};
use crate::defines::{ANSWER_MAX_CHUNK_GROUPS, ANSWER_THREADS, STAGE_GROUPS};
use crate::GpuError;

/// Row groups (of 4 rows) one warp step of the answer kernel takes, times
/// the block's 4 warps: a chunk is a whole number of them.
const CHUNK_STEP_GROUPS: u32 = 32;

/// Blocks an answer launch aims for per multiprocessor (enough to keep
/// every one busy while loads wait, few enough that the partial sums
/// added at the end stay a small part of the work).
const BLOCKS_PER_MULTIPROCESSOR: u64 = 16;

/// Overrides the answer kernel [`AnswerKernel::for_batch`] chooses (a
/// name of [`AnswerKernel::ALL`]), for measurements.
pub const ANSWER_KERNEL_ENV: &str = "ETHPIR_GPU_ANSWER_KERNEL";

/// One of the answer kernels of `kernels/ethpir.cu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerKernel {
    /// `ethpir_answer_m<MT>u<U>`: a block of 4 warps takes one panel and
    /// `MT` tiles of 16 byte-plane rows (`4 MT` queries); each warp loads
    /// `U` steps of the database from global memory before their products.
    Direct { mt: u32, unroll: u32 },
    /// `ethpir_answer_s<WM>x<WN>`: a block of `WM x WN` warps takes `WN`
    /// panels and `32 WM` byte-plane rows (`8 WM` queries), both operands
    /// staged in shared memory.
    Staged { wm: u32, wn: u32 },
}

impl AnswerKernel {
    /// Every kernel `kernels/ethpir.cu` defines, in its order. Of the
    /// seven direct shapes first measured (docs/benchmarks.md, "Answers
    /// from GPU memory"), these were the fastest at some batch size or
    /// within 4 % of it; the unrolled lone-query ones (m1u4, m1u8) and
    /// m2u4, m4u1 were slower everywhere.
    pub const ALL: [AnswerKernel; 8] = [
        AnswerKernel::Direct { mt: 1, unroll: 1 },
        AnswerKernel::Direct { mt: 2, unroll: 2 },
        AnswerKernel::Direct { mt: 4, unroll: 2 },
        AnswerKernel::Staged { wm: 1, wn: 2 },
        AnswerKernel::Staged { wm: 2, wn: 2 },
        AnswerKernel::Staged { wm: 4, wn: 1 },
        AnswerKernel::Staged { wm: 4, wn: 2 },
        AnswerKernel::Staged { wm: 2, wn: 3 },
    ];

    /// Its entry point.
    pub fn name(&self) -> String {
        match self {
            AnswerKernel::Direct { mt, unroll } => format!("ethpir_answer_m{mt}u{unroll}"),
            AnswerKernel::Staged { wm, wn } => format!("ethpir_answer_s{wm}x{wn}"),
        }
    }

    /// Threads per block (its launch bounds).
    pub fn threads(&self) -> u32 {
        match self {
            AnswerKernel::Direct { .. } => ANSWER_THREADS,
            AnswerKernel::Staged { wm, wn } => 32 * wm * wn,
        }
    }

    /// Panels (of 64 columns) one block takes.
    pub fn panels_per_block(&self) -> u32 {
        match self {
            AnswerKernel::Direct { .. } => 1,
            AnswerKernel::Staged { wn, .. } => *wn,
        }
    }

    /// Its place in [`Self::ALL`].
    pub fn index(&self) -> usize {
        Self::ALL
            .iter()
            .position(|k| k == self)
            .expect("a kernel of ALL")
    }

    /// Queries one block takes.
    pub fn queries_per_block(&self) -> u32 {
        match self {
            AnswerKernel::Direct { mt, .. } => 4 * mt,
            AnswerKernel::Staged { wm, .. } => 8 * wm,
        }
    }

    /// The kernel for a batch of `queries`: `$ETHPIR_GPU_ANSWER_KERNEL`
    /// when set to a kernel's name, else by the batch's size.
    pub fn for_batch(queries: u32) -> AnswerKernel {
        if let Some(k) = std::env::var(ANSWER_KERNEL_ENV)
            .ok()
            .and_then(|name| Self::ALL.into_iter().find(|k| k.name() == name))
        {
            return k;
        }
        // Measured on an H200 at 2^24 .. 2^30 keys: m1u1 for a lone query
        // (the scan at 3.3 to 4.0 TB/s), m2u2 for batches. The staged
        // kernels are checked bit for bit (the emulator, gpu-selftest) but
        // not yet timed on a GPU: they are chosen here once they are
        // measured faster (docs/benchmarks.md, "Staged answer kernels").
        match queries {
            0..=4 => AnswerKernel::Direct { mt: 1, unroll: 1 },
            _ => AnswerKernel::Direct { mt: 2, unroll: 2 },
        }
    }
}

/// One answer launch: `queries` queries over `groups` served row groups of
/// a database `cols_pad` columns wide, cut into chunks of `chunk_groups`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerShape {
    pub queries: u32,
    pub groups: u32,
    pub cols_pad: u32,
    pub chunk_groups: u32,
    pub kernel: AnswerKernel,
}

impl AnswerShape {
    /// The launch for `queries` queries on a device with `multiprocessors`
    /// multiprocessors.
    pub fn plan(queries: u32, groups: u32, cols_pad: u32, multiprocessors: u32) -> Self {
        let mut shape = AnswerShape {
            queries,
            groups,
            cols_pad,
            chunk_groups: ANSWER_MAX_CHUNK_GROUPS,
            kernel: AnswerKernel::for_batch(queries),
        };
        let per_chunk = shape.panel_blocks() * shape.query_blocks();
        let target = BLOCKS_PER_MULTIPROCESSOR * multiprocessors.max(1) as u64;
        let chunks = target.div_ceil(per_chunk).max(1);
        shape.chunk_groups = (groups as u64)
            .div_ceil(chunks)
            .next_multiple_of(CHUNK_STEP_GROUPS as u64)
            .min(ANSWER_MAX_CHUNK_GROUPS as u64) as u32;
        shape
    }

    /// Blocks of panels the launch takes (one block's width each).
    fn panel_blocks(&self) -> u64 {
        (self.cols_pad.div_ceil(PANEL_COLS as u32) as u64)
            .div_ceil(self.kernel.panels_per_block() as u64)
    }

    /// Words between two rows of the byte planes: the served row groups
    /// rounded up to whole stages of the staged kernels (zeros past them).
    pub fn plane_stride(&self) -> u32 {
        self.groups.next_multiple_of(STAGE_GROUPS)
    }

    fn query_blocks(&self) -> u64 {
        self.queries.div_ceil(self.kernel.queries_per_block()) as u64
    }

    /// Blocks of the launch: (query block, panel block, chunk), query
    /// blocks fastest so that blocks reading the same database tile run
    /// together.
    pub fn blocks(&self) -> u64 {
        self.panel_blocks()
            * self.query_blocks()
            * (self.groups as u64).div_ceil(self.chunk_groups as u64)
    }
}

/// What a device must offer to answer, beyond building hints. The launches
/// are `unsafe`: a kernel trusts its buffer sizes; [`DeviceDb`] checks them.
pub trait AnswerBackend: Backend {
    /// Copies `src` into `dst` at `offset` (bounds-checked: panics past the end).
    fn upload_u32(
        &self,
        dst: &mut Self::U32Buf,
        offset: usize,
        src: &[u32],
    ) -> Result<(), GpuError>;
    /// Multiprocessors of the device (how many blocks a launch wants).
    fn multiprocessors(&self) -> u32;
    /// Waits for the work queued so far (for timing its phases).
    fn synchronize(&self) -> Result<(), GpuError>;
    /// Splits `count` queries of `4 * groups` entries each (`q`, one after
    /// another) into their byte planes, rows `stride` words apart (zeros
    /// past `groups`).
    ///
    /// # Safety
    ///
    /// `q` holds `count * 4 * groups` elements, `planes` `count * 4 *
    /// stride`, and `stride >= groups`.
    unsafe fn slice_unchecked(
        &self,
        q: &Self::U32Buf,
        count: u32,
        groups: u32,
        stride: u32,
        planes: &mut Self::U32Buf,
    ) -> Result<(), GpuError>;
    /// `out[i] += planes of query i . d` for every query of `shape`.
    ///
    /// # Safety
    ///
    /// `planes` holds `4 * queries * plane_stride` elements (the layout
    /// [`Self::slice_unchecked`] leaves), `d` `4 * groups *
    /// cols_pad` (the panel layout of [`DeviceDb`]), `out` `queries *
    /// cols_pad`; `cols_pad` is whole lane groups; `chunk_groups` is a
    /// positive multiple of 32 of at most [`ANSWER_MAX_CHUNK_GROUPS`];
    /// [`AnswerShape::blocks`] is at most 2^31 - 1.
    unsafe fn answer_unchecked(
        &self,
        planes: &Self::U32Buf,
        d: &Self::I8Buf,
        out: &mut Self::U32Buf,
        shape: AnswerShape,
    ) -> Result<(), GpuError>;
}

/// The served rows of a database in device memory, ready to answer.
pub struct DeviceDb<B: AnswerBackend> {
    backend: B,
    d: B::I8Buf,
    groups: u32,
    cols: usize,
    cols_pad: u32,
}

impl<B: AnswerBackend> DeviceDb<B> {
    /// Uploads the rows `db` serves (all, or a shard's), panel after panel.
    pub fn upload(backend: B, db: &EncodedDb) -> Result<Self, GpuError> {
        let served = db.served_rows();
        let groups = served.len() / 4;
        let cols_pad = db.shape().padded_cols();
        let too_large = |_| GpuError::Driver("database too large for one device".into());
        let groups_u32 = u32::try_from(groups).map_err(too_large)?;
        let cols_pad_u32 = u32::try_from(cols_pad).map_err(too_large)?;
        let mut d = backend.alloc_i8(groups * 4 * cols_pad)?;
        upload_rows(&backend, db, served, &mut d)?;
        Ok(DeviceDb {
            backend,
            d,
            groups: groups_u32,
            cols: db.shape().cols(),
            cols_pad: cols_pad_u32,
        })
    }

    /// Entries of a query to it (the served rows).
    pub fn query_rows(&self) -> usize {
        self.groups as usize * 4
    }

    /// Bytes of database it holds.
    pub fn bytes(&self) -> u64 {
        self.groups as u64 * 4 * self.cols_pad as u64
    }

    /// `v . D` for each vector (one entry per served row), `cols` elements
    /// each: [`pir_core::product::multiply`]'s numbers.
    pub fn answer(&self, vecs: &[&[u32]]) -> Result<Vec<Vec<u32>>, GpuError> {
        Ok(self.answer_timed(vecs)?.0)
    }

    /// [`Self::answer`], and how long each phase took.
    pub fn answer_timed(&self, vecs: &[&[u32]]) -> Result<(Vec<Vec<u32>>, AnswerTimes), GpuError> {
        self.answer_planned(vecs, self.plan(vecs.len()))
    }

    /// The launch for a batch of `queries` on this device.
    fn plan(&self, queries: usize) -> AnswerShape {
        AnswerShape::plan(
            queries as u32,
            self.groups,
            self.cols_pad,
            self.backend.multiprocessors(),
        )
    }

    /// [`Self::answer`] with `kernel`, cut into chunks of `chunk_groups`
    /// row groups when given (tests force several chunks on small
    /// databases; benchmarks compare kernels).
    pub fn answer_with(
        &self,
        vecs: &[&[u32]],
        kernel: AnswerKernel,
        chunk_groups: Option<u32>,
    ) -> Result<(Vec<Vec<u32>>, AnswerTimes), GpuError> {
        let mut shape = self.plan(vecs.len());
        shape.kernel = kernel;
        if let Some(chunk) = chunk_groups {
            shape.chunk_groups = chunk;
        }
        self.answer_planned(vecs, shape)
    }

    fn answer_planned(
        &self,
        vecs: &[&[u32]],
        shape: AnswerShape,
    ) -> Result<(Vec<Vec<u32>>, AnswerTimes), GpuError> {
        if vecs.is_empty() {
            return Ok((Vec::new(), AnswerTimes::default()));
        }
        if self.groups == 0 {
            // No served rows: every product is zero (and no launch is
            // made of no blocks).
            return Ok((vec![vec![0; self.cols]; vecs.len()], AnswerTimes::default()));
        }
        let start = Instant::now();
        let rows = self.query_rows();
        assert!(
            vecs.iter().all(|v| v.len() == rows),
            "one entry per served row"
        );
        assert!(
            shape.groups == self.groups
                && shape.cols_pad == self.cols_pad
                && shape.queries as usize == vecs.len(),
            "launch shape of another database or batch"
        );
        let len = vecs.len() * rows;
        let planes_len = 4 * vecs.len() * shape.plane_stride() as usize;
        let mut q = self.backend.alloc_u32(len)?;
        for (i, v) in vecs.iter().enumerate() {
            self.backend.upload_u32(&mut q, i * rows, v)?;
        }
        self.backend.synchronize()?;
        let uploaded = Instant::now();
        let mut planes = self.backend.alloc_u32(planes_len)?;
        // Zeroed by the allocation: the kernels add into it.
        let mut out = self
            .backend
            .alloc_u32(vecs.len() * self.cols_pad as usize)?;
        add_products(&self.backend, &q, &mut planes, &self.d, &mut out, shape)?;
        self.backend.synchronize()?;
        let computed = Instant::now();
        let all = self
            .backend
            .download(&out, vecs.len() * self.cols_pad as usize)?;
        let times = AnswerTimes {
            upload: uploaded - start,
            compute: computed - uploaded,
            download: computed.elapsed(),
        };
        let answers = all
            .chunks_exact(self.cols_pad as usize)
            .map(|c| c[..self.cols].to_vec())
            .collect();
        Ok((answers, times))
    }
}

/// Adds the products of `shape.queries` vectors (`q`, one after another,
/// `4 * groups` entries each) with the database `d` (the panel layout of
/// [`DeviceDb`], `groups` row groups) into `out` (`queries x cols_pad`),
/// splitting the vectors into byte planes in `planes` first (`4 *
/// queries` rows of [`AnswerShape::plane_stride`] words); every buffer
/// and the launch's bounds checked before a kernel runs. The answers (into
/// zeros) and the hint (tile after tile into the same sums) both end here.
pub fn add_products<B: AnswerBackend>(
    backend: &B,
    q: &B::U32Buf,
    planes: &mut B::U32Buf,
    d: &B::I8Buf,
    out: &mut B::U32Buf,
    shape: AnswerShape,
) -> Result<(), GpuError> {
    let (queries, groups, cols_pad) = (
        shape.queries as usize,
        shape.groups as usize,
        shape.cols_pad as usize,
    );
    let len = queries * 4 * groups;
    let planes_len = queries * 4 * shape.plane_stride() as usize;
    assert!(
        B::u32_len(q) >= len,
        "query buffer holds fewer than {queries} x {} entries",
        4 * groups
    );
    assert!(
        B::u32_len(planes) >= planes_len,
        "plane buffer holds fewer than {queries} x 4 x {} words",
        shape.plane_stride()
    );
    assert!(
        B::i8_len(d) >= 4 * groups * cols_pad,
        "database buffer too small"
    );
    assert!(
        B::u32_len(out) >= queries * cols_pad,
        "answer buffer too small"
    );
    assert!(
        cols_pad.is_multiple_of(pir_core::db::LANE_COLS),
        "padded width {cols_pad} is not whole lane groups"
    );
    assert!(
        shape.chunk_groups > 0
            && shape.chunk_groups.is_multiple_of(CHUNK_STEP_GROUPS)
            && shape.chunk_groups <= ANSWER_MAX_CHUNK_GROUPS,
        "chunk of {} groups",
        shape.chunk_groups
    );
    // A grid's x dimension is at most 2^31 - 1 blocks.
    let grid_limit = i32::MAX as u64;
    assert!(shape.blocks() <= grid_limit, "launch too large");
    assert!(
        (planes_len as u64 / 4).div_ceil(crate::defines::SLICE_THREADS as u64) <= grid_limit,
        "slicing launch too large"
    );
    // SAFETY: every length and bound of both contracts was asserted above.
    unsafe {
        backend.slice_unchecked(q, shape.queries, shape.groups, shape.plane_stride(), planes)?;
        backend.answer_unchecked(planes, d, out, shape)
    }
}

/// Where a batch's time went on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnswerTimes {
    /// Queries copied to the device (allocation included).
    pub upload: Duration,
    /// Slicing and the answer kernel.
    pub compute: Duration,
    /// Answers copied back.
    pub download: Duration,
}

impl AnswerTimes {
    pub fn total(&self) -> Duration {
        self.upload + self.compute + self.download
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_stay_within_the_kernels_bounds() {
        for (queries, groups, cols_pad, sms) in [
            (1, 194_560, 4_704, 132),
            (64, 194_560, 4_704, 132),
            (256, 194_560, 4_704, 132),
            (1, 10, 16, 1),
            (5, 1 << 26, 64, 132),
        ] {
            let s = AnswerShape::plan(queries, groups, cols_pad, sms);
            assert!(s.chunk_groups > 0 && s.chunk_groups <= ANSWER_MAX_CHUNK_GROUPS);
            assert!(s.chunk_groups.is_multiple_of(CHUNK_STEP_GROUPS));
            assert!(s.blocks() <= i32::MAX as u64);
            assert!(s.plane_stride() >= groups && s.plane_stride().is_multiple_of(STAGE_GROUPS));
            for kernel in AnswerKernel::ALL {
                let k = AnswerShape { kernel, ..s };
                let panels = cols_pad.div_ceil(PANEL_COLS as u32) as u64;
                let chunks = (groups as u64).div_ceil(s.chunk_groups as u64);
                assert_eq!(
                    k.blocks(),
                    panels.div_ceil(kernel.panels_per_block() as u64)
                        * queries.div_ceil(kernel.queries_per_block()) as u64
                        * chunks,
                    "{}",
                    kernel.name()
                );
                assert!(kernel.threads().is_multiple_of(32) && kernel.threads() <= 1024);
            }
        }
        let lone = AnswerShape::plan(1, 194_560, 4_704, 132);
        assert!(lone.blocks() >= 132 * BLOCKS_PER_MULTIPROCESSOR / 2);
    }
}
