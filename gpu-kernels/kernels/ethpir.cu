// CUDA kernels of ethpir: the hint builder's and the server's answers.
// Compiled at run time with NVRTC (see src/cuda.rs) and, for tests on
// machines without a GPU, as plain C++ by emulator/emulator.cpp, which runs
// every CUDA thread of a block on its own host thread. Keep this file free
// of anything else CUDA-specific than the qualifiers,
// blockIdx/threadIdx/blockDim, __shared__, __syncthreads and the two
// helpers below that the emulator supplies (the MMA, atomics).
//
// The kernels make exactly the numbers pir-core makes on the CPU:
//   ethpir_expand    - the public matrix A in the setup's expansion (`mode`,
//                      pir-core's Expansion::code): 0 = block (row, block)
//                      is TurboSHAKE128 (Keccak-p[1600,12], domain byte 0x0A)
//                      of seed || row (u32 LE) || block (u32 LE); 1 = entries
//                      4c .. 4c+4 of a row are AES-128 (key: the first 16
//                      bytes of `key`, derived from the seed by pir-core) of
//                      row (u32 LE) || c (u32 LE) || 0 (u64); read as u32 LE;
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
    !defined(ETHPIR_ANSWER_THREADS) || !defined(ETHPIR_SLICE_THREADS)
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

// Encrypts one block in place; the state is column-major (byte r + 4c is
// row r of column c), as FIPS-197 lays the input bytes out.
__device__ void ethpir_aes128_encrypt(const u8* sbox, const u8 rk[176], u8 st[16]) {
    for (int i = 0; i < 16; ++i) {
        st[i] ^= rk[i];
    }
    for (int round = 1; round <= 10; ++round) {
        u8 t[16];
        for (int c = 0; c < 4; ++c) {
            for (int r = 0; r < 4; ++r) {
                // SubBytes, then ShiftRows: row r moves left by r columns.
                t[r + 4 * c] = sbox[st[r + 4 * ((c + r) % 4)]];
            }
        }
        if (round < 10) {
            for (int c = 0; c < 4; ++c) {
                u8 a0 = t[4 * c], a1 = t[4 * c + 1], a2 = t[4 * c + 2], a3 = t[4 * c + 3];
                u8 all = a0 ^ a1 ^ a2 ^ a3;
                t[4 * c] = a0 ^ all ^ ethpir_xtime(a0 ^ a1);
                t[4 * c + 1] = a1 ^ all ^ ethpir_xtime(a1 ^ a2);
                t[4 * c + 2] = a2 ^ all ^ ethpir_xtime(a2 ^ a3);
                t[4 * c + 3] = a3 ^ all ^ ethpir_xtime(a3 ^ a0);
            }
        }
        for (int i = 0; i < 16; ++i) {
            st[i] = t[i] ^ rk[16 * round + i];
        }
    }
}

__device__ __forceinline__ void ethpir_store_le32(u8* p, u32 v) {
    for (int i = 0; i < 4; ++i) {
        p[i] = (u8)(v >> (8 * i));
    }
}

// `count` entries of row `row` from column `col` (a multiple of 4) on, in
// AES-128 counter mode.
__device__ void ethpir_expand_aes(const u8* sbox, const u8* key, u32 row, u32 col, u32 count, u32* dst) {
    u8 rk[176];
    ethpir_aes128_schedule(sbox, key, rk);
    for (u32 done = 0; done < count; done += 4) {
        u8 st[16];
        ethpir_store_le32(st, row);
        ethpir_store_le32(st + 4, (col + done) / 4);
        for (int i = 8; i < 16; ++i) {
            st[i] = 0;
        }
        ethpir_aes128_encrypt(sbox, rk, st);
        for (u32 e = 0; e < 4 && done + e < count; ++e) {
            const u8* p = st + 4 * e;
            dst[done + e] = (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
        }
    }
}

// Columns col0 .. col0 + ncols of every row 0 .. n of A, into `out`
// (row-major, leading dimension ncols). col0 is a multiple of 2048. One
// thread per (row, 2048-column block). `key`: the seed (mode 0) or the AES
// key (mode 1), 32 bytes.
extern "C" __global__ void __launch_bounds__(ETHPIR_EXPAND_THREADS) ethpir_expand(const u8* key, u32 mode, u32 n, u32 col0, u32 ncols, u32* out) {
    // The S-box in shared memory: each thread looks up its own bytes, which
    // constant memory would serve one address at a time.
    __shared__ u8 sbox[256];
    for (u32 i = threadIdx.x; i < 256; i += blockDim.x) {
        sbox[i] = ETHPIR_SBOX[i];
    }
    __syncthreads();
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
    if (mode == 1) {
        ethpir_expand_aes(sbox, key, row, col0 + start, count, dst);
        return;
    }
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

// ---------------------------------------------------------------------------
// Answers. A query q (one u32 per served row) times D (i8) over Z_2^32 is
// sum_t 2^(8t) (q_t . D), where q_t is byte t of every entry: four u8
// vectors, each an exact integer product on the tensor cores
// (mma m16n8k32, u8 x s8 -> s32). The planes of all queries are the rows of
// one u8 matrix P (row 4i + t: plane t of query i), so D is read once per
// batch for every plane and query.
//
// Layouts, in 32-bit words:
//   planes: P[m][g], m < 4 * queries, g < groups (a served row group of 4):
//           byte r of the word is plane t of entry 4g + r, which is also
//           what one register of the MMA's A fragment holds;
//   d:      the served rows of pir-core's panel layout, panel after panel:
//           panel p starts at word p * 64 * groups, its word (g, c) holds
//           rows 4g .. 4g+3 of column c (a B fragment's register);
//   out:    out[i][c], i < queries, c < cols_pad, zeroed before the launch:
//           the partial sums of every block are added in (mod 2^32, so the
//           order does not matter and the result is exact).
//
// A block takes one panel, one chunk of row groups and up to 16 * MT rows
// of P; its 4 warps take the chunk's steps of 8 groups (32 rows) in turn.
// A chunk is at most 16384 groups, so a warp's s32 accumulator sums at
// most 16384 rows of |u8 x s8| <= 255 * 128: below 2^31, never wrapping.

#ifdef ETHPIR_EMULATOR
// Supplied by emulator/emulator.cpp.
void ethpir_mma_u8s8(int c[4], const u32 a[4], const u32 b[2]);
__device__ __forceinline__ u32 ethpir_load_word(const i8* base, u64 word) {
    u32 v;
    __builtin_memcpy(&v, base + 4 * word, 4);
    return v;
}
#define ethpir_atomic_add(ptr, v) __atomic_fetch_add((ptr), (v), __ATOMIC_RELAXED)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// No u8 x s8 MMA before sm_80: the host refuses such GPUs before any
// product (src/cuda.rs, check_tensor_cores); this keeps the module
// compiling there.
__device__ __forceinline__ void ethpir_mma_u8s8(int c[4], const u32 a[4], const u32 b[2]) {
    __trap();
}
__device__ __forceinline__ u32 ethpir_load_word(const i8* base, u64 word) {
    return ((const u32*)base)[word];
}
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
#define ethpir_atomic_add(ptr, v) atomicAdd((ptr), (v))
#endif

// Splits `count` queries (entry r of query i at q[i * 4 * groups + r]) into
// their byte planes (P above). One thread per (query, group).
extern "C" __global__ void __launch_bounds__(ETHPIR_SLICE_THREADS) ethpir_answer_slice(const u32* q, u32 count, u32 groups, u32* planes) {
    u64 item = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (u64)count * groups) {
        return;
    }
    u64 query = item / groups;
    u64 g = item % groups;
    const u32* x = q + query * 4 * groups + 4 * g;
    for (u32 t = 0; t < 4; ++t) {
        u32 word = 0;
        for (u32 r = 0; r < 4; ++r) {
            word |= ((x[r] >> (8 * t)) & 0xFFu) << (8 * r);
        }
        planes[(query * 4 + t) * groups + g] = word;
    }
}

// One block of the answer (see above): MT tiles of 16 rows of P, U steps
// of 8 row groups loaded at a time by each warp.
template <int MT, int U>
__device__ void ethpir_answer_block(const u32* planes, u32 m_rows, const i8* d, u32 groups, u32 cols_pad,
                                    u32 chunk_groups, u32* out) {
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
                a[u][mt][0] = lo && has_a ? planes[(u64)row * groups + ga] : 0u;
                a[u][mt][1] = hi && has_a ? planes[(u64)(row + 8) * groups + ga] : 0u;
                a[u][mt][2] = lo && has_b ? planes[(u64)row * groups + gb] : 0u;
                a[u][mt][3] = hi && has_b ? planes[(u64)(row + 8) * groups + gb] : 0u;
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

// The answer kernels: ethpir_answer_m<MT>u<U>, 4 * MT queries a block.
// src/answer.rs names them (AnswerKernel) and chooses one per batch.
#define ETHPIR_ANSWER_KERNEL(MT, U)                                                                      \
    extern "C" __global__ void __launch_bounds__(ETHPIR_ANSWER_THREADS)                                  \
        ethpir_answer_m##MT##u##U(const u32* planes, u32 m_rows, const i8* d, u32 groups, u32 cols_pad,  \
                                  u32 chunk_groups, u32* out) {                                          \
        ethpir_answer_block<MT, U>(planes, m_rows, d, groups, cols_pad, chunk_groups, out);               \
    }
ETHPIR_ANSWER_KERNEL(1, 1)
ETHPIR_ANSWER_KERNEL(2, 2)
ETHPIR_ANSWER_KERNEL(4, 2)
