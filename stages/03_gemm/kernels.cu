/**
 * @file stages/03_gemm/kernels.cu
 * @brief Stage 03 — C = A·B, from one thread per output to register tiles and
 *        tensor cores, next to cuBLAS.
 *
 * A GEMM does 2·M·N·K FLOPs on M·K + K·N + M·N elements: at 4096³, 137 GFLOP on
 * 192 MiB of fp32 — about 700 FLOPs per byte if each element were read once. It is
 * compute-bound *if* the kernel reuses what it loads: the whole progression is
 * about loads per FLOP, first from DRAM, then from shared memory, then from
 * registers. The peer is cuBLAS (TF32 off for fp32).
 */
#include "kernels.h"

#include <cuda_fp16.h>
#include <stdint.h>

#include "cublas_check.h"
#include "cuda_check.h"
#include "gemm_tiles.cuh" /* v7, v8 and v9 kernels, shared with stage 04 */

static const char *check_shape(int M, int N, int K)
{
    return M < 1 || N < 1 || K < 1 ? "needs M, N, K >= 1" : NULL;
}

static unsigned ceil_div(int a, int b) { return (unsigned)((a + b - 1) / b); }

/* ---------------------------------------------------------------------------
 * v1 — naive: one thread per element of C.
 * ------------------------------------------------------------------------- */

/**
 * @brief v1 — one thread per C element; threadIdx.x walks down a column of C.
 *
 * Each thread reads a row of A and a column of B: 2K loads for 2K FLOPs, one load
 * per FLOP, from DRAM or L2. Worse, threadIdx.x picks the *row*: the 32 threads
 * of a warp read A at 32 addresses K floats apart (32 transactions for one
 * instruction), read the same B element (a broadcast), and write C 32 rows apart.
 */
__global__ void sgemm_naive(const float *A, const float *B, float *C, int M, int N, int K)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(long long)row * K + k] * B[(long long)k * N + col];
    C[(long long)row * N + col] = acc;
}

static const char *gemm_v1(const void *A, const void *B, void *C, int M, int N, int K)
{
    const char *why = check_shape(M, N, K);
    if (why) return why;
    if (ceil_div(N, 32) > 65535) return "needs N <= 65535 * 32 (grid y limit)";
    sgemm_naive<<<dim3(ceil_div(M, 32), ceil_div(N, 32)), dim3(32, 32)>>>((const float *)A, (const float *)B,
                                                                          (float *)C, M, N, K);
    WB_CHECK_LAUNCH("sgemm_naive");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v2 — coalesced: threadIdx.x walks along a row of C.
 * ------------------------------------------------------------------------- */

/**
 * @brief v2 — the same work, with threadIdx.x picking the column.
 *
 * Now a warp reads 32 consecutive floats of a row of B (one 128-byte
 * transaction), one element of A for all 32 threads (a broadcast), and writes 32
 * consecutive floats of C. Still one load per FLOP, but every load is useful.
 */
__global__ void sgemm_coalesced(const float *A, const float *B, float *C, int M, int N, int K)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(long long)row * K + k] * B[(long long)k * N + col];
    C[(long long)row * N + col] = acc;
}

static const char *gemm_v2(const void *A, const void *B, void *C, int M, int N, int K)
{
    const char *why = check_shape(M, N, K);
    if (why) return why;
    if (ceil_div(M, 32) > 65535) return "needs M <= 65535 * 32 (grid y limit)";
    sgemm_coalesced<<<dim3(ceil_div(N, 32), ceil_div(M, 32)), dim3(32, 32)>>>((const float *)A, (const float *)B,
                                                                              (float *)C, M, N, K);
    WB_CHECK_LAUNCH("sgemm_coalesced");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v3 — shared-memory tiles.
 * ------------------------------------------------------------------------- */

/** @brief Tile edge of v3: a 32×32 block computes a 32×32 tile of C. */
#define SMEM_TILE 32

/**
 * @brief v3 — a block stages 32×32 tiles of A and B in shared memory.
 *
 * Each element loaded from global memory is now used 32 times (by the 32 threads
 * of a row or column of the block): 2·32·32 loads per 32·32·32·2 FLOPs, 1/32 of a
 * global load per FLOP. Every FLOP still costs two shared-memory loads. Tiles past
 * the edges of A and B are filled with zeros (predicated loads), so any M, N, K work.
 */
__global__ void sgemm_smem_tiled(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ float As[SMEM_TILE][SMEM_TILE], Bs[SMEM_TILE][SMEM_TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * SMEM_TILE + ty, col = blockIdx.x * SMEM_TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += SMEM_TILE) {
        As[ty][tx] = row < M && k0 + tx < K ? A[(long long)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = k0 + ty < K && col < N ? B[(long long)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SMEM_TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[(long long)row * N + col] = acc;
}

static const char *gemm_v3(const void *A, const void *B, void *C, int M, int N, int K)
{
    const char *why = check_shape(M, N, K);
    if (why) return why;
    if (ceil_div(M, SMEM_TILE) > 65535) return "needs M <= 65535 * 32 (grid y limit)";
    sgemm_smem_tiled<<<dim3(ceil_div(N, SMEM_TILE), ceil_div(M, SMEM_TILE)), dim3(SMEM_TILE, SMEM_TILE)>>>(
        (const float *)A, (const float *)B, (float *)C, M, N, K);
    WB_CHECK_LAUNCH("sgemm_smem_tiled");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v4 — 1-D register blocking: each thread computes TM outputs of a column.
 * ------------------------------------------------------------------------- */

/**
 * @brief v4 — each thread computes 8 consecutive outputs of a column (BM = BN = 64, BK = 8).
 *
 * In v3 each FMA needs two shared-memory loads. Here a thread loads one B value
 * into a register and uses it for 8 FMAs against 8 A values: per 8 FMAs, 9
 * shared loads instead of 16. The 64×64 tile of C is computed by 512 threads, each
 * loading one element of A's 64×8 tile and one of B's 8×64 tile per step.
 */
template <int BM, int BN, int BK, int TM>
__global__ void sgemm_1d_blocktile(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ float As[BM * BK], Bs[BK * BN];
    int t = threadIdx.x;
    int thread_col = t % BN, thread_row = t / BN; /* this thread: rows thread_row·TM … +TM−1 of the tile */
    int a_row = t / BK, a_col = t % BK, b_row = t / BN, b_col = t % BN;
    int tile_row = blockIdx.y * BM, tile_col = blockIdx.x * BN;
    float acc[TM] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += BK) {
        int ar = tile_row + a_row, ac = k0 + a_col, br = k0 + b_row, bc = tile_col + b_col;
        As[a_row * BK + a_col] = ar < M && ac < K ? A[(long long)ar * K + ac] : 0.0f;
        Bs[b_row * BN + b_col] = br < K && bc < N ? B[(long long)br * N + bc] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float b = Bs[k * BN + thread_col];
#pragma unroll
            for (int m = 0; m < TM; ++m) acc[m] += As[(thread_row * TM + m) * BK + k] * b;
        }
        __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < TM; ++m) {
        int r = tile_row + thread_row * TM + m, c = tile_col + thread_col;
        if (r < M && c < N) C[(long long)r * N + c] = acc[m];
    }
}

static const char *gemm_v4(const void *A, const void *B, void *C, int M, int N, int K)
{
    const char *why = check_shape(M, N, K);
    if (why) return why;
    if (ceil_div(M, 64) > 65535) return "needs M <= 65535 * 64 (grid y limit)";
    sgemm_1d_blocktile<64, 64, 8, 8><<<dim3(ceil_div(N, 64), ceil_div(M, 64)), 64 * 64 / 8>>>(
        (const float *)A, (const float *)B, (float *)C, M, N, K);
    WB_CHECK_LAUNCH("sgemm_1d_blocktile");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v5 — 2-D register blocking: each thread computes a TM×TN tile.
 * ------------------------------------------------------------------------- */

/**
 * @brief v5 — each thread computes an 8×8 tile of C (BM = BN = 128, BK = 8, 256 threads).
 *
 * Per step of k a thread loads 8 A values and 8 B values from shared memory into
 * registers and does their 64 products: 16 shared loads per 64 FMAs (v4: 9 per 8).
 * The 128×128 tile also halves global loads per FLOP against v4's 64×64. The 64
 * accumulators live in registers (about 100 registers per thread).
 */
template <int BM, int BN, int BK, int TM, int TN>
__global__ void sgemm_2d_blocktile(const float *A, const float *B, float *C, int M, int N, int K)
{
    constexpr int THREADS = (BM / TM) * (BN / TN);
    __shared__ float As[BM * BK], Bs[BK * BN];
    int t = threadIdx.x;
    int thread_col = t % (BN / TN), thread_row = t / (BN / TN);
    int a_row = t / BK, a_col = t % BK, b_row = t / BN, b_col = t % BN;
    int tile_row = blockIdx.y * BM, tile_col = blockIdx.x * BN;
    float acc[TM][TN] = {{0.0f}}, reg_m[TM], reg_n[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int off = 0; off < BM; off += THREADS / BK) {
            int r = tile_row + a_row + off, c = k0 + a_col;
            As[(a_row + off) * BK + a_col] = r < M && c < K ? A[(long long)r * K + c] : 0.0f;
        }
#pragma unroll
        for (int off = 0; off < BK; off += THREADS / BN) {
            int r = k0 + b_row + off, c = tile_col + b_col;
            Bs[(b_row + off) * BN + b_col] = r < K && c < N ? B[(long long)r * N + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) reg_m[i] = As[(thread_row * TM + i) * BK + k];
#pragma unroll
            for (int j = 0; j < TN; ++j) reg_n[j] = Bs[k * BN + thread_col * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            int r = tile_row + thread_row * TM + i, c = tile_col + thread_col * TN + j;
            if (r < M && c < N) C[(long long)r * N + c] = acc[i][j];
        }
}

static const char *gemm_v5(const void *A, const void *B, void *C, int M, int N, int K)
{
    const char *why = check_shape(M, N, K);
    if (why) return why;
    if (ceil_div(M, 128) > 65535) return "needs M <= 65535 * 128 (grid y limit)";
    sgemm_2d_blocktile<128, 128, 8, 8, 8><<<dim3(ceil_div(N, 128), ceil_div(M, 128)), 256>>>(
        (const float *)A, (const float *)B, (float *)C, M, N, K);
    WB_CHECK_LAUNCH("sgemm_2d_blocktile");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v6 — 16-byte loads, A's tile stored transposed.
 * ------------------------------------------------------------------------- */

/**
 * @brief v6 — v5 with float4 global loads, A's tile transposed in shared memory,
 *        and float4 shared-memory reads.
 *
 * A thread now fetches A and B with one 16-byte load each per step (v5: four
 * 4-byte loads each). A's 128×8 tile is stored transposed (As[k][m]) so that a
 * thread's 8 values of A for one k are contiguous: the inner loop reads them, and
 * its 8 values of B, as two float4 each — 4 shared-memory load instructions per
 * 64 FMAs instead of 16. When K or N is not a multiple of 4 (rows not 16-byte
 * aligned) the same kernel loads element by element (VEC = false).
 */
template <int BM, int BN, int BK, int TM, int TN, bool VEC>
__global__ void sgemm_vectorized(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ __align__(16) float As[BK * BM]; /* transposed: As[k·BM + m] */
    __shared__ __align__(16) float Bs[BK * BN];
    int t = threadIdx.x;
    int thread_col = t % (BN / TN), thread_row = t / (BN / TN);
    int a_row = t / (BK / 4), a_col = (t % (BK / 4)) * 4; /* one float4 of A per thread: 128 rows × 2 */
    int b_row = t / (BN / 4), b_col = (t % (BN / 4)) * 4; /* one float4 of B per thread: 8 rows × 32 */
    int tile_row = blockIdx.y * BM, tile_col = blockIdx.x * BN;
    float acc[TM][TN] = {{0.0f}}, reg_m[TM], reg_n[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        int ar = tile_row + a_row, ac = k0 + a_col, br = k0 + b_row, bc = tile_col + b_col;
        float a4[4], b4[4];
        if (VEC && ar < M && ac + 3 < K) {
            float4 v = *reinterpret_cast<const float4 *>(A + (long long)ar * K + ac);
            a4[0] = v.x, a4[1] = v.y, a4[2] = v.z, a4[3] = v.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) a4[i] = ar < M && ac + i < K ? A[(long long)ar * K + ac + i] : 0.0f;
        }
        if (VEC && br < K && bc + 3 < N) {
            float4 v = *reinterpret_cast<const float4 *>(B + (long long)br * N + bc);
            b4[0] = v.x, b4[1] = v.y, b4[2] = v.z, b4[3] = v.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) b4[i] = br < K && bc + i < N ? B[(long long)br * N + bc + i] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) As[(a_col + i) * BM + a_row] = a4[i];
        *reinterpret_cast<float4 *>(&Bs[b_row * BN + b_col]) = make_float4(b4[0], b4[1], b4[2], b4[3]);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                float4 v = *reinterpret_cast<const float4 *>(&As[k * BM + thread_row * TM + i]);
                reg_m[i] = v.x, reg_m[i + 1] = v.y, reg_m[i + 2] = v.z, reg_m[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                float4 v = *reinterpret_cast<const float4 *>(&Bs[k * BN + thread_col * TN + j]);
                reg_n[j] = v.x, reg_n[j + 1] = v.y, reg_n[j + 2] = v.z, reg_n[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += reg_m[i] * reg_n[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int r = tile_row + thread_row * TM + i;
        if (r >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            int c = tile_col + thread_col * TN + j;
            if (VEC && c + 3 < N) {
                *reinterpret_cast<float4 *>(C + (long long)r * N + c) =
                    make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            } else {
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
                    if (c + jj < N) C[(long long)r * N + c + jj] = acc[i][j + jj];
            }
        }
    }
}

static const char *gemm_v6(const void *A, const void *B, void *C, int M, int N, int K)
{
    const char *why = check_shape(M, N, K);
    if (why) return why;
    if (ceil_div(M, 128) > 65535) return "needs M <= 65535 * 128 (grid y limit)";
    bool vec = K % 4 == 0 && N % 4 == 0 && ((((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15u) == 0);
    dim3 grid(ceil_div(N, 128), ceil_div(M, 128));
    if (vec)
        sgemm_vectorized<128, 128, 8, 8, 8, true><<<grid, 256>>>((const float *)A, (const float *)B, (float *)C, M, N, K);
    else
        sgemm_vectorized<128, 128, 8, 8, 8, false><<<grid, 256>>>((const float *)A, (const float *)B, (float *)C, M, N, K);
    WB_CHECK_LAUNCH("sgemm_vectorized");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v7 — warp tiling and double-buffered shared memory: the kernel is in
 * gemm_tiles.cuh (stage 04 puts its epilogue on it).
 * ------------------------------------------------------------------------- */

static const char *gemm_v7(const void *A, const void *B, void *C, int M, int N, int K)
{
    return launch_sgemm_warptile((const float *)A, (const float *)B, (float *)C, M, N, K, GemmIdentity());
}

/* ---------------------------------------------------------------------------
 * v8 — tensor cores through WMMA (fp16 in, fp32 accumulate, fp16 out): the
 * kernel is in gemm_tiles.cuh (stage 04 puts its epilogue on it for the T4).
 * ------------------------------------------------------------------------- */

static const char *gemm_v8(const void *A, const void *B, void *C, int M, int N, int K)
{
    return launch_hgemm_wmma((const __half *)A, (const __half *)B, (__half *)C, M, N, K, GemmIdentity());
}

/* ---------------------------------------------------------------------------
 * v9 — mma.sync, ldmatrix and a cp.async pipeline (sm_80 and later): the kernel
 * is in gemm_tiles.cuh (stage 04 puts its epilogue on it).
 * ------------------------------------------------------------------------- */

static const char *gemm_v9(const void *A, const void *B, void *C, int M, int N, int K)
{
    return launch_hgemm_mma((const __half *)A, (const __half *)B, (__half *)C, M, N, K, GemmIdentity());
}

/* ---------------------------------------------------------------------------
 * The peers: cuBLAS. cuBLAS is column-major; a row-major C = A·B is the
 * column-major Cᵀ = Bᵀ·Aᵀ, so B goes first and the dimensions swap.
 * ------------------------------------------------------------------------- */

static cublasHandle_t handle = NULL;

static cublasHandle_t cublas(void)
{
    if (!handle) {
        WB_CUBLAS_CHECK(cublasCreate(&handle));
        WB_CUBLAS_CHECK(cublasSetStream(handle, cudaStreamPerThread)); /* the stream every kernel and the timer use */
        /* pedantic: no TF32 or other reduced-precision shortcuts for fp32 */
        WB_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));
    }
    return handle;
}

extern "C" void gemm_release(void)
{
    if (handle) WB_CUBLAS_CHECK(cublasDestroy(handle));
    handle = NULL;
    gemm_sm90_release();
}

static const char *gemm_cublas_sgemm(const void *A, const void *B, void *C, int M, int N, int K)
{
    const char *why = check_shape(M, N, K);
    if (why) return why;
    const float one = 1.0f, zero = 0.0f;
    WB_CUBLAS_CHECK(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, (const float *)B, N,
                             (const float *)A, K, &zero, (float *)C, N));
    return NULL;
}

static const char *gemm_cublas_hgemm(const void *A, const void *B, void *C, int M, int N, int K)
{
    const char *why = check_shape(M, N, K);
    if (why) return why;
    const float one = 1.0f, zero = 0.0f;
    WB_CUBLAS_CHECK(cublasGemmEx(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16F, N, A, CUDA_R_16F, K,
                              &zero, C, CUDA_R_16F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return NULL;
}

extern "C" const gemm_variant gemm_variants[] = {
    {"v1", "naive, thread per C element (uncoalesced)", WB_F32, 0, 75, gemm_v1},
    {"v2", "naive, coalesced (threadIdx.x along a row)", WB_F32, 0, 75, gemm_v2},
    {"v3", "32x32 shared-memory tiles", WB_F32, 0, 75, gemm_v3},
    {"v4", "1-D register tile: 8 outputs per thread", WB_F32, 0, 75, gemm_v4},
    {"v5", "2-D register tile: 8x8 outputs per thread", WB_F32, 0, 75, gemm_v5},
    {"v6", "v5 + float4 loads, A transposed in smem", WB_F32, 0, 75, gemm_v6},
    {"v7", "warp tiles, double-buffered shared memory", WB_F32, 0, 75, gemm_v7},
    {"cublas", "cuBLAS SGEMM, TF32 off (peer)", WB_F32, 1, 75, gemm_cublas_sgemm},
    {"v8", "tensor cores: WMMA 16x16x16, fp32 accumulate", WB_F16, 0, 75, gemm_v8},
    {"v9", "mma.sync m16n8k16 + ldmatrix + cp.async x3", WB_F16, 0, 80, gemm_v9},
    {"v10", "Hopper: TMA + wgmma, warp-specialized (sm_90a)", WB_F16, 0, 90, gemm_v10_wgmma},
    {"v11", "v10 persistent: a block per SM, loads run ahead (sm_90a)", WB_F16, 0, 90, gemm_v11_wgmma_persistent},
    {"v12", "v11 + epilogue in registers, tile stored by TMA (sm_90a)", WB_F16, 0, 90, gemm_v12_wgmma_tma_store},
    {"v13", "v12 + the last wave's tiles split along K (sm_90a)", WB_F16, 0, 90, gemm_v13_wgmma_split_tail},
    {"v14", "v13 + the tile shape from the waves: 128x256 or 192x128 (sm_90a)", WB_F16, 0, 90, gemm_v14_wgmma_tile_from_waves},
    {"cublas-h", "cuBLAS HGEMM, fp32 compute (peer)", WB_F16, 1, 75, gemm_cublas_hgemm},
    {"ex", "your kernel (exercise.cu)", WB_F32, 0, 75, gemm_exercise},
};
extern "C" const int gemm_variant_count = sizeof gemm_variants / sizeof gemm_variants[0];
