/**
 * @file stages/10_gpt2_e2e/kernels.cu
 * @brief Stage 10's own kernels (see kernels.h): the glue (simple,
 *        memory-bound, one thread per element; a small fraction of a forward
 *        pass, the page measures it), the decode-time linear of v1/v2, and
 *        v3's fused decode linear.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "02_reduction/block_reduce.cuh"      /* warp_allreduce: stage 02's butterfly */
#include "04_fused_gelu_linear/bias_gelu.cuh" /* gelu_tanh */
#include "cuda_check.h"
#include "device.h" /* wb_current_gpu */
#include "dtype_device.cuh"
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

/** @brief Warps per block of the fused decode linear; each warp owns one output at a time. */
#define DECODE_WARPS 4
/** @brief 16-byte loads of W each lane keeps in flight: 8·16 B·32 lanes = 4 KB a warp (K = 1024 fp32, 2048 fp16). */
#define DECODE_LOADS 8

/** @brief 16 bytes of fp32 storage as 4 floats. */
static __device__ __forceinline__ void widen(uint4 u, float (&f)[4])
{
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
}

/** @brief Two fp16 values packed in 32 bits, widened. */
static __device__ __forceinline__ float2 widen_pair(unsigned int bits)
{
    __half2_raw r;
    r.x = (unsigned short)(bits & 0xffffu), r.y = (unsigned short)(bits >> 16);
    return __half22float2(__half2(r));
}

/** @brief 16 bytes of fp16 storage as 8 floats. */
static __device__ __forceinline__ void widen(uint4 u, float (&f)[8])
{
    const unsigned int bits[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 p = widen_pair(bits[i]);
        f[2 * i] = p.x, f[2 * i + 1] = p.y;
    }
}

/**
 * @brief Programmatic dependent launch (sm_90): let the next kernel in the
 *        stream start launching now, then wait until the kernel before this
 *        one has finished and its writes are visible. Whatever a kernel does
 *        before this call must not read what the kernel before writes: here,
 *        only loads of the weights. Launched without the attribute, both
 *        instructions do nothing.
 */
static __device__ __forceinline__ void dependent_launch_sync()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/**
 * @brief This lane's share of one round of an output's weights: row n of
 *        W [N][K], 16 bytes at k = k0 + (u·32 + lane)·VEC for u < DECODE_LOADS
 *        (zeros past K, or when n >= N). Consecutive lanes read consecutive
 *        16 bytes: each load instruction of the warp is 512 contiguous bytes.
 */
template <typename T>
static __device__ __forceinline__ void fetch_weights(uint4 (&w)[DECODE_LOADS], const T *W, int n, int N, int K,
                                                     int k0, int lane)
{
    constexpr int VEC = 16 / sizeof(T);
#pragma unroll
    for (int u = 0; u < DECODE_LOADS; ++u) {
        int k = k0 + (u * 32 + lane) * VEC;
        w[u] = n < N && k < K ? __ldg(reinterpret_cast<const uint4 *>(W + (long long)n * K + k)) : make_uint4(0, 0, 0, 0);
    }
}

/**
 * @brief The prologue: rows[m][k] = LayerNorm(x[m])[k] for the M input rows,
 *        in shared memory, fp32 (stage 05's two passes: the mean, then the
 *        variance about it; a warp per row). Every block computes it for
 *        itself: M·K values read from L2, against the K weights per output
 *        that each warp streams from memory.
 */
template <typename T>
static __device__ void layernorm_rows(const T *x, const float *gain, const float *shift, float *rows, int M, int K)
{
    __shared__ float mean[DECODE_MAX_ROWS], rstd[DECODE_MAX_ROWS];
    for (int i = threadIdx.x; i < M * K; i += blockDim.x) rows[i] = load(x, i);
    __syncthreads();
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int m = warp; m < M; m += DECODE_WARPS) {
        const float *r = rows + (long long)m * K;
        float s = 0.0f;
        for (int k = lane; k < K; k += 32) s += r[k];
        float mu = warp_allreduce<SumOp>(s) / K, v = 0.0f;
        for (int k = lane; k < K; k += 32) v += (r[k] - mu) * (r[k] - mu);
        v = warp_allreduce<SumOp>(v) / K;
        if (lane == 0) mean[m] = mu, rstd[m] = rsqrtf(v + GPT2_LN_EPS);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < M * K; i += blockDim.x) {
        int m = i / K, k = i % K;
        rows[i] = (rows[i] - mean[m]) * rstd[m] * gain[k] + shift[k];
    }
    __syncthreads();
}

/** @brief The epilogue of output n of row m: s is the finished dot product. */
template <typename T, decode_epilogue EPI>
static __device__ __forceinline__ void decode_epilogue_apply(const decode_linear_args &a, int m, int n, float s,
                                                             unsigned long long &best)
{
    if (a.bias) s += a.bias[n];
    if (EPI == DECODE_GELU) {
        store((T *)a.y, (long long)m * a.N + n, gelu_tanh(s));
    } else if (EPI == DECODE_RESIDUAL) {
        T *y = (T *)a.y;
        long long i = (long long)m * a.N + n;
        store(y, i, load(y, i) + s);
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

/**
 * @brief v3's decode linear: y = epilogue(LayerNorm?(x)·W + bias) for M <= 8
 *        rows, W given transposed ([N][K]).
 *
 * A warp per output, the grid at most one wave, each warp looping over
 * outputs. For each output, every lane issues all its 16-byte loads of W
 * (up to DECODE_LOADS at once) before using any, multiplies each by the
 * same k-slice of the M input rows, and the warp's butterfly finishes the
 * dot products. Lane m then applies the epilogue to row m. The next output's
 * weights are requested before this one's epilogue, and the first output's
 * before the prologue (and, as a programmatic dependent, before the kernel
 * ahead has finished): the weights depend on nothing.
 */
template <typename T, decode_epilogue EPI>
__global__ void __launch_bounds__(DECODE_WARPS * 32) decode_linear_fused(decode_linear_args a)
{
    constexpr int VEC = 16 / sizeof(T), ROUND = 32 * VEC * DECODE_LOADS; /* the K one round of loads covers */
    extern __shared__ __align__(16) float ln_rows[]; /* [M][K] LayerNorm(x), when a.ln_w (read as float4) */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, M = a.M, N = a.N, K = a.K;
    const int stride = gridDim.x * DECODE_WARPS;
    const T *W = (const T *)a.w_t, *X = (const T *)a.x;
    int n = blockIdx.x * DECODE_WARPS + warp;
    uint4 w16[DECODE_LOADS];
    fetch_weights(w16, W, n, N, K, 0, lane);
    dependent_launch_sync();
    if (a.ln_w) layernorm_rows(X, a.ln_w, a.ln_b, ln_rows, M, K);
    unsigned long long best = 0; /* lane m: row m's best (value, token) key over this warp's outputs */
    for (; n < N; n += stride) {
        float acc[DECODE_MAX_ROWS] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k0 = 0;;) {
#pragma unroll
            for (int u = 0; u < DECODE_LOADS; ++u) {
                int k = k0 + (u * 32 + lane) * VEC;
                if (k >= K) break;
                float w[VEC];
                widen(w16[u], w);
#pragma unroll
                for (int m = 0; m < DECODE_MAX_ROWS; ++m) {
                    if (m >= M) break;
                    float x[VEC];
                    if (a.ln_w) {
#pragma unroll
                        for (int v = 0; v < VEC; v += 4) {
                            float4 f = *reinterpret_cast<const float4 *>(ln_rows + m * K + k + v);
                            x[v] = f.x, x[v + 1] = f.y, x[v + 2] = f.z, x[v + 3] = f.w;
                        }
                    } else {
                        widen(__ldg(reinterpret_cast<const uint4 *>(X + (long long)m * K + k)), x);
                    }
#pragma unroll
                    for (int v = 0; v < VEC; ++v) acc[m] = fmaf(w[v], x[v], acc[m]);
                }
            }
            k0 += ROUND;
            if (k0 >= K) break;
            fetch_weights(w16, W, n, N, K, k0, lane);
        }
        float mine = 0.0f; /* lane m keeps row m's sum */
#pragma unroll
        for (int m = 0; m < DECODE_MAX_ROWS; ++m) {
            if (m >= M) break;
            float s = warp_allreduce<SumOp>(acc[m]);
            if (lane == m) mine = s;
        }
        if (n + stride < N) fetch_weights(w16, W, n + stride, N, K, 0, lane);
        if (lane < M) decode_epilogue_apply<T, EPI>(a, lane, n, mine, best);
    }
    if (EPI == DECODE_LOGITS_ARGMAX) { /* the block's best per row, then one atomic per block and row */
        __shared__ unsigned long long warp_best[DECODE_WARPS][DECODE_MAX_ROWS];
        if (lane < M) warp_best[warp][lane] = best;
        __syncthreads();
        if (threadIdx.x < M) {
            unsigned long long b = 0;
            for (int w = 0; w < DECODE_WARPS; ++w) b = warp_best[w][threadIdx.x] > b ? warp_best[w][threadIdx.x] : b;
            atomicMax(a.best + threadIdx.x, b);
        }
    }
}

/** @brief Launch one instantiation: at most one wave of blocks, as a programmatic dependent when asked. */
template <typename T, decode_epilogue EPI>
static const char *launch_decode_linear(const decode_linear_args *a)
{
    const void *kernel = (const void *)decode_linear_fused<T, EPI>;
    size_t smem = a->ln_w ? (size_t)a->M * a->K * sizeof(float) : 0;
    /* asked of the runtime once per shared-memory size, not on every launch (a decode step makes ~60) */
    static size_t asked_smem = (size_t)-1;
    static int per_sm = 0;
    if (smem != asked_smem) {
        if (smem > 48 * 1024) { /* above the default, ask for it (the LayerNorm rows of a wide model) */
            int dev, max_smem;
            WB_CUDA_CHECK(cudaGetDevice(&dev));
            WB_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
            if (smem > (size_t)max_smem) return "fused decode linear: M rows of K floats do not fit in shared memory";
            WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        }
        WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, DECODE_WARPS * 32, smem));
        asked_smem = smem;
    }
    int sms;
    wb_current_gpu(NULL, &sms);
    long long wanted = (a->N + DECODE_WARPS - 1) / DECODE_WARPS, wave = (long long)per_sm * sms;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(wanted < wave ? wanted : wave));
    cfg.blockDim = dim3(DECODE_WARPS * 32);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cudaStreamPerThread;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = a->dependent_launch ? 1 : 0;
    WB_CUDA_CHECK(cudaLaunchKernelEx(&cfg, decode_linear_fused<T, EPI>, *a));
    WB_CHECK_LAUNCH("decode_linear_fused");
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
