// CUDA kernels of the ethpir hint builder. Compiled at run time with NVRTC
// (see src/cuda.rs) and, for tests on machines without a GPU, as plain C++
// by emulator/emulator.cpp, which runs every CUDA thread of a block on its
// own host thread. Keep this file free of anything else CUDA-specific than
// the qualifiers, blockIdx/threadIdx/blockDim, __shared__ and __syncthreads.
//
// Both kernels make exactly the numbers pir-core makes on the CPU:
//   ethpir_expand    - block (row, block) of the public matrix A, TurboSHAKE128
//                      (Keccak-p[1600,12], domain byte 0x0A) of
//                      seed || row (u32 LE) || block (u32 LE), read as u32 LE;
//   ethpir_hint_gemm - M += A_tile . D_tile over Z_2^32, D in pir-core's panel
//                      layout (columns in panels of <= 64, rows in quads).

typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char i8;
typedef unsigned char u8;

// Set from Rust (src/defines.rs), never here: NVRTC options and the
// emulator's build pass them.
#if !defined(ETHPIR_BLOCK_COLS) || !defined(ETHPIR_PANEL_COLS) || !defined(ETHPIR_TM) || \
    !defined(ETHPIR_TK) || !defined(ETHPIR_GEMM_THREADS) || !defined(ETHPIR_EXPAND_THREADS)
#error "compile with the defines of gpu-kernels/src/defines.rs"
#endif

__constant__ u64 ETHPIR_RC12[12] = {
    0x000000008000808BULL, 0x800000000000008BULL, 0x8000000000008089ULL, 0x8000000000008003ULL,
    0x8000000000008002ULL, 0x8000000000000080ULL, 0x000000000000800AULL, 0x800000008000000AULL,
    0x8000000080008081ULL, 0x8000000000008080ULL, 0x0000000080000001ULL, 0x8000000080008008ULL,
};

__constant__ int ETHPIR_RHO[25] = {
    0, 1, 62, 28, 27,
    36, 44, 6, 55, 20,
    3, 10, 43, 25, 39,
    41, 45, 15, 21, 8,
    18, 2, 61, 56, 14,
};

__device__ __forceinline__ u64 ethpir_rotl64(u64 x, int n) {
    return n == 0 ? x : ((x << n) | (x >> (64 - n)));
}

// Keccak-p[1600, 12]: the last 12 rounds of Keccak-f[1600].
__device__ void ethpir_keccak_p12(u64 s[25]) {
    for (int round = 0; round < 12; ++round) {
        u64 c[5], b[25];
        for (int x = 0; x < 5; ++x) {
            c[x] = s[x] ^ s[x + 5] ^ s[x + 10] ^ s[x + 15] ^ s[x + 20];
        }
        for (int x = 0; x < 5; ++x) {
            u64 d = c[(x + 4) % 5] ^ ethpir_rotl64(c[(x + 1) % 5], 1);
            for (int y = 0; y < 25; y += 5) {
                s[x + y] ^= d;
            }
        }
        for (int x = 0; x < 5; ++x) {
            for (int y = 0; y < 5; ++y) {
                b[y + 5 * ((2 * x + 3 * y) % 5)] = ethpir_rotl64(s[x + 5 * y], ETHPIR_RHO[x + 5 * y]);
            }
        }
        for (int y = 0; y < 25; y += 5) {
            for (int x = 0; x < 5; ++x) {
                s[x + y] = b[x + y] ^ (~b[(x + 1) % 5 + y] & b[(x + 2) % 5 + y]);
            }
        }
        s[0] ^= ETHPIR_RC12[round];
    }
}

__device__ __forceinline__ u64 ethpir_load_le64(const u8* p) {
    u64 v = 0;
    for (int i = 7; i >= 0; --i) {
        v = (v << 8) | p[i];
    }
    return v;
}

// Columns col0 .. col0 + ncols of every row 0 .. n of A, into `out`
// (row-major, leading dimension ncols). col0 is a multiple of 2048. One
// thread per (row, 2048-column block).
extern "C" __global__ void __launch_bounds__(ETHPIR_EXPAND_THREADS) ethpir_expand(const u8* seed, u32 n, u32 col0, u32 ncols, u32* out) {
    u32 blocks_per_row = (ncols + ETHPIR_BLOCK_COLS - 1) / ETHPIR_BLOCK_COLS;
    u64 item = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (u64)n * blocks_per_row) {
        return;
    }
    u32 row = (u32)(item / blocks_per_row);
    u32 blk = (u32)(item % blocks_per_row);
    u64 st[25];
    for (int i = 0; i < 25; ++i) {
        st[i] = 0;
    }
    for (int i = 0; i < 4; ++i) {
        st[i] = ethpir_load_le64(seed + 8 * i);
    }
    u32 global_block = col0 / ETHPIR_BLOCK_COLS + blk;
    st[4] = (u64)row | ((u64)global_block << 32);
    st[5] ^= 0x0AULL;                  // domain byte after the 40-byte input
    st[20] ^= 0x8000000000000000ULL;   // final bit of the 168-byte rate
    ethpir_keccak_p12(st);
    u32 start = blk * ETHPIR_BLOCK_COLS;
    u32 count = ncols - start < ETHPIR_BLOCK_COLS ? ncols - start : ETHPIR_BLOCK_COLS;
    u32* dst = out + (u64)row * ncols + start;
    u32 produced = 0;
    for (;;) {
        for (int lane = 0; lane < 21 && produced < count; ++lane) {
            dst[produced++] = (u32)st[lane];
            if (produced < count) {
                dst[produced++] = (u32)(st[lane] >> 32);
            }
        }
        if (produced >= count) {
            break;
        }
        ethpir_keccak_p12(st);
    }
}

// m[n x cols] += a[n x krows] . d[krows x cols] (mod 2^32).
// a: row-major, leading dimension a_ld. d: panel layout over krows rows
// (krows a multiple of 4), cols_pad columns. Grid: (panels, ceil(n / 64)),
// 256 threads; each thread owns a 4 x 4 block of the 64 x 64 output tile.
extern "C" __global__ void __launch_bounds__(ETHPIR_GEMM_THREADS) ethpir_hint_gemm(const u32* a, u32 a_ld, u32 n, u32 krows, const i8* d,
                                            u32 cols_pad, u32 cols, u32* m) {
    __shared__ u32 as[ETHPIR_TM][ETHPIR_TK + 1];
    __shared__ int ds[ETHPIR_TK][ETHPIR_PANEL_COLS];
    u32 panel = blockIdx.x;
    u32 row0 = blockIdx.y * ETHPIR_TM;
    u32 tid = threadIdx.x;
    u32 ty = tid / 16;
    u32 tx = tid % 16;
    u32 width = cols_pad - panel * ETHPIR_PANEL_COLS;
    if (width > ETHPIR_PANEL_COLS) {
        width = ETHPIR_PANEL_COLS;
    }
    const i8* dp = d + (u64)panel * ETHPIR_PANEL_COLS * krows;
    u32 acc[4][4];
    for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
            acc[i][j] = 0;
        }
    }
    for (u32 k0 = 0; k0 < krows; k0 += ETHPIR_TK) {
        for (u32 e = tid; e < ETHPIR_TM * ETHPIR_TK; e += ETHPIR_GEMM_THREADS) {
            u32 r = e / ETHPIR_TK;
            u32 kk = e % ETHPIR_TK;
            u32 gi = row0 + r;
            u32 gk = k0 + kk;
            as[r][kk] = (gi < n && gk < krows) ? a[(u64)gi * a_ld + gk] : 0u;
        }
        // The 32 rows starting at k0 are one contiguous run of 32 * width bytes.
        const i8* run = dp + (u64)(k0 / 4) * width * 4;
        for (u32 e = tid; e < ETHPIR_TK * ETHPIR_PANEL_COLS; e += ETHPIR_GEMM_THREADS) {
            u32 kk = e / ETHPIR_PANEL_COLS;
            u32 jj = e % ETHPIR_PANEL_COLS;
            ds[kk][jj] = 0;
        }
        __syncthreads();
        for (u32 e = tid; e < ETHPIR_TK * width; e += ETHPIR_GEMM_THREADS) {
            u32 quad = e / (width * 4);
            u32 within = e % (width * 4);
            u32 kk = quad * 4 + within % 4;
            u32 jj = within / 4;
            if (k0 + kk < krows) {
                ds[kk][jj] = (int)run[e];
            }
        }
        __syncthreads();
        for (u32 kk = 0; kk < ETHPIR_TK; ++kk) {
            u32 av[4];
            u32 dv[4];
            for (int i = 0; i < 4; ++i) {
                av[i] = as[ty * 4 + i][kk];
                dv[i] = (u32)ds[kk][tx * 4 + i];
            }
            for (int i = 0; i < 4; ++i) {
                for (int j = 0; j < 4; ++j) {
                    acc[i][j] += av[i] * dv[j];
                }
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i) {
        u32 gi = row0 + ty * 4 + i;
        for (int j = 0; j < 4; ++j) {
            u32 jj = tx * 4 + j;
            u32 col = panel * ETHPIR_PANEL_COLS + jj;
            if (gi < n && jj < width && col < cols) {
                m[(u64)gi * cols + col] += acc[i][j];
            }
        }
    }
}
