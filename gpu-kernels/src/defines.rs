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
/// AES blocks (of 4 entries) each thread of the AES expansion encrypts:
/// the block's tables and round keys, made once, serve them all.
pub const AES_STEPS: u32 = 16;

/// Threads per block of the direct answer kernels (4 warps; the kernel's
/// steps assume whole warps). The staged ones have `32 WM WN`.
pub const ANSWER_THREADS: u32 = 128;
/// Row groups (of 4 rows) of one stage of the staged answer kernels: the
/// planes' rows are padded to whole stages.
pub const STAGE_GROUPS: u32 = 16;
/// Stages of the staged answer kernels in shared memory (one being
/// multiplied, the others in flight): 3 x 16 KiB, the static limit of 48
/// KiB, for the widest.
pub const STAGES: u32 = 3;
/// Threads per block of the query slicing.
pub const SLICE_THREADS: u32 = 256;
/// Most row groups (of 4 rows) one answer block sums: a warp's s32
/// accumulator then stays below 2^31 even when it sums the whole chunk,
/// as a staged kernel's warp does (4 x 16384 rows x 255 x 128 =
/// 2,139,095,040; lib.rs asserts it at compile time).
pub const ANSWER_MAX_CHUNK_GROUPS: u32 = 16384;

/// `(name, value)` of every define the CUDA source needs.
pub fn kernel_defines() -> Vec<(&'static str, String)> {
    vec![
        ("ETHPIR_BLOCK_COLS", format!("{BLOCK_COLS}u")),
        ("ETHPIR_PANEL_COLS", format!("{PANEL_COLS}u")),
        ("ETHPIR_EXPAND_THREADS", format!("{EXPAND_THREADS}u")),
        ("ETHPIR_AES_STEPS", format!("{AES_STEPS}u")),
        ("ETHPIR_ANSWER_THREADS", format!("{ANSWER_THREADS}u")),
        ("ETHPIR_SLICE_THREADS", format!("{SLICE_THREADS}u")),
        ("ETHPIR_STAGE_GROUPS", format!("{STAGE_GROUPS}u")),
        ("ETHPIR_STAGES", format!("{STAGES}")),
    ]
}
