// Runs kernels/ethpir.cu on the host, one std::thread per CUDA thread of a
// block and a std::barrier for __syncthreads, blocks one after another. It
// exists so that the kernels' arithmetic is tested bit for bit against
// pir-core on machines without a GPU; it is not fast.
#include <barrier>
#include <algorithm>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace {
struct EmuDim3 {
    unsigned x = 1, y = 1, z = 1;
};
thread_local EmuDim3 threadIdx;
EmuDim3 blockIdx, blockDim, gridDim;
std::barrier<>* emu_barrier = nullptr;
// One barrier per warp of the running block, for the warp-wide MMA.
std::barrier<>* emu_warp_barrier[32] = {};
}  // namespace

#define ETHPIR_EMULATOR 1

#define __global__
#define __launch_bounds__(threads)
#define __device__
#define __constant__ static const
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() emu_barrier->arrive_and_wait()

#include "../kernels/ethpir.cu"

// mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 across the 32 threads of
// the caller's warp: each lane posts its fragments, waits for the warp,
// computes its four outputs from everyone's, and waits again before the
// fragments may be overwritten. Fragment layout as in kernels/ethpir.cu.
namespace {
struct EmuWarpFragments {
    u32 a[32][4];
    u32 b[32][2];
};
EmuWarpFragments emu_fragments[32];

// Element (row, k) of the warp's 16 x 32 u8 A tile.
u32 emu_a(const EmuWarpFragments& f, unsigned row, unsigned k) {
    unsigned lane = (row % 8) * 4 + (k % 16) / 4;
    unsigned reg = (row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0);
    return (f.a[lane][reg] >> (8 * (k % 4))) & 0xFF;
}

// Element (k, col) of the warp's 32 x 8 s8 B tile.
int emu_b(const EmuWarpFragments& f, unsigned k, unsigned col) {
    unsigned lane = col * 4 + (k % 16) / 4;
    unsigned reg = k >= 16 ? 1 : 0;
    return (int)(i8)(u8)(f.b[lane][reg] >> (8 * (k % 4)));
}
}  // namespace

void ethpir_mma_u8s8(int c[4], const u32 a[4], const u32 b[2]) {
    unsigned lane = threadIdx.x % 32;
    unsigned warp = threadIdx.x / 32;
    EmuWarpFragments& f = emu_fragments[warp];
    for (int i = 0; i < 4; ++i) {
        f.a[lane][i] = a[i];
    }
    f.b[lane][0] = b[0];
    f.b[lane][1] = b[1];
    emu_warp_barrier[warp]->arrive_and_wait();
    unsigned gid = lane / 4;
    unsigned tig = lane % 4;
    int out[4];
    for (unsigned i = 0; i < 4; ++i) {
        unsigned row = gid + (i >= 2 ? 8 : 0);
        unsigned col = tig * 2 + (i & 1);
        long long sum = 0;
        for (unsigned k = 0; k < 32; ++k) {
            sum += (long long)emu_a(f, row, k) * emu_b(f, k, col);
        }
        out[i] = (int)sum;
    }
    emu_warp_barrier[warp]->arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
        c[i] = (int)((u32)c[i] + (u32)out[i]);
    }
}

// The emulated grid state is global, like a GPU's: one launch at a time.
static std::mutex emu_launch_lock;

template <typename Kernel>
static void emu_launch(EmuDim3 grid, unsigned threads, Kernel kernel) {
    std::lock_guard<std::mutex> one_launch(emu_launch_lock);
    gridDim = grid;
    blockDim = EmuDim3{threads, 1, 1};
    for (unsigned z = 0; z < grid.z; ++z) {
        for (unsigned y = 0; y < grid.y; ++y) {
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = EmuDim3{x, y, z};
                std::barrier<> bar(threads);
                emu_barrier = &bar;
                std::deque<std::barrier<>> warp_bars;
                for (unsigned w = 0; w * 32 < threads && w < 32; ++w) {
                    warp_bars.emplace_back(std::min(32u, threads - 32 * w));
                    emu_warp_barrier[w] = &warp_bars.back();
                }
                std::vector<std::thread> pool;
                pool.reserve(threads);
                for (unsigned t = 0; t < threads; ++t) {
                    pool.emplace_back([t, &kernel] {
                        threadIdx = EmuDim3{t, 0, 0};
                        kernel();
                    });
                }
                for (auto& th : pool) {
                    th.join();
                }
            }
        }
    }
}

extern "C" void ethpir_emu_expand(const u8* key, u32 mode, u32 n, u32 col0, u32 ncols, u32* out) {
    u64 items = (u64)n * ((ncols + ETHPIR_BLOCK_COLS - 1) / ETHPIR_BLOCK_COLS);
    unsigned threads = 64;
    EmuDim3 grid{(unsigned)((items + threads - 1) / threads), 1, 1};
    emu_launch(grid, threads, [=] { ethpir_expand(key, mode, n, col0, ncols, out); });
}

extern "C" void ethpir_emu_hint_gemm(const u32* a, u32 a_ld, u32 n, u32 krows, const i8* d, u32 cols_pad,
                                     u32 cols, u32* m) {
    u32 panels = (cols_pad + ETHPIR_PANEL_COLS - 1) / ETHPIR_PANEL_COLS;
    EmuDim3 grid{panels, (n + ETHPIR_TM - 1) / ETHPIR_TM, 1};
    emu_launch(grid, ETHPIR_GEMM_THREADS, [=] { ethpir_hint_gemm(a, a_ld, n, krows, d, cols_pad, cols, m); });
}

extern "C" void ethpir_emu_answer_slice(const u32* q, u32 count, u32 groups, u32* planes) {
    u64 items = (u64)count * groups;
    EmuDim3 grid{(unsigned)((items + ETHPIR_SLICE_THREADS - 1) / ETHPIR_SLICE_THREADS), 1, 1};
    emu_launch(grid, ETHPIR_SLICE_THREADS, [=] { ethpir_answer_slice(q, count, groups, planes); });
}

// `blocks` as the CUDA launch computes it (src/answer.rs); `kernel` is
// the kernel's place in AnswerKernel::ALL.
extern "C" void ethpir_emu_answer(u32 kernel, u32 blocks, const u32* planes, u32 m_rows, const i8* d, u32 groups,
                                  u32 cols_pad, u32 chunk_groups, u32* out) {
    using Kernel = void (*)(const u32*, u32, const i8*, u32, u32, u32, u32*);
    static const Kernel kernels[] = {ethpir_answer_m1u1, ethpir_answer_m2u2, ethpir_answer_m4u2};
    Kernel run = kernels[kernel];
    emu_launch(EmuDim3{blocks, 1, 1}, ETHPIR_ANSWER_THREADS,
               [=] { run(planes, m_rows, d, groups, cols_pad, chunk_groups, out); });
}
