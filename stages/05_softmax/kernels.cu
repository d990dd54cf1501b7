/**
 * @file stages/05_softmax/kernels.cu
 * @brief Stage 05 — softmax from three passes over memory to one, and LayerNorm
 *        from three passes to one, with the row held in registers.
 *
 * Both are memory-bound: at least one read of x and one write of y. The variants
 * differ in how many times they read x (3, 2, then 1), in how the threads of a row
 * cooperate, and in how wide their loads are. The row reductions (max, sum) come
 * from stage 02's block_reduce.cuh.
 */
#include "kernels.h"

#include <cuda_fp16.h>
#include <stdint.h>
#include <type_traits>

#include "block_reduce.cuh" /* stage 02: SumOp, MaxOp, warp_allreduce, block_allreduce */
#include "cuda_check.h"
#include "device.h" /* wb_current_gpu */
#include "dtype_device.cuh" /* load, store, dispatch over fp32/fp16 */

/* ---------------------------------------------------------------------------
 * Shared pieces: the guards for fully masked rows.
 * ------------------------------------------------------------------------- */

/**
 * @brief The max a row is shifted by: its max, or 0 for a row that is entirely
 *        −∞, so that exp(−∞ − 0) = 0 everywhere and the row comes out as zeros
 *        instead of exp(−∞ − (−∞)) = NaN.
 */
static __device__ __forceinline__ float safe_shift(float m) { return m == -INFINITY ? 0.0f : m; }
/** @brief 1/sum, or 0 for a fully masked row (sum 0). */
static __device__ __forceinline__ float safe_inverse(float sum) { return sum > 0.0f ? 1.0f / sum : 0.0f; }

/** @brief Threads per block of the block-per-row variants that loop over the row. */
#define ROW_THREADS 256

static const char *check_shape(int rows, int cols)
{
    return rows < 1 || cols < 1 ? "needs rows >= 1 and cols >= 1" : NULL;
}

/* ===========================================================================
 * Softmax
 * ========================================================================= */

/**
 * @brief Softmax v1 — one thread per row, three passes: max, Σexp, normalise.
 *
 * The textbook loop, in parallel over rows. Per element: three reads of x and one
 * write of y (16 bytes in fp32 for 4 of output). Worse, neighbouring threads work
 * on neighbouring *rows*: at each step the 32 threads of a warp read 32 addresses
 * `cols` elements apart — 32 separate memory transactions, each using 4 of its 32
 * bytes. And with one thread per row, a 8192-row matrix keeps only 8192 threads busy.
 */
template <typename T>
__global__ void softmax_thread_per_row(const T *x, T *y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const T *xr = x + (long long)r * cols;
    T *yr = y + (long long)r * cols;
    float m = -INFINITY;
    for (int j = 0; j < cols; ++j) m = fmaxf(m, load(xr, j));
    float shift = safe_shift(m), sum = 0.0f;
    for (int j = 0; j < cols; ++j) sum += expf(load(xr, j) - shift);
    float inv = safe_inverse(sum);
    for (int j = 0; j < cols; ++j) store(yr, j, expf(load(xr, j) - shift) * inv);
}

static const char *softmax_v1(wb_dtype dtype, const void *x, void *y, int rows, int cols)
{
    const char *why = check_shape(rows, cols);
    if (why) return why;
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        softmax_thread_per_row<T><<<(rows + 255) / 256, 256>>>((const T *)x, (T *)y, rows, cols);
        WB_CHECK_LAUNCH("softmax_thread_per_row");
        return NULL;
    });
}

/**
 * @brief Softmax v2 — one block per row, block reductions, still three passes.
 *
 * 256 threads share a row: at each step they read 256 consecutive elements, so
 * every warp load is coalesced. The max and the sum are block reductions (warp
 * shuffles, then 32 floats of shared memory — stage 02's block_allreduce). Still
 * three reads of x per element.
 */
template <typename T>
__global__ void softmax_block_three_pass(const T *x, T *y, int cols)
{
    const T *xr = x + (long long)blockIdx.x * cols;
    T *yr = y + (long long)blockIdx.x * cols;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, load(xr, j));
    float shift = safe_shift(block_allreduce<MaxOp>(m));
    float sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += expf(load(xr, j) - shift);
    float inv = safe_inverse(block_allreduce<SumOp>(sum));
    for (int j = threadIdx.x; j < cols; j += blockDim.x) store(yr, j, expf(load(xr, j) - shift) * inv);
}

static const char *softmax_v2(wb_dtype dtype, const void *x, void *y, int rows, int cols)
{
    const char *why = check_shape(rows, cols);
    if (why) return why;
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        softmax_block_three_pass<T><<<rows, ROW_THREADS>>>((const T *)x, (T *)y, cols);
        WB_CHECK_LAUNCH("softmax_block_three_pass");
        return NULL;
    });
}

/**
 * @brief A running (max, sum) pair of online softmax: d = Σ exp(x − m) over the
 *        elements seen so far.
 */
struct MaxSum {
    float m; /**< the largest element seen */
    float d; /**< Σ exp(x − m) over the elements seen */
};

/**
 * @brief Merge two (m, d) pairs: rescale each sum to the common max.
 *        exp(m_a − m)·d_a + exp(m_b − m)·d_b; two −∞ maxima give (−∞, 0).
 */
static __device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b)
{
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, a.d * expf(a.m - m) + b.d * expf(b.m - m)};
}

/** @brief Merge the pairs of a warp; every lane gets the result. */
static __device__ __forceinline__ MaxSum warp_merge(MaxSum v)
{
#pragma unroll
    for (int mask = 16; mask > 0; mask /= 2) {
        MaxSum other = {__shfl_xor_sync(0xffffffffu, v.m, mask), __shfl_xor_sync(0xffffffffu, v.d, mask)};
        v = merge(v, other);
    }
    return v;
}

/** @brief Merge the pairs of a block; every thread gets the result. */
static __device__ __forceinline__ MaxSum block_merge(MaxSum v)
{
    __shared__ float ms[32], ds[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_merge(v);
    if (lane == 0) ms[warp] = v.m, ds[warp] = v.d;
    __syncthreads();
    v = lane < (int)(blockDim.x / 32) ? MaxSum{ms[lane], ds[lane]} : MaxSum{-INFINITY, 0.0f};
    return warp_merge(v);
}

/**
 * @brief Softmax v3 — online softmax: max and sum in one pass, then normalise.
 *
 * Keep a running max m and a sum d of exp(x − m). When a larger element arrives,
 * the sum so far was taken relative to the old max: multiply it by
 * exp(m_old − m_new) and go on (Milakov & Gimelshein, 2018). Pairs merge the same
 * way, so threads, warps and the block combine their (m, d) at the end. Two reads
 * of x instead of three: a third less traffic than v2. This rescaling is the step
 * FlashAttention (stage 06) is built on. It is also the path the register-held
 * variants take for rows longer than they can hold.
 */
template <typename T>
__global__ void softmax_online(const T *x, T *y, int cols)
{
    const T *xr = x + (long long)blockIdx.x * cols;
    T *yr = y + (long long)blockIdx.x * cols;
    MaxSum acc = {-INFINITY, 0.0f};
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = load(xr, j);
        if (v > acc.m) { /* a new max: rescale the sum so far, then count exp(v − v) = 1 */
            acc.d = acc.d * expf(acc.m - v) + 1.0f;
            acc.m = v;
        } else if (v > -INFINITY) { /* one exp per element; masked entries add 0 */
            acc.d += expf(v - acc.m);
        }
    }
    acc = block_merge(acc);
    float shift = safe_shift(acc.m), inv = safe_inverse(acc.d);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) store(yr, j, expf(load(xr, j) - shift) * inv);
}

template <typename T>
static const char *launch_softmax_online(const void *x, void *y, int rows, int cols)
{
    softmax_online<T><<<rows, ROW_THREADS>>>((const T *)x, (T *)y, cols);
    WB_CHECK_LAUNCH("softmax_online");
    return NULL;
}

static const char *softmax_v3(wb_dtype dtype, const void *x, void *y, int rows, int cols)
{
    const char *why = check_shape(rows, cols);
    if (why) return why;
    return dispatch(dtype, [&](auto t) { return launch_softmax_online<decltype(t)>(x, y, rows, cols); });
}

/* ---------------------------------------------------------------------------
 * The row in registers: a group of G threads (a warp, or a whole block) loads its
 * row once into registers, in vectors of V elements (16 bytes), and keeps it there.
 * ------------------------------------------------------------------------- */

/** @brief Load V floats at p (16-byte aligned when V > 1) into out[0..V), 16 bytes per load. */
template <int V>
static __device__ __forceinline__ void load_vec(const float *p, float *out)
{
    if constexpr (V % 4 == 0) {
#pragma unroll
        for (int k = 0; k < V; k += 4) {
            float4 q = *reinterpret_cast<const float4 *>(p + k);
            out[k] = q.x, out[k + 1] = q.y, out[k + 2] = q.z, out[k + 3] = q.w;
        }
    } else {
        out[0] = *p;
    }
}

/** @brief Load V fp16 elements at p into out[0..V) as fp32 (8 per 16-byte load, 4 per 8-byte load). */
template <int V>
static __device__ __forceinline__ void load_vec(const __half *p, float *out)
{
    if constexpr (V == 8 || V == 4) {
        using Bits = typename std::conditional<V == 8, uint4, uint2>::type; /* 16 or 8 bytes */
        Bits q = *reinterpret_cast<const Bits *>(p);
        const __half2 *h = reinterpret_cast<const __half2 *>(&q);
#pragma unroll
        for (int k = 0; k < V / 2; ++k) {
            float2 f = __half22float2(h[k]);
            out[2 * k] = f.x, out[2 * k + 1] = f.y;
        }
    } else {
        out[0] = __half2float(*p);
    }
}

/** @brief Store in[0..V) at p, as one 16-byte store when V > 1. */
template <int V>
static __device__ __forceinline__ void store_vec(float *p, const float *in)
{
    if constexpr (V == 4)
        *reinterpret_cast<float4 *>(p) = make_float4(in[0], in[1], in[2], in[3]);
    else
        *p = in[0];
}

/** @brief Store in[0..V) at p as fp16: one 16-byte store when V == 8, one 8-byte store when V == 4. */
template <int V>
static __device__ __forceinline__ void store_vec(__half *p, const float *in)
{
    if constexpr (V == 8 || V == 4) {
        using Bits = typename std::conditional<V == 8, uint4, uint2>::type;
        Bits q;
        __half2 *h = reinterpret_cast<__half2 *>(&q);
#pragma unroll
        for (int k = 0; k < V / 2; ++k) h[k] = __floats2half2_rn(in[2 * k], in[2 * k + 1]);
        *reinterpret_cast<Bits *>(p) = q;
    } else {
        *p = __float2half_rn(in[0]);
    }
}

/** @brief Reduce over a row's group of G threads: a warp (G = 32) or the block. */
template <typename Op, int G>
static __device__ __forceinline__ float group_allreduce(float v)
{
    if constexpr (G == 32)
        return warp_allreduce<Op>(v);
    else
        return block_allreduce<Op>(v);
}

/**
 * @brief Load a row into v[0..ELEMS): thread t of the group holds vectors
 *        t, t + G, t + 2G, … of V elements each, so each load instruction of a warp
 *        covers 32 consecutive vectors (coalesced). Elements past cols get `fill`.
 */
template <typename T, int V, int ELEMS, int G>
static __device__ __forceinline__ void load_row(const T *row, int cols, int t, float fill, float (&v)[ELEMS])
{
#pragma unroll
    for (int c = 0; c < ELEMS / V; ++c) {
        int j = (c * G + t) * V;
        if (j < cols)
            load_vec<V>(row + j, &v[c * V]);
        else
#pragma unroll
            for (int k = 0; k < V; ++k) v[c * V + k] = fill;
    }
}

/** @brief Store v[0..ELEMS) back to the row, in the layout of load_row. */
template <typename T, int V, int ELEMS, int G>
static __device__ __forceinline__ void store_row(T *row, int cols, int t, const float (&v)[ELEMS])
{
#pragma unroll
    for (int c = 0; c < ELEMS / V; ++c) {
        int j = (c * G + t) * V;
        if (j < cols) store_vec<V>(row + j, &v[c * V]);
    }
}

/**
 * @brief Softmax v4/v5 — the row in registers: one read, one write.
 *
 * A group of G threads owns a row (G = 32: one warp per row, v4; G = 512: one
 * block per row, v5). It loads the row once into registers with 16-byte loads
 * (ELEMS elements per thread), takes the max and the sum from the registers, and
 * writes y: 8 bytes of traffic per fp32 element, half of v2's 16, and the least
 * possible. A warp per row needs no shared memory and no barrier at all (shuffles
 * only) and suits short rows (attention rows, C ≤ 1024); a block per row holds up
 * to 16384 elements. Out-of-range elements are −∞, which contribute exp = 0.
 */
template <typename T, int V, int ELEMS, int G>
__global__ void softmax_registers(const T *x, T *y, int rows, int cols)
{
    int row = blockIdx.x * (blockDim.x / G) + threadIdx.x / G, t = threadIdx.x % G;
    if (row >= rows) return; /* whole groups exit together: rows are uniform per group */
    float v[ELEMS];
    load_row<T, V, ELEMS, G>(x + (long long)row * cols, cols, t, -INFINITY, v);
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) m = fmaxf(m, v[k]);
    float shift = safe_shift(group_allreduce<MaxOp, G>(m)), sum = 0.0f;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) sum += (v[k] = expf(v[k] - shift));
    float inv = safe_inverse(group_allreduce<SumOp, G>(sum));
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) v[k] *= inv;
    store_row<T, V, ELEMS, G>(y + (long long)row * cols, cols, t, v);
}

/**
 * @brief Pick the instantiation for a row: vectors of VEC elements (16 bytes unless
 *        asked otherwise) when every row starts aligned to one (cols a multiple of
 *        VEC), else scalars; then the fewest ELEMS per thread that hold the row.
 *        Calls f(V, ELEMS) as compile-time values.
 */
template <typename T, int G, int VEC = 16 / (int)sizeof(T), typename F>
static const char *with_row_layout(int cols, F f)
{
    int per_thread = (cols + G - 1) / G;
    bool vec = cols % VEC == 0;
    if (per_thread > 32) return "row too long for registers";
    if (vec) {
        if (per_thread <= VEC) return f(std::integral_constant<int, VEC>(), std::integral_constant<int, VEC>());
        if (per_thread <= 2 * VEC) return f(std::integral_constant<int, VEC>(), std::integral_constant<int, 2 * VEC>());
        if (per_thread <= 16 && VEC <= 16) return f(std::integral_constant<int, VEC>(), std::integral_constant<int, 16>());
        return f(std::integral_constant<int, VEC>(), std::integral_constant<int, 32>());
    }
    if (per_thread <= 4) return f(std::integral_constant<int, 1>(), std::integral_constant<int, 4>());
    if (per_thread <= 8) return f(std::integral_constant<int, 1>(), std::integral_constant<int, 8>());
    if (per_thread <= 16) return f(std::integral_constant<int, 1>(), std::integral_constant<int, 16>());
    return f(std::integral_constant<int, 1>(), std::integral_constant<int, 32>());
}

#ifndef WARP_ROWS_PER_BLOCK
/** @brief Rows per block of v4 (one warp each); -DWARP_ROWS_PER_BLOCK=8 tries another (exercise 1). */
#define WARP_ROWS_PER_BLOCK 4
#endif

/**
 * @brief Threads of v5's block (and LayerNorm v3's), all on one row. On a T4, 512:
 *        each thread holds up to 32 elements, so rows up to 16384 fit. A GPU with
 *        fast memory (sm_80 and later) needs more bytes in flight per SM, so when the
 *        row fits in 256 threads (8192 elements) it takes 256, and each thread issues
 *        twice as many 16-byte loads before it waits. Measured on the H200, 8192-wide
 *        rows: fp16 softmax 89.8% of the roof with 512 threads, 94.9% with 256;
 *        LayerNorm fp16 65.3% and 85.1% (when its fp16 loads were 8 wide; they are 4
 *        wide now, the page's LayerNorm section); fp32 within 1.2% either way (1024
 *        threads: 65.7% and 60.2%).
 */
static int block_row_threads(int cols)
{
    int cc;
    wb_current_gpu(&cc, NULL);
    return cc >= 80 && cols <= 256 * 32 ? 256 : 512;
}

/** @brief Call f with the block size block_row_threads() chose, as a compile-time constant. */
template <typename F>
static const char *with_block_row_threads(int cols, F f)
{
    if (block_row_threads(cols) == 256) return f(std::integral_constant<int, 256>());
    return f(std::integral_constant<int, 512>());
}

static const char *softmax_v4(wb_dtype dtype, const void *x, void *y, int rows, int cols)
{
    const char *why = check_shape(rows, cols);
    if (why) return why;
    if (cols > 32 * 32) return "one warp holds at most 1024 elements per row: use v5";
    return dispatch(dtype, [&](auto t) {
        using T = decltype(t);
        return with_row_layout<T, 32>(cols, [&](auto V, auto E) -> const char * {
            int blocks = (rows + WARP_ROWS_PER_BLOCK - 1) / WARP_ROWS_PER_BLOCK;
            softmax_registers<T, V(), E(), 32><<<blocks, 32 * WARP_ROWS_PER_BLOCK>>>((const T *)x, (T *)y, rows, cols);
            WB_CHECK_LAUNCH("softmax_registers (warp per row)");
            return NULL;
        });
    });
}

static const char *softmax_v5(wb_dtype dtype, const void *x, void *y, int rows, int cols)
{
    const char *why = check_shape(rows, cols);
    if (why) return why;
    return dispatch(dtype, [&](auto t) {
        using T = decltype(t);
        if (cols > ROW_IN_REGISTERS_MAX_COLS) return launch_softmax_online<T>(x, y, rows, cols); /* the long-row path */
        return with_block_row_threads(cols, [&](auto G) {
            return with_row_layout<T, G()>(cols, [&](auto V, auto E) -> const char * {
                softmax_registers<T, V(), E(), G()><<<rows, G()>>>((const T *)x, (T *)y, rows, cols);
                WB_CHECK_LAUNCH("softmax_registers (block per row)");
                return NULL;
            });
        });
    });
}

extern "C" const softmax_variant softmax_variants[] = {
    {"v1", "one thread per row, 3 passes (uncoalesced)", softmax_v1},
    {"v2", "block per row, block reductions, 3 passes", softmax_v2},
    {"v3", "online softmax: max+sum in 1 pass, 2 reads", softmax_v3},
    {"v4", "warp per row, row in registers, 1 read", softmax_v4},
    {"v5", "block per row, row in registers, 1 read", softmax_v5},
    {"ex", "your kernel (exercise.cu)", softmax_exercise},
};
extern "C" const int softmax_variant_count = sizeof softmax_variants / sizeof softmax_variants[0];

/* ===========================================================================
 * LayerNorm
 * ========================================================================= */

/**
 * @brief LayerNorm v1 — one block per row, two-pass statistics, three reads.
 *
 * Pass 1 sums x for the mean; pass 2 sums (x − mean)² for the variance (the
 * two-pass form: never E[x²] − E[x]², which cancels catastrophically when the
 * mean is large against the spread); pass 3 normalises. Three reads of x.
 */
template <typename T>
__global__ void layernorm_three_pass(const T *x, const float *w, const float *b, float eps, T *y, float *mean,
                                     float *rstd, int cols)
{
    const T *xr = x + (long long)blockIdx.x * cols;
    T *yr = y + (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += load(xr, j);
    float mu = block_allreduce<SumOp>(s) / cols;
    float q = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float d = load(xr, j) - mu;
        q += d * d;
    }
    float r = rsqrtf(block_allreduce<SumOp>(q) / cols + eps);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) store(yr, j, (load(xr, j) - mu) * r * w[j] + b[j]);
    if (threadIdx.x == 0) mean[blockIdx.x] = mu, rstd[blockIdx.x] = r;
}

static const char *layernorm_v1(wb_dtype dtype, const void *x, const float *w, const float *b, float eps, void *y,
                                float *mean, float *rstd, int rows, int cols)
{
    const char *why = check_shape(rows, cols);
    if (why) return why;
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        layernorm_three_pass<T><<<rows, ROW_THREADS>>>((const T *)x, w, b, eps, (T *)y, mean, rstd, cols);
        WB_CHECK_LAUNCH("layernorm_three_pass");
        return NULL;
    });
}

/** @brief Welford's running statistics of the elements seen: count, mean, Σ(x − mean)². */
struct WelfordState {
    float n;    /**< elements seen */
    float mean; /**< their mean */
    float m2;   /**< Σ (x − mean)² */
};

/** @brief Chan's merge of two Welford states (exact in exact arithmetic, stable in floating point). */
static __device__ __forceinline__ WelfordState merge(WelfordState a, WelfordState b)
{
    float n = a.n + b.n;
    if (n == 0.0f) return a;
    float delta = b.mean - a.mean, fb = b.n / n;
    return {n, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.n * fb};
}

/** @brief Merge the states of a block; every thread gets the result. */
static __device__ __forceinline__ WelfordState block_merge(WelfordState v)
{
    __shared__ float ns[32], means[32], m2s[32];
#pragma unroll
    for (int mask = 16; mask > 0; mask /= 2)
        v = merge(v, WelfordState{__shfl_xor_sync(0xffffffffu, v.n, mask), __shfl_xor_sync(0xffffffffu, v.mean, mask),
                             __shfl_xor_sync(0xffffffffu, v.m2, mask)});
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) ns[warp] = v.n, means[warp] = v.mean, m2s[warp] = v.m2;
    __syncthreads();
    v = lane < (int)(blockDim.x / 32) ? WelfordState{ns[lane], means[lane], m2s[lane]} : WelfordState{0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int mask = 16; mask > 0; mask /= 2)
        v = merge(v, WelfordState{__shfl_xor_sync(0xffffffffu, v.n, mask), __shfl_xor_sync(0xffffffffu, v.mean, mask),
                             __shfl_xor_sync(0xffffffffu, v.m2, mask)});
    return v;
}

/**
 * @brief LayerNorm v2 — Welford: mean and variance in one pass, then normalise.
 *
 * Each thread updates (n, mean, M2) element by element (Welford, 1962): the
 * variance comes out of the same pass as the mean, without the cancellation of
 * E[x²] − E[x]². States of threads, warps and the block merge pairwise (Chan et
 * al., 1979). Two reads of x instead of three.
 */
template <typename T>
__global__ void layernorm_welford(const T *x, const float *w, const float *b, float eps, T *y, float *mean,
                                  float *rstd, int cols)
{
    const T *xr = x + (long long)blockIdx.x * cols;
    T *yr = y + (long long)blockIdx.x * cols;
    WelfordState acc = {0.0f, 0.0f, 0.0f};
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = load(xr, j);
        acc.n += 1.0f;
        float delta = v - acc.mean;
        acc.mean += delta / acc.n;
        acc.m2 += delta * (v - acc.mean);
    }
    acc = block_merge(acc);
    float mu = acc.mean, r = rsqrtf(acc.m2 / cols + eps);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) store(yr, j, (load(xr, j) - mu) * r * w[j] + b[j]);
    if (threadIdx.x == 0) mean[blockIdx.x] = mu, rstd[blockIdx.x] = r;
}

template <typename T>
static const char *launch_layernorm_welford(const void *x, const float *w, const float *b, float eps, void *y,
                                            float *mean, float *rstd, int rows, int cols)
{
    layernorm_welford<T><<<rows, ROW_THREADS>>>((const T *)x, w, b, eps, (T *)y, mean, rstd, cols);
    WB_CHECK_LAUNCH("layernorm_welford");
    return NULL;
}

static const char *layernorm_v2(wb_dtype dtype, const void *x, const float *w, const float *b, float eps, void *y,
                                float *mean, float *rstd, int rows, int cols)
{
    const char *why = check_shape(rows, cols);
    if (why) return why;
    return dispatch(dtype, [&](auto t) {
        return launch_layernorm_welford<decltype(t)>(x, w, b, eps, y, mean, rstd, rows, cols);
    });
}

/**
 * @brief LayerNorm v3 — the row in registers, 16-byte loads: one read, one write.
 *
 * As softmax v4/v5: a warp (rows ≤ 1024) or a block (≤ 16384) loads its row once.
 * With the row in registers the exact two-pass statistics cost no extra memory
 * traffic: the mean from the registers, then Σ(x − mean)² from the same registers.
 * Longer rows take v2's Welford path.
 *
 * A thread's vector is 4 elements whatever x's type: the fp32 weight and bias are
 * read in 16-byte loads of 4, and a warp's load of them is coalesced only if its
 * lanes' 4-element pieces are consecutive. With fp16 x in 8-element (16-byte)
 * vectors, each lane needed two float4 of weight 32 bytes apart: 28.8 sectors per
 * request where 16 is coalesced, and weight and bias take twice the L1 traffic
 * of x and y together. So fp16 x comes in 8-byte loads of 4 (measured on the H200
 * at 8192 × 8192: 85.3% of the roof with 16-byte loads of x, 92.0% with 8-byte).
 */
template <typename T, int V, int ELEMS, int G>
__global__ void layernorm_registers(const T *x, const float *w, const float *b, float eps, T *y, float *mean,
                                    float *rstd, int rows, int cols)
{
    int row = blockIdx.x * (blockDim.x / G) + threadIdx.x / G, t = threadIdx.x % G;
    if (row >= rows) return;
    float v[ELEMS];
    load_row<T, V, ELEMS, G>(x + (long long)row * cols, cols, t, 0.0f, v);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) s += v[k];
    float mu = group_allreduce<SumOp, G>(s) / cols, q = 0.0f;
#pragma unroll
    for (int c = 0; c < ELEMS / V; ++c)
#pragma unroll
        for (int k = 0; k < V; ++k) {
            float d = (c * G + t) * V < cols ? v[c * V + k] - mu : 0.0f; /* padding is not data */
            q += d * d;
        }
    float r = rsqrtf(group_allreduce<SumOp, G>(q) / cols + eps);
#pragma unroll
    for (int c = 0; c < ELEMS / V; ++c) {
        int j = (c * G + t) * V;
        if (j >= cols) continue;
        float wv[V], bv[V]; /* weight and bias with the same 16-byte loads (they stay in L1/L2) */
        load_vec<V>(w + j, wv);
        load_vec<V>(b + j, bv);
#pragma unroll
        for (int k = 0; k < V; ++k) v[c * V + k] = (v[c * V + k] - mu) * r * wv[k] + bv[k];
    }
    store_row<T, V, ELEMS, G>(y + (long long)row * cols, cols, t, v);
    if (t == 0) mean[row] = mu, rstd[row] = r;
}

/** @brief Elements per vector of LayerNorm v3, for fp32 and fp16 x alike: one 16-byte load of the fp32 weight or bias. */
constexpr int PARAM_VEC = 4;

static const char *layernorm_v3(wb_dtype dtype, const void *x, const float *w, const float *b, float eps, void *y,
                                float *mean, float *rstd, int rows, int cols)
{
    const char *why = check_shape(rows, cols);
    if (why) return why;
    return dispatch(dtype, [&](auto t) {
        using T = decltype(t);
        if (cols > ROW_IN_REGISTERS_MAX_COLS) return launch_layernorm_welford<T>(x, w, b, eps, y, mean, rstd, rows, cols);
        if (cols <= 32 * 32)
            return with_row_layout<T, 32, PARAM_VEC>(cols, [&](auto V, auto E) -> const char * {
                int blocks = (rows + WARP_ROWS_PER_BLOCK - 1) / WARP_ROWS_PER_BLOCK;
                layernorm_registers<T, V(), E(), 32><<<blocks, 32 * WARP_ROWS_PER_BLOCK>>>(
                    (const T *)x, w, b, eps, (T *)y, mean, rstd, rows, cols);
                WB_CHECK_LAUNCH("layernorm_registers (warp per row)");
                return NULL;
            });
        return with_block_row_threads(cols, [&](auto G) {
            return with_row_layout<T, G(), PARAM_VEC>(cols, [&](auto V, auto E) -> const char * {
                layernorm_registers<T, V(), E(), G()><<<rows, G()>>>((const T *)x, w, b, eps, (T *)y, mean, rstd,
                                                                     rows, cols);
                WB_CHECK_LAUNCH("layernorm_registers (block per row)");
                return NULL;
            });
        });
    });
}

extern "C" const layernorm_variant layernorm_variants[] = {
    {"v1", "block per row, two-pass stats, 3 reads", layernorm_v1},
    {"v2", "Welford: stats in 1 pass, 2 reads", layernorm_v2},
    {"v3", "row in registers, 4-wide loads, 1 read", layernorm_v3},
};
extern "C" const int layernorm_variant_count = sizeof layernorm_variants / sizeof layernorm_variants[0];
