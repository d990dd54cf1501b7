/**
 * @file stages/03_gemm/gemm_tiles.cuh
 * @brief Stage 03's GEMM kernels that stage 04 builds on, v7 (fp32, warp tiles,
 *        double buffering), v8 (fp16 tensor cores through WMMA, the T4's) and v9
 *        (fp16 tensor cores, mma.sync + ldmatrix + cp.async, sm_80+), each with an
 *        epilogue hook, and their launchers.
 *
 * Stage 03 runs them with GemmIdentity; stage 04 includes this header and fuses
 * bias + GELU into the epilogue, so the product never makes a round trip through
 * memory before its activation. The epilogue is a functor:
 * `__device__ float operator()(float value, int column) const`.
 */
#ifndef STAGE03_GEMM_TILES_CUH
/** @brief Include guard. */
#define STAGE03_GEMM_TILES_CUH

#include <cuda_fp16.h>
#include <mma.h> /* WMMA, v8 */
#include <stdint.h>
#include <type_traits>

#include "cuda_check.h"
#include "mma_ptx.cuh" /* ldmatrix_x4(_trans), mma_16x8x16, cp_async_16/commit/wait */

/** @brief The epilogue of a plain GEMM: C = A·B as computed. */
struct GemmIdentity {
    /** @brief value, unchanged. */
    __device__ __forceinline__ float operator()(float value, int) const { return value; }
};

/* ---------------------------------------------------------------------------
 * v7 — warp tiling and double-buffered shared memory.
 * ------------------------------------------------------------------------- */

/**
 * @brief v7 — v6 reorganised around warps, with the next tiles loaded while the
 *        current ones are multiplied.
 *
 * Two changes. (1) Double buffering: while the block multiplies the tiles in one
 * shared-memory buffer, each thread has already issued the global loads of the
 * next tiles into registers; it stores them into the other buffer afterwards, so
 * one __syncthreads per step suffices and the load latency hides behind 512 FMAs.
 * (2) Warp tiling: the 8 warps each own a 64×32 tile of C; within it a lane owns
 * four 4×4 sub-tiles, 32 rows and 16 columns apart. For each k a warp then reads 8
 * consecutive float4 of A (each shared by 4 lanes: a broadcast) and 4 of B: no bank
 * conflicts, and the 8×8 outer product of v6 per lane per k. Every result passes
 * through `epi(value, column)` on its way out (stage 04 fuses bias and GELU there).
 */
template <bool VEC, typename Epilogue>
__global__ void __launch_bounds__(256) sgemm_warptile_double_buffer(const float *A, const float *B, float *C, int M,
                                                                    int N, int K, int k_chunk, Epilogue epi)
{
    constexpr int BM = 128, BN = 128, BK = 8;
    /* split-K (stage 04's v4): block z sums only K's chunk z and writes its own M×N slice of C; one chunk, the
     * whole K, is plain v7 */
    int k_begin = blockIdx.z * k_chunk, k_end = min(K, k_begin + k_chunk);
    C += (long long)blockIdx.z * M * N;
    __shared__ __align__(16) float As[2][BK * BM]; /* transposed: As[buf][k·BM + m] */
    __shared__ __align__(16) float Bs[2][BK * BN];
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    int row0 = (warp / 4) * 64 + (lane / 4) * 4; /* this lane's rows: row0 + {0..3} and row0 + 32 + {0..3} */
    int col0 = (warp % 4) * 32 + (lane % 4) * 4; /* its columns: col0 + {0..3} and col0 + 16 + {0..3} */
    int a_row = t / 2, a_col = (t % 2) * 4, b_row = t / 32, b_col = (t % 32) * 4;
    int tile_row = blockIdx.y * BM, tile_col = blockIdx.x * BN;
    float acc[8][8] = {{0.0f}}, a4[4], b4[4];

    /* The main loop, compiled twice: with bounds tests (GUARDED) for blocks on C's edges, and without for
     * blocks wholly inside C with whole K steps, most of them. The untaken tests alone cost 7% of the time
     * (H200, 4096³: 44.1 → 47.4 TFLOP/s without them): the compiler schedules the loop around them. */
    auto main_loop = [&](auto guarded) {
        constexpr bool GUARDED = decltype(guarded)::value;
        auto load_tiles = [&](int k0) { /* global → registers, zero-filled past the edges */
            int ar = tile_row + a_row, ac = k0 + a_col, br = k0 + b_row, bc = tile_col + b_col;
            if (!GUARDED || (VEC && ar < M && ac + 3 < k_end)) {
                float4 v = *reinterpret_cast<const float4 *>(A + (long long)ar * K + ac);
                a4[0] = v.x, a4[1] = v.y, a4[2] = v.z, a4[3] = v.w;
            } else {
                for (int i = 0; i < 4; ++i) a4[i] = ar < M && ac + i < k_end ? A[(long long)ar * K + ac + i] : 0.0f;
            }
            if (!GUARDED || (VEC && br < k_end && bc + 3 < N)) {
                float4 v = *reinterpret_cast<const float4 *>(B + (long long)br * N + bc);
                b4[0] = v.x, b4[1] = v.y, b4[2] = v.z, b4[3] = v.w;
            } else {
                for (int i = 0; i < 4; ++i) b4[i] = br < k_end && bc + i < N ? B[(long long)br * N + bc + i] : 0.0f;
            }
        };
        auto store_tiles = [&](int buf) { /* registers → shared memory */
#pragma unroll
            for (int i = 0; i < 4; ++i) As[buf][(a_col + i) * BM + a_row] = a4[i];
            *reinterpret_cast<float4 *>(&Bs[buf][b_row * BN + b_col]) = make_float4(b4[0], b4[1], b4[2], b4[3]);
        };

        load_tiles(k_begin);
        store_tiles(0);
        __syncthreads();
        int buf = 0;
        for (int k0 = k_begin; k0 < k_end; k0 += BK) {
            bool more = k0 + BK < k_end;
            if (more) load_tiles(k0 + BK); /* in flight during the FMAs below */
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                float a[8], b[8];
                float4 v0 = *reinterpret_cast<const float4 *>(&As[buf][k * BM + row0]);
                float4 v1 = *reinterpret_cast<const float4 *>(&As[buf][k * BM + row0 + 32]);
                float4 w0 = *reinterpret_cast<const float4 *>(&Bs[buf][k * BN + col0]);
                float4 w1 = *reinterpret_cast<const float4 *>(&Bs[buf][k * BN + col0 + 16]);
                a[0] = v0.x, a[1] = v0.y, a[2] = v0.z, a[3] = v0.w, a[4] = v1.x, a[5] = v1.y, a[6] = v1.z, a[7] = v1.w;
                b[0] = w0.x, b[1] = w0.y, b[2] = w0.z, b[3] = w0.w, b[4] = w1.x, b[5] = w1.y, b[6] = w1.z, b[7] = w1.w;
#pragma unroll
                for (int i = 0; i < 8; ++i)
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
            }
            if (more) store_tiles(buf ^ 1);
            __syncthreads();
            buf ^= 1;
        }
    };
    if (VEC && tile_row + BM <= M && tile_col + BN <= N && (k_end - k_begin) % BK == 0)
        main_loop(std::false_type());
    else
        main_loop(std::true_type());
    /* Finish every value first, then store: with no store in between (which might alias
     * whatever the epilogue reads), each of this lane's 8 columns is read once, not 8 times. */
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
            int c = tile_col + col0 + 16 * h + jj;
            if (c < N)
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[i][4 * h + jj] = epi(acc[i][4 * h + jj], c);
        }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        int r = tile_row + row0 + (i < 4 ? i : 32 + i - 4);
        if (r >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int c = tile_col + col0 + 16 * h;
            const float *v = &acc[i][4 * h];
            if (VEC && c + 3 < N) {
                *reinterpret_cast<float4 *>(C + (long long)r * N + c) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
                for (int jj = 0; jj < 4; ++jj)
                    if (c + jj < N) C[(long long)r * N + c + jj] = v[jj];
            }
        }
    }
}

/**
 * @brief Launch v7 with an epilogue (fp32 A, B, C; any M, N, K).
 * @param splits 1: C = epi(A·B). More (stage 04's split-K): K is cut into `splits`
 *        chunks, a multiple of 8 each, and chunk z's product A·B goes to the M×N slice
 *        z of C (C holds splits·M·N floats); epi is applied to each partial.
 * @return NULL, or why it cannot take the shape
 */
template <typename Epilogue>
static const char *launch_sgemm_warptile(const float *A, const float *B, float *C, int M, int N, int K, Epilogue epi,
                                         int splits = 1)
{
    if (M < 1 || N < 1 || K < 1) return "needs M, N, K >= 1";
    if ((M + 127) / 128 > 65535) return "needs M <= 65535 * 128 (grid y limit)";
    if (splits < 1 || splits > 64) return "needs 1 to 64 splits of K";
    int k_chunk = splits == 1 ? K : ((K + splits - 1) / splits + 7) / 8 * 8; /* chunks start on a float4 */
    bool vec = K % 4 == 0 && N % 4 == 0 && ((((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15u) == 0);
    dim3 grid((N + 127) / 128, (M + 127) / 128, splits);
    if (vec)
        sgemm_warptile_double_buffer<true><<<grid, 256>>>(A, B, C, M, N, K, k_chunk, epi);
    else
        sgemm_warptile_double_buffer<false><<<grid, 256>>>(A, B, C, M, N, K, k_chunk, epi);
    WB_CHECK_LAUNCH("sgemm_warptile_double_buffer");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v8 — tensor cores through WMMA (fp16 in, fp32 accumulate, fp16 out; sm_70+).
 * ------------------------------------------------------------------------- */

/** @brief Block tile of v8: 128×128 outputs, K in steps of 32. */
#define WMMA_BM 128
/** @brief Block tile columns. */
#define WMMA_BN 128
/** @brief K per shared-memory stage. */
#define WMMA_BK 32
/** @brief Padding of each shared-memory row, in halves: rows 80 bytes apart, not 64, spread the banks. */
#define WMMA_PAD 8

/** @brief Eight halves of row `row` of a rows×cols matrix, from column `col`, into shared memory: one 16-byte
 *         load when all eight are inside and rows are 16-byte aligned (`vec`), else one by one with zeros outside. */
static __device__ __forceinline__ void load8_or_zeros(__half *dst, const __half *m, int rows, int cols, int row, int col,
                                                      bool vec)
{
    if (vec && row < rows && col + 7 < cols) {
        *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(m + (long long)row * cols + col);
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
            dst[i] = row < rows && col + i < cols ? m[(long long)row * cols + col + i] : __float2half(0.0f);
    }
}

/**
 * @brief v8 — each warp computes a 64×32 tile of C as 4×2 WMMA 16×16×16 fragments.
 *
 * A tensor core instruction multiplies two 16×16 fp16 tiles and accumulates into
 * a 16×16 fp32 tile: 8192 FLOPs per warp instruction, where an FFMA does 64. The
 * 8 warps of a block share 128×32 of A and 32×128 of B in shared memory (16-byte
 * loads, zero-filled past the edges); each warp loads 4 A and 2 B fragments per
 * 16 of K and issues 8 mma_sync. The fp32 results go through a small per-warp
 * shared buffer, through `epi(value, column)`, to be converted to fp16 and written
 * with bounds checks. Runs on sm_70 and later (the T4 included).
 */
template <typename Epilogue>
__global__ void hgemm_wmma(const __half *A, const __half *B, __half *C, int M, int N, int K, bool vec, Epilogue epi)
{
    using namespace nvcuda;
    __shared__ __align__(16) __half As[WMMA_BM][WMMA_BK + WMMA_PAD];
    __shared__ __align__(16) __half Bs[WMMA_BK][WMMA_BN + WMMA_PAD];
    __shared__ __align__(16) float staging[8][16 * 16];
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    int warp_m = warp / 4, warp_n = warp % 4; /* 2×4 warps: 64 rows × 32 columns each */
    int tile_row = blockIdx.y * WMMA_BM, tile_col = blockIdx.x * WMMA_BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += WMMA_BK) {
        /* A tile: 128×32 halves = 512 vectors of 8; B tile: 32×128 = 512 vectors */
#pragma unroll
        for (int v = t; v < 512; v += 256) {
            int r = v / 4, c = (v % 4) * 8, br = v / 16, bc = (v % 16) * 8;
            load8_or_zeros(&As[r][c], A, M, K, tile_row + r, k0 + c, vec);
            load8_or_zeros(&Bs[br][bc], B, K, N, k0 + br, tile_col + bc, vec);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < WMMA_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[2];
#pragma unroll
            for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(a[i], &As[warp_m * 64 + i * 16][kk], WMMA_BK + WMMA_PAD);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[kk][warp_n * 32 + j * 16], WMMA_BN + WMMA_PAD);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(staging[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            int r0 = tile_row + warp_m * 64 + i * 16, c0 = tile_col + warp_n * 32 + j * 16;
            for (int e = lane; e < 256; e += 32) {
                int r = r0 + e / 16, c = c0 + e % 16;
                if (r < M && c < N) C[(long long)r * N + c] = __float2half_rn(epi(staging[warp][e], c));
            }
            __syncwarp();
        }
}

/**
 * @brief Launch v8 with an epilogue (fp16 A, B, C; any M, N, K; 16-byte loads when
 *        K and N are multiples of 8 and A, B are 16-byte aligned).
 * @return NULL, or why it cannot take the shape
 */
template <typename Epilogue>
static const char *launch_hgemm_wmma(const __half *A, const __half *B, __half *C, int M, int N, int K, Epilogue epi)
{
    if (M < 1 || N < 1 || K < 1) return "needs M, N, K >= 1";
    if ((M + WMMA_BM - 1) / WMMA_BM > 65535) return "needs M <= 65535 * 128 (grid y limit)";
    bool vec = K % 8 == 0 && N % 8 == 0 && ((((uintptr_t)A | (uintptr_t)B) & 15u) == 0);
    dim3 grid((N + WMMA_BN - 1) / WMMA_BN, (M + WMMA_BM - 1) / WMMA_BM);
    hgemm_wmma<<<grid, 256>>>(A, B, C, M, N, K, vec, epi);
    WB_CHECK_LAUNCH("hgemm_wmma");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v9 — mma.sync, ldmatrix and a cp.async pipeline (sm_80 and later).
 * ------------------------------------------------------------------------- */

/**
 * @brief v9's tile shape, one place to change it: block BM×BN, K in steps of BK,
 *        warps of WM×WN, STAGES tiles in flight. Rows of the shared tiles are padded
 *        by 8 halves (16 bytes) so that ldmatrix's eight 16-byte rows hit distinct banks.
 */
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_>
struct MmaTile {
    static constexpr int BM = BM_;         /**< rows of C per block */
    static constexpr int BN = BN_;         /**< columns of C per block */
    static constexpr int BK = BK_;         /**< K per pipeline stage */
    static constexpr int WM = WM_;         /**< rows of C per warp */
    static constexpr int WN = WN_;         /**< columns of C per warp */
    static constexpr int STAGES = STAGES_; /**< tiles in shared memory at once */
    static constexpr int WARPS_N = BN / WN;                       /**< warps across a block's columns */
    static constexpr int THREADS = (BM / WM) * WARPS_N * 32;      /**< threads per block */
    static constexpr int A_STRIDE = BK + 8;                       /**< A tile row stride, halves */
    static constexpr int B_STRIDE = BN + 8;                       /**< B tile row stride, halves */
    static constexpr int SMEM_BYTES = STAGES * (BM * A_STRIDE + BK * B_STRIDE) * 2; /**< dynamic shared memory */
};
/**
 * @brief v9's shape: 128×256 per block, K in steps of 64, 8 warps of 64×64, 3 stages
 *        (157 KB of shared memory, 212 registers: one block per SM). On the H100 it
 *        was the fastest of the shapes tried (see the page's exercise).
 */
#define MMA_CONFIG MmaTile<128, 256, 64, 64, 64, 3>

/**
 * @brief v9 — tensor cores through `mma.sync` m16n8k16, fed by `ldmatrix`, with a
 *        3-stage `cp.async` pipeline (sm_80 and later).
 *
 * Three changes to v8. (1) `cp.async` copies global memory straight into shared
 * memory without a round trip through registers, and does not block: the block
 * keeps the next two 128×32 / 32×128 tiles in flight while it multiplies the
 * current one (v8 loads, waits, then multiplies). (2) `ldmatrix` loads a warp's
 * 16×16 fragment of A (or two 16×8 fragments of B, transposed on the way) in one
 * instruction, from rows padded to 80 and 272 bytes so that its eight 16-byte rows
 * fall in distinct banks. (3) `mma.sync` is the instruction WMMA is built on, used
 * directly: each warp owns 64×32 of C as 4×4 tiles of 16×8 and issues 16 MMAs per
 * 16 of K. The fp32 results pass through `epi(value, column)` before they are
 * rounded to fp16. Contract: K and N multiples of 8 (16-byte rows for cp.async), sm_80+.
 *
 * SPLIT_K (stage 10's decode batches of 1-64 rows): block z sums only K's chunk z, of
 * `k_chunk` (a multiple of BK), and writes its fp32 partial tile to `partials`, slice z
 * of M·N floats, as stage 03's SGEMM does for stage 04's v4; a second pass adds them.
 */
template <typename Cfg, typename Epilogue, bool SPLIT_K = false>
__global__ void __launch_bounds__(Cfg::THREADS) hgemm_mma_pipeline(const __half *A, const __half *B, __half *C, int M,
                                                                   int N, int K, Epilogue epi, float *partials,
                                                                   int k_chunk)
{
#if __CUDA_ARCH__ >= 800
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, WM = Cfg::WM, WN = Cfg::WN, STAGES = Cfg::STAGES;
    constexpr int AS = Cfg::A_STRIDE, BS = Cfg::B_STRIDE, THREADS = Cfg::THREADS;
    constexpr int MT = WM / 16, NT = WN / 8; /* m16 × n8 tiles per warp */
    extern __shared__ __align__(16) __half smem[];
    __half *As = smem;                       /* [stage][BM][AS] */
    __half *Bs = smem + STAGES * BM * AS;    /* [stage][BK][BS] */
    int t = threadIdx.x, warp = t / 32, lane = t % 32;
    int warp_m = warp / Cfg::WARPS_N, warp_n = warp % Cfg::WARPS_N;
    int tile_row = blockIdx.y * BM, tile_col = blockIdx.x * BN;
    const int k_begin = SPLIT_K ? blockIdx.z * k_chunk : 0, k_end = SPLIT_K ? min(K, k_begin + k_chunk) : K;
    int k_tiles = (k_end - k_begin + BK - 1) / BK;

    auto load_tile = [&](int kt, int stage) { /* 16-byte chunks: BM·BK/8 of A, BK·BN/8 of B */
        int k0 = k_begin + kt * BK;
        __half *as = As + stage * BM * AS, *bs = Bs + stage * BK * BS;
        static_assert((BM * BK / 8) % THREADS == 0 && (BK * BN / 8) % THREADS == 0, "whole chunks per thread");
#pragma unroll
        for (int i = 0; i < BM * BK / 8 / THREADS; ++i) { /* a compile-time count: fully unrolled */
            int c = t + i * THREADS;
            int ar = c / (BK / 8), ac = (c % (BK / 8)) * 8, gr = tile_row + ar, gc = k0 + ac;
            bool ok = gr < M && gc < k_end;
            cp_async_16(as + ar * AS + ac, ok ? A + (long long)gr * K + gc : A, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < BK * BN / 8 / THREADS; ++i) {
            int c = t + i * THREADS;
            int br = c / (BN / 8), bc = (c % (BN / 8)) * 8, gbr = k0 + br, gbc = tile_col + bc;
            bool ok = gbr < k_end && gbc < N;
            cp_async_16(bs + br * BS + bc, ok ? B + (long long)gbr * N + gbc : B, ok ? 16 : 0);
        }
    };

    float acc[MT][NT][4] = {{{0.0f}}};
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_tile(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>(); /* tile kt has landed (for this thread's copies) */
        __syncthreads();              /* ... and for everyone's; the stage refilled below is free */
        int next = kt + STAGES - 1;
        if (next < k_tiles) load_tile(next, next % STAGES);
        cp_async_commit();
        const __half *as = As + (kt % STAGES) * BM * AS;
        const __half *bs = Bs + (kt % STAGES) * BK * BS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i)
                ldmatrix_x4(a[i], as + (warp_m * WM + i * 16 + lane % 16) * AS + kk + (lane / 16) * 8);
#pragma unroll
            for (int j = 0; j < NT; j += 2) {
                unsigned r[4];
                ldmatrix_x4_trans(r, bs + (kk + lane % 16) * BS + warp_n * WN + j * 8 + (lane / 16) * 8);
                b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) mma_16x8x16(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }
    cp_async_wait<0>();
    /* accumulator layout of m16n8: lane holds rows lane/4 and lane/4 + 8, columns 2·(lane%4) + {0, 1}.
     * Finish every value first (no store in between: each column's bias is read once), then store. */
    if constexpr (!SPLIT_K) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            int c = tile_col + warp_n * WN + j * 8 + (lane % 4) * 2;
            if (c < N) /* N is a multiple of 8: so is c + 1 < N */
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] = epi(acc[i][j][e], c + (e & 1));
        }
    }
    /* two columns of a row: rounded to fp16 into C, or (SPLIT_K) this chunk's raw fp32 sums into its slice of
     * `partials`, for the second pass that adds the chunks and then applies the epilogue */
    auto store2 = [&](int r, int c, float x, float y) {
        if constexpr (SPLIT_K)
            *reinterpret_cast<float2 *>(partials + ((long long)blockIdx.z * M + r) * N + c) = make_float2(x, y);
        else
            *reinterpret_cast<__half2 *>(C + (long long)r * N + c) = __floats2half2_rn(x, y);
    };
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            int r = tile_row + warp_m * WM + i * 16 + lane / 4, c = tile_col + warp_n * WN + j * 8 + (lane % 4) * 2;
            if (c >= N) continue;
            if (r < M) store2(r, c, acc[i][j][0], acc[i][j][1]);
            if (r + 8 < M) store2(r + 8, c, acc[i][j][2], acc[i][j][3]);
        }
#endif
}

/**
 * @brief Launch v9 with an epilogue (fp16 A, B, C; K and N multiples of 8; sm_80+).
 * @return NULL, or why it cannot take the shape
 */
template <typename Epilogue>
static const char *launch_hgemm_mma(const __half *A, const __half *B, __half *C, int M, int N, int K, Epilogue epi)
{
    using Cfg = MMA_CONFIG;
    if (M < 1 || N < 1 || K < 1) return "needs M, N, K >= 1";
    if (K % 8 || N % 8) return "needs K and N multiples of 8 (16-byte rows for cp.async)";
    if ((((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15u) != 0) return "needs 16-byte aligned A, B, C";
    if ((M + Cfg::BM - 1) / Cfg::BM > 65535) return "needs M <= 65535 * BM (grid y limit)";
    static bool configured = false; /* one per epilogue type */
    if (!configured) { /* more than 48 KB of dynamic shared memory must be asked for */
        WB_CUDA_CHECK(cudaFuncSetAttribute(hgemm_mma_pipeline<Cfg, Epilogue>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::SMEM_BYTES));
        configured = true;
    }
    dim3 grid((N + Cfg::BN - 1) / Cfg::BN, (M + Cfg::BM - 1) / Cfg::BM);
    hgemm_mma_pipeline<Cfg><<<grid, Cfg::THREADS, Cfg::SMEM_BYTES>>>(A, B, C, M, N, K, epi, nullptr, 0);
    WB_CHECK_LAUNCH("hgemm_mma_pipeline");
    return NULL;
}

#endif /* STAGE03_GEMM_TILES_CUH */
