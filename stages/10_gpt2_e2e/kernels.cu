/**
 * @file stages/10_gpt2_e2e/kernels.cu
 * @brief Stage 10's own kernels (see kernels.h): the glue (simple,
 *        memory-bound, one thread per element; a small fraction of a forward
 *        pass, the page measures it), the decode-time linear of v1/v2, and
 *        v3's fused decode linear.
 */
#include <cuda_fp16.h>
#include <math.h>
#include <type_traits> /* std::true_type: the ring, or not, as a template argument */

#include "02_reduction/block_reduce.cuh"      /* warp_allreduce: stage 02's butterfly */
#include "04_fused_gelu_linear/bias_gelu.cuh" /* gelu_tanh */
#include "cuda_check.h"
#include "dependent_launch.cuh" /* on sm_90 the decode linears launch as programmatic dependents */
#include "device.h"             /* wb_current_gpu, wb_current_smem_per_block */
#include "dtype_device.cuh"
#include "fast_math.cuh" /* LOG2E: attention's exponentials in base 2 */
#include "gpu_clock.cuh" /* wb_global_ns: the step's trace */
#include "03_gemm/hopper_ptx.cuh" /* mbarriers and the copy engine's bulk copy: v7/v8's weight ring (sm_90) */
#include "03_gemm/mma_ptx.cuh"    /* mma_16x8x16_top: v9's dot products on tensor cores */
#include "gpt2.h" /* GPT2_LN_EPS */
#include "argmax_key.h"
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
/* v3: the fused decode step                                                 */
/* ------------------------------------------------------------------------ */
/*
 * A decode step is ~100 matrix–vector products whose weights are read once
 * each: the step's floor is its weight bytes at the copy roof. v1/v2 spend
 * 14 launches per block on it (LayerNorm, the small-M linear's two passes,
 * the head split, the cache append, the residual adds), each a few µs of
 * launch and ramp for well under a µs of bytes. v3 gives each linear its
 * neighbours: LayerNorm as its prologue, and bias, GELU, residual add or the
 * K/V append as its epilogue — 4 kernels and stage 09's attention per block.
 */

/** @brief Warps per block of the fused decode linear. */
#define DECODE_WARPS 4
/** @brief Outputs each warp computes at once: the x it reads from shared memory serves both. */
#define DECODE_OUTS 2
/** @brief 16-byte loads of W each lane keeps in flight per output: with DECODE_OUTS, 16 loads, 8 KB a warp. */
#define DECODE_LOADS 8

/** @brief 16 bytes of W's row n at k (zeros past K or N: no memory access). */
template <typename T>
static __device__ __forceinline__ uint4 weight_chunk(const T *W, int n, int N, int K, int k)
{
    return n < N && k < K ? __ldg(reinterpret_cast<const uint4 *>(W + (long long)n * K + k)) : make_uint4(0, 0, 0, 0);
}

/**
 * @brief The prologue: the block's ROWS input rows in shared memory, in the
 *        storage type, rows M..ROWS−1 zero (so the main loop has no branch on
 *        M). With LayerNorm (gain and shift already in shared memory), each
 *        row is then normalised in place (stage 05's two passes, a warp per
 *        row), rounded to T as v1/v2's LayerNorm kernel rounds its output. All
 *        16-byte loads of x are issued at once: one latency, where reading x
 *        inside the main loop would put a trip to L2 in front of every use of
 *        the weights.
 */
template <typename T, int ROWS>
static __device__ void stage_rows(const T *x, const float *gain, const float *shift, T *rows, int M, int K)
{
    constexpr int VEC = Vec16<T>::N;
    __shared__ float mean[ROWS], rstd[ROWS];
#pragma unroll 4 /* up to 4 loads in flight per thread before the first is stored (K 3072: 6 per thread in fp32) */
    for (int i = threadIdx.x; i < ROWS * K / VEC; i += blockDim.x) {
        int m = i * VEC / K;
        reinterpret_cast<uint4 *>(rows)[i] =
            m < M ? __ldg(reinterpret_cast<const uint4 *>(x) + i) : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    if (!gain) return;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int m = warp; m < M; m += DECODE_WARPS) {
        const T *r = rows + (long long)m * K;
        float s = 0.0f;
#pragma unroll 8
        for (int k = lane; k < K; k += 32) s += load(r, k);
        float mu = warp_allreduce<SumOp>(s) / K, v = 0.0f;
#pragma unroll 8
        for (int k = lane; k < K; k += 32) v += (load(r, k) - mu) * (load(r, k) - mu);
        v = warp_allreduce<SumOp>(v) / K;
        if (lane == 0) mean[m] = mu, rstd[m] = rsqrtf(v + GPT2_LN_EPS);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < M * K; i += blockDim.x) {
        int m = i / K, k = i % K;
        store(rows, i, (load(rows, i) - mean[m]) * rstd[m] * gain[k] + shift[k]);
    }
    __syncthreads();
}

/**
 * @brief The epilogue of output n of row m: s is the finished dot product plus
 *        its bias; for DECODE_RESIDUAL, resid is y[m][n] as it was.
 */
template <typename T, decode_epilogue EPI>
static __device__ __forceinline__ void decode_epilogue_apply(const decode_linear_args &a, int m, int n, float s,
                                                             float resid, unsigned long long &best)
{
    if (EPI == DECODE_GELU) {
        store((T *)a.y, (long long)m * a.N + n, gelu_tanh(s));
    } else if (EPI == DECODE_RESIDUAL) {
        store((T *)a.y, (long long)m * a.N + n, resid + s);
    } else if (EPI == DECODE_QKV_APPEND) { /* n in [0, 3C): q, k or v; k and v go straight to the page pools */
        int C = a.N / 3, part = n / C, c = n - part * C, d = C / a.H;
        if (part == 0) {
            store((T *)a.y, (long long)m * C + c, s);
        } else { /* stage 08's pool layout [page][head][offset][d], at this row's slot */
            long long slot = a.slots[m], page = slot / a.block_size, offset = slot % a.block_size;
            T *pool = (T *)(part == 1 ? a.k_pool : a.v_pool);
            store(pool, ((page * a.H + c / d) * a.block_size + offset) * d + c % d, s);
        }
    } else { /* DECODE_LOGITS_ARGMAX */
        store((T *)a.y, (long long)m * a.ldy + n, s);
        unsigned long long key = gpt2_argmax_key(s, n);
        best = key > best ? key : best;
    }
}

/** @brief The biases of outputs n … n + DECODE_OUTS − 1 (zero past N, or without a bias). */
static __device__ __forceinline__ void fetch_bias(float (&b)[DECODE_OUTS], const float *bias, int n, int N)
{
#pragma unroll
    for (int o = 0; o < DECODE_OUTS; ++o) b[o] = bias && n + o < N ? __ldg(bias + n + o) : 0.0f;
}

/**
 * @brief v3's decode linear: y = epilogue(LayerNorm?(x)·W + bias) for M <= ROWS
 *        rows, W given transposed ([N][K]).
 *
 * A warp computes DECODE_OUTS outputs at a time, the grid at most one wave,
 * each warp looping over output pairs. Every lane keeps DECODE_LOADS 16-byte
 * loads of each output's weights in flight, and refills each slot as soon as
 * it has used it: with the same slot one round further along K, or, in the
 * last round, with the next pair's first round. So the next pair's weights
 * stream while this pair's dot products are reduced and its epilogue runs.
 *
 * Everything that does not depend on the kernel ahead — the first pair's
 * weights and biases, the LayerNorm gain and shift — is requested before
 * waiting for it (as a programmatic dependent, while it still runs). After
 * the wait, one latency: the input rows (all their loads at once) and, for
 * the residual add, the old y. The rows then come from shared memory, zero
 * past M: the loops over rows have no branches, so they stay unrolled.
 */
template <typename T, int ROWS, decode_epilogue EPI>
__global__ void __launch_bounds__(DECODE_WARPS * 32) decode_linear_fused(decode_linear_args a)
{
    constexpr int VEC = Vec16<T>::N, ROUND = 32 * VEC * DECODE_LOADS; /* the K one round of loads covers */
    extern __shared__ __align__(16) unsigned char smem[];
    T *rows = reinterpret_cast<T *>(smem);                     /* [ROWS][K] the input rows (LayerNorm'd) */
    float *gain = reinterpret_cast<float *>(rows + ROWS * a.K); /* [K] with LayerNorm, then shift [K] */
    float *shift = gain + a.K;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, N = a.N, K = a.K;
    const int stride = gridDim.x * DECODE_WARPS * DECODE_OUTS;
    const T *W = (const T *)a.w_t;
    const int lane_o = lane / ROWS, lane_m = lane % ROWS; /* the output and row this lane's epilogue handles */
    const bool epilogue_lane = lane < DECODE_OUTS * ROWS && lane_m < a.M;
    int n = (blockIdx.x * DECODE_WARPS + warp) * DECODE_OUTS;
    uint4 w16[DECODE_OUTS][DECODE_LOADS];
#pragma unroll
    for (int u = 0; u < DECODE_LOADS; ++u)
#pragma unroll
        for (int o = 0; o < DECODE_OUTS; ++o) w16[o][u] = weight_chunk(W, n + o, N, K, (u * 32 + lane) * VEC);
    float bias[DECODE_OUTS];
    fetch_bias(bias, a.bias, n, N);
    if (a.ln_w)
#pragma unroll 4 /* K 768: 6 values of each per thread, their loads in flight together */
        for (int k = threadIdx.x; k < K; k += blockDim.x) gain[k] = __ldg(a.ln_w + k), shift[k] = __ldg(a.ln_b + k);
    wb_dependent_launch_sync();
    float resid = 0.0f; /* DECODE_RESIDUAL: y[lane_m][n + lane_o] before the add, requested with the rows */
    if (EPI == DECODE_RESIDUAL && epilogue_lane && n + lane_o < N)
        resid = load((const T *)a.y, (long long)lane_m * N + n + lane_o);
    stage_rows<T, ROWS>((const T *)a.x, a.ln_w ? gain : NULL, shift, rows, a.M, K);
    unsigned long long best = 0; /* lane o·ROWS + m: row m's best (value, token) key over this warp's outputs */
    for (; n < N; n += stride) {
        float acc[DECODE_OUTS][ROWS] = {};
        for (int k0 = 0; k0 < K; k0 += ROUND) {
            const bool last = k0 + ROUND >= K;
#pragma unroll
            for (int u = 0; u < DECODE_LOADS; ++u) {
                int k = k0 + (u * 32 + lane) * VEC;
                if (k < K) {
                    float w[DECODE_OUTS][VEC];
#pragma unroll
                    for (int o = 0; o < DECODE_OUTS; ++o) unpack16(w16[o][u], w[o], T());
#pragma unroll
                    for (int m = 0; m < ROWS; ++m) {
                        float x[VEC];
                        unpack16(*reinterpret_cast<const uint4 *>(rows + m * K + k), x, T());
#pragma unroll
                        for (int o = 0; o < DECODE_OUTS; ++o)
#pragma unroll
                            for (int v = 0; v < VEC; ++v) acc[o][m] = fmaf(w[o][v], x[v], acc[o][m]);
                    }
                }
                /* the slot is free: refill it (this pair one round on, or the next pair's first round) */
                int next_n = last ? n + stride : n, next_k = last ? (u * 32 + lane) * VEC : k + ROUND;
#pragma unroll
                for (int o = 0; o < DECODE_OUTS; ++o) w16[o][u] = weight_chunk(W, next_n + o, N, K, next_k);
            }
        }
        float next_bias[DECODE_OUTS], next_resid = 0.0f; /* the next pair's, requested before the reductions */
        fetch_bias(next_bias, a.bias, n + stride, N);
        if (EPI == DECODE_RESIDUAL && epilogue_lane && n + stride + lane_o < N)
            next_resid = load((const T *)a.y, (long long)lane_m * N + n + stride + lane_o);
        float mine = 0.0f, my_bias = 0.0f; /* lane o·ROWS + m keeps output n + o of row m */
#pragma unroll
        for (int o = 0; o < DECODE_OUTS; ++o)
#pragma unroll
            for (int m = 0; m < ROWS; ++m) {
                float s = warp_allreduce<SumOp>(acc[o][m]);
                if (lane == o * ROWS + m) mine = s, my_bias = bias[o];
            }
        if (epilogue_lane && n + lane_o < N)
            decode_epilogue_apply<T, EPI>(a, lane_m, n + lane_o, mine + my_bias, resid, best);
#pragma unroll
        for (int o = 0; o < DECODE_OUTS; ++o) bias[o] = next_bias[o];
        resid = next_resid;
    }
    if (EPI == DECODE_LOGITS_ARGMAX) { /* the block's best per row, then one atomic per block and row */
        __shared__ unsigned long long warp_best[DECODE_WARPS][DECODE_OUTS * ROWS];
        if (lane < DECODE_OUTS * ROWS) warp_best[warp][lane] = best;
        __syncthreads();
        if (threadIdx.x < a.M) {
            unsigned long long b = 0;
            for (int w = 0; w < DECODE_WARPS; ++w)
                for (int o = 0; o < DECODE_OUTS; ++o) {
                    unsigned long long key = warp_best[w][o * ROWS + threadIdx.x];
                    b = key > b ? key : b;
                }
            atomicMax(a.best + threadIdx.x, b);
        }
    }
}

/** @brief A cap below the GPU's own limit (gpt2_decode_linear_smem_cap), or 0. */
static size_t decode_smem_cap = 0;

void gpt2_decode_linear_smem_cap(size_t bytes) { decode_smem_cap = bytes; }

/** @brief Static shared memory of the kernel, at most (LayerNorm statistics, the argmax's per-warp keys). */
#define DECODE_STATIC_SMEM_BYTES (2 * DECODE_MAX_ROWS * 4 + DECODE_WARPS * DECODE_OUTS * DECODE_MAX_ROWS * 8)

/** @brief Shared memory of one block: the rows, LayerNorm's gain and shift, the static arrays. */
static size_t decode_smem_bytes(int rows, int K, size_t elem, int ln)
{
    return (size_t)rows * K * elem + (ln ? 2 * (size_t)K * sizeof(float) : 0);
}

/** @brief The most dynamic shared memory a block may ask for: the GPU's limit, or the cap, less the static arrays. */
static size_t decode_max_smem()
{
    size_t gpu = wb_current_smem_per_block();
    size_t limit = decode_smem_cap && decode_smem_cap < gpu ? decode_smem_cap : gpu;
    return limit - DECODE_STATIC_SMEM_BYTES;
}

/** @brief Launch one instantiation for a group of at most ROWS rows: one wave of blocks at most, a programmatic dependent when asked. */
template <typename T, int ROWS, decode_epilogue EPI>
static void launch_decode_rows(const decode_linear_args *a)
{
    const void *kernel = (const void *)decode_linear_fused<T, ROWS, EPI>;
    size_t smem = decode_smem_bytes(ROWS, a->K, sizeof(T), a->ln_w != NULL);
    /* asked of the runtime once per shared-memory size (K), not on every launch (a decode step makes ~50) */
    static size_t asked_smem[4], allowed_smem = 0;
    static int asked_per_sm[4], asked = 0;
    int per_sm = 0;
    for (int i = 0; i < asked; ++i)
        if (asked_smem[i] == smem) per_sm = asked_per_sm[i];
    if (!per_sm) {
        /* the kernel's limit, raised to every size asked and never lowered: one limit bounds every launch, so
         * lowering it for a smaller size made the next launch of a larger, already asked one fail (an invalid
         * argument, seen under WB_EMULATE_T4). 48 KB of dynamic shared memory plus the static arrays is already
         * too many without it (the caller checked the GPU's limit) */
        if (smem > allowed_smem) {
            WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            allowed_smem = smem;
        }
        WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, DECODE_WARPS * 32, smem));
        if (per_sm < 1) per_sm = 1;
        int slot = asked < 4 ? asked++ : 0; /* more than 4 sizes: the first slot is reused */
        asked_smem[slot] = smem, asked_per_sm[slot] = per_sm;
    }
    int sms;
    wb_current_gpu(NULL, &sms);
    const int per_block = DECODE_WARPS * DECODE_OUTS;
    long long wanted = (a->N + per_block - 1) / per_block, wave = (long long)per_sm * sms;
    wb_launch_config launch;
    cudaLaunchConfig_t *cfg = wb_launch_config_init(&launch, dim3((unsigned)(wanted < wave ? wanted : wave)),
                                                    dim3(DECODE_WARPS * 32), smem, a->dependent_launch);
    WB_CUDA_CHECK(cudaLaunchKernelEx(cfg, decode_linear_fused<T, ROWS, EPI>, *a));
    WB_CHECK_LAUNCH("decode_linear_fused");
}

/** @brief The fewest rows (1, 2, 4 or 8) an instantiation must take to hold M. */
static int rows_for(int M) { return M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8; }

/**
 * @brief Launch for all M rows: in groups whose rows fit in shared memory
 *        (all of them on an H100; on a GPU with 64 KB a block, fp32 rows of
 *        K = 3072 go 4 at a time), each with the instantiation of the fewest
 *        rows that holds it.
 */
template <typename T, decode_epilogue EPI>
static const char *launch_decode_linear(const decode_linear_args *a)
{
    int group = rows_for(a->M), ln = a->ln_w != NULL;
    while (group > 1 && decode_smem_bytes(group, a->K, sizeof(T), ln) > decode_max_smem()) group /= 2;
    if (decode_smem_bytes(group, a->K, sizeof(T), ln) > decode_max_smem())
        return "fused decode linear: one row of K inputs does not fit in shared memory";
    for (int m0 = 0; m0 < a->M; m0 += group) {
        decode_linear_args g = *a;
        g.M = a->M - m0 < group ? a->M - m0 : group;
        g.x = (const T *)a->x + (long long)m0 * a->K;
        long long y_row = EPI == DECODE_QKV_APPEND ? a->N / 3 : EPI == DECODE_LOGITS_ARGMAX ? a->ldy : a->N;
        g.y = (T *)a->y + m0 * y_row;
        if (a->slots) g.slots = a->slots + m0;
        if (a->best) g.best = a->best + m0;
        switch (rows_for(g.M)) {
        case 1: launch_decode_rows<T, 1, EPI>(&g); break;
        case 2: launch_decode_rows<T, 2, EPI>(&g); break;
        case 4: launch_decode_rows<T, 4, EPI>(&g); break;
        default: launch_decode_rows<T, 8, EPI>(&g); break;
        }
    }
    return NULL;
}

const char *gpt2_decode_linear(wb_dtype dtype, const decode_linear_args *a)
{
    int per16 = 16 / (int)wb_dtype_bytes(dtype);
    if (a->M < 1 || a->M > DECODE_MAX_ROWS) return "fused decode linear: needs 1 <= M <= 8 rows";
    if (a->N < 1 || a->K < 1 || a->K % per16)
        return "fused decode linear: K must be a positive multiple of 16 bytes (4 fp32 or 8 fp16 values)";
    if (a->epilogue == DECODE_QKV_APPEND && (a->N % 3 || a->H < 1 || (a->N / 3) % a->H))
        return "fused decode linear: the QKV epilogue needs N = 3·C with C a multiple of the heads";
    if (a->epilogue == DECODE_LOGITS_ARGMAX && (!a->best || a->ldy < a->N))
        return "fused decode linear: the argmax epilogue needs best[] and ldy >= N";
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        switch (a->epilogue) {
        case DECODE_QKV_APPEND: return launch_decode_linear<T, DECODE_QKV_APPEND>(a);
        case DECODE_RESIDUAL: return launch_decode_linear<T, DECODE_RESIDUAL>(a);
        case DECODE_GELU: return launch_decode_linear<T, DECODE_GELU>(a);
        case DECODE_LOGITS_ARGMAX: return launch_decode_linear<T, DECODE_LOGITS_ARGMAX>(a);
        }
        return "fused decode linear: unknown epilogue";
    });
}

/* ------------------------------------------------------------------------ */
/* v5: the whole decode step in one persistent kernel                        */
/* ------------------------------------------------------------------------ */
/*
 * v3 made each linear one kernel, but a step is still 62 kernels, and each is
 * a chain of latencies — launch, wait for the kernel ahead, its input rows,
 * LayerNorm's reductions, the multiply, the epilogue's stores — around a few
 * hundred kilobytes of weights. v5 launches one kernel per step, one block per
 * SM, that stays resident and runs the step's phases in order: QKV,
 * attention, proj, fc, fc-proj for every block, then the LM head. Between
 * phases the blocks meet at a grid barrier (a counter in global memory), which
 * replaces a launch. What a phase does not need from the phase before — its
 * weights, biases, LayerNorm parameters, the residual it will add to — each
 * block requests *before* it waits at the barrier, so the weights stream while
 * the slowest block of the previous phase finishes.
 */

/** @brief Warps per block of the persistent step: one block per SM. 8 warps may use 255 registers each; with 16
 *         (128 registers) the step's state spilled to local memory, and every phase began by waiting for it. */
#define STEP_WARPS 8
/** @brief Threads per block. */
#define STEP_THREADS (STEP_WARPS * 32)
/** @brief 16-byte weight loads each lane keeps in flight: 6 KB per warp, 48 KB per SM. */
#define STEP_SLOTS 12
/** @brief LayerNorm parameters each thread holds in registers (k = thread + i·STEP_THREADS): all of C = 768. */
#define STEP_LN_PER_THREAD 3
/** @brief v10: the widest row that a warp normalises in registers, in one pass (stage_layernorm_rows): C = 768. */
#define ROWS_ONE_PASS_MAX_K 768
/** @brief v10: a lane's values of such a row (k = (lane + 32·i)·VEC + v: whole 16-byte chunks). */
#define ROWS_ONE_PASS_PER_LANE (ROWS_ONE_PASS_MAX_K / 32)
/** @brief 16-byte loads of K (and of V) per lane per attention tile. */
#define STEP_ATT_PASSES 8

/**
 * @brief Most units (outputs × slices) of one block's share of a linear that
 *        go through shared memory: at most ⌈4C / blocks⌉ outputs (fc, the
 *        widest), or, when outputs are split into slices, at most one unit per
 *        warp. With tensor cores (v9) every output is split over all the
 *        warps. The kernel lays out its shared memory with it, the host sizes
 *        it.
 */
static __host__ __device__ __forceinline__ int step_max_units(int C, int blocks, bool mma)
{
    int most_outputs = 4 * C / blocks + 1;
    if (mma) return most_outputs * STEP_WARPS;
    return most_outputs > STEP_WARPS ? most_outputs : STEP_WARPS;
}

/** @brief Dynamic shared memory of one block: the layer table, ROWS rows of 4C, the partial sums, the block tables
 *         (v7/v8's ring follows, from the next 16-byte boundary: step_ring_offset). */
static __host__ __device__ __forceinline__ size_t step_smem_bytes(size_t elem, int rows, int C, int L, int max_pages,
                                                                  int blocks, bool mma)
{
    return (size_t)L * sizeof(decode_layer_weights) + (size_t)rows * 4 * C * elem +
           (size_t)step_max_units(C, blocks, mma) * rows * 4 +
           (size_t)rows * max_pages * 4;
}

/** @brief Where v7/v8's plan of the ring (a RingPlan per linear) begins in the dynamic shared memory. */
static __host__ __device__ __forceinline__ size_t step_plan_offset(size_t elem, int rows, int C, int L, int max_pages,
                                                                   int blocks, bool mma)
{
    return (step_smem_bytes(elem, rows, C, L, max_pages, blocks, mma) + 15) & ~(size_t)15;
}

/** @brief Where v7/v8's weight ring begins in the dynamic shared memory, after a plan of `plan_entries` (4L, and
 *         v10's pieces of the LM head): 16-byte aligned, for the bulk copies. */
static __host__ __device__ __forceinline__ size_t step_ring_offset(size_t elem, int rows, int C, int L, int max_pages,
                                                                   int blocks, bool mma, int plan_entries)
{
    return step_plan_offset(elem, rows, C, L, max_pages, blocks, mma) + (size_t)plan_entries * 16; /* sizeof(RingPlan) */
}

/**
 * @brief The grid barrier, split in two: arrive() adds one to a counter in
 *        global memory, wait() waits until it reaches (barriers so far) ×
 *        (blocks). Between them a block may do what does not depend on the
 *        other blocks — request the next phase's weights — so the loads are in
 *        flight while the slowest block finishes.
 *
 *        arrive() counts the block with a releasing add, so its writes are
 *        visible before the count is (it runs before the weight loads are
 *        issued: a release also waits for the thread's loads in flight).
 *        wait() polls with relaxed loads and ends with one acquiring load.
 *        Every read of data written inside the step goes through L2
 *        (__ldcg), so no block sees a stale L1 line. Only a cooperative
 *        launch guarantees that all blocks are resident, so that waiting
 *        cannot deadlock.
 *
 *        With a trace buffer, thread 0 writes when its block starts each
 *        phase, has its rows ready, has its dot products done, and arrives at
 *        the barrier that ends it (globaltimer, ns).
 */
struct GridBarrier {
    unsigned *count;           /**< the arrivals so far, in global memory (zeroed before the launch) */
    unsigned target;           /**< what the count reaches when every block has arrived at this barrier */
    unsigned long long *trace; /**< [blocks][phases][4] (start, arrive, rows ready, dot products done), or NULL */
    int phase;                 /**< the phase this block is in */
    int phases;                /**< phases in the step (the trace's second dimension) */
    /** @brief Trace point `which` of this phase (0 start, 1 arrival, 2 rows ready, 3 dot products done). */
    __device__ __forceinline__ void mark(int which)
    {
        if (trace && threadIdx.x == 0) trace[((long long)blockIdx.x * phases + phase) * 4 + which] = wb_global_ns();
    }
    /** @brief Count this block in: its writes of the phase are done and visible. */
    __device__ __forceinline__ void arrive()
    {
        target += gridDim.x;
        __syncthreads(); /* the block's writes of this phase are done */
        mark(1);
        if (threadIdx.x == 0) /* release: the block's writes before it are visible to whoever sees the count */
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
    }
    /** @brief Wait until every block has arrived, then start the next phase. */
    __device__ __forceinline__ void wait()
    {
        if (threadIdx.x == 0) {
            unsigned seen;
            do { /* relaxed polls: an acquiring load invalidates the SM's L1, every time */
                asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
            } while (seen < target);
            /* then one acquiring load (a fence would also wait for this thread's weight loads in flight) */
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
        }
        __syncthreads();
        ++phase;
        mark(0);
    }
    /** @brief v27: end the phase without arriving (the next phase's rows wait for their own words). */
    __device__ __forceinline__ void leave()
    {
        __syncthreads(); /* the block's shared memory is free for the next phase */
        mark(1);
    }
    /** @brief v27: start the next phase at once. */
    __device__ __forceinline__ void enter()
    {
        ++phase;
        mark(0);
    }
};

/**
 * @brief v27: rows that carry the step they belong to. A grid barrier costs
 *        each phase about 1 µs (0.99 µs alone on the H100, the fastest of the
 *        eight designs measured under v26), and only then do the blocks
 *        fetch the rows the phase before wrote: a trip to L2 more. But a phase
 *        waits for the phase before only because it reads its outputs. So
 *        v27 stores each output as one 32-bit word, its fp16 bits in the low
 *        half and the step's tag in the high half (NCCL's "LL" protocol, in
 *        halves of 32 bits), and the reader polls the words it needs until
 *        every one carries this step's tag: the data is its own flag. A
 *        32-bit store is single-copy atomic, so a word is never half new;
 *        no fence orders it, since no other write has to be seen with it.
 *
 *        Each buffer is written once a step (x before each layer, each
 *        layer's q/k/v and hidden layer: DECODE_TAGGED_WORDS), so a word
 *        never changes between two reads of one step; the next step writes
 *        it again with the next tag, a kernel later. Tags run 1 … 65 535 and
 *        the buffers start at zero, so a word no step wrote never passes.
 */
static __device__ __forceinline__ unsigned step_tag(unsigned epoch) { return epoch % 65535u + 1u; }

/** @brief v27: output value v, rounded to fp16, with the step's tag, in one relaxed (gpu-scope) 32-bit store. */
static __device__ __forceinline__ void store_tagged(unsigned *p, float v, unsigned tag)
{
    const unsigned word = (unsigned)__half_as_ushort(__float2half_rn(v)) | tag << 16;
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(word) : "memory");
}

/** @brief v27: 4 words from L2 (a relaxed gpu-scope load: never a stale L1 line, and never hoisted out of a poll). */
static __device__ __forceinline__ uint4 load_relaxed4(const unsigned *p)
{
    uint4 v;
    asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/** @brief v27: whether all 4 words carry `tag`. */
static __device__ __forceinline__ bool all_tagged(uint4 v, unsigned tag)
{
    return (v.x >> 16 == tag) & (v.y >> 16 == tag) & (v.z >> 16 == tag) & (v.w >> 16 == tag);
}

/** @brief v27: 8 tagged words at p, polled until they all carry `tag`, as 16 bytes of fp16. */
static __device__ __forceinline__ uint4 poll_tagged8(const unsigned *p, unsigned tag)
{
    uint4 lo, hi;
    do {
        lo = load_relaxed4(p), hi = load_relaxed4(p + 4);
    } while (!(all_tagged(lo, tag) && all_tagged(hi, tag)));
    return make_uint4((lo.x & 0xffffu) | lo.y << 16, (lo.z & 0xffffu) | lo.w << 16, (hi.x & 0xffffu) | hi.y << 16,
                      (hi.z & 0xffffu) | hi.w << 16);
}

/** @brief v27: a phase's input row of K fp16 values (K a multiple of 8), polled from its tagged words into shared
 *         memory; then __syncthreads. Where stage_step_rows waits at the barrier, then loads. */
static __device__ void stage_tagged_rows(const unsigned *src, void *rows, int K, unsigned tag)
{
    for (int c = threadIdx.x; c < K / 8; c += STEP_THREADS) reinterpret_cast<uint4 *>(rows)[c] = poll_tagged8(src + 8 * c, tag);
    __syncthreads();
}

/** @brief v27: the tagged buffers of layer l (decode_step_args.tagged): x before it (l = L: the LM head's), its q/k/v,
 *         its hidden layer. */
static __device__ __forceinline__ unsigned *tagged_x(const decode_step_args &a, int l) { return a.tagged + (long long)l * a.C; }
static __device__ __forceinline__ unsigned *tagged_qkv(const decode_step_args &a, int l)
{
    return a.tagged + (long long)(a.L + 1) * a.C + (long long)l * 3 * a.C;
}
static __device__ __forceinline__ unsigned *tagged_hidden(const decode_step_args &a, int l)
{
    return a.tagged + (long long)(a.L + 1) * a.C + (long long)a.L * 3 * a.C + (long long)l * 4 * a.C;
}

/**
 * @brief A block's share of one linear layer: outputs n0 … n0 + outs − 1 of W
 *        ([N][K], a contiguous run of rows). With fewer outputs than warps,
 *        each output's K is split into S slices (a power of 2), so that every
 *        warp streams: unit u is output u / S, slice u % S (a shift and a
 *        mask), and slice s takes the lanes' 16-byte chunks (j·S + s)·32 +
 *        lane for j = 0, 1, … With tensor cores (v9), every output is split
 *        over all STEP_WARPS warps instead: slice w is warp w's 64-wide
 *        segments of K (run_phase_ring_mma).
 */
struct LinearShare {
    const uint4 *w; /**< the block's first output's weights, as 16-byte chunks */
    int n0;         /**< the block's first output */
    int outs;       /**< its outputs */
    int S;          /**< slices per output (2^log2S) */
    int log2S;      /**< log2 of S */
    int units;      /**< outs · S: the warps take them in turn */
    int chunks;     /**< 16-byte chunks per output (K / elements per 16 bytes) */
};

template <typename T>
static __device__ LinearShare share_of(const void *w_t, int N, int K, bool split_k, bool every_warp = false)
{
    LinearShare p;
    p.n0 = (int)((long long)N * blockIdx.x / gridDim.x);
    p.outs = (int)((long long)N * (blockIdx.x + 1) / gridDim.x) - p.n0;
    p.chunks = K / Vec16<T>::N;
    p.S = 1;
    p.log2S = 0;
    if (split_k && p.outs > 0) /* the most slices (a power of 2) that keep every warp busy and every slice at
                                * least one chunk per lane */
        while (p.outs << (p.log2S + 1) <= STEP_WARPS && 32 << (p.log2S + 1) <= p.chunks) ++p.log2S;
    if (every_warp)
        while (1 << p.log2S < STEP_WARPS) ++p.log2S;
    p.S = 1 << p.log2S;
    p.units = p.outs * p.S;
    p.w = reinterpret_cast<const uint4 *>(w_t) + (long long)p.n0 * p.chunks;
    return p;
}

/** @brief Where a warp is in its work: unit u (output o, slice s), round j of the slice's chunks. */
struct StepCursor {
    int u;      /**< the unit */
    int o;      /**< its output (within the block's share) */
    int s;      /**< its slice */
    int j;      /**< the round within the slice */
    int rounds; /**< the slice's rounds */
    /** @brief Move to the first round of `unit`. */
    __device__ __forceinline__ void start(const LinearShare &p, int unit)
    {
        u = unit, j = 0, o = u >> p.log2S, s = u & (p.S - 1); /* S a power of 2: no division */
        rounds = (p.chunks - s * 32 + (32 << p.log2S) - 1) >> (p.log2S + 5);
    }
    /** @brief Whether this is the unit's last round (its dot products are then complete). */
    __device__ __forceinline__ bool last_round() const { return j + 1 == rounds; }
    /** @brief The next round, or the warp's next unit (STEP_WARPS on). */
    __device__ __forceinline__ void advance(const LinearShare &p)
    {
        if (++j == rounds) start(p, u + STEP_WARPS);
    }
    /** @brief This lane's 16-byte chunk of the output's K in this round. */
    __device__ __forceinline__ int chunk(const LinearShare &p, int lane) const { return (j * p.S + s) * 32 + lane; }
    /** @brief This lane's 16 bytes of the step (zeros past the work or the row: no memory access). */
    __device__ __forceinline__ uint4 fetch(const LinearShare &p, int lane) const
    {
        int c = chunk(p, lane);
        return u < p.units && c < p.chunks ? __ldg(p.w + (long long)o * p.chunks + c) : make_uint4(0, 0, 0, 0);
    }
};

/** @brief One element written in this step, through L2 (ld.global.cg): an L1 line of it could be stale. */
static __device__ __forceinline__ float load_cg(const float *p) { return __ldcg(p); }
/** @brief The same in fp16. */
static __device__ __forceinline__ float load_cg(const __half *p) { return __half2float(__ldcg(p)); }

/** @brief What a phase's epilogue needs that the phase before does not write: requested before the barrier. */
struct Prefetched {
    float bias;  /**< the bias of this thread's output (output thread / ROWS, row thread % ROWS) */
    float colsum; /**< v24: the sum of that output's folded weights (decode_step_args.ln_folded) */
    float resid; /**< for a residual add, y's old value there */
    float gain[STEP_LN_PER_THREAD];  /**< LayerNorm gain at k = thread + i·STEP_THREADS */
    float shift[STEP_LN_PER_THREAD]; /**< LayerNorm shift at the same k */
    float chunk_gain[ROWS_ONE_PASS_PER_LANE];  /**< v10: the gain at this lane's k of a row, in 16-byte chunks */
    float chunk_shift[ROWS_ONE_PASS_PER_LANE]; /**< the shift at the same k */
};

/**
 * @brief Start phase `p` before its barrier: each lane's first STEP_SLOTS
 *        16-byte weight loads (the cursor then points past them; not where
 *        the ring brings the weights), the epilogue's bias and old residual
 *        value, the LayerNorm parameters.
 */
template <typename T, int ROWS>
static __device__ __forceinline__ void issue_phase(const LinearShare &p, uint4 (&slot)[STEP_SLOTS], StepCursor &ahead,
                                                   Prefetched &pre, const float *bias, const T *resid_y, int N, int M,
                                                   const float *ln_w, const float *ln_b, int K, bool weights,
                                                   const float *colsum = NULL)
{
    const int lane = threadIdx.x % 32;
    if (weights) { /* v7/v8's ring phases: the copy engine brings them */
        ahead.start(p, threadIdx.x / 32);
#pragma unroll
        for (int r = 0; r < STEP_SLOTS; ++r) {
            slot[r] = ahead.fetch(p, lane);
            ahead.advance(p);
        }
    }
    int o = threadIdx.x / ROWS, m = threadIdx.x % ROWS;
    pre.bias = pre.resid = 0.0f;
    if (o < p.outs && m < M) {
        if (bias) pre.bias = __ldg(bias + p.n0 + o);
        if (colsum) pre.colsum = __ldg(colsum + p.n0 + o); /* v24 (read only where it was set: finish_phase) */
        if (resid_y) pre.resid = load_cg(resid_y + (long long)m * N + p.n0 + o); /* written in this step: not __ldg */
    }
#pragma unroll
    for (int i = 0; i < STEP_LN_PER_THREAD; ++i) {
        int k = threadIdx.x + i * STEP_THREADS;
        pre.gain[i] = ln_w && k < K ? __ldg(ln_w + k) : 0.0f;
        pre.shift[i] = ln_w && k < K ? __ldg(ln_b + k) : 0.0f;
    }
}

/** @brief Ask L2 for `bytes` from p (one 128-byte line per request, the block's threads in turn). */
static __device__ __forceinline__ void prefetch_l2(const void *p, long long bytes)
{
    for (long long off = (long long)threadIdx.x * 128; off < bytes; off += (long long)STEP_THREADS * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)p + off));
}

/** @brief 16 bytes of a row written in this step: through L2, never a stale L1 line. */
static __device__ __forceinline__ uint4 load_fresh(const void *p) { return __ldcg(reinterpret_cast<const uint4 *>(p)); }
/** @brief load_fresh with an L2 cache policy for the line (v16/v17's K and V: l2_policy_evict_first; sm_80). */
static __device__ __forceinline__ uint4 load_fresh_with_policy(const void *p, uint64_t policy)
{
#if __CUDA_ARCH__ >= 800
    uint4 v;
    asm("ld.global.cg.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(policy));
    return v;
#else
    return load_fresh(p);
#endif
}

/**
 * @brief The phase's input rows, after the barrier: M rows of K from `src`
 *        (written by the phase before) into shared memory, rows M..ROWS−1
 *        zero. All 16-byte loads are issued at once: one trip to L2.
 */
template <typename T, int ROWS>
static __device__ void stage_step_rows(const T *src, T *rows, int M, int K)
{
    constexpr int VEC = Vec16<T>::N;
#pragma unroll 4
    for (int i = threadIdx.x; i < ROWS * K / VEC; i += STEP_THREADS) {
        int m = i * VEC / K;
        reinterpret_cast<uint4 *>(rows)[i] = m < M ? load_fresh(reinterpret_cast<const uint4 *>(src) + i) : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
}

/**
 * @brief A LayerNorm's two sums over a row, of d = x − x₀ (x₀ the row's first
 *        value). Shifted by x₀ so that var = E[d²] − E[d]² is never a
 *        difference of two large numbers when the mean is far from zero.
 */
struct RowSums {
    float x0; /**< the row's first value */
    float s1; /**< Σ d */
    float s2; /**< Σ d² */
    /** @brief Add N of the row's values (this lane's). */
    template <int N>
    __device__ __forceinline__ void add(const float (&v)[N])
    {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const float d = v[i] - x0;
            s1 += d, s2 = fmaf(d, d, s2);
        }
    }
    /** @brief The warp's lanes' sums, in every lane. */
    __device__ __forceinline__ void warp_reduce() { s1 = warp_allreduce<SumOp>(s1), s2 = warp_allreduce<SumOp>(s2); }
    /** @brief (mean, 1/σ) of the row of K values. */
    __device__ __forceinline__ float2 mean_rstd(int K) const
    {
        const float mean_d = s1 / K;
        return make_float2(x0 + mean_d, rsqrtf(fmaxf(s2 / K - mean_d * mean_d, 0.0f) + GPT2_LN_EPS));
    }
};

/** @brief One warp's LayerNorm sums over a staged row (shared memory, K a multiple of 16 bytes), in every lane. */
template <typename T>
static __device__ __forceinline__ RowSums warp_row_sums(const T *row, int K)
{
    constexpr int VEC = Vec16<T>::N;
    RowSums r = {load(row, 0), 0.0f, 0.0f};
    for (int c = threadIdx.x % 32; c < K / VEC; c += 32) {
        float v[VEC];
        unpack16(*reinterpret_cast<const uint4 *>(row + c * VEC), v, T());
        r.add(v);
    }
    r.warp_reduce();
    return r;
}

/**
 * @brief v24: the statistics of a staged row (x as it is, the LayerNorm
 *        folded into the linear after it), by one warp, into stats[0] =
 *        (mean, 1/σ). At 1 row.
 *
 *        A LayerNorm before a linear is y_n = Σ_k ((x_k − mean)·rstd·g_k +
 *        b_k)·W_nk + bias_n, which is
 *
 *            y_n = rstd·(Σ_k x_k·W'_nk − mean·Σ_k W'_nk) + bias'_n,
 *
 *        W'_nk = g_k·W_nk and bias'_n = bias_n + Σ_k b_k·W_nk, both worked
 *        out once on the host (model.c: gpt2_fold_layernorm). The dot products
 *        then take the row as the phase before left it, and the statistics
 *        are needed only in the epilogue: v23's rows stage normalised the
 *        row (its loads, two butterflies, the gain and shift) before any dot
 *        product could start; v24's stages x (stage_step_rows, or the sums
 *        of stage_proj_sum_rows), and one warp works out mean and rstd while
 *        the others multiply (STATS_WARP). The column sums Σ_k W'_nk are of
 *        the rounded W', so that x·W' − mean·ΣW' is (x − mean)·W' in exact
 *        arithmetic; the two terms cancel as far as the mean is from zero,
 *        and fp32 keeps 13 bits more than fp16's rounding of the row: the
 *        cancellation shows only for a mean thousands of times σ.
 */
template <typename T>
static __device__ __forceinline__ void row_statistics(const T *row, int K, float2 *stats)
{
    const RowSums r = warp_row_sums(row, K);
    if (threadIdx.x % 32 == 0) stats[0] = r.mean_rstd(K);
}

/**
 * @brief v24: the warp that works out the statistics (row_statistics): the
 *        last but one. At 1 row QKV's 17-18 outputs a block leave it 2 dot
 *        products where warps 0 and 1 have 3, and it is not the producer's
 *        (the last warp, which requests in the same phases).
 */
#define STATS_WARP (STEP_WARPS - 2)

/**
 * @brief LayerNorm of the M staged rows, in place: the statistics in one
 *        block-wide reduction of two sums, then every thread its columns
 *        with the prefetched gain and shift; rounded to T as v1's LayerNorm
 *        kernel rounds its output.
 *
 *        WARP_ROWS (v9): the statistics a warp per row instead. Warp m reads
 *        row m in 16-byte chunks and reduces its two sums with one butterfly:
 *        no shared partial sums, no __syncthreads between them. At 8 rows the
 *        block-wide way costs 16 butterflies per warp and 24 two-byte shared
 *        loads per thread.
 */
template <typename T, int ROWS, bool WARP_ROWS = false>
static __device__ void layernorm_step_rows(T *rows, int M, int K, const Prefetched &pre, const float *ln_w,
                                           const float *ln_b)
{
    __shared__ float partial_sums[STEP_WARPS][ROWS], partial_squares[STEP_WARPS][ROWS], mean[ROWS], rstd[ROWS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    /* Both statistics of a row from the shifted values d = x − x₀ (x₀ the row's first value), so that
     * var = E[d²] − E[d]² is never a difference of two large numbers when the mean is far from zero */
    if constexpr (WARP_ROWS) {
        for (int m = warp; m < ROWS; m += STEP_WARPS) { /* rows past M are zero: harmless statistics, never used */
            const RowSums r = warp_row_sums(rows + (long long)m * K, K);
            if (lane == 0) {
                const float2 st = r.mean_rstd(K);
                mean[m] = st.x, rstd[m] = st.y;
            }
        }
    } else {
        /* All warps share each row: each thread sums d and d² over its columns (rows past M are zero), the
         * butterfly per warp, the warps' sums added by thread m. Stage 05's two passes (the mean, then the squared
         * deviations) cost one more reduction and its two __syncthreads on the step's critical path: 0.3 µs a
         * LayerNorm on the H100 */
        float s1[ROWS], s2[ROWS], x0[ROWS];
#pragma unroll
        for (int m = 0; m < ROWS; ++m) s1[m] = s2[m] = 0.0f, x0[m] = load(rows, (long long)m * K);
        for (int k = threadIdx.x; k < K; k += STEP_THREADS)
#pragma unroll
            for (int m = 0; m < ROWS; ++m) {
                float d = load(rows, (long long)m * K + k) - x0[m];
                s1[m] += d, s2[m] = fmaf(d, d, s2[m]);
            }
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            float t1 = warp_allreduce<SumOp>(s1[m]), t2 = warp_allreduce<SumOp>(s2[m]);
            if (lane == 0) partial_sums[warp][m] = t1, partial_squares[warp][m] = t2;
        }
        __syncthreads();
        if (threadIdx.x < ROWS) {
            float t1 = 0.0f, t2 = 0.0f;
            for (int w = 0; w < STEP_WARPS; ++w) t1 += partial_sums[w][threadIdx.x], t2 += partial_squares[w][threadIdx.x];
            float mean_d = t1 / K;
            mean[threadIdx.x] = load(rows, (long long)threadIdx.x * K) + mean_d;
            rstd[threadIdx.x] = rsqrtf(fmaxf(t2 / K - mean_d * mean_d, 0.0f) + GPT2_LN_EPS);
        }
    }
    __syncthreads();
    auto normalise = [&](int k, float g, float b) {
        for (int m = 0; m < M; ++m)
            store(rows, (long long)m * K + k, (load(rows, (long long)m * K + k) - mean[m]) * rstd[m] * g + b);
    };
#pragma unroll
    for (int i = 0; i < STEP_LN_PER_THREAD; ++i) /* unrolled: the prefetched registers are never indexed at run time */
        if (threadIdx.x + i * STEP_THREADS < K) normalise(threadIdx.x + i * STEP_THREADS, pre.gain[i], pre.shift[i]);
    for (int k = threadIdx.x + STEP_LN_PER_THREAD * STEP_THREADS; k < K; k += STEP_THREADS)
        normalise(k, __ldg(ln_w + k), __ldg(ln_b + k));
    __syncthreads();
}

/** @brief One 16-byte chunk of an output's weights (chunk c of its K) times the ROWS staged rows, added to acc:
 *         the inner step of run_phase (weights from a register slot) and run_phase_ring (from the ring). */
template <typename T, int ROWS>
static __device__ __forceinline__ void multiply_chunk(uint4 w16, const T *rows, int K, int c, float (&acc)[ROWS])
{
    constexpr int VEC = Vec16<T>::N;
    float w[VEC];
    unpack16(w16, w, T());
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        float x[VEC];
        unpack16(*reinterpret_cast<const uint4 *>(rows + m * K + c * VEC), x, T());
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[m] = fmaf(w[v], x[v], acc[m]);
    }
}

/** @brief The warp's dot products of one output, one per row (acc[m], a part per lane), reduced by the butterfly:
 *         lane m gets row m's. */
template <int ROWS>
static __device__ __forceinline__ float reduce_rows_to_lanes(const float (&acc)[ROWS])
{
    float mine = 0.0f;
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        float s = warp_allreduce<SumOp>(acc[m]);
        if (threadIdx.x % 32 == m) mine = s;
    }
    return mine;
}

/** @brief The LM head's logit of row m, output n: written, and kept in `best` if it is the row's largest so far. */
template <typename T>
static __device__ __forceinline__ void keep_logit(float logit, int m, int n, unsigned long long &best,
                                                  const decode_step_args &a)
{
    store((T *)a.logits, (long long)m * a.ldy + n, logit);
    unsigned long long key = gpt2_argmax_key(logit, n);
    best = key > best ? key : best;
}

/** @brief An LM head tile's logits on tensor cores: lane (g, t) holds row g's outputs 2t and 2t + 1 of the tile
 *         (acc[half][e], the two halves' parts), local outputs tile_o + 2t + e of `outs`, vocabulary n0 + those. */
static __device__ __forceinline__ void keep_tile_logits(const float (&acc)[2][2], int tile_o, int outs, int n0,
                                                        unsigned long long &best, const decode_step_args &a)
{
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int o = tile_o + 2 * t + e;
        if (g < a.M && o < outs) keep_logit<__half>(acc[0][e] + acc[1][e], g, n0 + o, best, a);
    }
}

/**
 * @brief Run a linear phase after its barrier (the input rows staged): each
 *        warp consumes its slots in order and refills each with the load
 *        STEP_SLOTS steps further on, so loads stay in flight while it
 *        multiplies. A unit's finished dot products (one per row, reduced by
 *        the butterfly) go to shared memory (`partial`) for finish_phase; or,
 *        for the LM head (`direct`, never split), lane m writes row m's logit
 *        and keeps its best (value, token) key in `best`.
 */
template <typename T, int ROWS>
static __device__ __forceinline__ void run_phase(const LinearShare &p, uint4 (&slot)[STEP_SLOTS], StepCursor &ahead,
                                                 const T *rows, int K, float *partial, bool direct,
                                                 unsigned long long &best, const decode_step_args &a)
{
    const int lane = threadIdx.x % 32;
    StepCursor use;
    use.start(p, threadIdx.x / 32);
    float acc[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; ++m) acc[m] = 0.0f;
    while (use.u < p.units) {
#pragma unroll
        for (int r = 0; r < STEP_SLOTS; ++r) {
            if (use.u >= p.units) break;
            int c = use.chunk(p, lane);
            if (c < p.chunks) multiply_chunk<T, ROWS>(slot[r], rows, K, c, acc);
            slot[r] = ahead.fetch(p, lane); /* the slot is free: the load STEP_SLOTS steps on */
            ahead.advance(p);
            if (use.last_round()) { /* the unit is done: its dot products, one per row */
                float mine = 0.0f;
#pragma unroll
                for (int m = 0; m < ROWS; ++m) {
                    float s = warp_allreduce<SumOp>(acc[m]);
                    if (lane == m) mine = s;
                    acc[m] = 0.0f;
                }
                if (direct) {
                    if (lane < a.M) keep_logit<T>(mine, lane, p.n0 + use.o, best, a);
                } else if (lane < ROWS) {
                    partial[use.u * ROWS + lane] = mine;
                }
            }
            use.advance(p);
        }
    }
}

/** @brief The step's own inputs, in shared memory for the whole step. */
struct StepInputs {
    int lens[DECODE_MAX_ROWS];        /**< each sequence's context length, the new token included */
    long long slots[DECODE_MAX_ROWS]; /**< each sequence's slot in the page pools */
    const int *tables; /**< [M][max_pages], shared memory */
};

/** @brief v25: log2 of n, a power of 2 (the block size: the host checks). */
static __device__ __forceinline__ int log2_of_power_of_2(int n) { return 31 - __clz(n); }

/** @brief The block's epilogue of a split phase: slices added, bias, then the epilogue for each (output, row). */
template <typename T, int ROWS>
static __device__ __forceinline__ void finish_phase(decode_epilogue epi, const LinearShare &p, const float *partial,
                                                    const Prefetched &pre, const float *bias, T *y, int N,
                                                    const decode_step_args &a, const StepInputs &in, void *k_pool,
                                                    void *v_pool, const float2 *ln_stats = NULL, bool kv_shifts = false,
                                                    unsigned *tagged_y = NULL, unsigned tag = 0)
{
    __syncthreads(); /* every warp's partial sums are in */
    for (int i = threadIdx.x; i < p.outs * ROWS; i += STEP_THREADS) {
        int o = i / ROWS, m = i % ROWS, n = p.n0 + o;
        if (m >= a.M) continue;
        float s = 0.0f;
        for (int sl = 0; sl < p.S; ++sl) s += partial[(o * p.S + sl) * ROWS + m];
        bool mine = i == (int)threadIdx.x; /* the first pass: what issue_phase prefetched */
        if (ln_stats) /* v24: rstd·(x·w' − mean·Σw') + bias', the LayerNorm folded (row_statistics) */
            s = fmaf(ln_stats[m].y, s - ln_stats[m].x * (mine ? pre.colsum : __ldg(bias + N + n)),
                     mine ? pre.bias : __ldg(bias + n));
        else
            s += mine ? pre.bias : bias ? __ldg(bias + n) : 0.0f;
        if (tagged_y && epi != DECODE_QKV_APPEND) { /* v27: y's words, tagged (at 1 row; resid: fc's rows left it) */
            store_tagged(tagged_y + n, epi == DECODE_GELU ? gelu_tanh(s) : pre.resid + s, tag);
        } else if (epi == DECODE_GELU) {
            store(y, (long long)m * N + n, gelu_tanh(s));
        } else if (epi == DECODE_RESIDUAL) {
            store(y, (long long)m * N + n, (mine ? pre.resid : load_cg(y + (long long)m * N + n)) + s);
        } else { /* DECODE_QKV_APPEND: q to its rows, k and v to their slots in the page pools */
            int C = a.C, part = n / C, c = n - part * C, d = DECODE_STEP_HEAD_DIM;
            if (tagged_y) store_tagged(tagged_y + n, s, tag); /* v27: q, k and v for this step's attention */
            if (part == 0) {
                if (!tagged_y) store((T *)a.q, (long long)m * C + c, s);
            } else { /* k and v also to the pools, for the steps after */
                long long slot = in.slots[m], page, offset;
                if (kv_shifts) /* v25: a shift and a mask, not a 64-bit division (a subroutine of ~70 instructions) */
                    page = slot >> log2_of_power_of_2(a.block_size), offset = slot & (a.block_size - 1);
                else
                    page = slot / a.block_size, offset = slot % a.block_size;
                store((T *)(part == 1 ? k_pool : v_pool), ((page * a.H + c / d) * a.block_size + offset) * d + c % d, s);
            }
        }
    }
}


/**
 * @brief v16/v17: at 5-8 rows, the K and V of layers from this one on are
 *        read evict-first in L2, so that the first layers' stay there for
 *        the next step. Eight sequences' K and V (38-75 MB in fp16 at
 *        context 130-256) do not all fit in L2 beside the weights; read in
 *        the same order every step, each layer's pushed out the ones the
 *        next step reads first. Measured on the H100 at batch 8: keeping the
 *        first 2, 3 or 4 layers' gave the same (on v16's LM head), 6 a little
 *        less and 8 nothing (on v12). At 1 row every layer's fit, and keeping
 *        only some lost 4-5 µs (v12).
 */
#define KV_KEPT_LAYERS 2

/** @brief Tokens one warp of attention_phase reads a pass: STEP_ATT_PASSES loads a lane, each of 32 / (64 / N) tokens
 *         (a token's 64 values are 64 / N lanes' 16-byte chunks): 16 in fp32, 32 in fp16. */
template <typename T>
static __host__ __device__ constexpr int attention_warp_tokens()
{
    return STEP_ATT_PASSES * (32 / (DECODE_STEP_HEAD_DIM / Vec16<T>::N));
}

/** @brief The factor that takes a softmax part kept at its own max `m` to the common max `most` (0 for a part with no
 *         tokens, whose max is −∞). */
static __device__ __forceinline__ float rescale_to_max(float m, float most)
{
    return m == -INFINITY ? 0.0f : exp2f(m - most);
}

/** @brief Whether the ROWS-row step of a variant that splits attention (v18/v19, SPLIT) splits it: at 1 to
 *         ATT_SPLIT_MAX_ROWS rows. */
template <int ROWS, bool SPLIT>
static __host__ __device__ constexpr bool split_at_rows() { return SPLIT && ROWS <= ATT_SPLIT_MAX_ROWS; }

/**
 * @brief v18/v19: how many blocks share each (sequence, head) pair's
 *        attention this step: one per pass of a block's warps over the
 *        longest context (STEP_WARPS warps × a tile of STEP_ATT_PASSES loads
 *        a lane: 128 tokens in fp32, 256 in fp16), as many as the blocks
 *        with no pair allow, at most ATT_MAX_SPLITS. One block reads a
 *        pair's context in passes, each an L2 round trip after the one
 *        before; at batch 1 attention keeps 12 of the 132 blocks busy, and
 *        in fp32 every context past 128 tokens takes a second pass. Split,
 *        each block reads one pass's tokens and keeps its part unnormalised
 *        (its running max and sum beside it), and proj's rows merge the
 *        parts (stage_attention_rows), as flash-decoding does.
 */
template <typename T, int ROWS, bool SPLIT>
static __device__ __forceinline__ int attention_splits(const decode_step_args &a, const StepInputs &in)
{
    if constexpr (!split_at_rows<ROWS, SPLIT>()) {
        return 1;
    } else {
        constexpr int PASS_TOKENS = STEP_WARPS * attention_warp_tokens<T>();
        int longest = 1;
        for (int m = 0; m < a.M; ++m) longest = max(longest, in.lens[m]);
        const int wanted = (longest + PASS_TOKENS - 1) / PASS_TOKENS, room = (int)gridDim.x / (a.M * a.H);
        return max(1, min(min(wanted, room), ATT_MAX_SPLITS));
    }
}

/**
 * @brief v18/v19: where split s of row m keeps head h's part: its 64
 *        unnormalised outputs, then its running max and sum (and 2 floats
 *        of padding, so that the next head's outputs start on 16 bytes).
 *        The (max, sum) sit in the head's own lines: each of those is read
 *        by one warp of every block, as each line of the outputs is. Kept
 *        apart, the (max, sum) of all the heads filled one or two lines that
 *        six warps of every block read: proj's rows took 1.04-1.07 µs at
 *        batch 1 on the H100, against 0.89-0.98 (v17's: 0.48-0.54).
 */
static __device__ __forceinline__ float *att_part(const decode_step_args &a, int m, int s, int h)
{
    return a.att_parts + (((long long)m * ATT_MAX_SPLITS + s) * a.H + h) * ATT_PART_FLOATS;
}

/**
 * @brief v18/v19: proj's rows from the attention's S splits. Each thread
 *        merges 4 columns of a row: it loads the S parts and their (max,
 *        sum) together (one L2 round trip, as stage_step_rows), rescales
 *        each part to the largest max, adds, and divides by the sum, then
 *        rounds to T as attention_phase stores its output.
 */
template <typename T, int ROWS>
static __device__ void stage_attention_rows(const decode_step_args &a, T *rows, int S)
{
    constexpr int D = DECODE_STEP_HEAD_DIM;
    const int C = a.C;
    for (int i = threadIdx.x; i < ROWS * C / 4; i += STEP_THREADS) {
        const int m = i * 4 / C, c = i * 4 - m * C;
        float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (m < a.M) {
            float4 part[ATT_MAX_SPLITS];
            float2 max_sum[ATT_MAX_SPLITS];
#pragma unroll
            for (int s = 0; s < ATT_MAX_SPLITS; ++s) /* unrolled, so that the S loads are in flight together */
                if (s < S) {
                    const float *p = att_part(a, m, s, c / D);
                    part[s] = __ldcg(reinterpret_cast<const float4 *>(p + c % D));
                    max_sum[s] = __ldcg(reinterpret_cast<const float2 *>(p + D));
                }
            float most = -INFINITY, sum = 0.0f;
#pragma unroll
            for (int s = 0; s < ATT_MAX_SPLITS; ++s)
                if (s < S) most = fmaxf(most, max_sum[s].x);
#pragma unroll
            for (int s = 0; s < ATT_MAX_SPLITS; ++s)
                if (s < S) { /* a split with no tokens has max −∞ and adds nothing */
                    const float f = rescale_to_max(max_sum[s].x, most);
                    sum += f * max_sum[s].y;
                    o[0] += f * part[s].x, o[1] += f * part[s].y, o[2] += f * part[s].z, o[3] += f * part[s].w;
                }
#pragma unroll
            for (int k = 0; k < 4; ++k) o[k] /= sum;
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) store(rows, (long long)m * C + c + k, o[k]);
    }
    __syncthreads();
}

/**
 * @brief The attention phase: (sequence, head) pairs go to blocks in turn;
 *        in a block the 8 warps take tiles of the context in turn (stage 09's
 *        layout: each token's K row read whole by consecutive lanes, every
 *        lane's loads of the tile issued together), keep their own online
 *        softmax, and merge in shared memory — no partials in global memory,
 *        no second pass. v18/v19 (SPLIT, `splits` > 1): each pair's context
 *        in `splits` parts, each its own item; a part's block leaves its
 *        unnormalised output and (max, sum) in global memory (att_part), and
 *        proj's rows merge them (stage_attention_rows).
 */
/**
 * @brief v25: where token t's row of head h starts in a page pool ([pages][H][bs][64]), its page from `table`, with
 *        the block size bs a power of 2 (the host checks): a shift and a mask where v5-v24 divide by bs. (QKV's
 *        epilogue, which appends the new token's K and V, shifts its slot too: finish_phase.)
 *
 *        v24's attention took 3.0 µs of a 5 µs phase at context 130 (H100). In its sm_90 code each of a warp's 8
 *        passes divided t by bs (an integer division by a run-time value: I2F, MUFU.RCP, F2I and a dozen integer
 *        instructions, a dependent chain), then read the page from the table and only then issued its two loads,
 *        and `if (t < len)` put each pass in a branch of its own, so the passes could not overlap: the last loads
 *        left about 1 100 instructions after the first. v25 clamps t to the last token instead (a token past the
 *        context reads the last one's row; its score is −∞, so it weighs 0) and shifts: no branch, and the 8 passes'
 *        arithmetic interleaves.
 */
static __device__ __forceinline__ long long kv_row_offset(const int *table, int t, int H, int h, int bs)
{
    return (((long long)table[t >> log2_of_power_of_2(bs)] * H + h) * bs + (t & (bs - 1))) * DECODE_STEP_HEAD_DIM;
}

template <typename T, int ROWS, bool KEEP_FIRST_KV, bool SPLIT = false, bool SHIFTS = false, bool TAGGED = false>
static __device__ void attention_phase(const decode_step_args &a, const StepInputs &in, const T *k_pool, const T *v_pool,
                                       int layer, int splits = 1, int only_pair = -1, T *to_shared = nullptr,
                                       unsigned tag = 0)
{
    static_assert(!TAGGED || SHIFTS, "v27's attention is v25's");
    const bool kv_evict_first = KEEP_FIRST_KV && ROWS > 4 && layer >= KV_KEPT_LAYERS; /* v16/v17, 5-8 rows */
#if __CUDA_ARCH__ >= 800
    const uint64_t kv_policy = kv_evict_first ? l2_policy_evict_first() : 0;
#else
    const uint64_t kv_policy = 0;
#endif
    constexpr int D = DECODE_STEP_HEAD_DIM, EP = Vec16<T>::N, CHUNKS = D / EP, TPP = 32 / CHUNKS;
    constexpr int TILE = attention_warp_tokens<T>(); /* tokens per warp per tile: STEP_ATT_PASSES · TPP */
    __shared__ float warp_m[STEP_WARPS], warp_l[STEP_WARPS], warp_o[STEP_WARPS][D];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % CHUNKS, sub = lane / CHUNKS;
    const int H = a.H, C = a.C, bs = a.block_size;
    const float scale_log2 = LOG2E * rsqrtf((float)D);
    const int S = SPLIT ? splits : 1;
    /* v21 (only_pair >= 0): that one pair, its output into to_shared (the block's own, for proj) */
    const int item0 = only_pair >= 0 ? only_pair : (int)blockIdx.x, items = only_pair >= 0 ? only_pair + 1 : a.M * H * S;
    for (int item = item0; item < items; item += gridDim.x) {
        /* v18/v19: item = split·pairs + pair; split s reads tokens [s·len/S, (s+1)·len/S) */
        const int pair = SPLIT ? item % (a.M * H) : item, split = SPLIT ? item / (a.M * H) : 0;
        int m = pair / H, h = pair - m * H, len = in.lens[m], first = 0;
        if (SPLIT && S > 1) first = (int)((long long)split * len / S), len = (int)((long long)(split + 1) * len / S);
        const int *table = in.tables + m * a.max_pages;
        float qv[EP], acc[EP], mx = -INFINITY, l = 0.0f;
        uint4 k_new, v_new; /* v27: the new token's K and V, from QKV's tagged words (the pools' may not be there yet) */
        if constexpr (TAGGED) {
            const unsigned *qkv = tagged_qkv(a, layer) + h * D + c * EP; /* at 1 row */
            const uint4 q16 = poll_tagged8(qkv, tag);
            k_new = poll_tagged8(qkv + C, tag), v_new = poll_tagged8(qkv + 2 * C, tag);
            unpack16(q16, qv, T());
        } else {
            unpack16(load_fresh((const T *)a.q + (long long)m * C + h * D + c * EP), qv, T());
        }
#pragma unroll
        for (int k = 0; k < EP; ++k) qv[k] *= scale_log2, acc[k] = 0.0f;
        for (int t0 = first + warp * TILE; t0 < len; t0 += STEP_WARPS * TILE) {
            uint4 kr[STEP_ATT_PASSES], vr[STEP_ATT_PASSES];
#pragma unroll
            for (int p = 0; p < STEP_ATT_PASSES; ++p) {
                int t = t0 + p * TPP + sub;
                if constexpr (SHIFTS) { /* v25: see kv_row_offset */
                    const long long off = kv_row_offset(table, min(t, len - 1), H, h, bs) + c * EP;
                    kr[p] = load_fresh(k_pool + off), vr[p] = load_fresh(v_pool + off);
                    if (TAGGED && t >= len - 1) kr[p] = k_new, vr[p] = v_new; /* v27: the new token's (past it: −∞) */
                } else {
                    kr[p] = vr[p] = make_uint4(0, 0, 0, 0);
                    if (t < len) {
                        long long off = (((long long)table[t / bs] * H + h) * bs + t % bs) * D + c * EP;
                        if (kv_evict_first)
                            kr[p] = load_fresh_with_policy(k_pool + off, kv_policy),
                            vr[p] = load_fresh_with_policy(v_pool + off, kv_policy);
                        else
                            kr[p] = load_fresh(k_pool + off), vr[p] = load_fresh(v_pool + off);
                    }
                }
            }
            float s[STEP_ATT_PASSES], tile_max = -INFINITY;
#pragma unroll
            for (int p = 0; p < STEP_ATT_PASSES; ++p) {
                float kf[EP], x = 0.0f;
                unpack16(kr[p], kf, T());
#pragma unroll
                for (int k = 0; k < EP; ++k) x += qv[k] * kf[k];
#pragma unroll
                for (int off = 1; off < CHUNKS; off *= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
                s[p] = t0 + p * TPP + sub < len ? x : -INFINITY;
                tile_max = fmaxf(tile_max, s[p]);
            }
#pragma unroll
            for (int off = CHUNKS; off < 32; off *= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
            float m_new = fmaxf(mx, tile_max), base = m_new == -INFINITY ? 0.0f : m_new, alpha = exp2f(mx - base);
            l *= alpha;
#pragma unroll
            for (int k = 0; k < EP; ++k) acc[k] *= alpha;
            mx = m_new;
#pragma unroll
            for (int p = 0; p < STEP_ATT_PASSES; ++p) {
                float vf[EP], pr = exp2f(s[p] - base);
                unpack16(vr[p], vf, T());
                l += pr;
#pragma unroll
                for (int k = 0; k < EP; ++k) acc[k] += pr * vf[k];
            }
        }
#pragma unroll
        for (int off = CHUNKS; off < 32; off *= 2) { /* the lanes of one chunk held different tokens */
            l += __shfl_xor_sync(0xffffffffu, l, off);
#pragma unroll
            for (int k = 0; k < EP; ++k) acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], off);
        }
        if (lane == 0) warp_m[warp] = mx, warp_l[warp] = l;
        if (sub == 0)
#pragma unroll
            for (int k = 0; k < EP; ++k) warp_o[warp][c * EP + k] = acc[k];
        __syncthreads();
        if (threadIdx.x < D) { /* the warps merged: rescaled to the block's max, added */
            float M = -INFINITY, L = 0.0f, o = 0.0f;
            for (int w = 0; w < STEP_WARPS; ++w) M = fmaxf(M, warp_m[w]);
            for (int w = 0; w < STEP_WARPS; ++w) {
                float f = rescale_to_max(warp_m[w], M);
                L += f * warp_l[w], o += f * warp_o[w][threadIdx.x];
            }
            if (SPLIT && S > 1) { /* v18/v19: the part unnormalised, for proj's rows to merge */
                float *part = att_part(a, m, split, h);
                part[threadIdx.x] = o;
                if (threadIdx.x == 0) part[D] = M, part[D + 1] = L;
            } else if (to_shared) { /* v21 */
                store(to_shared, threadIdx.x, o / L);
            } else {
                store((T *)a.att, (long long)m * C + h * D + threadIdx.x, o / L);
            }
        }
        __syncthreads(); /* the merge has read the slots before the next pair writes them */
    }
}

/** @brief The phases of a step: five per block (QKV, attention, proj, fc, fc-proj), then the LM head. */
enum StepPhase { PHASE_QKV, PHASE_ATTENTION, PHASE_PROJ, PHASE_FC, PHASE_FCPROJ };

/** @brief What a linear phase multiplies, with what before and after. */
struct LinearPhase {
    decode_epilogue epilogue;         /**< what happens to each output */
    const void *w;                    /**< [N][K] */
    const float *bias;                /**< [N], or NULL */
    const float *ln_w;                /**< LayerNorm gain [K] before the multiply, or NULL */
    const float *ln_b;                /**< LayerNorm shift [K] */
    const void *src;                  /**< the input rows [M][K]; NULL: the embedding (the first QKV) */
    void *y;                          /**< q, x (residual), hidden, or the logits */
    const void *resid;                /**< the residual's old values (x), or NULL */
    int N;                            /**< outputs per row */
    int K;                            /**< inputs per row */
    int linear;                       /**< the step's linear number (4 per block), for the L2 prefetch */
    void *k_pool;                     /**< the QKV phase's K page pool */
    void *v_pool;                     /**< and V */
};

/** @brief Sequence m's token in this step: from the host, or (steps queued on the GPU, engine_generate) the argmax
 *         key of the step before, a kernel before. */
static __device__ __forceinline__ int step_token(const decode_step_args &a, int m)
{
    return a.prev_best ? gpt2_argmax_key_token(__ldg(a.prev_best + m), a.V) : __ldg(a.tokens + m);
}

/** @brief Phase i of the step (not an attention phase). */
static __device__ __forceinline__ LinearPhase describe_phase(const decode_step_args &a,
                                                             const decode_layer_weights *layers, int i)
{
    const int C = a.C, l = i / 5;
    if (i == 5 * a.L) /* the LM head: wte [V][C] is already [N][K] */
        return {DECODE_LOGITS_ARGMAX, a.wte, NULL, a.lnf_w, a.lnf_b, a.x, a.logits, NULL, a.V, C, 4 * l, NULL, NULL};
    const decode_layer_weights &W = layers[l];
    switch (i % 5) {
    case PHASE_QKV:
        return {DECODE_QKV_APPEND, W.qkv_wt, W.qkv_b, W.ln1_w, W.ln1_b, i ? a.x : NULL, a.q, NULL, 3 * C, C, 4 * l,
                W.k_pool, W.v_pool};
    case PHASE_PROJ:
        return {DECODE_RESIDUAL, W.proj_wt, W.proj_b, NULL, NULL, a.att, a.x, a.x, C, C, 4 * l + 1, NULL, NULL};
    case PHASE_FC:
        return {DECODE_GELU, W.fc_wt, W.fc_b, W.ln2_w, W.ln2_b, a.x, a.hidden, NULL, 4 * C, C, 4 * l + 2, NULL, NULL};
    default:
        return {DECODE_RESIDUAL, W.fcproj_wt, W.fcproj_b, NULL, NULL, a.hidden, a.x, a.x, C, 4 * C, 4 * l + 3, NULL, NULL};
    }
}

/** @brief The phase of the step's linear number j (four per block): phases 0, 2, 3 and 4 of a block (attention is 1). */
static __device__ __forceinline__ int phase_of_linear(int j) { return 5 * (j / 4) + (j % 4 ? j % 4 + 1 : 0); }

/**
 * @brief Ask L2 for this block's share of the step's linear number j (four
 *        per block: QKV, proj, fc, fc-proj; none past the last block: the LM
 *        head streams on its own), so that its loads, when issued, find it
 *        there.
 */

template <typename T>
static __device__ __forceinline__ void prefetch_linear(const decode_step_args &a, const decode_layer_weights *layers,
                                                       int j)
{
    if (j >= 4 * a.L) return;
    LinearPhase d = describe_phase(a, layers, phase_of_linear(j));
    LinearShare share = share_of<T>(d.w, d.N, d.K, true);
    prefetch_l2(share.w, (long long)share.outs * share.chunks * 16);
}


/* ------------------------------------------------------------------------ */
/* v7 and v8: the weights by the copy engine, into a ring in shared memory   */
/* ------------------------------------------------------------------------ */
/*
 * v5's trace shows where a phase's time goes: not into the weights, which are
 * in flight before the barrier, but into the loads that come after them. The
 * barrier's polls, the phase's input rows and attention's K and V are loads of
 * the same SM, queued behind its 48 KB of weight requests; with the weights
 * requested after the barrier instead (the H100, v6 at batch 1), reading the
 * input rows went from 1.0 to 2.2 µs and the step from 365 to 441 µs.
 *
 * On sm_90 a block can hand its weights to the copy engine (TMA): one thread
 * asks for a contiguous run of bytes (`cp.async.bulk`), the engine writes it
 * into shared memory and counts the bytes on an mbarrier, and no load of the
 * block's threads waits behind it. A block's share of a linear *is* one
 * contiguous run (its rows of Wᵀ), so each linear is one or two copies. The
 * copies go into a ring that fills the rest of the block's shared memory
 * (about 200 KB): one thread, the producer, requests linears in order as long
 * as they fit, and gives a linear's bytes back as soon as its dot products are
 * done. So the
 * copy engine streams several phases ahead, while the phases' chain of
 * latencies runs behind it on loads that no longer queue.
 */

/** @brief Linears a block's ring may hold at once (requested, landing or being read): one mbarrier each. */
#define RING_LINEARS 8
/**
 * @brief The thread that requests and gives back. Not thread 0, which arrives
 *        at and polls the grid barrier. It requests as a linear phase's rows
 *        are ready, not at the barrier: requested right after the arrival,
 *        each phase's burst of copies (4.7 MB for fc from all blocks at once,
 *        1.6 µs of DRAM) met the barrier's polls in L2, and the barriers after
 *        QKV, fc and fc-proj took 1.5–2.1 µs instead of 0.6–1.0 (the H100,
 *        v8 at batch 1: 326 µs a step against 298).
 */
#define RING_PRODUCER 32
/**
 * @brief v14/v15's producer: lane 0 of the last warp. Its requests take a
 *        while (a proxy fence, an mbarrier, one or two bulk copies), and the
 *        block waits for its slowest warp at the __syncthreads after the dot
 *        products. At 1 or 2 rows warp 1 has as many units as any (3 of
 *        QKV's 17–18), warp 7 the fewest (2; none of proj's and fc-proj's
 *        6), so there the requests overlap the other warps' dot products.
 */
#define RING_PRODUCER_LAST_WARP (STEP_THREADS - 32)
/**
 * @brief v17 (fp32): whether this block's producer also requests as
 *        attention starts. In fp32 the ring holds less than a layer (215 KB
 *        of weights a block), so the next linear fits only once QKV's bytes
 *        are back, and all 132 blocks then requested it at proj's rows: 9.4
 *        MB at once, 3.2 µs of DRAM, and the barrier after proj waited
 *        2.6-2.8 µs for it (fp16: 0.6). At attention's start most blocks
 *        have no (sequence, head) pair and nothing to do. All of those
 *        requesting there moved the burst onto the pairs' K and V (H100: the
 *        step 343 µs against 347); half of them (every other block) split it
 *        in two, attention 4.5 → 5.1 µs and the barrier after proj 2.8 → 1.4
 *        (the step 334-336 µs against 344-348). A third or two thirds of them
 *        measured no better. In fp16 the ring holds two layers, and the same
 *        requests lost.
 */
template <typename T>
static __device__ __forceinline__ bool fp32_requests_at_attention(const decode_step_args &a, int attention_blocks)
{
    return sizeof(T) == 4 && (int)blockIdx.x >= attention_blocks && blockIdx.x % 2 == 0;
}

static_assert(sizeof(decode_layer_weights) % 16 == 0, "the rows after the layer table are read 16 bytes at a time");

/** @brief WeightRing::request's default end: past every linear of the step (and the LM head's pieces). */
#define RING_ALL_LINEARS (1 << 30)

/** @brief v20: the linears asked for as the step starts (the first QKV's). */
#define PACED_FIRST_LINEARS 1
/** @brief v20: the most linears, the current one included, asked for at a linear's rows: one block of the model
 *         (QKV, proj, fc and fc-proj). */
#define PACED_AHEAD_LINEARS 4

/**
 * @brief v20 (fp16): where the producer's requests stop at linear j's rows,
 *        a phase of kind `kind`. v18 asks for whatever fits, and as the step
 *        starts that is 8 linears, nearly two blocks of the model: 26 MB
 *        from all blocks at once, 9 µs of DRAM, and the first phase's own
 *        loads (the embedding's row, LayerNorm's parameters) queue behind
 *        it, so that its rows took 13 µs where the later QKVs' take 1.1
 *        (H100, batch 1). v20 asks for the first QKV alone as the step
 *        starts (PACED_FIRST_LINEARS), then at a linear's rows for at most
 *        PACED_AHEAD_LINEARS linears, itself included. At proj's rows, where
 *        the copies would land during proj's short phase and the barrier
 *        after it, it asks for nothing past proj: fc's rows ask instead. The
 *        end is never below j + 1, so linear j is always asked for before
 *        the block waits for it (ring.wait(j)).
 */
static __device__ __forceinline__ int paced_request_end(int j, int kind)
{
    return kind == PHASE_PROJ ? j + 1 : j + PACED_AHEAD_LINEARS;
}

/** @brief One of the step's linears as a block's ring sees it: where its share starts, how long it is. */
struct RingPlan {
    const uint4 *src; /**< the block's share of the linear: a contiguous run of 16-byte chunks */
    unsigned n;       /**< its chunks */
};

static_assert(sizeof(RingPlan) == 16, "step_ring_offset counts 16 bytes a linear");

/**
 * @brief A block's ring of weights in shared memory. Linear j (the step's
 *        linears in order, four per block of the model) starts at chunk
 *        start[j % RING_LINEARS] and may wrap past the end; its bytes have
 *        landed when mbarrier j % RING_LINEARS completes its phase
 *        j / RING_LINEARS. head, tail, next and freed are kept by the
 *        producer (RING_PRODUCER, or v14/v15's RING_PRODUCER_LAST_WARP): it
 *        alone requests and gives back.
 */
struct WeightRing {
    uint4 *buf;              /**< the ring: `chunks` 16-byte chunks of shared memory */
    unsigned chunks;         /**< its capacity */
    uint64_t *bars;          /**< [RING_LINEARS] mbarriers, one per linear in the ring */
    unsigned *start;         /**< [RING_LINEARS] the chunk where each linear begins */
    const RingPlan *plan;    /**< [linears] the block's share of each linear, worked out once as the step begins */
    int linears;             /**< the step's linears (4 per block of the model; the LM head is not one of them) */
    unsigned long long head; /**< chunks requested since the step began */
    unsigned long long tail; /**< chunks given back */
    int next;                /**< the next linear to request */
    int freed;               /**< linears given back */
    bool evict_first;        /**< v12-v17: the copies mark the weights evict-first in L2 (see the kernel) */
    int producer;            /**< the thread that requests and gives back: RING_PRODUCER, or v14/v15's
                                  RING_PRODUCER_LAST_WARP */

    /** @brief Whether this thread is the producer. */
    __device__ __forceinline__ bool is_producer() const { return (int)threadIdx.x == producer; }

    /** @brief The producer, once: make the mbarriers (one arrival each: the producer's, with the bytes it expects). */
    __device__ void init()
    {
#if __CUDA_ARCH__ >= 900
        for (int b = 0; b < RING_LINEARS; ++b) mbar_init(bars + b, 1);
        mbar_fence_init();
#endif
    }
    /** @brief The producer: request the next linears, in order, while they fit (and an mbarrier is free), up to
     *         linear `end` − 1 (v20's pacing; by default all of them). */
    __device__ void request(int end = RING_ALL_LINEARS)
    {
#if __CUDA_ARCH__ >= 900
        fence_shared_for_tma(); /* the reads of what was given back, before the copies overwrite it */
        const uint64_t policy = evict_first ? l2_policy_evict_first() : 0;
        for (; next < linears && next < end && next - freed < RING_LINEARS; ++next) {
            const unsigned n = plan[next].n, at = (unsigned)(head % chunks), first = n < chunks - at ? n : chunks - at;
            if (head + n - tail > chunks) return; /* not yet: a linear's bytes come back first */
            uint64_t *bar = bars + next % RING_LINEARS;
            start[next % RING_LINEARS] = at;
            mbar_arrive_expect_bytes(bar, n * 16);
            if (first) copy(buf + at, plan[next].src, first * 16, bar, policy);
            if (n > first) copy(buf, plan[next].src + first, (n - first) * 16, bar, policy); /* the part past the end */
            head += n;
        }
#else
        __trap(); /* the launcher takes the ring only on sm_90 */
#endif
    }
#if __CUDA_ARCH__ >= 900
    /** @brief One bulk copy into the ring: plain (v7-v11), or with v12-v17's evict-first policy. */
    __device__ __forceinline__ void copy(uint4 *dst, const uint4 *src, unsigned bytes, uint64_t *bar, uint64_t policy)
    {
        if (evict_first) bulk_load_with_policy(dst, src, bytes, bar, policy);
        else bulk_load(dst, src, bytes, bar);
    }
#endif
    /** @brief Every thread: wait until linear j's bytes have landed. */
    __device__ __forceinline__ void wait(int j) const
    {
#if __CUDA_ARCH__ >= 900
        mbar_wait(bars + j % RING_LINEARS, (j / RING_LINEARS) & 1);
#endif
    }
    /** @brief The producer, after a __syncthreads that follows every read of it: give back the oldest linear. */
    __device__ __forceinline__ void give_back() { tail += plan[freed++].n; }
    /** @brief Chunk q of the ring counted from `from` (q < 2·chunks: at most one wrap). */
    __device__ __forceinline__ uint4 at(unsigned from, unsigned q) const
    {
        unsigned i = from + q;
        return buf[i >= chunks ? i - chunks : i];
    }
};

/**
 * @brief v7/v8's dot products of a linear phase: v5's units and slices, with
 *        each weight chunk read from the ring (shared memory) instead of from
 *        a register slot. The warps' finished dot products go to `partial`
 *        for finish_phase, as in run_phase.
 */
template <typename T, int ROWS>
static __device__ __forceinline__ void run_phase_ring(const LinearShare &p, const WeightRing &ring, int j,
                                                      const T *rows, int K, float *partial)
{
    const int lane = threadIdx.x % 32;
    const unsigned from = ring.start[j % RING_LINEARS];
    for (int u = threadIdx.x / 32; u < p.units; u += STEP_WARPS) {
        const int o = u >> p.log2S, s = u & (p.S - 1);
        const unsigned first = (unsigned)(o * p.chunks);
        float acc[ROWS];
#pragma unroll
        for (int m = 0; m < ROWS; ++m) acc[m] = 0.0f;
#pragma unroll 4
        for (int c = s * 32 + lane; c < p.chunks; c += 32 << p.log2S)
            multiply_chunk<T, ROWS>(ring.at(from, first + c), rows, K, c, acc);
        const float mine = reduce_rows_to_lanes<ROWS>(acc);
        if (lane < ROWS) partial[u * ROWS + lane] = mine;
    }
}

/** @brief v26: a lane's 16-byte chunks of one output at K = 768 in fp16 (96 chunks over 32 lanes). */
#define LOADS_FIRST_LANE_CHUNKS 3

/**
 * @brief v26: run_phase_ring at 1 row for the phases whose outputs each take
 *        LOADS_FIRST_LANE_CHUNKS chunks a lane (QKV's and fc's, K = 768),
 *        with two changes. run_phase_ring's loop over a unit's chunks has a
 *        run-time trip count, so the compiler keeps each round apart: it
 *        loads a chunk of weights and a chunk of the row, waits for both,
 *        converts 16 halves and multiplies, then goes round again; and it
 *        converts the row's chunks again for every unit, though they are the
 *        same for all of them. Here the lane's row chunks are converted once,
 *        before the warp's first unit, into 24 floats that stay in
 *        registers; and a unit's three weight chunks are loaded before any
 *        of them is used (a loop the compiler unrolls, its count known), so
 *        their shared-memory latencies overlap. Alone, from shared memory,
 *        warp 0's three units of QKV took 1 305 cycles against 2 198 (the
 *        H100; the page has the micro-benchmark). The conversion, and the
 *        statistics' warp's sums (v24: from the same registers, without
 *        reading the row again), come before the wait for the weights.
 */
template <typename T>
static __device__ __forceinline__ void run_phase_ring_loads_first(const LinearShare &p, const WeightRing &ring, int j,
                                                                  const T *rows, float *partial, float2 *ln_stats)
{
    constexpr int VEC = Vec16<T>::N, LC = LOADS_FIRST_LANE_CHUNKS;
    const int lane = threadIdx.x % 32;
    float x[LC][VEC]; /* the lane's chunks c = lane + 32·i of the row, converted once */
#pragma unroll
    for (int i = 0; i < LC; ++i) unpack16(reinterpret_cast<const uint4 *>(rows)[lane + 32 * i], x[i], T());
    if (ln_stats && threadIdx.x / 32 == STATS_WARP) { /* v24's statistics from the same registers: warp_row_sums's
                                                      * sums in its order, without reading the row again */
        RowSums r = {__shfl_sync(0xffffffffu, x[0][0], 0), 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < LC; ++i) r.add(x[i]);
        r.warp_reduce();
        if (lane == 0) ln_stats[0] = r.mean_rstd(32 * LC * VEC);
    }
    ring.wait(j); /* the row's conversion and the statistics above ran while the weights were landing */
    const unsigned from = ring.start[j % RING_LINEARS]; /* set by the producer's request: read after the wait */
    for (int u = threadIdx.x / 32; u < p.units; u += STEP_WARPS) {
        const unsigned first = (unsigned)(u * p.chunks) + lane;
        uint4 w16[LC]; /* every load of the unit issued before the first multiply */
#pragma unroll
        for (int i = 0; i < LC; ++i) w16[i] = ring.at(from, first + 32 * i);
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < LC; ++i) {
            float w[VEC];
            unpack16(w16[i], w, T());
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc = fmaf(w[v], x[i][v], acc);
        }
        acc = warp_allreduce<SumOp>(acc);
        if (lane == 0) partial[u] = acc;
    }
}

/* ------------------------------------------------------------------------ */
/* v9: the dot products on tensor cores                                      */
/* ------------------------------------------------------------------------ */
/*
 * At batch 8, v8's step is bound by instructions, not bytes (Nsight Compute
 * on the H100: 154.6 M warp instructions a step, 0.29 issued per cycle per
 * scheduler). run_phase_ring multiplies a 16-byte chunk of 8 fp16 weights
 * by 8 rows with 8 shared loads of the rows, their fp16→fp32 conversions and
 * 64 FFMA. One mma.sync.m16n8k16 does 16 × 8 × 16 multiply-adds.
 *
 * The tile. A (16 × 16) is the staged rows, the sequences as its rows 0–7;
 * rows 8–15 would be zero and are not computed (mma_16x8x16_top, as stage
 * 09's v7 does for its query heads). B (16 × 8, "col": each column's k
 * contiguous) is 8 outputs' weights, which is how W ([N][K]) lies in the
 * ring: no transposition. The result is 8 rows × 8 outputs. A block's share
 * of a linear (6 to 24 outputs at C = 768) is 1 to 3 such tiles, and the 8
 * warps split K between them: warp w takes the 64-wide segments w, w + 8, …
 * and leaves its part of every (output, row) in shared memory for
 * finish_phase, which adds the 8 parts as it adds slices.
 *
 * The banks. Lane (g, t) of a fragment reads row g: sequence g of the rows,
 * output g of the tile. Both are rows of 1.5 or 6 KB, a multiple of 128
 * bytes, so the same k of the 8 rows lies on the same 4 banks. Each lane
 * reads 16 contiguous bytes, k 8t … 8t + 7 of one 32-wide half of the
 * segment (4 lanes: 64 bytes of a row), and the odd rows read the second
 * half first: each 16-byte load then covers all 32 banks, 4 rows on each,
 * the least that 512 bytes can take. The order of k inside a dot product is
 * free as long as both operands use the same one, so lane t's 16 bytes are
 * mma's k {2t, 2t + 1} and {2t + 8, 2t + 9} of two consecutive mma.
 */

/** @brief Output tiles (8 outputs each, mma's n) a warp accumulates at once: 32 outputs, 16 registers per lane (two
 *         per output and half). */
#define MMA_TILES 4
/** @brief 16-byte chunks in one 64-wide segment of K (fp16): two halves of 4 lanes × 16 bytes. */
#define MMA_SEGMENT_CHUNKS 8

/** @brief The segment's two halves for this lane, read in the order that spreads the 8 rows over the banks (odd rows:
 *         the second half first), handed back in k order. chunk(half) loads this lane's 16 bytes of that half. */
template <typename Chunk>
static __device__ __forceinline__ void load_halves(uint4 (&half)[2], bool odd, Chunk chunk)
{
    uint4 first = chunk(odd ? 1 : 0), second = chunk(odd ? 0 : 1);
    half[0] = odd ? second : first;
    half[1] = odd ? first : second;
}

/** @brief The rows' fragment (A) of segment `seg` for this lane: sequence g's halves (zero past the ROWS staged rows),
 *         read as load_halves spreads them. */
template <int ROWS>
static __device__ __forceinline__ void load_rows_segment(uint4 (&x)[2], const __half *rows, int K, int seg)
{
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const __half *chunk = rows + (long long)g * K + (seg * MMA_SEGMENT_CHUNKS + t) * 8; /* the first half's chunk */
    load_halves(x, g & 1, [&](int h) {
        return g < ROWS ? *reinterpret_cast<const uint4 *>(chunk + h * 32) : make_uint4(0, 0, 0, 0);
    });
}

/** @brief The four mma of one segment: the rows' halves x (A) against the outputs' halves w (B), half h added to
 *         acc[h] (row g, outputs 2t and 2t + 1): two chains of dependent mma, not one, for the latency. Lane t's 16
 *         bytes of a half are k {2t, 2t + 1, 2t + 8, 2t + 9} of two mma. */
static __device__ __forceinline__ void mma_segment(float (&acc)[2][2], const uint4 (&x)[2], const uint4 (&w)[2])
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        mma_16x8x16_top(acc[h], x[h].x, x[h].y, w[h].x, w[h].y);
        mma_16x8x16_top(acc[h], x[h].z, x[h].w, w[h].z, w[h].w);
    }
}

/**
 * @brief v9's dot products of a linear phase (fp16): the block's outputs in
 *        tiles of 8, K split over the warps in 64-wide segments, each warp's
 *        part of every (output, row) to `partial` as slice `warp` (the share
 *        says S = STEP_WARPS), for finish_phase.
 */
template <int ROWS>
static __device__ __forceinline__ void run_phase_ring_mma(const LinearShare &p, const WeightRing &ring, int j,
                                                          const __half *rows, int K, float *partial)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const bool odd = g & 1;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const unsigned from = ring.start[j % RING_LINEARS];
    const int segments = p.chunks / MMA_SEGMENT_CHUNKS; /* K is C or 4C, and C = 64·H: whole segments */
    for (int tile0 = 0; tile0 * 8 < p.outs; tile0 += MMA_TILES) {
        float acc[MMA_TILES][2][2] = {}; /* [tile][half][output 2t + e] */
#pragma unroll 2
        for (int seg = warp; seg < segments; seg += STEP_WARPS) {
            const int c = seg * MMA_SEGMENT_CHUNKS + t; /* this lane's chunk of the first half; the second is c + 4 */
            uint4 x[2];
            load_rows_segment<ROWS>(x, rows, K, seg);
#pragma unroll
            for (int i = 0; i < MMA_TILES; ++i) {
                const int o = (tile0 + i) * 8 + g; /* the tile's output g */
                if ((tile0 + i) * 8 >= p.outs) break;
                uint4 w[2];
                load_halves(w, odd, [&](int h) {
                    return o < p.outs ? ring.at(from, (unsigned)(o * p.chunks + c + 4 * h)) : zero;
                });
                mma_segment(acc[i], x, w);
            }
        }
#pragma unroll
        for (int i = 0; i < MMA_TILES; ++i) /* lane (g, t) holds row g's outputs 2t and 2t + 1 of each tile */
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int o = (tile0 + i) * 8 + 2 * t + e;
                if (g < ROWS && o < p.outs) partial[(o * STEP_WARPS + warp) * ROWS + g] = acc[i][0][e] + acc[i][1][e];
            }
    }
}

/**
 * @brief v9's LM head (fp16): its weights stream from global memory, as v5's
 *        do, but straight into fragments. Each warp takes the block's tiles
 *        of 8 outputs in turn (warp, warp + 8, …) and runs each tile's whole
 *        K, so no partial sums leave the warp. Its work is a list of (tile,
 *        segment) units, and the slots hold the next STEP_SLOTS / 2 units'
 *        weights: two 16-byte loads each, lane (g, t) reading output g's
 *        chunks t and t + 4 of the segment. The first are issued before the
 *        barrier (head_mma_fetch), and each is refilled as it is used.
 *
 *        A HeadCursor walks the units: one add per unit, and a jump at a
 *        tile's end. Computing (tile, segment) from a unit number instead,
 *        with a division, cost about 150 instructions a unit, and the head
 *        took 54 µs at batch 1 (the H100) against v8's 33.
 */
struct HeadCursor {
    const uint4 *src; /**< this lane's first chunk of the unit: output tile·8 + g, chunk segment·8 + t */
    int tile;         /**< the unit's tile */
    int seg;          /**< its segment */
    /** @brief The warp's first unit: tile `warp`, segment 0. */
    __device__ __forceinline__ void start(const LinearShare &p)
    {
        const int lane = threadIdx.x % 32;
        tile = threadIdx.x / 32, seg = 0;
        src = p.w + (long long)(tile * 8 + lane / 4) * p.chunks + lane % 4;
    }
    /** @brief The next unit: the next segment, or the warp's next tile (8 tiles on, 64 outputs). */
    __device__ __forceinline__ void advance(const LinearShare &p)
    {
        src += MMA_SEGMENT_CHUNKS;
        if (++seg * MMA_SEGMENT_CHUNKS == p.chunks) seg = 0, tile += STEP_WARPS, src += (8 * STEP_WARPS - 1) * (long long)p.chunks;
    }
    /** @brief This lane's two loads of the unit (zeros past the share's outputs: no memory access). */
    __device__ __forceinline__ void fetch(const LinearShare &p, uint4 &w0, uint4 &w1) const
    {
        w0 = w1 = make_uint4(0, 0, 0, 0);
        if (tile * 8 + (int)(threadIdx.x % 32) / 4 < p.outs) w0 = __ldg(src), w1 = __ldg(src + 4);
    }
};

/** @brief Before the LM head's barrier: the first STEP_SLOTS / 2 units' weights into the slots; `ahead` then points
 *         past them. */
static __device__ __forceinline__ void head_mma_fetch(const LinearShare &p, uint4 (&slot)[STEP_SLOTS], HeadCursor &ahead)
{
    ahead.start(p);
#pragma unroll
    for (int r = 0; r < STEP_SLOTS / 2; ++r) {
        ahead.fetch(p, slot[2 * r], slot[2 * r + 1]);
        ahead.advance(p);
    }
}

/** @brief v9's LM head after its barrier: each unit's four mma, then its slots refilled STEP_SLOTS / 2 units on; at a
 *         tile's last segment, row g's logits of outputs 2t and 2t + 1 written and its best key kept (as run_phase). */
template <int ROWS>
static __device__ __forceinline__ void run_head_mma(const LinearShare &p, uint4 (&slot)[STEP_SLOTS], HeadCursor &ahead,
                                                    const __half *rows, int K, unsigned long long &best,
                                                    const decode_step_args &a)
{
    const int tiles = (p.outs + 7) / 8;
    HeadCursor use;
    use.start(p);
    float acc[2][2] = {}; /* [half][output 2t + e] */
    while (use.tile < tiles) {
#pragma unroll
        for (int r = 0; r < STEP_SLOTS / 2; ++r) {
            if (use.tile >= tiles) break;
            uint4 x[2];
            load_rows_segment<ROWS>(x, rows, K, use.seg);
            const uint4 w[2] = {slot[2 * r], slot[2 * r + 1]};
            mma_segment(acc, x, w);
            ahead.fetch(p, slot[2 * r], slot[2 * r + 1]); /* the slots are free: the unit STEP_SLOTS / 2 on */
            ahead.advance(p);
            if ((use.seg + 1) * MMA_SEGMENT_CHUNKS == p.chunks) { /* the tile is done: row g's outputs 2t, 2t + 1 */
                keep_tile_logits(acc, use.tile * 8, p.outs, p.n0, best, a);
                acc[0][0] = acc[0][1] = acc[1][0] = acc[1][1] = 0.0f;
            }
            use.advance(p);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* v10: the LM head through the ring, and a LayerNorm's rows in one pass     */
/* ------------------------------------------------------------------------ */
/*
 * v9's trace at batch 8 has two links left that are not the chain of small
 * phases itself.
 *
 * The LM head is an eighth of the step (50.7 µs of 392): 77 MB of wte that
 * v9 streams through registers, from the moment its barrier opens, at 1.7
 * TB/s. The layers' weights stream through the ring, phases ahead, and
 * leave DRAM idle most of the time (v8: 0.86 TB/s on average). So v10 cuts
 * each block's share of the head (about 380 outputs, 585 KB) into pieces of
 * 32 outputs and puts them in the ring's plan after the last layer's
 * linears: the producer requests them as soon as the last layers give back
 * their bytes, and the first pieces have landed before the head begins.
 * The head then reads its weights from shared memory, as the linears do,
 * in rounds of two pieces (8 tiles: one per warp); after each round the
 * block meets at a __syncthreads and the producer gives the two pieces back
 * and requests the next.
 *
 * The rows of a LayerNorm phase (QKV, fc, the head) took v9 three passes
 * over shared memory, each ended by a __syncthreads: staging the rows,
 * their statistics, normalising them (3.96 µs at batch 8 for QKV, against
 * 1.42 for its dot products). In v10, warp m loads row m from L2 into
 * registers (3 chunks of 16 bytes per lane at C = 768), reduces its two
 * sums with one butterfly, normalises in registers with the gain and shift
 * it requested before the barrier, and writes the row once.
 */

/** @brief v10: outputs of the LM head per piece in the ring, for `elem`-byte weights: 32 in fp16, 4 tiles of 8
 *         (48 KB at C = 768), so that at 8 rows the ring holds three or four of them beside the rows; 16 in fp32
 *         (v11), the same 48 KB. */
static __host__ __device__ __forceinline__ constexpr int head_piece_outputs(size_t elem)
{
    return (int)(64 / elem);
}
/** @brief Pieces the warps read between two __syncthreads: 2 × 4 tiles, one tile per warp with tensor cores. */
#define HEAD_ROUND_PIECES 2

/** @brief The pieces of a block's share of the LM head of `outs` outputs of `elem` bytes each. */
static __host__ __device__ __forceinline__ int head_pieces(int outs, size_t elem)
{
    return (outs + head_piece_outputs(elem) - 1) / head_piece_outputs(elem);
}

/** @brief Most pieces of one block's share of the LM head (V outputs over `blocks`): the plan's extra entries. */
static __host__ __device__ __forceinline__ int head_ring_pieces(int V, int blocks, size_t elem)
{
    return head_pieces((V + blocks - 1) / blocks, elem);
}

/** @brief The ring's plan: 4L linears, and v10's pieces of the LM head (the kernel and its launcher agree on it). */
static __host__ __device__ __forceinline__ int ring_plan_entries(int L, int V, int blocks, size_t elem, bool head_ring)
{
    return 4 * L + (head_ring ? head_ring_pieces(V, blocks, elem) : 0);
}

/** @brief Before the barrier of a LayerNorm phase: this lane's gain and shift of each 16-byte chunk of a row it
 *         normalises (k = (lane + 32·i)·VEC + v; ln_w and ln_b are whole cudaMalloc'd arrays: 16-byte aligned). */
template <typename T>
static __device__ __forceinline__ void prefetch_ln_chunks(Prefetched &pre, const float *ln_w, const float *ln_b,
                                                          int K)
{
    constexpr int VEC = Vec16<T>::N;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < ROWS_ONE_PASS_PER_LANE / VEC; ++i) {
        const int k = (lane + 32 * i) * VEC;
#pragma unroll
        for (int v = 0; v < VEC; v += 4) {
            const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            const float4 g = k < K ? __ldg(reinterpret_cast<const float4 *>(ln_w + k + v)) : zero;
            const float4 b = k < K ? __ldg(reinterpret_cast<const float4 *>(ln_b + k + v)) : zero;
            float *gain = pre.chunk_gain + i * VEC + v, *shift = pre.chunk_shift + i * VEC + v;
            gain[0] = g.x, gain[1] = g.y, gain[2] = g.z, gain[3] = g.w;
            shift[0] = b.x, shift[1] = b.y, shift[2] = b.z, shift[3] = b.w;
        }
    }
}

/**
 * @brief v10: a LayerNorm phase's input rows (K <= ROWS_ONE_PASS_MAX_K) in
 *        one pass: warp m loads row m of `src` (written by the phase before:
 *        through L2) into registers, reduces its two sums with one
 *        butterfly, normalises in registers and writes the row to shared
 *        memory, rounded to T as layernorm_step_rows rounds it. Rows M ..
 *        ROWS − 1 are zero. One __syncthreads, at the end. With src NULL
 *        (the first QKV) row m is the embedding of sequence m, wte's row of
 *        its token plus wpe's of its position, summed in registers (block 0
 *        writes the sum to x, the residual stream): one pass there too,
 *        where v9 stages it element by element and normalises in three.
 */
template <typename T, int ROWS, bool FROM_SHARED = false>
static __device__ void stage_layernorm_rows(const T *src, T *rows, int M, int K, const Prefetched &pre,
                                            const decode_step_args &a)
{
    constexpr int VEC = Vec16<T>::N, CHUNKS = ROWS_ONE_PASS_PER_LANE / VEC; /* a lane's chunks of a row */
    const int lane = threadIdx.x % 32;
    for (int m = threadIdx.x / 32; m < ROWS; m += STEP_WARPS) {
        /* the first QKV's rows (src NULL): the embedding, wte's row of the token plus wpe's of the position, summed
         * here and rounded to T as the residual stream holds it (block 0 writes it there, to x) */
        const uint4 *in, *position = NULL;
        uint4 *x = NULL;
        if (src) {
            in = reinterpret_cast<const uint4 *>(src + (long long)m * K);
        } else {
            const int token = m < M ? step_token(a, m) : 0, pos = m < M ? __ldg(a.positions + m) : 0;
            in = reinterpret_cast<const uint4 *>((const T *)a.wte + (long long)token * K);
            position = reinterpret_cast<const uint4 *>((const T *)a.wpe + (long long)pos * K);
            if (blockIdx.x == 0) x = reinterpret_cast<uint4 *>((T *)a.x + (long long)m * K);
        }
        uint4 *out = reinterpret_cast<uint4 *>(rows + (long long)m * K);
        float v[CHUNKS][VEC];
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) { /* every load first: one trip to L2 */
            const int c = lane + 32 * i;
            const bool live = m < M && c * VEC < K;
            unpack16(live ? (FROM_SHARED ? in[c] : load_fresh(in + c)) : make_uint4(0, 0, 0, 0), v[i], T());
            if (position && live) { /* the embedding: plus wpe, rounded to T */
                float p[VEC];
                unpack16(__ldg(position + c), p, T());
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[i][e] += p[e];
                const uint4 sum = pack16(v[i], T());
                unpack16(sum, v[i], T());
                if (x) x[c] = sum;
            }
        }
        if (m >= M) { /* a row of the tile with no sequence: zeros */
            for (int c = lane; c * VEC < K; c += 32) out[c] = make_uint4(0, 0, 0, 0);
            continue;
        }
        /* the statistics from d = x − x₀, as layernorm_step_rows (x₀ the row's first value: lane 0's) */
        const float x0 = __shfl_sync(0xffffffffu, v[0][0], 0);
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i)
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float d = (lane + 32 * i) * VEC < K ? v[i][e] - x0 : 0.0f;
                s1 += d, s2 = fmaf(d, d, s2);
            }
        s1 = warp_allreduce<SumOp>(s1), s2 = warp_allreduce<SumOp>(s2);
        const float mean_d = s1 / K, mean = x0 + mean_d;
        const float rstd = rsqrtf(fmaxf(s2 / K - mean_d * mean_d, 0.0f) + GPT2_LN_EPS);
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            const int c = lane + 32 * i;
            if (c * VEC >= K) break;
            float y[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                y[e] = (v[i][e] - mean) * rstd * pre.chunk_gain[i * VEC + e] + pre.chunk_shift[i * VEC + e];
            out[c] = pack16(y, T());
        }
    }
    __syncthreads();
}

/** @brief An LM head tile (8 outputs from `tile` of a piece of `outs`) on tensor cores, over K's 64-wide segments
 *         seg0 … seg1 − 1, added to acc, with the weights from the ring (as run_head_mma, from registers). */
template <int ROWS>
static __device__ __forceinline__ void head_tile_mma(float (&acc)[2][2], const LinearShare &p, const WeightRing &ring,
                                                     unsigned from, int outs, int tile, int seg0, int seg1,
                                                     const __half *rows, int K)
{
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const bool odd = g & 1;
    const int o = tile + g; /* this lane's output of the tile (B's column g) */
#pragma unroll 4
    for (int seg = seg0; seg < seg1; ++seg) {
        uint4 x[2], wt[2];
        load_rows_segment<ROWS>(x, rows, K, seg);
        load_halves(wt, odd, [&](int h) {
            return o < outs ? ring.at(from, (unsigned)(o * p.chunks + seg * MMA_SEGMENT_CHUNKS + t + 4 * h))
                            : make_uint4(0, 0, 0, 0);
        });
        mma_segment(acc, x, wt);
    }
}

/** @brief v10's LM head, one piece with tensor cores: warp w (of 4 on the piece) runs tile w (8 outputs) over the
 *         whole K, as run_head_mma does, with the weights from the ring. */
template <int ROWS>
static __device__ __forceinline__ void head_piece_mma(const LinearShare &p, const WeightRing &ring, unsigned from,
                                                      int o0, int outs, int w, const __half *rows, int K,
                                                      unsigned long long &best, const decode_step_args &a)
{
    const int tile = 8 * w;
    if (tile >= outs) return;
    float acc[2][2] = {}; /* [half][output 2t + e] */
    head_tile_mma<ROWS>(acc, p, ring, from, outs, tile, 0, p.chunks / MMA_SEGMENT_CHUNKS, rows, K);
    keep_tile_logits(acc, tile, outs, p.n0 + o0, best, a);
}

/** @brief The same on FFMA (1 or 2 rows): warp w (of `warps` on the piece: 4 in v10-v15, 8 in v16/v17) takes
 *         outputs w, w + warps, …, each a whole K per warp, as run_phase_ring's units; lane m keeps row m's logit. */
template <typename T, int ROWS>
static __device__ __forceinline__ void head_piece_ffma(const LinearShare &p, const WeightRing &ring, unsigned from,
                                                       int o0, int outs, int w, int warps, const T *rows, int K,
                                                       unsigned long long &best, const decode_step_args &a)
{
    const int lane = threadIdx.x % 32;
    for (int o = w; o < outs; o += warps) {
        float acc[ROWS];
#pragma unroll
        for (int m = 0; m < ROWS; ++m) acc[m] = 0.0f;
#pragma unroll 4
        for (int c = lane; c < p.chunks; c += 32)
            multiply_chunk<T, ROWS>(ring.at(from, (unsigned)(o * p.chunks + c)), rows, K, c, acc);
        const float mine = reduce_rows_to_lanes<ROWS>(acc);
        if (lane < a.M) keep_logit<T>(mine, lane, p.n0 + o0 + o, best, a);
    }
}

/**
 * @brief v10's LM head after its barrier: the block's pieces (ring linears
 *        first, first + 1, …) in rounds of HEAD_ROUND_PIECES, warps 0-3 on
 *        the first piece of a round and 4-7 on the second; after each round
 *        the producer gives the round's pieces back and requests more.
 */
template <typename T, int ROWS, bool MMA>
static __device__ void run_head_ring(const LinearShare &p, WeightRing &ring, int first, const T *rows, int K,
                                     unsigned long long &best, const decode_step_args &a)
{
    constexpr int WARPS_PER_PIECE = STEP_WARPS / HEAD_ROUND_PIECES;
    constexpr int PIECE_OUTPUTS = head_piece_outputs(sizeof(T));
    const int pieces = head_pieces(p.outs, sizeof(T)), warp = threadIdx.x / 32;
    for (int q0 = 0; q0 < pieces; q0 += HEAD_ROUND_PIECES) {
        const int q = q0 + warp / WARPS_PER_PIECE, o0 = q * PIECE_OUTPUTS;
        if (q < pieces) {
            ring.wait(first + q);
            const unsigned from = ring.start[(first + q) % RING_LINEARS];
            const int outs = min(PIECE_OUTPUTS, p.outs - o0), w = warp % WARPS_PER_PIECE;
            if constexpr (MMA)
                head_piece_mma<ROWS>(p, ring, from, o0, outs, w, rows, K, best, a);
            else
                head_piece_ffma<T, ROWS>(p, ring, from, o0, outs, w, WARPS_PER_PIECE, rows, K, best, a);
        }
        __syncthreads(); /* every warp has read the round's pieces */
        if (ring.is_producer()) {
            for (int r = q0; r < q0 + HEAD_ROUND_PIECES && r < pieces; ++r) ring.give_back();
            ring.request();
        }
    }
}

/**
 * @brief v16/v17's LM head: the pieces one at a time, every warp on each.
 *
 *        In rounds of two pieces, the ring holds the round being read and
 *        what is left of it: at 8 rows in fp16 the rows of 4C take 48 KB of
 *        shared memory, the ring keeps three 48 KB pieces, and while a round
 *        is read only one more is on its way from DRAM. Read one piece at a
 *        time, the other two are in flight, and the block gives each piece
 *        back as soon as it is read. On tensor cores the piece's 4 tiles go
 *        to 8 warps by splitting K: warp w runs tile w % 4 over the first or
 *        second half of K's segments, warps 4-7 leave their sums in shared
 *        memory (two buffers, so that the next piece's cannot overwrite what
 *        warps 0-3 have not read), and warps 0-3 add them and keep the
 *        logits. On FFMA (1 or 2 rows) the 8 warps take the piece's outputs
 *        in turn.
 */
template <typename T, int ROWS, bool MMA>
static __device__ void run_head_ring_one_piece(const LinearShare &p, WeightRing &ring, int first, const T *rows,
                                               int K, unsigned long long &best, const decode_step_args &a)
{
    constexpr int PIECE_OUTPUTS = head_piece_outputs(sizeof(T));
    const int pieces = head_pieces(p.outs, sizeof(T)), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int q = 0; q < pieces; ++q) {
        ring.wait(first + q);
        const unsigned from = ring.start[(first + q) % RING_LINEARS];
        const int o0 = q * PIECE_OUTPUTS, outs = min(PIECE_OUTPUTS, p.outs - o0);
        if constexpr (MMA) {
            __shared__ float second_half[2][4][32][4]; /* [piece % 2][tile][lane][acc] */
            const int tile = 8 * (warp % 4), half = warp / 4, segments = p.chunks / MMA_SEGMENT_CHUNKS;
            float acc[2][2] = {};
            if (tile < outs)
                head_tile_mma<ROWS>(acc, p, ring, from, outs, tile, half * segments / 2, (half + 1) * segments / 2,
                                    reinterpret_cast<const __half *>(rows), K);
            float *sums = second_half[q % 2][warp % 4][lane];
            if (half) sums[0] = acc[0][0], sums[1] = acc[0][1], sums[2] = acc[1][0], sums[3] = acc[1][1];
            __syncthreads(); /* every warp has read the piece, and warps 4-7 have left their sums */
            if (!half && tile < outs) {
                acc[0][0] += sums[0], acc[0][1] += sums[1], acc[1][0] += sums[2], acc[1][1] += sums[3];
                keep_tile_logits(acc, tile, outs, p.n0 + o0, best, a);
            }
        } else {
            head_piece_ffma<T, ROWS>(p, ring, from, o0, outs, warp, STEP_WARPS, rows, K, best, a);
            __syncthreads(); /* every warp has read the piece */
        }
        if (ring.is_producer()) { /* lane 0 of warp 7 (v16/v17's producer), which keeps no logits */
            ring.give_back();
            ring.request();
        }
    }
}

/* ------------------------------------------------------------------------ */
/* v21: attention and proj in one phase, at 1 row                           */
/* ------------------------------------------------------------------------ */

/** @brief Whether the ROWS-row step of a variant that splits attention (v18-v21) merges proj into attention when
 *         a.merge_proj says so (v21): at 1 row only; at 8 every block would compute 8 sequences' attention. */
template <int ROWS, bool SPLIT>
static __host__ __device__ constexpr bool merge_at_rows() { return SPLIT && ROWS == 1; }

/**
 * @brief v21: this block's share of proj, by head: of G = blocks / H blocks
 *        a head, block b takes head b / G and outputs [s·C/G, (s+1)·C/G)
 *        for s = b % G (on the H100, 132 = 12 heads × 11 slices of 69-70
 *        outputs). Each output's 64 inputs of that head are contiguous in
 *        proj_heads ([H][C][64]), so the share is one run, as the ring
 *        copies it. A block past G·H has no head (-1) and no outputs.
 */
template <typename T>
static __device__ LinearShare proj_head_share(const decode_step_args &a, const void *proj_heads, int *head)
{
    const int G = (int)gridDim.x / a.H, b = (int)blockIdx.x, s = b % G;
    *head = b < G * a.H ? b / G : -1;
    LinearShare p;
    p.chunks = DECODE_STEP_HEAD_DIM * (int)sizeof(T) / 16;
    p.n0 = s * a.C / G;
    p.outs = *head < 0 ? 0 : (s + 1) * a.C / G - p.n0;
    p.S = 1, p.log2S = 0, p.units = p.outs;
    p.w = reinterpret_cast<const uint4 *>(proj_heads) + ((long long)max(*head, 0) * a.C + p.n0) * p.chunks;
    return p;
}

/**
 * @brief v21: the head's part of proj's outputs: its 64 attention outputs
 *        (`att`, in shared memory) times the share's weights (from the
 *        ring), one float an output into proj_parts[head][n]. A group of
 *        64 / VEC lanes takes an output (8 in fp16, one 16-byte chunk each),
 *        so a warp takes 4 at once.
 *
 *        v23 (FIXED_POINT): the part is added into acc[n] instead (the
 *        layer's row of proj_acc), as a 64-bit integer, 2^32 to 1.0, with
 *        one atomic. Integer addition is associative, so the H parts sum to
 *        the same bits in whatever order their atomics land (stage 02 fixes
 *        its sum's order with two passes; this is the other way). A part of
 *        2^22 or more, or NaN, would not fit: it sets the row's flag,
 *        acc[C], and fc's rows make the row NaN rather than add a sum that
 *        wrapped round.
 *
 *        v27 (COUNTED, with FIXED_POINT): the row has no barrier after it, so
 *        each sum counts its parts: a part is added as part·2^32·2^8 + 1,
 *        and fc's rows wait until the low 4 bits say H. Integer addition
 *        still makes the order of no account, and the sum shifted right by 8
 *        is v23's, bit for bit. A part out of range adds 1 + 16 instead, no
 *        value: bits 4-7 flag the row (at most 12 flags, 192, stay under the
 *        value's bits). The range is 2^18 (DECODE_PROJ_TAGGED_PART_MOST), so
 *        that H parts stay under 2^62.
 */
template <typename T, bool FIXED_POINT = false, bool COUNTED = false>
static __device__ void proj_head_dots(const decode_step_args &a, const LinearShare &p, const WeightRing &ring, int j,
                                      const T *att, int head, long long *acc)
{
    constexpr int VEC = Vec16<T>::N, LANES = DECODE_STEP_HEAD_DIM / VEC, PER_WARP = 32 / LANES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % LANES;
    const unsigned from = ring.start[j % RING_LINEARS];
    float x[VEC];
    unpack16(reinterpret_cast<const uint4 *>(att)[c], x, T());
    for (int o0 = warp * PER_WARP; o0 < p.outs; o0 += STEP_WARPS * PER_WARP) {
        const int o = o0 + lane / LANES;
        float w[VEC], sum = 0.0f;
        unpack16(o < p.outs ? ring.at(from, o * LANES + c) : make_uint4(0, 0, 0, 0), w, T());
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum = fmaf(x[e], w[e], sum);
#pragma unroll
        for (int off = 1; off < LANES; off *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (c == 0 && o < p.outs) {
            if constexpr (COUNTED) {
                const bool in_range = fabsf(sum) < DECODE_PROJ_TAGGED_PART_MOST; /* false for NaN too */
                const unsigned long long fixed = (unsigned long long)(in_range ? __float2ll_rn(sum * DECODE_PROJ_FIXED_ONE) : 0);
                atomicAdd(reinterpret_cast<unsigned long long *>(acc + p.n0 + o), (fixed << 8) + (in_range ? 1 : 17));
            } else if constexpr (FIXED_POINT) {
                if (!(fabsf(sum) < DECODE_PROJ_PART_MOST)) atomicOr(reinterpret_cast<unsigned long long *>(acc + a.C), 1ull);
                const long long fixed = __float2ll_rn(sum * DECODE_PROJ_FIXED_ONE); /* exact: a power of 2 */
                atomicAdd(reinterpret_cast<unsigned long long *>(acc + p.n0 + o), (unsigned long long)fixed);
            } else {
                a.proj_parts[(long long)head * a.C + p.n0 + o] = sum;
            }
        }
    }
}

/** @brief v21: the most heads fc's rows add (stage_proj_sum_rows holds a part of each in registers). */
#define PROJ_SUM_MAX_HEADS 12

/**
 * @brief v21: fc's row before its LayerNorm: x plus proj's bias plus the H
 *        heads' parts (what v20's proj epilogue adds), rounded to T as the
 *        residual stream holds it, into rows[0 … C). The block also writes
 *        columns [n0, n1), its own outputs of fc-proj, to a.att: fc-proj's
 *        epilogue reads its residual there, before the barrier after fc
 *        (issue_phase), so each block reads only what it wrote itself; x is
 *        still being read by the other blocks. A thread sums 4 columns, its
 *        H + 2 loads issued together (one trip to L2). H is at most
 *        PROJ_SUM_MAX_HEADS: a 32-head array made the kernel spill (620
 *        bytes; the step took 440 µs), and 4 heads at a time, the next 4 in
 *        flight, took two trips (fc's rows 2.45 µs against 2.06).
 *
 *        v23 (FIXED_POINT): the heads' parts come summed, acc[c]·2^-32 (the
 *        layer's row of proj_acc): one 8-byte load a column where v21 loads
 *        H floats. A flagged row (a part out of range) is NaN.
 */
template <typename T, bool FIXED_POINT = false>
static __device__ void stage_proj_sum_rows(const decode_step_args &a, const float *proj_b, const long long *acc,
                                           T *rows, int n0, int n1)
{
    constexpr int MAX_HEADS = PROJ_SUM_MAX_HEADS;
    const int C = a.C, H = a.H;
    for (int c = threadIdx.x * 4; c < C; c += STEP_THREADS * 4) {
        float4 part[MAX_HEADS]; /* v21 */
        long long sum[4];       /* v23 */
        bool flagged = false;
        if constexpr (FIXED_POINT) {
            const longlong2 s01 = __ldcg(reinterpret_cast<const longlong2 *>(acc + c)),
                            s23 = __ldcg(reinterpret_cast<const longlong2 *>(acc + c + 2));
            sum[0] = s01.x, sum[1] = s01.y, sum[2] = s23.x, sum[3] = s23.y;
            flagged = __ldcg(acc + C) != 0;
        } else {
#pragma unroll
            for (int h = 0; h < MAX_HEADS; ++h)
                part[h] = h < H ? __ldcg(reinterpret_cast<const float4 *>(a.proj_parts + (long long)h * C + c))
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        const float4 b = __ldg(reinterpret_cast<const float4 *>(proj_b + c));
        float s[4] = {b.x, b.y, b.z, b.w}, x[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) x[k] = load_cg((const T *)a.x + c + k);
        if constexpr (FIXED_POINT) {
#pragma unroll
            for (int k = 0; k < 4; ++k) s[k] += (float)sum[k] / DECODE_PROJ_FIXED_ONE;
        } else {
#pragma unroll
            for (int h = 0; h < MAX_HEADS; ++h)
                s[0] += part[h].x, s[1] += part[h].y, s[2] += part[h].z, s[3] += part[h].w;
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float v = flagged ? __int_as_float(0x7fffffff) : x[k] + s[k];
            store(rows, c + k, v);
            if (c + k >= n0 && c + k < n1) store((T *)a.att, c + k, v);
        }
    }
    __syncthreads();
}

/** @brief v27: 2 of proj's counted sums (tagged_acc), a relaxed gpu-scope load. */
static __device__ __forceinline__ longlong2 load_relaxed2(const long long *p)
{
    longlong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.s64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
    return v;
}

/**
 * @brief v27: stage_proj_sum_rows with no barrier before it (at 1 row, fp16):
 *        a thread's 4 columns of x (layer l's tagged words) and of proj's
 *        sums (`acc`, counted: proj_head_dots), loads issued together and
 *        polled until x carries the step's tag and every sum has its H
 *        parts. Then v23's arithmetic: x + bias + sum·2^-32. A part out of
 *        range makes the thread's 4 columns NaN, and with them fc's
 *        statistics and so all of its outputs, as v23's flagged row does.
 */
static __device__ void stage_proj_sum_rows_tagged(const decode_step_args &a, const float *proj_b, const long long *acc,
                                                  const unsigned *x, unsigned tag, __half *rows, int n0, int n1)
{
    const int C = a.C;
    const long long H = a.H;
    for (int c = threadIdx.x * 4; c < C; c += STEP_THREADS * 4) {
        /* the bias first: asked for after the poll, its trip to L2 came after the last part had landed */
        const float4 b = __ldg(reinterpret_cast<const float4 *>(proj_b + c));
        longlong2 s01, s23;
        uint4 xw;
        do {
            s01 = load_relaxed2(acc + c), s23 = load_relaxed2(acc + c + 2), xw = load_relaxed4(x + c);
        } while (!(all_tagged(xw, tag) && (s01.x & 15) == H && (s01.y & 15) == H && (s23.x & 15) == H &&
                   (s23.y & 15) == H));
        const long long sum[4] = {s01.x, s01.y, s23.x, s23.y};
        const unsigned xs[4] = {xw.x, xw.y, xw.z, xw.w};
        const float bias[4] = {b.x, b.y, b.z, b.w};
        bool flagged = false;
#pragma unroll
        for (int k = 0; k < 4; ++k) flagged |= (sum[k] >> 4 & 15) != 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float s = bias[k] + (float)(sum[k] >> 8) / DECODE_PROJ_FIXED_ONE; /* arithmetic shift: v23's sum */
            const float v = flagged ? __int_as_float(0x7fffffff) : __half2float(__ushort_as_half((unsigned short)xs[k])) + s;
            store(rows, c + k, v);
            if (c + k >= n0 && c + k < n1) store((__half *)a.att, c + k, v);
        }
    }
    __syncthreads();
}

/** @brief v23: layer `layer`'s row of proj_acc (its C sums, then the flag). */
static __device__ __forceinline__ long long *proj_acc_row(const decode_step_args &a, int layer)
{
    return a.proj_acc + (long long)layer * DECODE_PROJ_ACC_ROW(a.C);
}

/**
 * @brief v5: one decode step, one kernel. The step is a list of 5·L + 1
 *        phases, and every block walks it: for each phase it requests what
 *        does not depend on the phase before (its share of the weights, its
 *        biases, LayerNorm parameters and old residual values), waits at the
 *        grid barrier, stages its input rows (the embedding, for the first),
 *        normalises them where a LayerNorm comes first, multiplies, applies
 *        the epilogue, and arrives at the next barrier. One loop, so the
 *        phase code exists once in the binary: written out phase by phase it
 *        was 25 000 instructions (400 KB), more than the instruction cache,
 *        and every phase waited for its own code.
 *
 *        v7/v8 (RING): the same kernel, but the linears' weights come from
 *        the block's WeightRing in shared memory (the LM head's still stream
 *        through registers: its share, 585 KB, is larger than the ring).
 *        v9 (MMA, fp16): and their dot products run on tensor cores.
 *        v10 (HEAD_RING): and the LM head's weights come through the ring too,
 *        the rows of a LayerNorm phase in one pass. v11 (HEAD_RING, fp32):
 *        v7 with v10's two changes, on FFMA.
 *        v12/v13 (EVICT_FIRST): v10/v11 with the ring's copies marked
 *        evict-first in L2. A step reads each weight once, 247 MB in fp16
 *        (495 MB in fp32), through a 50 MB L2; with the default policy they
 *        push out what the next step reads again, the K/V cache above all.
 *        Evict-first lines are the first that L2 replaces, so the K/V stay.
 *        v14/v15 (PRODUCER_LAST_WARP): v12/v13 with the ring's producer in
 *        the last warp, which has the fewest dot products at 1 or 2 rows
 *        (RING_PRODUCER_LAST_WARP).
 *        v16/v17 (SHAPED_TRAFFIC): v14/v15 with three changes to when bytes
 *        move and where they stay: the LM head's pieces one at a time
 *        (run_head_ring_one_piece); at 5-8 rows, the K and V of the first
 *        KV_KEPT_LAYERS layers kept in L2 (attention_phase); in fp32, half
 *        of the blocks with no attention pair request as attention starts
 *        (fp32_requests_at_attention).
 *        v18/v19 (SPLIT_ATTENTION): v16/v17 with each pair's attention split
 *        over blocks that would be idle, one split per pass of a block's
 *        warps over the context, at 1-4 rows (attention_splits); proj's rows
 *        merge the splits (stage_attention_rows).
 *        v20 (fp16; v18's kernel with a.paced_requests, a run-time flag, so
 *        that no new kernel is built): the ring's requests paced
 *        (paced_request_end).
 *        v21 (fp16; v20's kernel with a.merge_proj, at 1 row): attention and
 *        proj one phase (proj_head_share, proj_head_dots), fc's rows adding
 *        the heads' parts (stage_proj_sum_rows): one barrier fewer a layer.
 *        v23 (PROJ_FIXED_POINT; fp16, 1 row, launched for the merged
 *        steps only): v21's kernel with the heads' parts of proj added as
 *        they are stored, in 64-bit fixed point (proj_head_dots), so that
 *        fc's rows read one sum a column, not H parts
 *        (stage_proj_sum_rows).
 *        v24 (LN_FOLDED; v23's steps): v23's kernel with QKV's and fc's
 *        LayerNorm folded into their weights (decode_step_args.ln_folded):
 *        the rows are staged as they are, one warp works out their
 *        statistics while the others multiply (row_statistics), and the
 *        epilogue applies them (finish_phase).
 *        v25 (KV_SHIFTS; v24's steps): v24's kernel with attention's K/V
 *        addresses worked out with shifts, not divisions, and no branch a
 *        token (kv_row_offset).
 *        v26 (LOADS_FIRST; v25's steps): v25's kernel with QKV's and fc's
 *        dot products loading a unit's weights before the first multiply and
 *        the row converted once for all of a warp's units
 *        (run_phase_ring_loads_first).
 *        v27 (TAGGED_ROWS; v26's steps): v26's kernel with no grid barriers:
 *        every phase's outputs are tagged with the step, and the next phase
 *        polls the words it reads (store_tagged, stage_tagged_rows).
 */
template <typename T, int ROWS, bool RING, bool MMA, bool HEAD_RING, bool EVICT_FIRST = false,
          bool PRODUCER_LAST_WARP = false, bool SHAPED_TRAFFIC = false, bool SPLIT_ATTENTION = false,
          bool PROJ_FIXED_POINT = false, bool LN_FOLDED = false, bool KV_SHIFTS = false, bool LOADS_FIRST = false,
          bool TAGGED_ROWS = false>
__global__ void __launch_bounds__(STEP_THREADS, 1) decode_step_persistent(decode_step_args a)
{
    static_assert(!LN_FOLDED || (PROJ_FIXED_POINT && ROWS == 1), "v24 is v23's kernel with the LayerNorms folded");
    static_assert(!KV_SHIFTS || LN_FOLDED, "v25 is v24's kernel with attention's addresses in shifts");
    static_assert(!LOADS_FIRST || (KV_SHIFTS && !MMA), "v26 is v25's kernel with the dot products' loads first");
    static_assert(!TAGGED_ROWS || (LOADS_FIRST && std::is_same<T, __half>::value), "v27 is v26's kernel, tagged");
    extern __shared__ __align__(16) unsigned char smem[];
    const int C = a.C, M = a.M, L = a.L, P = 5 * L + 1;
    decode_layer_weights *layers = reinterpret_cast<decode_layer_weights *>(smem); /* [L] */
    T *rows = reinterpret_cast<T *>(layers + L);                                   /* [ROWS][4C] */
    float *partial = reinterpret_cast<float *>(rows + (long long)ROWS * 4 * C);   /* [units][ROWS] */
    int *tables = reinterpret_cast<int *>(partial + step_max_units(C, gridDim.x, MMA) * ROWS); /* [M][max_pages] */
    __shared__ uint64_t ring_bars[RING_LINEARS];
    __shared__ unsigned ring_start[RING_LINEARS];
    const int plan_entries = ring_plan_entries(L, a.V, gridDim.x, sizeof(T), HEAD_RING);
    RingPlan *plan = reinterpret_cast<RingPlan *>(smem + step_plan_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x, MMA));
    WeightRing ring = {reinterpret_cast<uint4 *>(smem + step_ring_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x, MMA,
                                                                         plan_entries)),
                       a.ring_chunks, ring_bars, ring_start, plan, 4 * L, 0, 0, 0, 0, EVICT_FIRST,
                       PRODUCER_LAST_WARP ? RING_PRODUCER_LAST_WARP : RING_PRODUCER}; /* RING only */
    __shared__ StepInputs in;
    __shared__ unsigned long long block_best[ROWS];
    __shared__ float2 ln_stats[ROWS]; /* v24: the row's (mean, 1/σ), for the epilogue (row_statistics) */
    GridBarrier barrier = {a.barrier, 0, a.trace, 0, P};
    barrier.mark(0);
    uint4 slot[STEP_SLOTS];
    StepCursor ahead;
    HeadCursor head_ahead; /* v9's LM head */
    Prefetched pre;
    unsigned long long best = 0;

    /* the step's inputs and the layer table, into shared memory */
    for (int i = threadIdx.x; i < L * (int)(sizeof(decode_layer_weights) / 8); i += STEP_THREADS)
        reinterpret_cast<unsigned long long *>(layers)[i] = __ldg(reinterpret_cast<const unsigned long long *>(a.layers) + i);
    for (int i = threadIdx.x; i < M * a.max_pages; i += STEP_THREADS) tables[i] = __ldg(a.tables + i);
    if (threadIdx.x < M) in.lens[threadIdx.x] = __ldg(a.lens + threadIdx.x), in.slots[threadIdx.x] = __ldg(a.slots + threadIdx.x);
    if (threadIdx.x < ROWS) block_best[threadIdx.x] = 0;
    if (threadIdx.x == 0) in.tables = tables;
    if (blockIdx.x == 0 && threadIdx.x < M) {
        if (!TAGGED_ROWS) a.best[threadIdx.x] = 0; /* read only by the LM head, many barriers on (v27: see best_zeroed) */
        if (a.fed_tokens) a.fed_tokens[threadIdx.x] = step_token(a, threadIdx.x);
    }
    /* v27: the step's tag, and which half of tagged_acc its proj sums use (read before this block writes anything;
     * block 0 adds 1 as the step ends, after every block's outputs have reached it) */
    const unsigned epoch = TAGGED_ROWS ? __ldcg(a.epoch) : 0u, tag = step_tag(epoch);
    long long *const counted_acc = TAGGED_ROWS ? a.tagged_acc + (long long)(epoch & 1) * L * C : nullptr;
    /* v23: layer l's row of proj's fixed-point sums (v27: of this step's half of the counted ones) */
    auto proj_sums = [&](int l) -> long long * {
        return TAGGED_ROWS ? counted_acc + (long long)l * C : PROJ_FIXED_POINT ? proj_acc_row(a, l) : nullptr;
    };
    __syncthreads();
    /* v21: attention and proj one phase (at 1 row); then attention is not split, each block computes its head's */
    const bool merged = merge_at_rows<ROWS, SPLIT_ATTENTION>() && a.merge_proj;
    const int att_splits = merged ? 1 : attention_splits<T, ROWS, SPLIT_ATTENTION>(a, in); /* v18-v20; 1 before */
    /* v23: attention's instance of its own (its shared arrays laid out apart from v16-v22's kernels'); at 1 row
     * KEEP_FIRST_KV changes nothing, it acts from 5 rows */
    constexpr bool KEEP_FIRST_KV = SHAPED_TRAFFIC && !PROJ_FIXED_POINT;
    if constexpr (PROJ_FIXED_POINT) {
        /* v23: the sums start at zero (the step before has read them, a kernel before); the barrier before the first
         * attention orders these stores before its atomics. v27: no barrier, so the step zeroes the other half of
         * its sums, for the next step (the step before used it) */
        long long *const sums = TAGGED_ROWS ? a.tagged_acc + (long long)((epoch + 1) & 1) * L * C : a.proj_acc;
        const long long n = TAGGED_ROWS ? (long long)L * C : (long long)L * DECODE_PROJ_ACC_ROW(C);
        for (long long k = (long long)blockIdx.x * STEP_THREADS + threadIdx.x; k < n; k += (long long)gridDim.x * STEP_THREADS)
            sums[k] = 0;
    }
    if (RING) { /* the block's share of every linear (the thread's linears), the mbarriers, the first copies */
        for (int j = threadIdx.x; j < 4 * L; j += STEP_THREADS) {
            LinearPhase d = describe_phase(a, layers, phase_of_linear(j));
            int head;
            LinearShare share = merged && j % 4 == 1 ? proj_head_share<T>(a, layers[j / 4].proj_heads, &head)
                                                     : share_of<T>(d.w, d.N, d.K, true); /* v21: proj by head */
            plan[j] = {share.w, (unsigned)(share.outs * share.chunks)};
        }
        if (HEAD_RING) { /* v10: then the pieces of the block's share of the LM head */
            LinearPhase d = describe_phase(a, layers, 5 * L);
            LinearShare head = share_of<T>(d.w, d.N, d.K, false);
            constexpr int PIECE_OUTPUTS = head_piece_outputs(sizeof(T));
            const int pieces = head_pieces(head.outs, sizeof(T));
            for (int q = threadIdx.x; q < pieces; q += STEP_THREADS) {
                const int outs = min(PIECE_OUTPUTS, head.outs - q * PIECE_OUTPUTS);
                plan[4 * L + q] = {head.w + (long long)q * PIECE_OUTPUTS * head.chunks, (unsigned)(outs * head.chunks)};
            }
            ring.linears += pieces;
        }
        __syncthreads();
        if (ring.is_producer()) {
            ring.init();
            ring.request(a.paced_requests ? PACED_FIRST_LINEARS : RING_ALL_LINEARS);
        }
        __syncthreads(); /* the mbarriers are initialised before any thread waits on one */
    }

    for (int i = 0; i < P; ++i) {
        if (merged && i < 5 * L && i % 5 == PHASE_PROJ) { /* v21: done in the attention phase; no barrier */
            ++barrier.phase;
            continue;
        }
        const bool attention = i < 5 * L && i % 5 == PHASE_ATTENTION;
        const bool from_ring = RING && !attention && i < 5 * L; /* before v10, the LM head streams through registers */
        LinearPhase d;
        LinearShare share;
        bool one_pass = false; /* v10: the rows staged and normalised in one pass */
        bool folded = false;   /* v24: QKV's or fc's LayerNorm, folded into the weights */
        if (!attention) { /* before the barrier: everything that does not depend on the phase before */
            d = describe_phase(a, layers, i);
            if (merged && i % 5 == PHASE_FCPROJ) d.resid = a.att; /* v21: x + proj, as fc's rows left it */
            share = share_of<T>(d.w, d.N, d.K, d.epilogue != DECODE_LOGITS_ARGMAX, MMA && from_ring);
            const bool head_mma = MMA && !HEAD_RING && i == 5 * L; /* v9's LM head: its own order of loads */
            folded = LN_FOLDED && d.ln_w && i < 5 * L;
            one_pass = !folded && HEAD_RING && d.ln_w && d.K <= ROWS_ONE_PASS_MAX_K; /* the embedding's too */
            issue_phase<T, ROWS>(share, slot, ahead, pre, d.bias, (const T *)d.resid, d.N, M,
                                 one_pass || folded ? NULL : d.ln_w, d.ln_b, d.K,
                                 !HEAD_RING && !from_ring && !head_mma, /* v10: no weights in registers */
                                 folded ? d.bias + d.N : NULL); /* v24: the folded weights' sums */
            if (head_mma) head_mma_fetch(share, slot, head_ahead);
            if (one_pass) prefetch_ln_chunks<T>(pre, d.ln_w, d.ln_b, d.K);
        }
        if (i > 0) {
            if constexpr (TAGGED_ROWS)
                barrier.enter(); /* v27: the rows wait for their own words */
            else
                barrier.wait();
        }
        if (attention) {
            const decode_layer_weights &W = layers[i / 5];
            if (SHAPED_TRAFFIC && HEAD_RING && fp32_requests_at_attention<T>(a, M * a.H * att_splits) &&
                ring.is_producer())
                ring.request();
            if (merged) { /* v21: the block's head's attention into rows, times its slice of proj */
                const int j = 4 * (i / 5) + 1;
                int proj_head; /* -1: a block past G·H, with no head */
                const LinearShare proj = proj_head_share<T>(a, W.proj_heads, &proj_head);
                if (proj_head >= 0)
                    attention_phase<T, ROWS, KEEP_FIRST_KV, split_at_rows<ROWS, SPLIT_ATTENTION>(), KV_SHIFTS,
                                    TAGGED_ROWS>(a, in, (const T *)W.k_pool, (const T *)W.v_pool, i / 5, 1, proj_head,
                                                 rows, tag); /* 1 split */
                __syncthreads(); /* the head's outputs are in rows */
                if constexpr (LN_FOLDED) barrier.mark(2); /* v24 traces the merged phase: attention done */
                ring.wait(j);
                if (proj_head >= 0)
                    proj_head_dots<T, PROJ_FIXED_POINT, TAGGED_ROWS>(a, proj, ring, j, rows, proj_head, proj_sums(i / 5));
                if constexpr (LN_FOLDED) barrier.mark(3); /* and proj's part */
                __syncthreads(); /* every read of proj's weights is done: they go back */
                if (ring.is_producer()) ring.give_back();
            } else { /* (v27's steps are all merged: its instance here only keeps one copy of attention's shared arrays) */
                attention_phase<T, ROWS, KEEP_FIRST_KV, split_at_rows<ROWS, SPLIT_ATTENTION>(), KV_SHIFTS, TAGGED_ROWS>(
                    a, in, (const T *)W.k_pool, (const T *)W.v_pool, i / 5, att_splits, -1, nullptr, tag);
            }
        } else {
            if (merged && i % 5 == PHASE_FC) { /* v21: x + proj's bias + the heads' parts, then LayerNorm */
                const LinearShare fcproj = share_of<T>(layers[i / 5].fcproj_wt, a.C, 4 * a.C, true);
                if constexpr (TAGGED_ROWS)
                    stage_proj_sum_rows_tagged(a, layers[i / 5].proj_b, proj_sums(i / 5), tagged_x(a, i / 5), tag, rows, fcproj.n0,
                                               fcproj.n0 + fcproj.outs);
                else
                    stage_proj_sum_rows<T, PROJ_FIXED_POINT>(a, layers[i / 5].proj_b, proj_sums(i / 5), /* v23: one sum a column */
                                                             rows, fcproj.n0, fcproj.n0 + fcproj.outs);
                if (!folded) stage_layernorm_rows<T, ROWS, true>(rows, rows, M, d.K, pre, a);
            } else if (TAGGED_ROWS && one_pass) { /* v27: the LM head's row, then its LayerNorm in place */
                stage_tagged_rows(tagged_x(a, L), rows, d.K, tag);
                stage_layernorm_rows<T, ROWS, true>(rows, rows, M, d.K, pre, a);
            } else if (one_pass) {
                stage_layernorm_rows<T, ROWS>((const T *)d.src, rows, M, d.K, pre, a);
            } else if (SPLIT_ATTENTION && i % 5 == PHASE_PROJ && att_splits > 1) {
                stage_attention_rows<T, ROWS>(a, rows, att_splits); /* v18/v19: the parts merged */
            } else if (TAGGED_ROWS && d.src) { /* v27: QKV's x, fc-proj's hidden layer */
                stage_tagged_rows(i % 5 == PHASE_QKV ? tagged_x(a, i / 5) : tagged_hidden(a, i / 5), rows, d.K, tag);
            } else if (d.src) {
                stage_step_rows<T, ROWS>((const T *)d.src, rows, M, d.K);
            } else { /* the first QKV's rows: the embedding (block 0 also writes it to x, the residual stream) */
                for (int e = threadIdx.x; e < ROWS * C; e += STEP_THREADS) {
                    int m = e / C, k = e - m * C;
                    float v = 0.0f;
                    if (m < M)
                        v = load((const T *)a.wte, (long long)step_token(a, m) * C + k) +
                            load((const T *)a.wpe, (long long)__ldg(a.positions + m) * C + k);
                    store(rows, e, v);
                    if (blockIdx.x == 0 && m < M) {
                        if constexpr (TAGGED_ROWS)
                            store_tagged(tagged_x(a, 0) + e, v, tag); /* v27: fc's rows read it */
                        else
                            store((T *)a.x, e, v);
                    }
                }
                __syncthreads();
            }
            if (d.ln_w && !one_pass && !folded) layernorm_step_rows<T, ROWS, MMA>(rows, M, d.K, pre, d.ln_w, d.ln_b);
            if (!RING && a.l2_prefetch) prefetch_linear<T>(a, layers, d.linear + a.l2_prefetch);
            barrier.mark(2);
            const bool head = d.epilogue == DECODE_LOGITS_ARGMAX;
            if (from_ring) {
                if (ring.is_producer()) /* see RING_PRODUCER: when to request; v20 paces them */
                    ring.request(a.paced_requests ? paced_request_end(d.linear, i % 5) : RING_ALL_LINEARS);
                /* v26: QKV's and fc's (K = 768), their statistics included, wait for their weights themselves */
                if (LOADS_FIRST && share.S == 1 && share.chunks == 32 * LOADS_FIRST_LANE_CHUNKS) {
                    run_phase_ring_loads_first<T>(share, ring, d.linear, rows, partial, folded ? ln_stats : NULL);
                } else {
                    if (folded && threadIdx.x / 32 == STATS_WARP) row_statistics<T>(rows, d.K, ln_stats); /* v24 */
                    ring.wait(d.linear);
                    if constexpr (MMA)
                        run_phase_ring_mma<ROWS>(share, ring, d.linear, rows, d.K, partial);
                    else
                        run_phase_ring<T, ROWS>(share, ring, d.linear, rows, d.K, partial);
                }
            } else if constexpr (HEAD_RING) { /* the LM head (the only linear not from_ring) */
                if (ring.is_producer()) ring.request();
                if constexpr (SHAPED_TRAFFIC)
                    run_head_ring_one_piece<T, ROWS, MMA>(share, ring, 4 * L, rows, d.K, best, a);
                else
                    run_head_ring<T, ROWS, MMA>(share, ring, 4 * L, rows, d.K, best, a);
            } else if constexpr (MMA) {
                run_head_mma<ROWS>(share, slot, head_ahead, rows, d.K, best, a);
            } else {
                run_phase<T, ROWS>(share, slot, ahead, rows, d.K, partial, head, best, a);
            }
            barrier.mark(3);
            if (!head)
                finish_phase<T, ROWS>(d.epilogue, share, partial, pre, d.bias, (T *)d.y, d.N, a, in, d.k_pool, d.v_pool,
                                      folded ? ln_stats : NULL, KV_SHIFTS,
                                      !TAGGED_ROWS               ? NULL /* v27: the phase's tagged outputs */
                                      : i % 5 == PHASE_QKV ? tagged_qkv(a, i / 5)
                                      : i % 5 == PHASE_FC  ? tagged_hidden(a, i / 5)
                                                           : tagged_x(a, i / 5 + 1),
                                      tag);
        }
        if (i + 1 < P) {
            if constexpr (TAGGED_ROWS)
                barrier.leave();
            else
                barrier.arrive();
        }
        if (from_ring && ring.is_producer()) { /* the phase's weights were read (finish_phase's __syncthreads):
                                                 * its bytes go back */
            ring.give_back();
        }
    }
    /* the LM head's argmax: the block's best per row (lane m holds row m's; with tensor cores, lanes 4m … 4m + 3),
     * then one atomic per row */
    const int best_row = MMA ? threadIdx.x % 32 / 4 : threadIdx.x % 32;
    if (best_row < M) atomicMax(&block_best[best_row], best);
    __syncthreads();
    if (threadIdx.x < M) atomicMax(a.best + threadIdx.x, block_best[threadIdx.x]);
    /* v27: the next step's tag, and the keys the next queued step raises (this step read its tokens there) zeroed.
     * Block 0 gets here only after every block's last fc-proj outputs have reached it, so every block has read this
     * step's epoch and tokens (the first things it did) */
    if (TAGGED_ROWS && blockIdx.x == 0) {
        if (threadIdx.x == 0) atomicAdd(a.epoch, 1u);
        if (threadIdx.x < M && a.prev_best) a.prev_best[threadIdx.x] = 0;
    }
    barrier.mark(1);
}


/** @brief The most 16-byte chunks the ring must hold at once: one block's share of one linear (v7/v8), or v10's
 *         round of the LM head's pieces (run_head_ring reads them together). */
static unsigned ring_largest_share(int C, int blocks, size_t elem, bool head_ring)
{
    const int vec = (int)(16 / elem), shapes[4][2] = {{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}}; /* (N, K) */
    unsigned most = head_ring ? (unsigned)(HEAD_ROUND_PIECES * head_piece_outputs(elem)) * (unsigned)(C / vec) : 0;
    for (int i = 0; i < 4; ++i) {
        unsigned chunks = (unsigned)((shapes[i][0] + blocks - 1) / blocks) * (unsigned)(shapes[i][1] / vec);
        most = chunks > most ? chunks : most;
    }
    return most;
}

/** @brief v7/v8's kernel's static shared memory (its mbarriers, the step's inputs, the reductions' slots): asked of
 *         the runtime once per instantiation, not on every step. */
template <typename T, int ROWS, bool MMA, bool HEAD_RING, bool SHAPED_TRAFFIC, bool SPLIT_ATTENTION, bool PROJ_FIXED_POINT,
          bool LN_FOLDED, bool KV_SHIFTS, bool LOADS_FIRST, bool TAGGED_ROWS>
static size_t ring_static_smem()
{
    static size_t bytes = 0;
    if (!bytes) { /* v16-v19's LM head has its own (the second half's sums): asked of v16-v19's kernel */
        cudaFuncAttributes attr;
        WB_CUDA_CHECK(cudaFuncGetAttributes(&attr, decode_step_persistent<T, ROWS, true, MMA, HEAD_RING, SHAPED_TRAFFIC,
                                                                          SHAPED_TRAFFIC, SHAPED_TRAFFIC, SPLIT_ATTENTION,
                                                                          PROJ_FIXED_POINT, LN_FOLDED, KV_SHIFTS,
                                                                          LOADS_FIRST, TAGGED_ROWS>));
        bytes = attr.sharedSizeBytes;
    }
    return bytes;
}

/** @brief v7/v8: the kernel's static shared memory plus the dynamic part with the smallest ring that works. */
/**
 * @brief v9 takes tensor cores from 4 rows (3 sequences) on. With 1 row a tile
 *        uses 1 of its 8 rows, and the H100 measured v8's FFMA faster at batch
 *        1: the LM head 33 µs against 43, the linears' dot products 0.5-1.2 µs
 *        against 0.9-1.7 (and finish_phase adds 8 parts of each output instead
 *        of 1 or 2). So 1 or 2 sequences run v8's kernel.
 */
#define MMA_MIN_ROWS 4

/** @brief Whether the ROWS-row step of a variant that asks for tensor cores (MMA) runs them. */
template <int ROWS, bool MMA>
static constexpr bool mma_at_rows() { return MMA && ROWS >= MMA_MIN_ROWS; }

template <typename T, int ROWS, bool MMA, bool HEAD_RING, bool SHAPED_TRAFFIC, bool SPLIT_ATTENTION, bool PROJ_FIXED_POINT,
          bool LN_FOLDED, bool KV_SHIFTS, bool LOADS_FIRST, bool TAGGED_ROWS>
static size_t ring_step_smem(const decode_step_args *a, int blocks)
{
    constexpr bool TC = mma_at_rows<ROWS, MMA>();
    return step_ring_offset(sizeof(T), ROWS, a->C, a->L, a->max_pages, blocks, TC,
                            ring_plan_entries(a->L, a->V, blocks, sizeof(T), HEAD_RING)) +
           (size_t)ring_largest_share(a->C, blocks, sizeof(T), HEAD_RING) * 16 +
           ring_static_smem<T, ROWS, TC, HEAD_RING, SHAPED_TRAFFIC, SPLIT_ATTENTION, PROJ_FIXED_POINT, LN_FOLDED,
                            KV_SHIFTS, LOADS_FIRST, TAGGED_ROWS>();
}

/** @brief Why the flags of `a` name no variant of the persistent step (tensor cores, the LM head in the ring), or
 *         NULL: the rules both gpt2_decode_step_smem and gpt2_decode_step follow. */
static const char *step_flags_refused(wb_dtype dtype, const decode_step_args *a)
{
    if (a->tensor_cores && (!a->weight_ring || dtype != WB_F16))
        return "persistent decode step on tensor cores: needs the weight ring and fp16";
    if (a->head_ring && !a->weight_ring) return "persistent decode step with the LM head in the ring: needs the "
                                                "weight ring";
    if (a->weights_evict_first && !a->head_ring)
        return "persistent decode step with the weights evict-first in L2 (v12/v13): needs the LM head in the ring";
    if (a->producer_last_warp && !a->weights_evict_first)
        return "persistent decode step with the producer in the last warp (v14/v15): needs the weights evict-first "
               "in L2 (v12/v13)";
    if (a->shaped_traffic && !a->producer_last_warp)
        return "persistent decode step with v16/v17's traffic: needs the producer in the last warp (v14/v15)";
    if (a->split_attention && !a->shaped_traffic)
        return "persistent decode step with attention split over the idle blocks (v18/v19): needs v16/v17's traffic";
    if (a->split_attention && !a->att_parts)
        return "persistent decode step with attention split over the idle blocks (v18/v19): needs att_parts "
               "(decode_att_parts_floats(H) floats)";
    if (a->paced_requests && (!a->split_attention || dtype != WB_F16))
        return "persistent decode step with paced requests (v20): needs fp16 and attention split over the idle blocks "
               "(v18)";
    if (a->merge_proj && (!a->paced_requests || !a->proj_parts))
        return "persistent decode step with attention and proj in one phase (v21): needs paced requests (v20) and "
               "proj_parts ([H][C] floats)";
    if (a->merge_proj && (a->H > PROJ_SUM_MAX_HEADS || a->C > ROWS_ONE_PASS_MAX_K))
        return "persistent decode step with attention and proj in one phase (v21): needs at most 12 heads and C <= 768 "
               "(fc's rows in one pass)";
    if (a->proj_fixed_point && (!a->merge_proj || !a->proj_acc))
        return "persistent decode step with proj's parts added in fixed point (v23): needs attention and proj in one "
               "phase (v21's merge_proj) and proj_acc (L * DECODE_PROJ_ACC_ROW(C) int64)";
    if (a->ln_folded && (!a->proj_fixed_point || a->M != 1))
        return "persistent decode step with the LayerNorms folded (v24): needs proj's parts in fixed point (v23) and "
               "1 sequence";
    if (a->kv_shifts && (!a->ln_folded || a->block_size < 1 || (a->block_size & (a->block_size - 1))))
        return "persistent decode step with attention's addresses in shifts (v25): needs the LayerNorms folded (v24) "
               "and a block size that is a power of 2";
    if (a->loads_first && !a->kv_shifts)
        return "persistent decode step with the dot products' loads first (v26): needs attention's addresses in shifts "
               "(v25)";
    if (a->tagged_rows && (!a->loads_first || !a->tagged || !a->tagged_acc || !a->epoch || a->H > 15))
        return "persistent decode step with tagged rows (v27): needs the dot products' loads first (v26), at most 15 "
               "heads (the count's 4 bits), and tagged, tagged_acc and epoch";
    if (a->head_ring && dtype == WB_F16 && !a->tensor_cores)
        return "persistent decode step with the LM head in the ring: in fp16 that is v10, v9's, with tensor_cores";
    return NULL;
}

/**
 * @brief Call f(T(), RING, MMA, HEAD_RING, ROWS, EVICT_FIRST,
 *        PRODUCER_LAST_WARP, SHAPED_TRAFFIC, SPLIT_ATTENTION, PROJ_FIXED_POINT, LN_FOLDED, KV_SHIFTS, LOADS_FIRST,
 *        TAGGED_ROWS) with the storage
 *        type and the template arguments
 *        (std::integral_constant values) of the kernel that runs a->M rows
 *        with the flags of `a` (step_flags_refused said yes): v5/v6 no ring;
 *        v7/v8 the ring; v9 and tensor cores (fp16); v10 the LM head in the
 *        ring too (fp16); v11 the same without tensor cores (fp32); v12/v13
 *        v10/v11 with the weights evict-first in L2; v14/v15 v12/v13 with the
 *        ring's producer in the last warp; v16/v17 v14/v15 with their traffic
 *        shaped; v18/v19 v16/v17 with attention split over the idle blocks;
 *        v23 at 1 row with merge_proj, v21's with proj's parts in fixed point;
 *        v24 v23's with the LayerNorms folded; v25 v24's with attention's
 *        addresses in shifts; v26 v25's with the dot products' loads first; v27 v26's with its rows tagged.
 */
template <typename R, typename F>
static R with_step_kernel(wb_dtype dtype, const decode_step_args *a, F f)
{
    using yes = std::true_type;
    using no = std::false_type;
    auto at_rows = [&](auto t, auto ring, auto mma, auto head_ring, auto evict, auto last_warp, auto shaped,
                       auto split) -> R {
        auto rows = [&](auto n) -> R { /* v23-v26's flags are off below 1 row's merged steps */
            return f(t, ring, mma, head_ring, n, evict, last_warp, shaped, split, no(), no(), no(), no(), no());
        };
        switch (rows_for(a->M)) { /* tensor cores from MMA_MIN_ROWS rows: mma_at_rows */
        case 1: return rows(std::integral_constant<int, 1>());
        case 2: return rows(std::integral_constant<int, 2>());
        case 4: return rows(std::integral_constant<int, 4>());
        default: return rows(std::integral_constant<int, 8>());
        }
    };
    auto head_ring = [&](auto t, auto mma) -> R { /* v10/v11; v12/v13 with the weights evict-first; v14-v20 */
        if constexpr (std::is_same<decltype(t), __half>::value) { /* v23-v26 (merge_proj is fp16 only), at 1 row */
            auto merged = [&](auto folded, auto shifts, auto loads_first, auto tagged) -> R {
                return f(t, yes(), mma, yes(), std::integral_constant<int, 1>(), yes(), yes(), yes(), yes(), yes(),
                         folded, shifts, loads_first, tagged);
            };
            if (a->proj_fixed_point && rows_for(a->M) == 1) {
                if (a->tagged_rows) return merged(yes(), yes(), yes(), yes()); /* v27 */
                if (a->loads_first) return merged(yes(), yes(), yes(), no());  /* v26 */
                if (a->kv_shifts) return merged(yes(), yes(), no(), no());     /* v25 */
                if (a->ln_folded) return merged(yes(), no(), no(), no());      /* v24 */
                return merged(no(), no(), no(), no());                         /* v23 */
            }
        }
        if (a->split_attention) return at_rows(t, yes(), mma, yes(), yes(), yes(), yes(), yes());
        if (a->shaped_traffic) return at_rows(t, yes(), mma, yes(), yes(), yes(), yes(), no());
        if (a->producer_last_warp) return at_rows(t, yes(), mma, yes(), yes(), yes(), no(), no());
        return a->weights_evict_first ? at_rows(t, yes(), mma, yes(), yes(), no(), no(), no())
                                      : at_rows(t, yes(), mma, yes(), no(), no(), no(), no());
    };
    if (dtype == WB_F16) {
        if (a->head_ring) return head_ring(__half(), yes());
        if (a->tensor_cores) return at_rows(__half(), yes(), yes(), no(), no(), no(), no(), no());
        return a->weight_ring ? at_rows(__half(), yes(), no(), no(), no(), no(), no(), no())
                              : at_rows(__half(), no(), no(), no(), no(), no(), no(), no());
    }
    if (a->head_ring) return head_ring(0.0f, no());
    return a->weight_ring ? at_rows(0.0f, yes(), no(), no(), no(), no(), no(), no())
                          : at_rows(0.0f, no(), no(), no(), no(), no(), no(), no());
}

size_t gpt2_decode_step_smem(wb_dtype dtype, const decode_step_args *a)
{
    int sms;
    wb_current_gpu(NULL, &sms);
    const int M = a->M, C = a->C;
    if (M < 1 || M > DECODE_MAX_ROWS || C < DECODE_STEP_HEAD_DIM || C % DECODE_STEP_HEAD_DIM || a->L < 1 || a->V < 1)
        return 0;
    if (step_flags_refused(dtype, a)) return 0;
    if (!a->weight_ring) return step_smem_bytes(wb_dtype_bytes(dtype), rows_for(M), C, a->L, a->max_pages, sms, false);
    return with_step_kernel<size_t>(
        dtype, a,
        [&](auto t, auto, auto mma, auto head_ring, auto rows, auto, auto, auto shaped, auto split, auto fixed,
            auto folded, auto shifts, auto loads_first, auto tagged) {
            return ring_step_smem<decltype(t), decltype(rows)::value, decltype(mma)::value, decltype(head_ring)::value,
                                  decltype(shaped)::value, decltype(split)::value, decltype(fixed)::value,
                                  decltype(folded)::value, decltype(shifts)::value, decltype(loads_first)::value,
                                  decltype(tagged)::value>(a, sms);
        });
}

/**
 * @brief A cooperative launch of one instantiation: one block per SM, all
 *        resident (the barrier's premise). With the ring (v7/v8), the ring
 *        takes all the shared memory that the rest of the block leaves.
 */
template <typename T, int ROWS, bool RING, bool MMA, bool HEAD_RING, bool EVICT_FIRST, bool PRODUCER_LAST_WARP,
          bool SHAPED_TRAFFIC, bool SPLIT_ATTENTION, bool PROJ_FIXED_POINT, bool LN_FOLDED, bool KV_SHIFTS,
          bool LOADS_FIRST, bool TAGGED_ROWS>
static const char *launch_step_rows(const decode_step_args *a, size_t smem, int blocks)
{
    constexpr bool TC = mma_at_rows<ROWS, MMA>();
    auto kernel = decode_step_persistent<T, ROWS, RING, TC, HEAD_RING, EVICT_FIRST, PRODUCER_LAST_WARP, SHAPED_TRAFFIC,
                                         SPLIT_ATTENTION, PROJ_FIXED_POINT, LN_FOLDED, KV_SHIFTS, LOADS_FIRST,
                                         TAGGED_ROWS>;
    static size_t asked_smem = 0; /* asked of the runtime once per size, not on every step */
    static int per_sm = 0;
    decode_step_args args = *a;
    if (RING) {
        size_t offset = step_ring_offset(sizeof(T), ROWS, a->C, a->L, a->max_pages, blocks, TC,
                                         ring_plan_entries(a->L, a->V, blocks, sizeof(T), HEAD_RING));
        size_t limit = wb_current_smem_per_block(),
               used = offset + ring_static_smem<T, ROWS, TC, HEAD_RING, SHAPED_TRAFFIC, SPLIT_ATTENTION, PROJ_FIXED_POINT,
                                                LN_FOLDED, KV_SHIFTS, LOADS_FIRST, TAGGED_ROWS>();
        args.ring_chunks = limit > used ? (unsigned)((limit - used) / 16) : 0;
        if (TC) /* 128-byte lines: a row that wraps keeps its fragments' banks (run_phase_ring_mma) */
            args.ring_chunks &= ~(unsigned)(MMA_SEGMENT_CHUNKS - 1);
        if (args.ring_chunks < ring_largest_share(a->C, blocks, sizeof(T), HEAD_RING))
            return HEAD_RING ? "persistent decode step with the LM head in the ring: a round of its pieces does not "
                               "fit in the shared memory the rows leave (fewer sequences, or v9, do)"
                             : "persistent decode step with the weight ring: one block's share of a linear does not fit "
                               "in the shared memory the rows leave (fewer sequences, or the step without the ring, do)";
        smem = offset + (size_t)args.ring_chunks * 16;
    }
    if (smem != asked_smem) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, STEP_THREADS, smem));
        asked_smem = smem;
    }
    if (per_sm < 1) return "persistent decode step: one block of 256 threads does not fit on an SM";
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute cooperative;
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    cfg.gridDim = dim3((unsigned)blocks), cfg.blockDim = dim3(STEP_THREADS), cfg.dynamicSmemBytes = smem;
    cfg.stream = cudaStreamPerThread, cfg.attrs = &cooperative, cfg.numAttrs = 1;
    WB_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args));
    WB_CHECK_LAUNCH("decode_step_persistent");
    return NULL;
}

int gpt2_decode_step_pass_tokens(wb_dtype dtype)
{
    return STEP_WARPS * (dtype == WB_F16 ? attention_warp_tokens<__half>() : attention_warp_tokens<float>());
}

const char *gpt2_decode_step(wb_dtype dtype, const decode_step_args *a)
{
    if (a->M < 1 || a->M > DECODE_MAX_ROWS) return "persistent decode step: needs 1 <= M <= 8 sequences";
    if (a->H < 1 || a->C != a->H * DECODE_STEP_HEAD_DIM) return "persistent decode step: needs heads of 64 (C = 64·H)";
    if (a->L < 1 || a->V < 1 || a->ldy < a->V || a->max_pages < 1 || a->block_size < 1)
        return "persistent decode step: needs L, V, max_pages, block_size >= 1 and ldy >= V";
    decode_step_args rows_only = *a; /* the size without the ring (the ring takes what is left) */
    rows_only.weight_ring = rows_only.tensor_cores = rows_only.head_ring = 0;
    size_t smem = gpt2_decode_step_smem(dtype, &rows_only);
    if (smem > wb_current_smem_per_block())
        return "persistent decode step: the rows do not fit in one block's shared memory (fewer sequences do)";
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (a->weight_ring && cc < 90) return "persistent decode step with the weight ring: needs sm_90 (the copy engine)";
    if (const char *why = step_flags_refused(dtype, a)) return why;
    if (a->merge_proj && sms < a->H)
        return "persistent decode step with attention and proj in one phase (v21): needs at least one block (SM) a head";
    if (a->tagged_rows) { /* v27 meets no barrier, and zeroes no keys as it starts: nothing would order the zero before
                           * the LM head's atomics (engine_generate's queued steps zero them for the step after) */
        if (!a->best_zeroed)
            WB_CUDA_CHECK(cudaMemsetAsync(a->best, 0, (size_t)a->M * sizeof *a->best, cudaStreamPerThread));
    } else if (!a->barrier_zeroed) {
        WB_CUDA_CHECK(cudaMemsetAsync(a->barrier, 0, sizeof(unsigned), cudaStreamPerThread));
    }
    return with_step_kernel<const char *>(dtype, a, [&](auto t, auto ring, auto mma, auto head_ring, auto rows,
                                                        auto evict, auto last_warp, auto shaped, auto split, auto fixed,
                                                        auto folded, auto shifts, auto loads_first, auto tagged) {
        return launch_step_rows<decltype(t), decltype(rows)::value, decltype(ring)::value, decltype(mma)::value,
                                decltype(head_ring)::value, decltype(evict)::value, decltype(last_warp)::value,
                                decltype(shaped)::value, decltype(split)::value, decltype(fixed)::value,
                                decltype(folded)::value, decltype(shifts)::value, decltype(loads_first)::value,
                                decltype(tagged)::value>(a, smem, sms);
    });
}
