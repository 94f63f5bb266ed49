// The constants of `kernels/ethpir.cu`, set here and nowhere else: NVRTC
// gets them as `-D` options (src/cuda.rs) and the host emulator's C++ build
// as defines (build.rs includes this file). The source refuses to compile
// without them. The two layout constants must equal pir-core's; lib.rs
// checks that at compile time (a build script cannot see pir-core without
// building it twice).

/// Columns of `A` per expansion block (`pir_core::matrix::BLOCK_COLS`).
pub const BLOCK_COLS: u32 = 2048;
/// Database columns per panel (`pir_core::db::PANEL_COLS`).
pub const PANEL_COLS: u32 = 64;

/// Threads per block of the matrix expansion.
pub const EXPAND_THREADS: u32 = 128;

/// Threads per block of the answer kernels (4 warps; the kernel's steps
/// assume whole warps).
pub const ANSWER_THREADS: u32 = 128;
/// Threads per block of the query slicing.
pub const SLICE_THREADS: u32 = 256;
/// Most row groups (of 4 rows) one answer block sums: a warp's s32
/// accumulator then stays below 2^31 (16384 x 255 x 128 < 2^31 with a
/// quarter of the chunk per warp; kernels/ethpir.cu says why it matters).
pub const ANSWER_MAX_CHUNK_GROUPS: u32 = 16384;

/// `(name, value)` of every define the CUDA source needs.
pub fn kernel_defines() -> Vec<(&'static str, String)> {
    vec![
        ("ETHPIR_BLOCK_COLS", format!("{BLOCK_COLS}u")),
        ("ETHPIR_PANEL_COLS", format!("{PANEL_COLS}u")),
        ("ETHPIR_EXPAND_THREADS", format!("{EXPAND_THREADS}u")),
        ("ETHPIR_ANSWER_THREADS", format!("{ANSWER_THREADS}u")),
        ("ETHPIR_SLICE_THREADS", format!("{SLICE_THREADS}u")),
    ]
}
