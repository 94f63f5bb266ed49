//! # gpu-kernels
//!
//! The hint `M = A . D` on an NVIDIA GPU: the public matrix is expanded on
//! the device tile by tile (never copied from the host), the database is
//! streamed in row tiles when it does not fit in device memory, and the
//! result is bit-identical to [`pir_core::product::hint_cpu`].
//!
//! The server's answers `q . D` from GPU memory ([`hold_for_answers`],
//! [`answer`]): a level's rows uploaded once, each batch of queries one
//! tensor-core product of their byte planes with the database,
//! bit-identical to [`pir_core::product::multiply`]. The hint's product
//! runs on the same kernels.
//!
//! The kernels are CUDA C in `kernels/ethpir.cu`, compiled at run time with
//! NVRTC and launched with `cudarc` (loaded dynamically: this crate builds
//! and runs on machines without CUDA). [`build_hint`] with
//! [`Device::Auto`] takes the GPU when a driver and a device are there
//! and the CPU otherwise, and says which and why; so does
//! [`hold_for_answers`].

// `unsafe` lives only where kernels are launched (FFI to the driver and to
// the emulator), behind checked wrappers.
#![deny(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use pir_core::EncodedDb;
use pir_core::PublicMatrix;

#[allow(unsafe_code)]
pub mod answer;
#[allow(unsafe_code)]
pub mod backend;
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
pub mod cuda;
pub mod defines;
#[cfg(feature = "host-emulator")]
#[allow(unsafe_code)]
pub mod emulated;
mod tiling;

pub use backend::{expand, Backend};
pub use tiling::plan_tile_rows;

const _: () = assert!(defines::BLOCK_COLS as usize == pir_core::matrix::BLOCK_COLS);
const _: () = assert!(defines::PANEL_COLS as usize == pir_core::db::PANEL_COLS);
// A warp's s32 sums over a whole chunk never reach 2^31 (kernels/ethpir.cu).
const _: () = assert!((defines::ANSWER_MAX_CHUNK_GROUPS as u64) * 4 * 255 * 128 < 1 << 31);

/// The CUDA C source of the kernels.
pub const KERNEL_SOURCE: &str = include_str!("../kernels/ethpir.cu");

/// Where to build a hint or answer queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Device {
    /// The GPU when one is usable, else all CPU cores.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda),
            other => Err(format!("unknown device '{other}': use auto, cpu or cuda")),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        })
    }
}

/// Why the GPU path failed or was not taken.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no CUDA driver library on this machine")]
    NoDriver,
    #[error("no NVRTC library on this machine (needed to compile the kernels)")]
    NoNvrtc,
    #[error("{0}")]
    Unusable(String),
    #[error("no CUDA device")]
    NoDevice,
    #[error("this build has no CUDA support (feature `cuda` off)")]
    NotBuilt,
    #[error("CUDA driver error: {0}")]
    Driver(String),
    #[error("kernel compilation failed: {0}")]
    Compile(String),
    #[error("device memory too small for one tile ({needed} bytes needed, {free} free)")]
    OutOfMemory { needed: u64, free: u64 },
}

/// Which builder made a hint, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HintReport {
    /// Where it was built: [`Device::Cpu`] or [`Device::Cuda`].
    pub device: Device,
    /// The GPU's name, or why the CPU was used.
    pub detail: String,
}

/// Builds the hint of `db` on the chosen device. `Auto` falls back to the
/// CPU (logging why) when the GPU is absent or fails; `Cuda` reports the
/// failure instead.
pub fn build_hint(
    db: &EncodedDb,
    matrix: &PublicMatrix,
    device: Device,
) -> Result<(Vec<u32>, HintReport), GpuError> {
    build_hint_with_progress(db, matrix, device, &|_| {})
}

/// [`build_hint`] with a progress callback (public-matrix rows done on the
/// CPU path, row tiles of the database on the GPU path).
pub fn build_hint_with_progress(
    db: &EncodedDb,
    matrix: &PublicMatrix,
    device: Device,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<(Vec<u32>, HintReport), GpuError> {
    let cpu = |detail: String| {
        let hint = pir_core::product::hint_cpu(db, matrix, progress);
        (
            hint,
            HintReport {
                device: Device::Cpu,
                detail,
            },
        )
    };
    match device {
        Device::Cpu => Ok(cpu(format!(
            "requested; {}",
            pir_core::product::cpu_detail()
        ))),
        Device::Cuda => gpu_hint(db, matrix, progress),
        Device::Auto => match gpu_hint(db, matrix, progress) {
            Ok(done) => {
                tracing::info!(gpu = %done.1.detail, "hint built on the GPU");
                Ok(done)
            }
            Err(why) => {
                tracing::info!(reason = %why, "hint built on the CPU: GPU not usable");
                Ok(cpu(format!("GPU not usable: {why}")))
            }
        },
    }
}

/// The build pipeline's hint step on this device choice (`Auto` falls back
/// to the CPU as [`build_hint`] does).
impl pir_core::product::HintBuilder for Device {
    fn build_hint(
        &self,
        db: &EncodedDb,
        matrix: &PublicMatrix,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<(Vec<u32>, String), pir_core::product::HintBuildError> {
        let (hint, report) = build_hint_with_progress(db, matrix, *self, progress)
            .map_err(|e| pir_core::product::HintBuildError(Box::new(e)))?;
        Ok((hint, format!("{} ({})", report.device, report.detail)))
    }

    fn name(&self) -> String {
        self.to_string()
    }
}

#[cfg(feature = "cuda")]
fn gpu_hint(
    db: &EncodedDb,
    matrix: &PublicMatrix,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<(Vec<u32>, HintReport), GpuError> {
    let gpu = cuda::CudaGpu::new()?;
    let hint = gpu.build(db, matrix, progress)?;
    Ok((
        hint,
        HintReport {
            device: Device::Cuda,
            detail: gpu.device_name().to_string(),
        },
    ))
}

#[cfg(not(feature = "cuda"))]
fn gpu_hint(
    _: &EncodedDb,
    _: &PublicMatrix,
    _: &(dyn Fn(usize) + Sync),
) -> Result<(Vec<u32>, HintReport), GpuError> {
    Err(GpuError::NotBuilt)
}

/// Levels smaller than this are answered on the CPU under [`Device::Auto`]
/// by default: all cores scan them in well under a millisecond, less than
/// a batch's trip over PCIe.
pub const GPU_ANSWER_MIN_BYTES: u64 = 16 << 20;

/// A database's served rows held on the GPU to answer from
/// ([`hold_for_answers`]).
pub struct GpuAnswers {
    held: Held,
    name: String,
}

/// Where the rows are held: a real GPU, or (tests only) the host emulator.
enum Held {
    #[cfg(feature = "cuda")]
    Cuda(answer::DeviceDb<cuda::CudaGpu>),
    #[cfg(feature = "host-emulator")]
    Emulated {
        db: answer::DeviceDb<emulated::Emulator>,
        fail: bool,
    },
}

impl GpuAnswers {
    /// The GPU's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `v . D` for each query vector (one entry per served row):
    /// [`pir_core::product::multiply`]'s numbers, from device memory.
    pub fn answer(
        &self,
        vecs: &[&[u32]],
    ) -> Result<(Vec<Vec<u32>>, answer::AnswerTimes), GpuError> {
        let _ = vecs;
        match &self.held {
            #[cfg(feature = "cuda")]
            Held::Cuda(db) => db.answer_timed(vecs),
            #[cfg(feature = "host-emulator")]
            Held::Emulated { fail: true, .. } => Err(GpuError::Driver(
                "a failure the host emulator was told to make".into(),
            )),
            #[cfg(feature = "host-emulator")]
            Held::Emulated { db, .. } => db.answer_timed(vecs),
        }
    }

    /// Bytes of database it holds on the GPU.
    pub fn bytes(&self) -> u64 {
        match &self.held {
            #[cfg(feature = "cuda")]
            Held::Cuda(db) => db.bytes(),
            #[cfg(feature = "host-emulator")]
            Held::Emulated { db, .. } => db.bytes(),
        }
    }
}

/// What the host emulator stands in for (feature `host-emulator`, which
/// no production build has): the tests of a GPU's users (the server)
/// hold levels on it instead of a GPU, and may make its passes fail.
#[cfg(feature = "host-emulator")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmulatedGpu {
    /// No stand-in: the real GPU or none.
    Off,
    /// Levels held on the emulator, answered by the kernels' source.
    Answering,
    /// Levels held on the emulator, every pass failing.
    Failing,
}

#[cfg(feature = "host-emulator")]
static EMULATED_GPU: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Makes the levels held from now on stand on the host emulator (tests of
/// the server's GPU path on machines without one). Process-wide.
#[cfg(feature = "host-emulator")]
pub fn emulate_gpu(mode: EmulatedGpu) {
    EMULATED_GPU.store(mode as u8, std::sync::atomic::Ordering::SeqCst);
}

#[cfg(feature = "host-emulator")]
fn emulated_answers(db: &EncodedDb) -> Option<Result<GpuAnswers, GpuError>> {
    let fail = match EMULATED_GPU.load(std::sync::atomic::Ordering::SeqCst) {
        1 => false,
        2 => true,
        _ => return None,
    };
    Some(
        answer::DeviceDb::upload(emulated::Emulator, db).map(|db| GpuAnswers {
            held: Held::Emulated { db, fail },
            name: "host emulator".into(),
        }),
    )
}

/// Where a server answers a level from, and why.
pub enum AnswerPlace {
    Gpu(GpuAnswers),
    /// On the CPU for good, with the reason (asked for, or a level too
    /// small to gain).
    Cpu(String),
    /// On the CPU because the GPU could not take it now (absent, full,
    /// failing), with the reason: worth asking again later, when memory
    /// is freed.
    CpuForNow(String),
}

/// Holds `db`'s served rows on the GPU when `device` asks for it and they
/// fit with a batch of `max_queries` queries: `Cuda` fails when they
/// cannot, `Auto` answers on the CPU then (and for levels under
/// `min_bytes`), `Cpu` always does.
pub fn hold_for_answers(
    db: &EncodedDb,
    device: Device,
    max_queries: usize,
    min_bytes: u64,
) -> Result<AnswerPlace, GpuError> {
    match device {
        Device::Cpu => Ok(AnswerPlace::Cpu("requested".into())),
        Device::Cuda => gpu_answers(db, max_queries).map(AnswerPlace::Gpu),
        Device::Auto if (db.bytes() as u64) < min_bytes => Ok(AnswerPlace::Cpu(format!(
            "level of {} bytes: the CPU is as fast",
            db.bytes()
        ))),
        Device::Auto => Ok(match gpu_answers(db, max_queries) {
            Ok(gpu) => AnswerPlace::Gpu(gpu),
            Err(why) => AnswerPlace::CpuForNow(format!("GPU not usable: {why}")),
        }),
    }
}

fn gpu_answers(db: &EncodedDb, max_queries: usize) -> Result<GpuAnswers, GpuError> {
    #[cfg(feature = "host-emulator")]
    if let Some(emulated) = emulated_answers(db) {
        return emulated;
    }
    #[cfg(feature = "cuda")]
    {
        let gpu = cuda::shared()?;
        Ok(GpuAnswers {
            held: Held::Cuda(gpu.hold(db, max_queries)?),
            name: gpu.device_name().to_string(),
        })
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (db, max_queries);
        Err(GpuError::NotBuilt)
    }
}
