/**
 * @file stages/10_gpt2_e2e/kernels.cu
 * @brief v1's own kernels (see kernels.h): the glue between the earlier
 *        stages' kernels (simple, memory-bound, one thread per element; a
 *        small fraction of a forward pass, the page measures it) and the
 *        decode-time linears of a few rows (1-8: fp32, and fp16 on the T4) and of
 *        a batch (1-64, fp16 from sm_80).
 */
#include <cuda_fp16.h>
#include <math.h>

#include "03_gemm/gemm_tiles.cuh" /* hgemm_mma_pipeline, MmaTile: stage 03's v9, the skinny linear's GEMM */
#include "argmax_key.h"
#include "cuda_check.h"
#include "device.h" /* wb_current_gpu */
#include "dtype_device.cuh"
#include "kernels.h"

/** @brief Blocks of 256 covering n (at most 2^31 − 1 blocks). */
static unsigned blocks_for(long long n) { return (unsigned)((n + 255) / 256); }

/** @brief One thread per element of x: a row of wte plus a row of wpe. */
template <typename T>
__global__ void embed_kernel(const int *tokens, const int *positions, const T *wte, const T *wpe, T *x, int rows, int C)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * C) return;
    int r = (int)(i / C), c = (int)(i % C);
    store(x, i, load(wte, (long long)tokens[r] * C + c) + load(wpe, (long long)positions[r] * C + c));
}

const char *gpt2_embed(wb_dtype dtype, const int *tokens, const int *positions, const void *wte, const void *wpe,
                       void *x, int rows, int C)
{
    long long n = (long long)rows * C;
    if (n == 0) return NULL;
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        embed_kernel<T><<<blocks_for(n), 256>>>(tokens, positions, (const T *)wte, (const T *)wpe, (T *)x, rows, C);
        WB_CHECK_LAUNCH("embed_kernel");
        return NULL;
    });
}

/** @brief x += y, one thread per element. */
template <typename T>
__global__ void residual_kernel(T *x, const T *y, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) store(x, i, load(x, i) + load(y, i));
}

const char *gpt2_residual_add(wb_dtype dtype, void *x, const void *y, long long n)
{
    if (n == 0) return NULL;
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        residual_kernel<T><<<blocks_for(n), 256>>>((T *)x, (const T *)y, n);
        WB_CHECK_LAUNCH("residual_kernel");
        return NULL;
    });
}

/** @brief One thread per element of qkv: copy it to the heads layout and/or the rows layout. */
template <typename T>
__global__ void split_qkv_kernel(const T *qkv, int rows, int C, int H, T *qh, T *kh, T *vh, T *qr, T *kr, T *vr)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * 3 * C) return;
    int r = (int)(i / (3 * C)), j = (int)(i % (3 * C)), part = j / C, c = j % C, d = C / H, h = c / d;
    T v = qkv[i];
    T *heads = part == 0 ? qh : part == 1 ? kh : vh, *row = part == 0 ? qr : part == 1 ? kr : vr;
    if (heads) heads[((long long)h * rows + r) * d + c % d] = v;
    if (row) row[(long long)r * C + c] = v;
}

const char *gpt2_split_qkv(wb_dtype dtype, const void *qkv, int rows, int C, int H, void *q_heads, void *k_heads,
                           void *v_heads, void *q_rows, void *k_rows, void *v_rows)
{
    long long n = (long long)rows * 3 * C;
    if (n == 0) return NULL;
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        split_qkv_kernel<T><<<blocks_for(n), 256>>>((const T *)qkv, rows, C, H, (T *)q_heads, (T *)k_heads,
                                                    (T *)v_heads, (T *)q_rows, (T *)k_rows, (T *)v_rows);
        WB_CHECK_LAUNCH("split_qkv_kernel");
        return NULL;
    });
}

/** @brief One thread per output element: read it from its head. */
template <typename T>
__global__ void merge_heads_kernel(const T *heads, T *out, int rows, int C, int H)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * C) return;
    int r = (int)(i / C), c = (int)(i % C), d = C / H;
    out[i] = heads[((long long)(c / d) * rows + r) * d + c % d];
}

const char *gpt2_merge_heads(wb_dtype dtype, const void *heads, void *out, int rows, int C, int H)
{
    long long n = (long long)rows * C;
    if (n == 0) return NULL;
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        merge_heads_kernel<T><<<blocks_for(n), 256>>>((const T *)heads, (T *)out, rows, C, H);
        WB_CHECK_LAUNCH("merge_heads_kernel");
        return NULL;
    });
}

/** @brief (value, index) pairs compared for the argmax: larger value, then smaller index. */
static __device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

/** @brief A block per row: each thread scans a stride of the row, then warp and block trees keep (max, lowest index). */
template <typename T>
__global__ void argmax_kernel(const T *logits, int V, int ld, int *next)
{
    __shared__ float best_v[32];
    __shared__ int best_i[32];
    const T *row = logits + (long long)blockIdx.x * ld;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = load(row, j);
        if (better(v, j, bv, bi)) bv = v, bi = j;
    }
    for (int off = 16; off > 0; off /= 2) { /* the warp, then the block: stage 02's tree */
        float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) best_v[warp] = bv, best_i[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        int n_warps = blockDim.x / 32;
        bv = lane < n_warps ? best_v[lane] : -INFINITY;
        bi = lane < n_warps ? best_i[lane] : 0x7fffffff;
        for (int off = 16; off > 0; off /= 2) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if (lane == 0) next[blockIdx.x] = bi < V ? bi : 0; /* all NaN: token 0 rather than an id out of range */
    }
}

const char *gpt2_argmax(wb_dtype dtype, const void *logits, int rows, int V, int ld, int *next)
{
    if (rows == 0) return NULL;
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        argmax_kernel<T><<<rows, 1024>>>((const T *)logits, V, ld, next);
        WB_CHECK_LAUNCH("argmax_kernel");
        return NULL;
    });
}

/** @brief gpt2_queued_step_inputs in one block: the copy, then each row's token over the copied one. */
__global__ void queued_step_inputs_kernel(int *dst, const int *src, size_t words, const unsigned long long *keys,
                                          const int *next, int *tokens, int *fed, int n, int V)
{
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
    __syncthreads(); /* the copied tokens first, the chosen ones over them */
    for (int r = threadIdx.x; r < n; r += blockDim.x)
        tokens[r] = fed[r] = keys ? gpt2_argmax_key_token(keys[r], V) : next ? next[r] : tokens[r];
}

const char *gpt2_queued_step_inputs(void *dst, const void *src, size_t words, const unsigned long long *keys,
                                    const int *next, int *tokens, int *fed, int n, int V)
{
    queued_step_inputs_kernel<<<1, 1024>>>((int *)dst, (const int *)src, words, keys, next, tokens, fed, n, V);
    WB_CHECK_LAUNCH("queued_step_inputs_kernel");
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Linear layers at decode time: a handful of rows                           */
/* ------------------------------------------------------------------------ */

/** @brief Most rows the small-M linear takes (a decode batch). */
#define SMALL_M_ROWS 8
/** @brief Most rows of W one block's slice of K covers (its X slice sits in shared memory). */
#define SMALL_M_K_CHUNK 256

/**
 * @brief Partial products of Y = X·W over one slice of K: thread n owns output
 *        column n for all M rows, so each element of W is read once, by one
 *        thread, in a coalesced row (consecutive threads, consecutive columns).
 */
template <typename T>
__global__ void small_m_partial(const T *X, const T *W, float *partial, int M, int N, int K, int k_chunk)
{
    __shared__ float xs[SMALL_M_ROWS][SMALL_M_K_CHUNK];
    int n = blockIdx.x * blockDim.x + threadIdx.x, split = blockIdx.y;
    int k0 = split * k_chunk, k1 = min(K, k0 + k_chunk);
    for (int i = threadIdx.x; i < SMALL_M_ROWS * k_chunk; i += blockDim.x) {
        int m = i / k_chunk, k = k0 + i % k_chunk;
        xs[m][i % k_chunk] = m < M && k < k1 ? load(X, (long long)m * K + k) : 0.0f;
    }
    __syncthreads();
    if (n >= N) return;
    float acc[SMALL_M_ROWS] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = k0; k < k1; ++k) {
        float w = load(W, (long long)k * N + n);
#pragma unroll
        for (int m = 0; m < SMALL_M_ROWS; ++m) acc[m] += xs[m][k - k0] * w;
    }
    for (int m = 0; m < M; ++m) partial[((long long)split * M + m) * N + n] = acc[m];
}

/** @brief Y = act(Σ over the slices + bias), stored in T (stage 04's epilogue, as its own pass). */
template <typename T>
__global__ void small_m_finish(const float *partial, const float *bias, T *Y, int M, int N, int splits, int gelu)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)M * N) return;
    int n = (int)(i % N);
    float s = bias ? bias[n] : 0.0f;
    for (int k = 0; k < splits; ++k) s += partial[(long long)k * M * N + i];
    if (gelu) { /* GPT-2's tanh form, as stage 04 */
        float u = 0.7978845608028654f * (s + 0.044715f * s * s * s);
        s = 0.5f * s * (1.0f + tanhf(u));
    }
    store(Y, i, s);
}

size_t gpt2_small_m_workspace_floats(int N, int K)
{
    int sms;
    wb_current_gpu(NULL, &sms);
    /* splits·N <= (4·SMs/col_blocks + 1)·N + ceil(K/256)·N, and 4·SMs·N/col_blocks <= 4·SMs·256 */
    return (size_t)SMALL_M_ROWS * ((size_t)4 * sms * 256 + (size_t)N * (2 + (K + SMALL_M_K_CHUNK - 1) / SMALL_M_K_CHUNK));
}

const char *gpt2_linear_small_m(wb_dtype dtype, const void *X, const void *W, const float *bias, void *Y, int M, int N,
                                int K, int gelu, float *workspace, size_t workspace_floats)
{
    if (M < 1 || M > SMALL_M_ROWS) return "small-M linear: needs 1 <= M <= 8";
    int sms; /* asked of the driver once per process (common/): this runs ~100 times per decode step */
    wb_current_gpu(NULL, &sms);
    /* enough K slices for about 4 blocks per SM, each slice at most SMALL_M_K_CHUNK rows */
    int col_blocks = (N + 255) / 256;
    int splits = (4 * sms + col_blocks - 1) / col_blocks;
    int min_splits = (K + SMALL_M_K_CHUNK - 1) / SMALL_M_K_CHUNK;
    splits = splits < min_splits ? min_splits : splits > K ? K : splits;
    int k_chunk = (K + splits - 1) / splits;
    splits = (K + k_chunk - 1) / k_chunk;
    if ((size_t)splits * M * N > workspace_floats) return "small-M linear: workspace too small";
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        small_m_partial<T><<<dim3(col_blocks, splits), 256>>>((const T *)X, (const T *)W, workspace, M, N, K, k_chunk);
        WB_CHECK_LAUNCH("small_m_partial");
        long long n = (long long)M * N;
        small_m_finish<T><<<blocks_for(n), 256>>>(workspace, bias, (T *)Y, M, N, splits, gelu);
        WB_CHECK_LAUNCH("small_m_finish");
        return NULL;
    });
}

/* ------------------------------------------------------------------------ */
/* Linear layers of a decode batch: 1-64 rows, fp16                          */
/* ------------------------------------------------------------------------ */

/**
 * @brief Stage 03's v9 (mma.sync fed by ldmatrix, a 3-stage cp.async pipeline) in a 64×64 tile of four 32×32
 *        warps: one tile holds a whole batch of up to 64 rows. Stage 04's GEMMs tile 128 or 192 rows, so at 64 rows
 *        a layer is N/128 blocks or fewer (6 for proj) on 132 SMs, each streaming its columns of W over all of K.
 */
using SkinnyTile = MmaTile<SKINNY_MAX_ROWS, 64, 64, 32, 32, 3>;

/** @brief Chunks of K for a layer of N outputs: about two blocks an SM over the N/64 tiles, each chunk whole tiles
 *         of 64; *k_chunk gets a chunk's length. */
static int skinny_splits(int N, int K, int sms, int *k_chunk)
{
    const int tiles = (N + SkinnyTile::BN - 1) / SkinnyTile::BN, k_tiles = (K + SkinnyTile::BK - 1) / SkinnyTile::BK;
    int splits = 2 * sms / tiles;
    splits = splits < 1 ? 1 : splits > k_tiles ? k_tiles : splits;
    *k_chunk = (k_tiles + splits - 1) / splits * SkinnyTile::BK;
    return (K + *k_chunk - 1) / *k_chunk;
}

size_t gpt2_skinny_workspace_floats(int N, int K)
{
    int sms, k_chunk;
    wb_current_gpu(NULL, &sms);
    return (size_t)skinny_splits(N, K, sms, &k_chunk) * SKINNY_MAX_ROWS * N;
}

const char *gpt2_skinny_partials(const void *X, const void *W, int M, int N, int K, float *workspace,
                                 size_t workspace_floats, int *splits)
{
    int cc, sms, k_chunk;
    wb_current_gpu(&cc, &sms);
    if (cc < 80) return "skinny linear: needs sm_80 (mma.sync m16n8k16, cp.async)";
    if (M < 1 || M > SKINNY_MAX_ROWS) return "skinny linear: needs 1 <= M <= 64";
    if (K % 8 || N % 8) return "skinny linear: needs K and N multiples of 8 (16-byte rows for cp.async)";
    if ((((uintptr_t)X | (uintptr_t)W) & 15u) != 0) return "skinny linear: needs 16-byte aligned X and W";
    *splits = skinny_splits(N, K, sms, &k_chunk);
    if ((size_t)*splits * M * N > workspace_floats) return "skinny linear: workspace too small";
    auto kernel = hgemm_mma_pipeline<SkinnyTile, GemmIdentity, true>;
    static bool configured = false; /* more than 48 KB of dynamic shared memory is asked for once */
    if (!configured) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SkinnyTile::SMEM_BYTES));
        configured = true;
    }
    /* each (tile, chunk) block leaves its fp32 partial sums: [splits][M][N] */
    kernel<<<dim3((N + SkinnyTile::BN - 1) / SkinnyTile::BN, 1, *splits), SkinnyTile::THREADS, SkinnyTile::SMEM_BYTES>>>(
        (const __half *)X, (const __half *)W, NULL, M, N, K, GemmIdentity(), workspace, k_chunk);
    WB_CHECK_LAUNCH("hgemm_mma_pipeline (K split)");
    return NULL;
}

const char *gpt2_linear_skinny(const void *X, const void *W, const float *bias, void *Y, int M, int N, int K, int gelu,
                               float *workspace, size_t workspace_floats)
{
    int splits;
    const char *why = gpt2_skinny_partials(X, W, M, N, K, workspace, workspace_floats, &splits);
    if (why) return why;
    /* the second pass adds the chunks, the bias and GELU */
    small_m_finish<__half><<<blocks_for((long long)M * N), 256>>>(workspace, bias, (__half *)Y, M, N, splits, gelu);
    WB_CHECK_LAUNCH("small_m_finish");
    return NULL;
}
