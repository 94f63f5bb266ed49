// Runs kernels/ethpir.cu on the host, one std::thread per CUDA thread of a
// block and a std::barrier for __syncthreads, blocks one after another. It
// exists so that the kernels' arithmetic is tested bit for bit against
// pir-core on machines without a GPU; it is not fast.
#include <barrier>
#include <cstdint>
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
}  // namespace

#define __global__
#define __launch_bounds__(threads)
#define __device__
#define __constant__ static const
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() emu_barrier->arrive_and_wait()

#include "../kernels/ethpir.cu"

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
