//! The CUDA backend: NVRTC-compiled kernels launched with cudarc.

use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaViewMut, DevicePtrMut,
    DeviceRepr, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use pir_core::matrix::{Expansion, PublicMatrix};
use pir_core::params::SEED_BYTES;
use pir_core::EncodedDb;
use rayon::prelude::*;

use crate::answer::{AnswerBackend, AnswerKernel, AnswerShape, DeviceDb};
use crate::backend::{expand, expand_launch, Backend};
use crate::defines::{kernel_defines, EXPAND_THREADS, SLICE_THREADS};
use crate::tiling::{plan_tile_rows, run_tiled};
use crate::{GpuError, KERNEL_SOURCE};

fn driver(e: impl std::fmt::Debug) -> GpuError {
    GpuError::Driver(format!("{e:?}"))
}

/// Checks, without touching a device, that CUDA can be used here.
/// `CudaContext::new` panics when the driver library is missing, so this
/// must pass first.
pub fn probe() -> Result<(), GpuError> {
    // SAFETY: only tries to dlopen the libraries.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::NoDriver);
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::NoNvrtc);
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(()),
        Ok(_) => Err(GpuError::NoDevice),
        Err(e) => Err(driver(e)),
    }
}

/// Compiles `kernels/ethpir.cu` with NVRTC and the defines of
/// [`crate::defines`], for `arch` (e.g. `compute_90`; NVRTC's default when
/// `None`). Needs NVRTC only, no driver or device: the test command
/// compiles it for sm_80 and sm_90 on every machine.
pub fn compile_ptx(arch: Option<&'static str>) -> Result<cudarc::nvrtc::Ptx, GpuError> {
    // SAFETY: only tries to dlopen the library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::NoNvrtc);
    }
    compile_ptx_with_opts(
        KERNEL_SOURCE,
        CompileOptions {
            name: Some("ethpir.cu".into()),
            arch,
            options: std::iter::once("--std=c++17".to_string())
                .chain(
                    kernel_defines()
                        .into_iter()
                        .map(|(k, v)| format!("-D{k}={v}")),
                )
                .collect(),
            ..Default::default()
        },
    )
    .map_err(|e| GpuError::Compile(format!("{e:?}")))
}

/// The process's GPU, opened and its kernels compiled once: every level a
/// server holds shares it (each with a stream of its own). A failure is
/// kept too, so that a machine without a GPU is probed once.
pub fn shared() -> Result<&'static CudaGpu, GpuError> {
    static GPU: std::sync::OnceLock<Result<CudaGpu, String>> = std::sync::OnceLock::new();
    GPU.get_or_init(|| CudaGpu::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| GpuError::Unusable(e.clone()))
}

/// Bytes of each page-locked buffer an upload passes through.
const STAGE_BYTES: usize = 16 << 20;

/// Page-locked buffers a stream's uploads cycle through: the host fills
/// one while the device copies out of the others.
const STAGE_BUFFERS: usize = 3;

/// Uploads smaller than this take the driver's copy: one thread copies
/// them as fast, without a hand-off to the copy threads.
const MIN_STAGED_BYTES: usize = 1 << 20;

/// Bytes of host memory one thread copies into a staging buffer.
const COPY_PIECE: usize = 1 << 20;

/// Threads that fill staging buffers at most: a few cores saturate the
/// host's memory bandwidth.
const COPY_THREADS: usize = 8;

/// The threads that fill staging buffers: a pool of their own, so that an
/// upload never waits behind CPU answers in the global pool.
fn copy_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads.min(COPY_THREADS))
            .thread_name(|i| format!("gpu-stage-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// `to.copy_from_slice(from)` on the copy threads when there are some.
fn copy_in(to: &mut [u8], from: &[u8]) {
    let copy = || {
        to.par_chunks_mut(COPY_PIECE)
            .zip(from.par_chunks(COPY_PIECE))
            .for_each(|(to, from)| to.copy_from_slice(from))
    };
    match copy_pool() {
        Some(pool) => pool.install(copy),
        None => to.copy_from_slice(from),
    }
}

/// Sets how host memory reaches the GPU, for measurements: `pageable`
/// (the driver's own copy from the caller's memory) or `staged` (the
/// default: through page-locked buffers that all cores fill, [`Staging`]).
pub const UPLOAD_ENV: &str = "ETHPIR_GPU_UPLOAD";

/// How host memory reaches the GPU ([`UPLOAD_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UploadPath {
    /// Through [`Staging`]'s page-locked buffers.
    Staged,
    /// The driver's copy from pageable memory (one thread, through its
    /// own small staging: about 9 GB/s on the H200's host).
    Pageable,
}

impl UploadPath {
    /// `$ETHPIR_GPU_UPLOAD`, else [`UploadPath::Staged`].
    pub fn from_env() -> UploadPath {
        match std::env::var(UPLOAD_ENV).as_deref() {
            Ok("pageable") => UploadPath::Pageable,
            _ => UploadPath::Staged,
        }
    }
}

/// One page-locked buffer and the event that marks its last copy out.
struct StageBuffer {
    host: PinnedHostSlice<u8>,
    copied: CudaEvent,
}

/// A device's page-locked staging buffers, used in turn by every stream's
/// uploads (one at a time). The driver copies pageable memory to the
/// device on one thread at about 9 GB/s; filled by several cores, a
/// page-locked buffer is copied at the bus's speed, and the next is
/// filled meanwhile. Made once per device: allocating or freeing
/// page-locked memory stalls the whole device.
struct Staging {
    buffers: Vec<StageBuffer>,
    next: usize,
}

impl Staging {
    fn new(ctx: &Arc<CudaContext>) -> Result<Self, GpuError> {
        let buffers = (0..STAGE_BUFFERS)
            .map(|_| {
                Ok(StageBuffer {
                    // SAFETY: the memory is uninitialised; it is only
                    // written (by `upload_staged`) before it is copied.
                    host: unsafe { ctx.alloc_pinned::<u8>(STAGE_BYTES) }.map_err(driver)?,
                    // A waiting thread sleeps instead of spinning.
                    copied: ctx
                        .new_event(Some(
                            cudarc::driver::sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC,
                        ))
                        .map_err(driver)?,
                })
            })
            .collect::<Result<_, GpuError>>()?;
        Ok(Staging { buffers, next: 0 })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // The buffers are freed after this: no copy may still read them.
        // The driver's call itself: cudarc's wrapper may return an error
        // stored earlier without waiting.
        for b in &self.buffers {
            // SAFETY: the event is alive (owned by `b`).
            let _ = unsafe { cudarc::driver::result::event::synchronize(b.copied.cu_event()) };
        }
    }
}

/// A device's staging: made on its first upload; `Err` when page-locked
/// memory could not be had (uploads are then pageable).
type StagingSlot = Arc<Mutex<Option<Result<Staging, String>>>>;

/// A GPU with the kernels loaded, and the stream its work goes to.
#[derive(Clone)]
pub struct CudaGpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// What every stream of the device shares.
    device: Arc<Loaded>,
}

/// A device's kernels, loaded once, and what it is.
struct Loaded {
    /// The device's staging buffers ([`Staging`]).
    staging: StagingSlot,
    /// The expansions' kernels.
    expand_turboshake: CudaFunction,
    expand_aes: CudaFunction,
    slice_fn: CudaFunction,
    /// The answer kernels, in [`AnswerKernel::ALL`]'s order.
    answer_fns: Vec<CudaFunction>,
    multiprocessors: u32,
    compute_capability: (u32, u32),
    name: String,
}

impl CudaGpu {
    /// Opens device 0 and compiles the kernels.
    pub fn new() -> Result<Self, GpuError> {
        probe()?;
        let ctx = CudaContext::new(0).map_err(driver)?;
        let name = ctx.name().map_err(driver)?;
        use cudarc::driver::sys::CUdevice_attribute as Attr;
        let major = ctx
            .attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(driver)?;
        let minor = ctx
            .attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .map_err(driver)?;
        // The device's own architecture (NVRTC's default predates the
        // tensor-core instruction of the answer kernels); leaked once per
        // process, as NVRTC's options take a static string.
        let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
        let ptx = compile_ptx(Some(arch))?;
        let module = ctx.load_module(ptx).map_err(driver)?;
        let load_expand = |e| {
            module
                .load_function(expand_launch(e, 0, 0).0)
                .map_err(driver)
        };
        let expand_turboshake = load_expand(Expansion::TurboShake128)?;
        let expand_aes = load_expand(Expansion::Aes128Ctr)?;
        let slice_fn = module
            .load_function("ethpir_answer_slice")
            .map_err(driver)?;
        let answer_fns = AnswerKernel::ALL
            .iter()
            .map(|k| module.load_function(&k.name()).map_err(driver))
            .collect::<Result<Vec<_>, _>>()?;
        let multiprocessors = ctx
            .attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver)? as u32;
        let stream = ctx.default_stream();
        Ok(CudaGpu {
            ctx,
            stream,
            device: Arc::new(Loaded {
                staging: StagingSlot::default(),
                expand_turboshake,
                expand_aes,
                slice_fn,
                answer_fns,
                multiprocessors,
                compute_capability: (major as u32, minor as u32),
                name,
            }),
        })
    }

    /// The products (answers and the hint's) run on the u8 x s8 tensor-core
    /// instruction of compute capability 8.0 and later; older GPUs are
    /// refused here (the CPU builds and answers instead under `auto`).
    fn check_tensor_cores(&self) -> Result<(), GpuError> {
        match self.device.compute_capability {
            (major, minor) if major < 8 => Err(GpuError::Unusable(format!(
                "the kernels need compute capability 8.0 or newer (this GPU: {major}.{minor})"
            ))),
            _ => Ok(()),
        }
    }

    /// The same GPU with a stream of its own (one per database held, so
    /// that answers from different databases run side by side).
    pub fn with_own_stream(&self) -> Result<Self, GpuError> {
        let mut gpu = self.clone();
        gpu.stream = self.ctx.new_stream().map_err(driver)?;
        Ok(gpu)
    }

    /// Copies `src` into `dst` at `offset` on this stream, the way
    /// [`UploadPath::from_env`] says (bounds-checked: panics past the end).
    fn upload<T: DeviceRepr + Copy>(
        &self,
        dst: &mut CudaSlice<T>,
        offset: usize,
        src: &[T],
    ) -> Result<(), GpuError> {
        self.upload_via(UploadPath::from_env(), dst, offset, src)
    }

    /// [`Self::upload`] the given way.
    fn upload_via<T: DeviceRepr + Copy>(
        &self,
        path: UploadPath,
        dst: &mut CudaSlice<T>,
        offset: usize,
        src: &[T],
    ) -> Result<(), GpuError> {
        if src.is_empty() {
            return Ok(());
        }
        let mut view = dst.slice_mut(offset..offset + src.len());
        if path == UploadPath::Staged && std::mem::size_of_val(src) >= MIN_STAGED_BYTES {
            let mut slot = self
                .device
                .staging
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let staging = slot.get_or_insert_with(|| {
                // cudarc hands an error stored earlier (by a drop) to the
                // next call: it is not this allocation's.
                if let Err(e) = self.ctx.check_err() {
                    tracing::warn!(error = ?e, "an earlier CUDA error, reported late");
                }
                Staging::new(&self.ctx).map_err(|e| {
                    tracing::warn!(error = %e, "no page-locked memory: uploads are pageable");
                    e.to_string()
                })
            });
            if let Ok(staging) = staging {
                // SAFETY: T is plain data (DeviceRepr + Copy): its bytes
                // are what the device receives either way.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        src.as_ptr().cast::<u8>(),
                        std::mem::size_of_val(src),
                    )
                };
                return self.upload_staged(staging, bytes, &mut view);
            }
        }
        self.stream.memcpy_htod(src, &mut view).map_err(driver)
    }

    /// Copies `src` (the bytes of `view`'s elements) through the staging
    /// buffers: each is filled by all cores once its last copy out is done,
    /// then copied on this stream while the next one fills.
    fn upload_staged<T>(
        &self,
        staging: &mut Staging,
        src: &[u8],
        view: &mut CudaViewMut<'_, T>,
    ) -> Result<(), GpuError> {
        assert_eq!(
            src.len(),
            view.len() * std::mem::size_of::<T>(),
            "staged upload of another size than its destination"
        );
        // Waits for the destination's earlier uses; marks it written on
        // this stream once the copies below are queued.
        let (dst, _written) = view.device_ptr_mut(&self.stream);
        let copied = self.copy_chunks(staging, src, dst);
        if copied.is_err() {
            // A copy may be queued whose buffer's event was not recorded:
            // none may still read a buffer when it is filled again.
            let _ = self.stream.synchronize();
        }
        copied
    }

    /// [`Self::upload_staged`]'s copies, `src` to the device at `dst`.
    fn copy_chunks(
        &self,
        staging: &mut Staging,
        src: &[u8],
        dst: cudarc::driver::sys::CUdeviceptr,
    ) -> Result<(), GpuError> {
        for (k, chunk) in src.chunks(STAGE_BYTES).enumerate() {
            let b = staging.next;
            staging.next = (b + 1) % staging.buffers.len();
            let buffer = &mut staging.buffers[b];
            buffer.copied.synchronize().map_err(driver)?;
            let host = &mut buffer.host.as_mut_slice().map_err(driver)?[..chunk.len()];
            copy_in(host, chunk);
            let at = dst + (k * STAGE_BYTES) as u64;
            // SAFETY: `at .. at + chunk.len()` lies within the view (the
            // caller asserted the sizes equal), and the host bytes are
            // page-locked and not written again before `copied` says this
            // copy is done.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(at, &*host, self.stream.cu_stream())
            }
            .map_err(driver)?;
            buffer.copied.record(&self.stream).map_err(driver)?;
        }
        Ok(())
    }

    /// Uploads the rows `db` serves to answer from them, when they and a
    /// batch of `max_queries` queries fit the free memory.
    pub fn hold(&self, db: &EncodedDb, max_queries: usize) -> Result<DeviceDb<Self>, GpuError> {
        self.check_tensor_cores()?;
        // Buffers freed on other streams return to the free count once
        // their work is done.
        self.ctx.synchronize().map_err(driver)?;
        let (free, _) = self.memory()?;
        let rows = db.served_rows().len() as u64;
        let needed = db.bytes() as u64
            + max_queries as u64 * (8 * rows + 4 * db.shape().padded_cols() as u64);
        // Leave a tenth for the driver and other databases' batches.
        if needed > free / 10 * 9 {
            return Err(GpuError::OutOfMemory { needed, free });
        }
        DeviceDb::upload(self.with_own_stream()?, db)
    }

    pub fn device_name(&self) -> &str {
        &self.device.name
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(u64, u64), GpuError> {
        let (free, total) = self.ctx.mem_get_info().map_err(driver)?;
        Ok((free as u64, total as u64))
    }

    /// Builds the hint, in as few row tiles as device memory allows.
    pub fn build(
        &self,
        db: &EncodedDb,
        matrix: &PublicMatrix,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<u32>, GpuError> {
        self.check_tensor_cores()?;
        let (free, _) = self.memory()?;
        let tile_rows = plan_tile_rows(db, free)?;
        self.build_tiled(db, matrix, tile_rows, progress)
    }

    /// Builds the hint with a given tile height (tests force several tiles).
    pub fn build_tiled(
        &self,
        db: &EncodedDb,
        matrix: &PublicMatrix,
        tile_rows: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<u32>, GpuError> {
        let hint = run_tiled(self, db, matrix, tile_rows, progress)?;
        self.stream.synchronize().map_err(driver)?;
        Ok(hint)
    }

    /// Expands columns `0 .. ncols` of rows `0 .. n` into device memory and
    /// times the kernel alone, the second of two runs (for benchmarks).
    pub fn time_expansion(
        &self,
        matrix: &PublicMatrix,
        n: u32,
        ncols: u32,
    ) -> Result<std::time::Duration, GpuError> {
        let key = self.upload_key(&matrix.kernel_key())?;
        let mut out = self.alloc_u32(n as usize * ncols as usize)?;
        self.second_run_time(|| expand(self, &key, matrix.expansion(), n, 0, ncols, &mut out))
    }

    /// How long the second of two runs of `work` took on this stream, from
    /// idle to idle (the first warms up the driver and the caches).
    fn second_run_time(
        &self,
        mut work: impl FnMut() -> Result<(), GpuError>,
    ) -> Result<std::time::Duration, GpuError> {
        let mut took = std::time::Duration::ZERO;
        for _ in 0..2 {
            self.stream.synchronize().map_err(driver)?;
            let start = std::time::Instant::now();
            work()?;
            self.stream.synchronize().map_err(driver)?;
            took = start.elapsed();
        }
        Ok(took)
    }

    /// Uploads `src` the given way, the second of two runs timed, and
    /// whether the device then holds exactly `src` (for gpu-selftest).
    pub fn time_upload(
        &self,
        src: &[i8],
        path: UploadPath,
    ) -> Result<(std::time::Duration, bool), GpuError> {
        let mut d = self.alloc_i8(src.len())?;
        let took = self.second_run_time(|| self.upload_via(path, &mut d, 0, src))?;
        let back = self.stream.clone_dtoh(&d).map_err(driver)?;
        Ok((took, back[..src.len()] == *src))
    }

    /// Expands columns `col0 .. col0 + ncols` of rows `0 .. n` on the GPU.
    pub fn expand_to_host(
        &self,
        matrix: &PublicMatrix,
        n: u32,
        col0: u32,
        ncols: u32,
    ) -> Result<Vec<u32>, GpuError> {
        let key = self.upload_key(&matrix.kernel_key())?;
        let mut out = self.alloc_u32(n as usize * ncols as usize)?;
        expand(self, &key, matrix.expansion(), n, col0, ncols, &mut out)?;
        self.download(&out, n as usize * ncols as usize)
    }
}

impl Backend for CudaGpu {
    type U32Buf = CudaSlice<u32>;
    type I8Buf = CudaSlice<i8>;
    type KeyBuf = CudaSlice<u8>;

    fn alloc_u32(&self, len: usize) -> Result<CudaSlice<u32>, GpuError> {
        self.stream.alloc_zeros::<u32>(len.max(1)).map_err(driver)
    }

    fn alloc_i8(&self, len: usize) -> Result<CudaSlice<i8>, GpuError> {
        self.stream.alloc_zeros::<i8>(len.max(1)).map_err(driver)
    }

    fn upload_key(&self, key: &[u8; SEED_BYTES]) -> Result<CudaSlice<u8>, GpuError> {
        self.stream.clone_htod(&key[..]).map_err(driver)
    }

    fn beside(&self) -> Result<Self, GpuError> {
        self.with_own_stream()
    }

    fn upload_i8(
        &self,
        dst: &mut CudaSlice<i8>,
        offset: usize,
        src: &[i8],
    ) -> Result<(), GpuError> {
        self.upload(dst, offset, src)
    }

    fn u32_len(buf: &CudaSlice<u32>) -> usize {
        buf.len()
    }

    fn i8_len(buf: &CudaSlice<i8>) -> usize {
        buf.len()
    }

    unsafe fn expand_unchecked(
        &self,
        key: &CudaSlice<u8>,
        expansion: Expansion,
        n: u32,
        col0: u32,
        ncols: u32,
        out: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        let (_, blocks) = expand_launch(expansion, n, ncols);
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (EXPAND_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let function = match expansion {
            Expansion::TurboShake128 => &self.device.expand_turboshake,
            Expansion::Aes128Ctr => &self.device.expand_aes,
        };
        let mut args = self.stream.launch_builder(function);
        args.arg(key).arg(&n).arg(&col0).arg(&ncols).arg(out);
        // SAFETY: the kernel writes n x ncols entries of `out`, which the
        // caller guarantees it holds; the key buffer is 32 bytes.
        unsafe { args.launch(cfg) }.map(|_| ()).map_err(driver)
    }

    fn download(&self, m: &CudaSlice<u32>, len: usize) -> Result<Vec<u32>, GpuError> {
        let mut all = self.stream.clone_dtoh(m).map_err(driver)?;
        all.truncate(len);
        Ok(all)
    }
}

impl AnswerBackend for CudaGpu {
    fn upload_u32(
        &self,
        dst: &mut CudaSlice<u32>,
        offset: usize,
        src: &[u32],
    ) -> Result<(), GpuError> {
        self.upload(dst, offset, src)
    }

    fn multiprocessors(&self) -> u32 {
        self.device.multiprocessors
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        self.stream.synchronize().map_err(driver)
    }

    unsafe fn slice_unchecked(
        &self,
        q: &CudaSlice<u32>,
        count: u32,
        groups: u32,
        stride: u32,
        planes: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        let items = count as u64 * stride as u64;
        let cfg = LaunchConfig {
            grid_dim: (items.div_ceil(SLICE_THREADS as u64) as u32, 1, 1),
            block_dim: (SLICE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = self.stream.launch_builder(&self.device.slice_fn);
        args.arg(q)
            .arg(&count)
            .arg(&groups)
            .arg(&stride)
            .arg(planes);
        // SAFETY: the caller guarantees q holds count x 4 x groups elements
        // and planes count x 4 x stride; the kernel touches no others.
        unsafe { args.launch(cfg) }.map(|_| ()).map_err(driver)
    }

    unsafe fn answer_unchecked(
        &self,
        planes: &CudaSlice<u32>,
        d: &CudaSlice<i8>,
        out: &mut CudaSlice<u32>,
        shape: AnswerShape,
    ) -> Result<(), GpuError> {
        let cfg = LaunchConfig {
            grid_dim: (shape.blocks() as u32, 1, 1),
            block_dim: (shape.kernel.threads(), 1, 1),
            shared_mem_bytes: 0,
        };
        let function = &self.device.answer_fns[shape.kernel.index()];
        let m_rows = 4 * shape.queries;
        let stride = shape.plane_stride();
        let mut args = self.stream.launch_builder(function);
        args.arg(planes)
            .arg(&m_rows)
            .arg(&stride)
            .arg(d)
            .arg(&shape.groups)
            .arg(&shape.cols_pad)
            .arg(&shape.chunk_groups)
            .arg(out);
        // SAFETY: the caller guarantees the sizes of the contract, which
        // bound every index the kernel touches; the block count fits a u32.
        unsafe { args.launch(cfg) }.map(|_| ()).map_err(driver)
    }
}
