//! # gpu-kernels
//!
//! The hint `M = A . D` on an NVIDIA GPU: the public matrix is expanded on
//! the device tile by tile (never copied from the host), the database is
//! streamed in row tiles when it does not fit in device memory, and the
//! result is bit-identical to [`pir_core::product::hint_cpu`].
//!
//! The kernels are CUDA C in `kernels/ethpir.cu`, compiled at run time with
//! NVRTC and launched with `cudarc` (loaded dynamically: this crate builds
//! and runs on machines without CUDA). [`build_hint`] with
//! [`HintDevice::Auto`] takes the GPU when a driver and a device are there
//! and the CPU otherwise, and says which and why.

// `unsafe` lives only where kernels are launched (FFI to the driver and to
// the emulator), behind checked wrappers.
#![deny(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use pir_core::EncodedDb;
use pir_core::PublicMatrix;

#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
pub mod cuda;
pub mod defines;
#[cfg(feature = "host-emulator")]
#[allow(unsafe_code)]
pub mod emulated;
#[allow(unsafe_code)]
mod tiling;

pub use tiling::{expand, gemm, plan_tile_rows, GemmShape, HintBackend};

const _: () = assert!(defines::BLOCK_COLS as usize == pir_core::matrix::BLOCK_COLS);
const _: () = assert!(defines::PANEL_COLS as usize == pir_core::db::PANEL_COLS);

/// The CUDA C source of the kernels.
pub const KERNEL_SOURCE: &str = include_str!("../kernels/ethpir.cu");

/// Where to build the hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HintDevice {
    /// The GPU when one is usable, else all CPU cores.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl FromStr for HintDevice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(HintDevice::Auto),
            "cpu" => Ok(HintDevice::Cpu),
            "cuda" | "gpu" => Ok(HintDevice::Cuda),
            other => Err(format!("unknown device '{other}': use auto, cpu or cuda")),
        }
    }
}

impl fmt::Display for HintDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HintDevice::Auto => "auto",
            HintDevice::Cpu => "cpu",
            HintDevice::Cuda => "cuda",
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
    /// Where it was built: [`HintDevice::Cpu`] or [`HintDevice::Cuda`].
    pub device: HintDevice,
    /// The GPU's name, or why the CPU was used.
    pub detail: String,
}

/// Builds the hint of `db` on the chosen device. `Auto` falls back to the
/// CPU (logging why) when the GPU is absent or fails; `Cuda` reports the
/// failure instead.
pub fn build_hint(
    db: &EncodedDb,
    matrix: &PublicMatrix,
    device: HintDevice,
) -> Result<(Vec<u32>, HintReport), GpuError> {
    build_hint_with_progress(db, matrix, device, &|_| {})
}

/// [`build_hint`] with a progress callback (public-matrix rows done on the
/// CPU path, row tiles of the database on the GPU path).
pub fn build_hint_with_progress(
    db: &EncodedDb,
    matrix: &PublicMatrix,
    device: HintDevice,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<(Vec<u32>, HintReport), GpuError> {
    let cpu = |detail: String| {
        let hint = pir_core::product::hint_cpu(db, matrix, progress);
        (
            hint,
            HintReport {
                device: HintDevice::Cpu,
                detail,
            },
        )
    };
    match device {
        HintDevice::Cpu => Ok(cpu(format!(
            "requested; {}",
            pir_core::product::cpu_detail()
        ))),
        HintDevice::Cuda => gpu_hint(db, matrix, progress),
        HintDevice::Auto => match gpu_hint(db, matrix, progress) {
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
impl pir_core::product::HintBuilder for HintDevice {
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
    let gpu = cuda::CudaHint::new()?;
    let hint = gpu.build(db, matrix, progress)?;
    Ok((
        hint,
        HintReport {
            device: HintDevice::Cuda,
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
