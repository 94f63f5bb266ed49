// Runs kernels/ethpir.cu on the host: the CUDA threads of a block are
// fibers (ucontext) on the calling thread, switched cooperatively at
// __syncthreads and at the warp-wide MMA, blocks one after another. It
// exists so that the kernels' arithmetic is tested bit for bit against
// pir-core on machines without a GPU; it is not fast, but a switch costs
// a fraction of an OS thread's (the warp's MMA meets 32 lanes twice).
#include <ucontext.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace {
struct EmuDim3 {
    unsigned x = 1, y = 1, z = 1;
};
EmuDim3 threadIdx, blockIdx, blockDim, gridDim;

// One CUDA thread of the running block.
struct EmuFiber {
    ucontext_t context;
    std::vector<char> stack;
    bool done = false;
};

// The running block: its fibers, the scheduler's context, the body.
struct EmuBlock {
    std::vector<EmuFiber> fibers;
    ucontext_t scheduler;
    unsigned current = 0;
    std::function<void()> body;
};
EmuBlock emu_block;

// Back to the scheduler, which resumes the next fiber in turn.
void emu_yield() {
    swapcontext(&emu_block.fibers[emu_block.current].context, &emu_block.scheduler);
}

// A barrier of `expected` fibers: the last to arrive opens it.
struct EmuBarrier {
    unsigned expected = 0;
    unsigned arrived = 0;
    unsigned long long generation = 0;
    void arrive_and_wait() {
        unsigned long long mine = generation;
        if (++arrived == expected) {
            arrived = 0;
            ++generation;
            return;
        }
        while (generation == mine) {
            emu_yield();
        }
    }
};
EmuBarrier emu_barrier;
// One per warp of the running block, for the warp-wide MMA.
EmuBarrier emu_warp_barrier[32];

void emu_fiber_main() {
    emu_block.body();
    emu_block.fibers[emu_block.current].done = true;
}
}  // namespace

#define ETHPIR_EMULATOR 1

#define __global__
#define __launch_bounds__(threads)
#define __device__
#define __constant__ static const
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __syncthreads() emu_barrier.arrive_and_wait()

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
    emu_warp_barrier[warp].arrive_and_wait();
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
    emu_warp_barrier[warp].arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
        c[i] = (int)((u32)c[i] + (u32)out[i]);
    }
}

// The emulated grid state is global, like a GPU's: one launch at a time.
static std::mutex emu_launch_lock;

// Runs every fiber of the block (blockIdx set) to its end, round-robin.
static void run_block(unsigned threads) {
    for (unsigned t = 0; t < threads; ++t) {
        EmuFiber& f = emu_block.fibers[t];
        f.done = false;
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack.data();
        f.context.uc_stack.ss_size = f.stack.size();
        f.context.uc_link = &emu_block.scheduler;
        makecontext(&f.context, emu_fiber_main, 0);
    }
    unsigned left = threads;
    while (left > 0) {
        for (unsigned t = 0; t < threads; ++t) {
            if (emu_block.fibers[t].done) {
                continue;
            }
            emu_block.current = t;
            threadIdx = EmuDim3{t, 0, 0};
            swapcontext(&emu_block.scheduler, &emu_block.fibers[t].context);
            left -= emu_block.fibers[t].done ? 1 : 0;
        }
    }
}

// Bytes of stack per fiber: the kernels' locals are a few KiB.
constexpr size_t EMU_STACK_BYTES = 64 << 10;

template <typename Kernel>
static void emu_launch(EmuDim3 grid, unsigned threads, Kernel kernel) {
    std::lock_guard<std::mutex> one_launch(emu_launch_lock);
    gridDim = grid;
    blockDim = EmuDim3{threads, 1, 1};
    emu_block.body = kernel;
    emu_block.fibers.resize(threads);
    for (auto& f : emu_block.fibers) {
        f.stack.resize(EMU_STACK_BYTES);
    }
    emu_barrier.expected = threads;
    for (unsigned w = 0; w * 32 < threads && w < 32; ++w) {
        emu_warp_barrier[w].expected = threads - 32 * w < 32 ? threads - 32 * w : 32;
    }
    for (unsigned z = 0; z < grid.z; ++z) {
        for (unsigned y = 0; y < grid.y; ++y) {
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = EmuDim3{x, y, z};
                run_block(threads);
            }
        }
    }
}

// `blocks` as src/backend.rs (expand_launch) computes them.
extern "C" void ethpir_emu_expand(u32 aes, u32 blocks, const u8* key, u32 n, u32 col0, u32 ncols, u32* out) {
    emu_launch(EmuDim3{blocks, 1, 1}, ETHPIR_EXPAND_THREADS, [=] {
        if (aes != 0) {
            ethpir_expand_aes(key, n, col0, ncols, out);
        } else {
            ethpir_expand_turboshake(key, n, col0, ncols, out);
        }
    });
}

extern "C" void ethpir_emu_answer_slice(const u32* q, u32 count, u32 groups, u32 stride, u32* planes) {
    u64 items = (u64)count * stride;
    EmuDim3 grid{(unsigned)((items + ETHPIR_SLICE_THREADS - 1) / ETHPIR_SLICE_THREADS), 1, 1};
    emu_launch(grid, ETHPIR_SLICE_THREADS, [=] { ethpir_answer_slice(q, count, groups, stride, planes); });
}

// `blocks` and `threads` as the CUDA launch computes them (src/answer.rs);
// `kernel` is the kernel's place in AnswerKernel::ALL.
extern "C" void ethpir_emu_answer(u32 kernel, u32 blocks, u32 threads, const u32* planes, u32 m_rows, u32 stride,
                                  const i8* d, u32 groups, u32 cols_pad, u32 chunk_groups, u32* out) {
    using Kernel = void (*)(const u32*, u32, u32, const i8*, u32, u32, u32, u32*);
    static const Kernel kernels[] = {
        ethpir_answer_m1u1, ethpir_answer_m2u2, ethpir_answer_m4u2, ethpir_answer_s1x2,
        ethpir_answer_s2x2, ethpir_answer_s4x1, ethpir_answer_s4x2, ethpir_answer_s2x3,
    };
    Kernel run = kernels[kernel];
    emu_launch(EmuDim3{blocks, 1, 1}, threads,
               [=] { run(planes, m_rows, stride, d, groups, cols_pad, chunk_groups, out); });
}
