// CUDA kernels of ethpir: the hint builder's and the server's answers.
// Compiled at run time with NVRTC (see src/cuda.rs) and, for tests on
// machines without a GPU, as plain C++ by emulator/emulator.cpp, which runs
// every CUDA thread of a block on its own host thread. Keep this file free
// of anything else CUDA-specific than the qualifiers,
// blockIdx/threadIdx/blockDim, __shared__, __align__, __syncthreads and the
// helpers below that the emulator supplies (the MMA, atomics, 16-byte
// loads and asynchronous copies into shared memory).
//
// The kernels make exactly the numbers pir-core makes on the CPU:
//   ethpir_expand_* - the public matrix A in the setup's expansion:
//                      turboshake: block (row, block) is TurboSHAKE128
//                      (Keccak-p[1600,12], domain byte 0x0A) of seed || row
//                      (u32 LE) || block (u32 LE); aes: entries 4c .. 4c+4
//                      of a row are AES-128 (key: the first 16 bytes of
//                      `key`, derived from the seed by pir-core) of row (u32
//                      LE) || c (u32 LE) || 0 (u64); read as u32 LE;
//   ethpir_answer_*  - q . D over Z_2^32 for a batch of vectors q, on the
//                      tensor cores (below, with their layout): the
//                      server's answers, and the hint M += A_tile . D_tile
//                      with the rows of A as the vectors.
//
// The tensor-core instruction is the one place with inline PTX; the
// emulator defines ETHPIR_EMULATOR and supplies the same warp-wide
// operation in C++.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char i8;
typedef unsigned char u8;

// Set from Rust (src/defines.rs), never here: NVRTC options and the
// emulator's build pass them.
#if !defined(ETHPIR_BLOCK_COLS) || !defined(ETHPIR_PANEL_COLS) || !defined(ETHPIR_EXPAND_THREADS) || \
    !defined(ETHPIR_AES_STEPS) || \
    !defined(ETHPIR_ANSWER_THREADS) || !defined(ETHPIR_SLICE_THREADS) || !defined(ETHPIR_STAGE_GROUPS) || \
    !defined(ETHPIR_STAGES)
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

// The AES S-box (FIPS-197, figure 7).
__constant__ u8 ETHPIR_SBOX[256] = {
    0x63, 0x7c, 0x77, 0x7b, 0xf2, 0x6b, 0x6f, 0xc5, 0x30, 0x01, 0x67, 0x2b, 0xfe, 0xd7, 0xab, 0x76,
    0xca, 0x82, 0xc9, 0x7d, 0xfa, 0x59, 0x47, 0xf0, 0xad, 0xd4, 0xa2, 0xaf, 0x9c, 0xa4, 0x72, 0xc0,
    0xb7, 0xfd, 0x93, 0x26, 0x36, 0x3f, 0xf7, 0xcc, 0x34, 0xa5, 0xe5, 0xf1, 0x71, 0xd8, 0x31, 0x15,
    0x04, 0xc7, 0x23, 0xc3, 0x18, 0x96, 0x05, 0x9a, 0x07, 0x12, 0x80, 0xe2, 0xeb, 0x27, 0xb2, 0x75,
    0x09, 0x83, 0x2c, 0x1a, 0x1b, 0x6e, 0x5a, 0xa0, 0x52, 0x3b, 0xd6, 0xb3, 0x29, 0xe3, 0x2f, 0x84,
    0x53, 0xd1, 0x00, 0xed, 0x20, 0xfc, 0xb1, 0x5b, 0x6a, 0xcb, 0xbe, 0x39, 0x4a, 0x4c, 0x58, 0xcf,
    0xd0, 0xef, 0xaa, 0xfb, 0x43, 0x4d, 0x33, 0x85, 0x45, 0xf9, 0x02, 0x7f, 0x50, 0x3c, 0x9f, 0xa8,
    0x51, 0xa3, 0x40, 0x8f, 0x92, 0x9d, 0x38, 0xf5, 0xbc, 0xb6, 0xda, 0x21, 0x10, 0xff, 0xf3, 0xd2,
    0xcd, 0x0c, 0x13, 0xec, 0x5f, 0x97, 0x44, 0x17, 0xc4, 0xa7, 0x7e, 0x3d, 0x64, 0x5d, 0x19, 0x73,
    0x60, 0x81, 0x4f, 0xdc, 0x22, 0x2a, 0x90, 0x88, 0x46, 0xee, 0xb8, 0x14, 0xde, 0x5e, 0x0b, 0xdb,
    0xe0, 0x32, 0x3a, 0x0a, 0x49, 0x06, 0x24, 0x5c, 0xc2, 0xd3, 0xac, 0x62, 0x91, 0x95, 0xe4, 0x79,
    0xe7, 0xc8, 0x37, 0x6d, 0x8d, 0xd5, 0x4e, 0xa9, 0x6c, 0x56, 0xf4, 0xea, 0x65, 0x7a, 0xae, 0x08,
    0xba, 0x78, 0x25, 0x2e, 0x1c, 0xa6, 0xb4, 0xc6, 0xe8, 0xdd, 0x74, 0x1f, 0x4b, 0xbd, 0x8b, 0x8a,
    0x70, 0x3e, 0xb5, 0x66, 0x48, 0x03, 0xf6, 0x0e, 0x61, 0x35, 0x57, 0xb9, 0x86, 0xc1, 0x1d, 0x9e,
    0xe1, 0xf8, 0x98, 0x11, 0x69, 0xd9, 0x8e, 0x94, 0x9b, 0x1e, 0x87, 0xe9, 0xce, 0x55, 0x28, 0xdf,
    0x8c, 0xa1, 0x89, 0x0d, 0xbf, 0xe6, 0x42, 0x68, 0x41, 0x99, 0x2d, 0x0f, 0xb0, 0x54, 0xbb, 0x16,
};

__device__ __forceinline__ u8 ethpir_xtime(u8 x) {
    return (u8)((x << 1) ^ ((x >> 7) * 0x1b));
}

// AES-128 key expansion (FIPS-197, 5.2): 11 round keys of 16 bytes.
__device__ void ethpir_aes128_schedule(const u8* sbox, const u8* key, u8 rk[176]) {
    for (int i = 0; i < 16; ++i) {
        rk[i] = key[i];
    }
    u8 rcon = 1;
    for (int i = 16; i < 176; i += 4) {
        u8 t0 = rk[i - 4], t1 = rk[i - 3], t2 = rk[i - 2], t3 = rk[i - 1];
        if (i % 16 == 0) {
            u8 first = t0;
            t0 = (u8)(sbox[t1] ^ rcon);
            t1 = sbox[t2];
            t2 = sbox[t3];
            t3 = sbox[first];
            rcon = ethpir_xtime(rcon);
        }
        rk[i] = rk[i - 16] ^ t0;
        rk[i + 1] = rk[i - 15] ^ t1;
        rk[i + 2] = rk[i - 14] ^ t2;
        rk[i + 3] = rk[i - 13] ^ t3;
    }
}

// AES-128 with tables (FIPS-197's round as four lookups a column): TE[x]
// is column (2 s, s, s, 3 s) of MixColumns for s = S(x), a byte per lane
// of the little-endian word; the other three rows' tables are rotations of
// it. A column word holds bytes r = 0..3 of state column c (byte r + 4c).
__device__ __forceinline__ u32 ethpir_rotl32(u32 x, int n) {
    return (x << n) | (x >> (32 - n));
}

// Fills `te` (256 words) from the S-box; by the block's threads.
__device__ void ethpir_aes_tables(const u8* sbox, u32* te) {
    for (u32 i = threadIdx.x; i < 256; i += blockDim.x) {
        u8 s = sbox[i];
        u8 s2 = ethpir_xtime(s);
        te[i] = (u32)s2 | ((u32)s << 8) | ((u32)s << 16) | ((u32)(s2 ^ s) << 24);
    }
}

// Encrypts the block of column words c[0..4] in place with round-key words
// rk[0..44] (word j: bytes 4j .. 4j+3 of the schedule, little-endian).
__device__ __forceinline__ void ethpir_aes128_encrypt_tables(const u32* te, const u8* sbox, const u32* rk, u32 c[4]) {
    u32 s0 = c[0] ^ rk[0], s1 = c[1] ^ rk[1], s2 = c[2] ^ rk[2], s3 = c[3] ^ rk[3];
    for (int round = 1; round < 10; ++round) {
        // Row r of new column j comes from old column j + r (ShiftRows).
        u32 t0 = te[s0 & 0xFF] ^ ethpir_rotl32(te[(s1 >> 8) & 0xFF], 8) ^ ethpir_rotl32(te[(s2 >> 16) & 0xFF], 16) ^
                 ethpir_rotl32(te[s3 >> 24], 24) ^ rk[4 * round];
        u32 t1 = te[s1 & 0xFF] ^ ethpir_rotl32(te[(s2 >> 8) & 0xFF], 8) ^ ethpir_rotl32(te[(s3 >> 16) & 0xFF], 16) ^
                 ethpir_rotl32(te[s0 >> 24], 24) ^ rk[4 * round + 1];
        u32 t2 = te[s2 & 0xFF] ^ ethpir_rotl32(te[(s3 >> 8) & 0xFF], 8) ^ ethpir_rotl32(te[(s0 >> 16) & 0xFF], 16) ^
                 ethpir_rotl32(te[s1 >> 24], 24) ^ rk[4 * round + 2];
        u32 t3 = te[s3 & 0xFF] ^ ethpir_rotl32(te[(s0 >> 8) & 0xFF], 8) ^ ethpir_rotl32(te[(s1 >> 16) & 0xFF], 16) ^
                 ethpir_rotl32(te[s2 >> 24], 24) ^ rk[4 * round + 3];
        s0 = t0;
        s1 = t1;
        s2 = t2;
        s3 = t3;
    }
    // The last round has no MixColumns.
    u32 w[4] = {s0, s1, s2, s3};
    for (int j = 0; j < 4; ++j) {
        c[j] = ((u32)sbox[w[j] & 0xFF] | ((u32)sbox[(w[(j + 1) % 4] >> 8) & 0xFF] << 8) |
                ((u32)sbox[(w[(j + 2) % 4] >> 16) & 0xFF] << 16) | ((u32)sbox[w[(j + 3) % 4] >> 24] << 24)) ^
               rk[40 + j];
    }
}

// Columns col0 .. col0 + ncols of every row 0 .. n of A in TurboSHAKE128,
// into `out` (row-major, leading dimension ncols). col0 is a multiple of
// 2048. One thread per (row, 2048-column block). `key`: the seed.
extern "C" __global__ void __launch_bounds__(ETHPIR_EXPAND_THREADS)
    ethpir_expand_turboshake(const u8* key, u32 n, u32 col0, u32 ncols, u32* out) {
    u32 blocks_per_row = (ncols + ETHPIR_BLOCK_COLS - 1) / ETHPIR_BLOCK_COLS;
    u64 item = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (u64)n * blocks_per_row) {
        return;
    }
    u32 row = (u32)(item / blocks_per_row);
    u32 blk = (u32)(item % blocks_per_row);
    u32 start = blk * ETHPIR_BLOCK_COLS;
    u32 count = ncols - start < ETHPIR_BLOCK_COLS ? ncols - start : ETHPIR_BLOCK_COLS;
    u32* dst = out + (u64)row * ncols + start;
    u64 st[25];
    for (int i = 0; i < 25; ++i) {
        st[i] = 0;
    }
    for (int i = 0; i < 4; ++i) {
        st[i] = ethpir_load_le64(key + 8 * i);
    }
    u32 global_block = col0 / ETHPIR_BLOCK_COLS + blk;
    st[4] = (u64)row | ((u64)global_block << 32);
    st[5] ^= 0x0AULL;                  // domain byte after the 40-byte input
    st[20] ^= 0x8000000000000000ULL;   // final bit of the 168-byte rate
    ethpir_keccak_p12(st);
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

// The same columns in AES-128 counter mode: one block of 4 entries per
// thread and step, ETHPIR_AES_STEPS steps a thread, adjacent threads on
// adjacent blocks of a row (so that a warp's stores are adjacent too). The
// tables and round keys are the block's, in shared memory. `key`: the AES
// key (its first 16 bytes).
extern "C" __global__ void __launch_bounds__(ETHPIR_EXPAND_THREADS)
    ethpir_expand_aes(const u8* key, u32 n, u32 col0, u32 ncols, u32* out) {
    __shared__ u8 sbox[256];
    __shared__ u32 te[256];
    __shared__ u8 schedule[176];
    __shared__ u32 rk[44];
    for (u32 i = threadIdx.x; i < 256; i += blockDim.x) {
        sbox[i] = ETHPIR_SBOX[i];
    }
    __syncthreads();
    ethpir_aes_tables(sbox, te);
    if (threadIdx.x == 0) {
        ethpir_aes128_schedule(sbox, key, schedule);
    }
    __syncthreads();
    for (u32 i = threadIdx.x; i < 44; i += blockDim.x) {
        const u8* p = schedule + 4 * i;
        rk[i] = (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
    }
    __syncthreads();
    u32 per_row = (ncols + 3) / 4;
    u64 total = (u64)n * per_row;
    u64 base = (u64)blockIdx.x * ETHPIR_AES_STEPS * blockDim.x;
    for (u32 step = 0; step < ETHPIR_AES_STEPS; ++step) {
        u64 item = base + (u64)step * blockDim.x + threadIdx.x;
        if (item >= total) {
            return;
        }
        u32 row = (u32)(item / per_row);
        u32 col = 4 * (u32)(item % per_row);
        u32 c[4] = {row, (col0 + col) / 4, 0u, 0u};
        ethpir_aes128_encrypt_tables(te, sbox, rk, c);
        u32* dst = out + (u64)row * ncols + col;
        for (u32 e = 0; e < 4 && col + e < ncols; ++e) {
            dst[e] = c[e];
        }
    }
}

// ---------------------------------------------------------------------------
// Answers. A query q (one u32 per served row) times D (i8) over Z_2^32 is
// sum_t 2^(8t) (q_t . D), where q_t is byte t of every entry: four u8
// vectors, each an exact integer product on the tensor cores
// (mma m16n8k32, u8 x s8 -> s32). The planes of all queries are the rows of
// one u8 matrix P (row 4i + t: plane t of query i), so D is read once per
// batch for every plane and query.
//
// Layouts, in 32-bit words:
//   planes: P[m][g] at m * stride + g, m < 4 * queries, g < stride (a
//           served row group of 4; stride is groups rounded up to whole
//           stages, the groups past the last zero): byte r of the word is
//           plane t of entry 4g + r, which is also what one register of
//           the MMA's A fragment holds;
//   d:      the served rows of pir-core's panel layout, panel after panel:
//           panel p starts at word p * 64 * groups, its word (g, c) holds
//           rows 4g .. 4g+3 of column c (a B fragment's register);
//   out:    out[i][c], i < queries, c < cols_pad, zeroed before the launch:
//           the partial sums of every block are added in (mod 2^32, so the
//           order does not matter and the result is exact).
//
// Two families of kernels share these layouts:
//   ethpir_answer_m<MT>u<U> (direct): a block takes one panel, one chunk of
//           row groups and up to 16 * MT rows of P; its 4 warps take the
//           chunk's steps of 8 groups (32 rows) in turn, loading their
//           fragments straight from global memory. For a lone query, a scan
//           at memory speed.
//   ethpir_answer_s<WM>x<WN> (staged): a block takes WN panels, one chunk
//           and 32 * WM rows of P; both operands go through shared memory
//           in stages of ETHPIR_STAGE_GROUPS groups, ETHPIR_STAGES - 1 of
//           them in flight (cp.async), and each warp multiplies a 32-row x
//           64-column tile from there. For batches.
// A chunk is at most 16384 groups (65,536 rows), so an s32 accumulator
// sums at most 65,536 products of |u8 x s8| <= 255 * 128: below 2^31,
// never wrapping.

// Four words of shared memory at a 16-byte boundary, in one load.
struct __align__(16) ethpir_u32x4 {
    u32 w[4];
};

#ifdef ETHPIR_EMULATOR
// Supplied by emulator/emulator.cpp.
void ethpir_mma_u8s8(int c[4], const u32 a[4], const u32 b[2]);
__device__ __forceinline__ u32 ethpir_load_word(const i8* base, u64 word) {
    u32 v;
    __builtin_memcpy(&v, base + 4 * word, 4);
    return v;
}
// A GPU faults on a 16-byte access that is not 16-byte aligned; the
// emulator stops there too, so that the tests catch it.
__device__ __forceinline__ void ethpir_check_align16(const void* p) {
    if ((unsigned long long)p % 16 != 0) {
        __builtin_trap();
    }
}
__device__ __forceinline__ ethpir_u32x4 ethpir_load4(const u32* p) {
    ethpir_check_align16(p);
    ethpir_u32x4 v;
    __builtin_memcpy(&v, p, 16);
    return v;
}
// The copies are queued per thread and land only when a wait says their
// group is done, as late as a GPU may land them: a kernel that reads a
// stage it has not waited for reads stale words here too, and the tests
// fail. (The fibers of a block share one OS thread: the queues are
// indexed by the thread's place in the block.)
struct EthpirEmuCopy {
    u32* dst;
    const void* src;
    u32 bytes;
    u32 group;
};
static std::vector<EthpirEmuCopy> ethpir_emu_copies[1024];
static u32 ethpir_emu_committed[1024];
__device__ __forceinline__ void ethpir_cp_async16(u32* dst, const void* src, u32 bytes) {
    ethpir_check_align16(dst);
    if (bytes != 0) {
        ethpir_check_align16(src);
    }
    u32 t = threadIdx.x;
    ethpir_emu_copies[t].push_back(EthpirEmuCopy{dst, src, bytes, ethpir_emu_committed[t]});
}
__device__ __forceinline__ void ethpir_cp_async_commit() {
    ++ethpir_emu_committed[threadIdx.x];
}
template <int PENDING>
__device__ __forceinline__ void ethpir_cp_async_wait() {
    u32 t = threadIdx.x;
    std::vector<EthpirEmuCopy>& queue = ethpir_emu_copies[t];
    std::vector<EthpirEmuCopy> later;
    for (const EthpirEmuCopy& c : queue) {
        if (c.group + PENDING < ethpir_emu_committed[t]) {
            __builtin_memset(c.dst, 0, 16);
            if (c.bytes != 0) {
                __builtin_memcpy(c.dst, c.src, 16);
            }
        } else {
            later.push_back(c);
        }
    }
    queue.swap(later);
}
#define ethpir_atomic_add(ptr, v) __atomic_fetch_add((ptr), (v), __ATOMIC_RELAXED)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// No u8 x s8 MMA (nor cp.async) before sm_80: the host refuses such GPUs
// before any product (src/cuda.rs, check_tensor_cores); this keeps the
// module compiling there.
__device__ __forceinline__ void ethpir_mma_u8s8(int c[4], const u32 a[4], const u32 b[2]) {
    __trap();
}
__device__ __forceinline__ u32 ethpir_load_word(const i8* base, u64 word) {
    return ((const u32*)base)[word];
}
__device__ __forceinline__ ethpir_u32x4 ethpir_load4(const u32* p) {
    return *(const ethpir_u32x4*)p;
}
__device__ __forceinline__ void ethpir_cp_async16(u32* dst, const void* src, u32 bytes) {
    __trap();
}
__device__ __forceinline__ void ethpir_cp_async_commit() {}
template <int PENDING>
__device__ __forceinline__ void ethpir_cp_async_wait() {}
#define ethpir_atomic_add(ptr, v) atomicAdd((ptr), (v))
#else
// c += a . b for one 16 x 8 x 32 tile held across the warp (PTX ISA,
// "Matrix Fragments for mma.m16n8k32": a0 rows gid, k 4 tig .. +3; a1 row
// gid + 8; a2 and a3 the same rows at k + 16; b0 k 4 tig .. +3 of column
// gid, b1 k + 16; c0, c1 row gid, columns 2 tig, 2 tig + 1; c2, c3 row
// gid + 8).
__device__ __forceinline__ void ethpir_mma_u8s8(int c[4], const u32 a[4], const u32 b[2]) {
    // Not volatile: a pure function of its operands, so the compiler may
    // schedule the next step's loads across it.
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ u32 ethpir_load_word(const i8* base, u64 word) {
    return ((const u32*)base)[word];
}
__device__ __forceinline__ ethpir_u32x4 ethpir_load4(const u32* p) {
    return *(const ethpir_u32x4*)p;
}
// 16 bytes from global `src` to shared `dst`, in the background; the bytes
// past `bytes` (0 or 16) are zeros, and none is read when it is 0.
__device__ __forceinline__ void ethpir_cp_async16(u32* dst, const void* src, u32 bytes) {
    u32 shared;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(shared) : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void ethpir_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
// Waits until at most PENDING committed groups of copies are in flight.
template <int PENDING>
__device__ __forceinline__ void ethpir_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}
#define ethpir_atomic_add(ptr, v) atomicAdd((ptr), (v))
#endif

// Splits `count` queries (entry r of query i at q[i * 4 * groups + r]) into
// their byte planes (P above, rows `stride` words apart, zeros past
// `groups`). One thread per (query, group of the stride).
extern "C" __global__ void __launch_bounds__(ETHPIR_SLICE_THREADS)
    ethpir_answer_slice(const u32* q, u32 count, u32 groups, u32 stride, u32* planes) {
    u64 item = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (u64)count * stride) {
        return;
    }
    u64 query = item / stride;
    u64 g = item % stride;
    const u32* x = q + query * 4 * groups + 4 * g;
    for (u32 t = 0; t < 4; ++t) {
        u32 word = 0;
        for (u32 r = 0; g < groups && r < 4; ++r) {
            word |= ((x[r] >> (8 * t)) & 0xFFu) << (8 * r);
        }
        planes[(query * 4 + t) * stride + g] = word;
    }
}

// One block of the answer (see above): MT tiles of 16 rows of P, U steps
// of 8 row groups loaded at a time by each warp.
template <int MT, int U>
__device__ void ethpir_answer_block(const u32* planes, u32 m_rows, u32 stride, const i8* d, u32 groups,
                                    u32 cols_pad, u32 chunk_groups, u32* out) {
    __shared__ u32 sums[4 * MT][ETHPIR_PANEL_COLS];
    u32 panels = (cols_pad + ETHPIR_PANEL_COLS - 1) / ETHPIR_PANEL_COLS;
    u32 m_groups = (m_rows + 16 * MT - 1) / (16 * MT);
    u64 item = blockIdx.x;
    u32 mg = (u32)(item % m_groups);
    item /= m_groups;
    u32 panel = (u32)(item % panels);
    u32 chunk = (u32)(item / panels);
    u32 width = cols_pad - panel * ETHPIR_PANEL_COLS;
    if (width > ETHPIR_PANEL_COLS) {
        width = ETHPIR_PANEL_COLS;
    }
    u32 ntiles = width / 8;
    u32 m0 = mg * 16 * MT;
    u32 g_begin = chunk * chunk_groups;
    u32 g_end = groups - g_begin < chunk_groups ? groups : g_begin + chunk_groups;
    u32 tid = threadIdx.x;
    u32 warp = tid / 32;
    u32 lane = tid % 32;
    u32 gid = lane / 4;
    u32 tig = lane % 4;
    u64 panel_words = (u64)panel * ETHPIR_PANEL_COLS * groups;
    for (u32 e = tid; e < 4 * MT * ETHPIR_PANEL_COLS; e += ETHPIR_ANSWER_THREADS) {
        sums[e / ETHPIR_PANEL_COLS][e % ETHPIR_PANEL_COLS] = 0;
    }
    int acc[MT][8][4];
    for (int i = 0; i < MT; ++i) {
        for (int j = 0; j < 8; ++j) {
            for (int k = 0; k < 4; ++k) {
                acc[i][j][k] = 0;
            }
        }
    }
    // U steps at a time: every load of the U steps is issued before their
    // MMAs, so that a warp keeps U steps of the database in flight.
    const u32 warps = ETHPIR_ANSWER_THREADS / 32;
    for (u32 g0 = g_begin + 8 * warp; g0 < g_end; g0 += 8 * warps * U) {
        u32 b[U][8][2];
        u32 a[U][MT][4];
        for (u32 u = 0; u < U; ++u) {
            u32 ga = g0 + 8 * warps * u + tig;
            u32 gb = ga + 4;
            bool has_a = ga < g_end;
            bool has_b = gb < g_end;
            for (u32 nt = 0; nt < 8; ++nt) {
                u32 col = nt * 8 + gid;
                bool in = nt < ntiles;
                b[u][nt][0] = in && has_a ? ethpir_load_word(d, panel_words + (u64)ga * width + col) : 0u;
                b[u][nt][1] = in && has_b ? ethpir_load_word(d, panel_words + (u64)gb * width + col) : 0u;
            }
            for (u32 mt = 0; mt < MT; ++mt) {
                u32 row = m0 + mt * 16 + gid;
                bool lo = row < m_rows;
                bool hi = row + 8 < m_rows;
                a[u][mt][0] = lo && has_a ? planes[(u64)row * stride + ga] : 0u;
                a[u][mt][1] = hi && has_a ? planes[(u64)(row + 8) * stride + ga] : 0u;
                a[u][mt][2] = lo && has_b ? planes[(u64)row * stride + gb] : 0u;
                a[u][mt][3] = hi && has_b ? planes[(u64)(row + 8) * stride + gb] : 0u;
            }
        }
        for (u32 u = 0; u < U; ++u) {
            for (u32 mt = 0; mt < MT; ++mt) {
                for (u32 nt = 0; nt < 8; ++nt) {
                    if (nt < ntiles) {
                        ethpir_mma_u8s8(acc[mt][nt], a[u][mt], b[u][nt]);
                    }
                }
            }
        }
    }
    __syncthreads();
    // Plane t of query i is row 4i + t: weighted by 2^(8t), summed per query.
    for (u32 mt = 0; mt < MT; ++mt) {
        for (u32 nt = 0; nt < 8; ++nt) {
            for (u32 k = 0; k < 4; ++k) {
                u32 row = m0 + mt * 16 + gid + (k >= 2 ? 8 : 0);
                u32 col = nt * 8 + tig * 2 + (k & 1);
                if (row < m_rows && nt < ntiles) {
                    u32 v = (u32)acc[mt][nt][k] << (8 * (row % 4));
                    ethpir_atomic_add(&sums[(row - m0) / 4][col], v);
                }
            }
        }
    }
    __syncthreads();
    for (u32 e = tid; e < 4 * MT * ETHPIR_PANEL_COLS; e += ETHPIR_ANSWER_THREADS) {
        u32 query = m0 / 4 + e / ETHPIR_PANEL_COLS;
        u32 col = e % ETHPIR_PANEL_COLS;
        if (4 * query < m_rows && col < width) {
            ethpir_atomic_add(&out[(u64)query * cols_pad + panel * ETHPIR_PANEL_COLS + col],
                              sums[e / ETHPIR_PANEL_COLS][col]);
        }
    }
}

// An answer kernel's entry point: NAME, its threads, the block it runs.
// Every answer kernel takes the same arguments (src/cuda.rs passes them).
#define ETHPIR_ANSWER_ENTRY(NAME, THREADS, BLOCK)                                                        \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                \
        NAME(const u32* planes, u32 m_rows, u32 stride, const i8* d, u32 groups, u32 cols_pad,           \
             u32 chunk_groups, u32* out) {                                                               \
        BLOCK(planes, m_rows, stride, d, groups, cols_pad, chunk_groups, out);                           \
    }

// The direct kernels: ethpir_answer_m<MT>u<U>, 4 * MT queries a block.
// src/answer.rs names them (AnswerKernel) and chooses one per batch.
#define ETHPIR_ANSWER_KERNEL(MT, U) \
    ETHPIR_ANSWER_ENTRY(ethpir_answer_m##MT##u##U, ETHPIR_ANSWER_THREADS, (ethpir_answer_block<MT, U>))
ETHPIR_ANSWER_KERNEL(1, 1)
ETHPIR_ANSWER_KERNEL(2, 2)
ETHPIR_ANSWER_KERNEL(4, 2)

// ---------------------------------------------------------------------------
// The staged answer kernels (see above). Within a stage of 16 groups, the
// MMA's k and n are permuted so that every fragment is a 16-byte load from
// shared memory (the product does not depend on which k or n a slot holds,
// only that A and B agree and that each sum lands in its column):
//   k: at step s (0, 1), lane tig's first register pair holds group
//      4 tig + 2 s and its second 4 tig + 2 s + 1, so a row's four words
//      4 tig .. 4 tig + 3 feed both steps;
//   n: column tile nt, column gid is the panel's column 8 gid + nt, so a
//      lane's 8 columns of one group are adjacent words.
// A stage in shared memory: A as [32 WM rows][16 groups]; each panel's B as
// [16 groups][64 columns], its 16-byte pieces of group j at piece
// c ^ ethpir_stage_swizzle(j), so that the 8 lanes of a quarter warp read
// 32 different banks.

__device__ __forceinline__ u32 ethpir_stage_swizzle(u32 group) {
    return ((group >> 2) & 1u) | (((group >> 3) & 1u) << 2);
}

// Width of panel p of a database cols_pad columns wide (0 past the last).
__device__ __forceinline__ u32 ethpir_panel_width(u32 p, u32 cols_pad) {
    u32 start = p * ETHPIR_PANEL_COLS;
    if (start >= cols_pad) {
        return 0;
    }
    return cols_pad - start < ETHPIR_PANEL_COLS ? cols_pad - start : ETHPIR_PANEL_COLS;
}

// Issues the copies of one stage (groups g0 .. g0 + 16 of rows m0 .. of P
// and of panels p0 .. p0 + WN) into `stage`; what lies outside the
// operands (rows past m_rows, groups past g_end, panels or columns past the
// database) is zeros.
template <int WM, int WN>
__device__ void ethpir_stage_load(u32* stage, const u32* planes, u32 m0, u32 m_rows, u32 stride, const i8* d,
                                  u32 groups, u32 cols_pad, u32 p0, u32 g0, u32 g_end) {
    const u32 threads = 32 * WM * WN;
    const u32 rows = 32 * WM;
    const u32 a_words = rows * ETHPIR_STAGE_GROUPS;
    for (u32 c = threadIdx.x; c < rows * (ETHPIR_STAGE_GROUPS / 4); c += threads) {
        u32 r = c / (ETHPIR_STAGE_GROUPS / 4);
        u32 piece = c % (ETHPIR_STAGE_GROUPS / 4);
        bool in = m0 + r < m_rows;
        const u32* src = in ? planes + (u64)(m0 + r) * stride + g0 + 4 * piece : planes;
        ethpir_cp_async16(stage + r * ETHPIR_STAGE_GROUPS + 4 * piece, src, in ? 16u : 0u);
    }
    const u32 pieces = ETHPIR_PANEL_COLS / 4;
    for (u32 c = threadIdx.x; c < WN * ETHPIR_STAGE_GROUPS * pieces; c += threads) {
        u32 pp = c / (ETHPIR_STAGE_GROUPS * pieces);
        u32 j = (c / pieces) % ETHPIR_STAGE_GROUPS;
        u32 piece = c % pieces;
        u32 width = ethpir_panel_width(p0 + pp, cols_pad);
        bool in = g0 + j < g_end && 4 * piece < width;
        u64 word = (u64)(p0 + pp) * ETHPIR_PANEL_COLS * groups + (u64)(g0 + j) * width + 4 * piece;
        const void* src = in ? (const void*)(d + 4 * word) : (const void*)d;
        u32* dst = stage + a_words + (pp * ETHPIR_STAGE_GROUPS + j) * ETHPIR_PANEL_COLS +
                   4 * (piece ^ ethpir_stage_swizzle(j));
        ethpir_cp_async16(dst, src, in ? 16u : 0u);
    }
}

// The MMAs of one stage for warp (wm, wn): rows 32 wm .. of the block's P
// tile times the block's panel wn, into acc.
template <int WM, int WN>
__device__ __forceinline__ void ethpir_stage_multiply(const u32* stage, u32 wm, u32 wn, u32 gid, u32 tig,
                                                      int acc[2][8][4]) {
    const u32 a_words = 32 * WM * ETHPIR_STAGE_GROUPS;
    ethpir_u32x4 lo[2], hi[2];
    for (u32 mt = 0; mt < 2; ++mt) {
        u32 row = 32 * wm + 16 * mt + gid;
        lo[mt] = ethpir_load4(stage + row * ETHPIR_STAGE_GROUPS + 4 * tig);
        hi[mt] = ethpir_load4(stage + (row + 8) * ETHPIR_STAGE_GROUPS + 4 * tig);
    }
    const u32* b_panel = stage + a_words + wn * ETHPIR_STAGE_GROUPS * ETHPIR_PANEL_COLS;
    u32 swizzle = ethpir_stage_swizzle(4 * tig);
    for (u32 s = 0; s < 2; ++s) {
        u32 b[8][2];
        for (u32 h = 0; h < 2; ++h) {
            const u32* row = b_panel + (4 * tig + 2 * s + h) * ETHPIR_PANEL_COLS;
            ethpir_u32x4 first = ethpir_load4(row + 4 * ((2 * gid) ^ swizzle));
            ethpir_u32x4 second = ethpir_load4(row + 4 * ((2 * gid + 1) ^ swizzle));
            for (u32 nt = 0; nt < 4; ++nt) {
                b[nt][h] = first.w[nt];
                b[nt + 4][h] = second.w[nt];
            }
        }
        for (u32 mt = 0; mt < 2; ++mt) {
            u32 a[4] = {lo[mt].w[2 * s], hi[mt].w[2 * s], lo[mt].w[2 * s + 1], hi[mt].w[2 * s + 1]};
            for (u32 nt = 0; nt < 8; ++nt) {
                ethpir_mma_u8s8(acc[mt][nt], a, b[nt]);
            }
        }
    }
}

template <int WM, int WN>
__device__ void ethpir_answer_staged(const u32* planes, u32 m_rows, u32 stride, const i8* d, u32 groups,
                                     u32 cols_pad, u32 chunk_groups, u32* out) {
    const u32 threads = 32 * WM * WN;
    const u32 rows = 32 * WM;
    const u32 stage_words = rows * ETHPIR_STAGE_GROUPS + WN * ETHPIR_STAGE_GROUPS * ETHPIR_PANEL_COLS;
    __shared__ __align__(16) u32 smem[ETHPIR_STAGES * stage_words];
    u32 panels = (cols_pad + ETHPIR_PANEL_COLS - 1) / ETHPIR_PANEL_COLS;
    u32 n_blocks = (panels + WN - 1) / WN;
    u32 m_blocks = (m_rows + rows - 1) / rows;
    u64 item = blockIdx.x;
    u32 mb = (u32)(item % m_blocks);
    item /= m_blocks;
    u32 p0 = (u32)(item % n_blocks) * WN;
    u32 chunk = (u32)(item / n_blocks);
    u32 m0 = mb * rows;
    u32 g_begin = chunk * chunk_groups;
    u32 g_end = groups - g_begin < chunk_groups ? groups : g_begin + chunk_groups;
    u32 ktiles = (g_end - g_begin + ETHPIR_STAGE_GROUPS - 1) / ETHPIR_STAGE_GROUPS;
    u32 warp = threadIdx.x / 32;
    u32 lane = threadIdx.x % 32;
    u32 gid = lane / 4;
    u32 tig = lane % 4;
    u32 wm = warp % WM;
    u32 wn = warp / WM;
    int acc[2][8][4];
    for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 8; ++j) {
            for (int k = 0; k < 4; ++k) {
                acc[i][j][k] = 0;
            }
        }
    }
    // STAGES - 1 stages in flight: at step kt, stage kt is waited for, and
    // stage kt + STAGES - 1 is issued into the buffer every warp finished
    // multiplying at step kt - 1 (the barrier says so).
    for (u32 s = 0; s + 1 < ETHPIR_STAGES; ++s) {
        if (s < ktiles) {
            ethpir_stage_load<WM, WN>(smem + s * stage_words, planes, m0, m_rows, stride, d, groups, cols_pad, p0,
                                      g_begin + s * ETHPIR_STAGE_GROUPS, g_end);
        }
        ethpir_cp_async_commit();
    }
    for (u32 kt = 0; kt < ktiles; ++kt) {
        ethpir_cp_async_wait<ETHPIR_STAGES - 2>();
        __syncthreads();
        u32 next = kt + ETHPIR_STAGES - 1;
        if (next < ktiles) {
            ethpir_stage_load<WM, WN>(smem + (next % ETHPIR_STAGES) * stage_words, planes, m0, m_rows, stride, d,
                                      groups, cols_pad, p0, g_begin + next * ETHPIR_STAGE_GROUPS, g_end);
        }
        ethpir_cp_async_commit();
        ethpir_stage_multiply<WM, WN>(smem + (kt % ETHPIR_STAGES) * stage_words, wm, wn, gid, tig, acc);
    }
    ethpir_cp_async_wait<0>();
    __syncthreads();
    // The block's sums per query (plane t of query i is row 4i + t,
    // weighted by 2^(8t)), in the stages' memory, then into `out`.
    const u32 sum_cols = WN * ETHPIR_PANEL_COLS;
    u32* sums = smem;
    for (u32 e = threadIdx.x; e < rows / 4 * sum_cols; e += threads) {
        sums[e] = 0;
    }
    __syncthreads();
    for (u32 mt = 0; mt < 2; ++mt) {
        for (u32 nt = 0; nt < 8; ++nt) {
            for (u32 k = 0; k < 4; ++k) {
                u32 row = 32 * wm + 16 * mt + gid + (k >= 2 ? 8 : 0);
                u32 col = wn * ETHPIR_PANEL_COLS + (2 * tig + (k & 1)) * 8 + nt;
                u32 v = (u32)acc[mt][nt][k] << (8 * (row % 4));
                ethpir_atomic_add(&sums[row / 4 * sum_cols + col], v);
            }
        }
    }
    __syncthreads();
    for (u32 e = threadIdx.x; e < rows / 4 * sum_cols; e += threads) {
        u32 query = m0 / 4 + e / sum_cols;
        u32 p = p0 + (e % sum_cols) / ETHPIR_PANEL_COLS;
        u32 col = e % ETHPIR_PANEL_COLS;
        if (4 * query < m_rows && col < ethpir_panel_width(p, cols_pad)) {
            ethpir_atomic_add(&out[(u64)query * cols_pad + p * ETHPIR_PANEL_COLS + col], sums[e]);
        }
    }
}

// The staged kernels: ethpir_answer_s<WM>x<WN>, 32 * WM * WN threads,
// 8 * WM queries and WN panels a block. src/answer.rs names them.
#define ETHPIR_STAGED_KERNEL(WM, WN) \
    ETHPIR_ANSWER_ENTRY(ethpir_answer_s##WM##x##WN, 32 * WM * WN, (ethpir_answer_staged<WM, WN>))
ETHPIR_STAGED_KERNEL(1, 2)
ETHPIR_STAGED_KERNEL(2, 2)
ETHPIR_STAGED_KERNEL(4, 1)
ETHPIR_STAGED_KERNEL(4, 2)
ETHPIR_STAGED_KERNEL(2, 3)
