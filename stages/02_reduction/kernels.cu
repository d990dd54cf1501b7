/**
 * @file stages/02_reduction/kernels.cu
 * @brief Stage 02 — reductions: from one atomic per element to vectorized
 *        grid-stride loops that read at the memory roof, with CUB as the peer.
 *
 * A reduction reads n elements and writes one number: it is bound by reading.
 * Every variant below reads the same n elements; what changes is how much work
 * (instructions, shared-memory traffic, synchronisation, launches) each element
 * costs on the way, and whether that work hides behind the memory traffic.
 *
 * The kernels are templates over the element type T (float, or __half widened to
 * float on load) and the operation Op (SumOp, MaxOp), so one tree serves all four
 * problems; accumulation is always fp32.
 */
#include "kernels.h"

#include <cub/device/device_reduce.cuh>
#include <cub/version.cuh>
#if CUB_VERSION >= 200800 /* CCCL 2.8 (CUDA 12.9) and later: TransformReduce and cuda::maximum */
#include <cuda/functional>
#else /* CUDA 12.4-12.8: the same reduction through a transform iterator */
#include <cub/iterator/transform_input_iterator.cuh>
#endif
#include <cuda_fp16.h>
#include <limits.h>
#include <stdint.h>

#include "block_reduce.cuh"
#include "cuda_check.h"
#include "device.h"

/* ---------------------------------------------------------------------------
 * The pieces every variant shares.
 * ------------------------------------------------------------------------- */

/** @brief Widen an element to the fp32 accumulator: a float is already there... */
static __device__ __forceinline__ float to_float(float x) { return x; }
/** @brief ... an fp16 value is converted exactly (every fp16 is a float). */
static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

/**
 * @brief Call f(T{}, Op{}) with the element type and operation of the run: the
 *        one place where run-time (op, dtype) turns into template arguments.
 */
template <typename F>
static auto dispatch(reduce_op op, wb_dtype dtype, F f)
{
    if (dtype == WB_F32) return op == REDUCE_SUM ? f(float(), SumOp()) : f(float(), MaxOp());
    return op == REDUCE_SUM ? f(__half(), SumOp()) : f(__half(), MaxOp());
}

static long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

/* ---------------------------------------------------------------------------
 * v1 — one global atomic per element.
 * ------------------------------------------------------------------------- */

/** @brief atomicAdd is the Σ atomic; max needs the trick in atomic_max_float. */
static __device__ __forceinline__ void atomic_combine(SumOp, float *addr, float v) { atomicAdd(addr, v); }

/**
 * @brief Atomic max of floats with integer atomics: floats of the same sign are
 *        ordered like their bit patterns — as signed ints when the sign bit is
 *        clear, in reverse as unsigned ints when it is set.
 */
static __device__ __forceinline__ void atomic_combine(MaxOp, float *addr, float v)
{
    if (__float_as_int(v) >= 0)
        atomicMax((int *)addr, __float_as_int(v));
    else
        atomicMin((unsigned int *)addr, __float_as_uint(v));
}

/** @brief Set the result to the identity before v1's atomics combine into it. */
template <typename Op>
__global__ void store_identity(float *out) { *out = Op::identity(); }

/**
 * @brief v1 — every thread combines its element into *out with one atomic.
 *
 * Correct and short, but all n atomics hit the same 4 bytes: the L2 slice that
 * owns that address performs them one after another, so the time grows with n at
 * the rate of one atomic unit, not with the bandwidth. It is also not
 * deterministic: the order of the additions changes from run to run, and fp32
 * addition is not associative, so the last bits of the sum change too.
 */
template <typename T, typename Op>
__global__ void reduce_atomic_per_element(const T *x, long long n, float *out)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomic_combine(Op(), out, to_float(x[i]));
}

static size_t reduce_atomic_workspace(reduce_op, wb_dtype, long long) { return 0; }

static const char *reduce_atomic(reduce_op op, wb_dtype dtype, const void *x, long long n, float *out,
                                     void *, size_t)
{
    if (n < 1) return "needs n >= 1";
    return dispatch(op, dtype, [&](auto t, auto o) -> const char * {
        using T = decltype(t);
        using Op = decltype(o);
        store_identity<Op><<<1, 1>>>(out);
        WB_CHECK_LAUNCH("store_identity");
        reduce_atomic_per_element<T, Op><<<(unsigned)ceil_div(n, 256), 256>>>((const T *)x, n, out);
        WB_CHECK_LAUNCH("reduce_atomic_per_element");
        return NULL;
    });
}

/* ---------------------------------------------------------------------------
 * v2–v4 — shared-memory trees: each block reduces its chunk to one partial; the
 * same kernel runs again over the partials until one value is left. No atomics.
 * ------------------------------------------------------------------------- */

/** @brief Threads per block of the tree variants, short. */
#define TREE REDUCE_TREE_THREADS

/* Two partial buffers: ceil(n/E) floats, then ceil(n/E/E). */
static size_t tree_workspace(long long n, int elems_per_block)
{
    long long b1 = ceil_div(n, elems_per_block);
    return (size_t)(b1 + ceil_div(b1, elems_per_block)) * sizeof(float);
}

/**
 * @brief Run `first` over x, then `rest` over the partials, pass after pass, until
 *        one value is left in out. Workspace: two partial buffers used in turn.
 */
template <typename T>
static const char *tree_passes(void (*first)(const T *, long long, float *),
                               void (*rest)(const float *, long long, float *), int elems_per_block,
                               const T *x, long long n, float *out, float *workspace, size_t workspace_bytes)
{
    if (n < 1) return "needs n >= 1";
    if (workspace_bytes < tree_workspace(n, elems_per_block)) return "workspace too small";
    long long blocks = ceil_div(n, elems_per_block);
    float *buf[2] = {workspace, workspace + blocks};
    first<<<(unsigned)blocks, TREE>>>(x, n, blocks == 1 ? out : buf[0]);
    WB_CHECK_LAUNCH("tree reduction, first pass");
    int cur = 0;
    while (blocks > 1) {
        long long count = blocks;
        blocks = ceil_div(count, elems_per_block);
        rest<<<(unsigned)blocks, TREE>>>(buf[cur], count, blocks == 1 ? out : buf[1 - cur]);
        WB_CHECK_LAUNCH("tree reduction, pass over partials");
        cur = 1 - cur;
    }
    return NULL;
}

/**
 * @brief v2 — shared-memory tree, interleaved addressing (divergent warps).
 *
 * Each block loads 256 elements into shared memory and halves them 8 times. In
 * step s the threads whose index is a multiple of 2s work: at s = 1 half the
 * threads of every warp are idle (divergence), and from s = 32 on whole warps are
 * scheduled to do one add each. The `%` costs a dozen instructions per step.
 * Per element: one global load, ~2 shared accesses, 8 barriers per block.
 */
template <typename T, typename Op>
__global__ void reduce_smem_interleaved(const T *x, long long n, float *partial)
{
    __shared__ float s[TREE];
    unsigned tid = threadIdx.x;
    long long i = (long long)blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? to_float(x[i]) : Op::identity();
    __syncthreads();
    for (unsigned stride = 1; stride < blockDim.x; stride *= 2) {
        if (tid % (2 * stride) == 0) s[tid] = Op::combine(s[tid], s[tid + stride]);
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = s[0];
}

static size_t reduce_interleaved_workspace(reduce_op, wb_dtype, long long n) { return tree_workspace(n, TREE); }

static const char *reduce_interleaved(reduce_op op, wb_dtype dtype, const void *x, long long n, float *out,
                                          void *ws, size_t ws_bytes)
{
    return dispatch(op, dtype, [&](auto t, auto o) {
        using T = decltype(t);
        using Op = decltype(o);
        return tree_passes<T>(reduce_smem_interleaved<T, Op>, reduce_smem_interleaved<float, Op>, TREE,
                              (const T *)x, n, out, (float *)ws, ws_bytes);
    });
}

/**
 * @brief v3 — shared-memory tree, sequential addressing.
 *
 * Step s lets threads 0..s−1 combine s[tid] with s[tid + s]: the working threads
 * are contiguous, so warps are either fully busy or fully idle (no divergence
 * until the last 32), the `%` is gone, and a warp's 32 consecutive shared-memory
 * addresses fall in 32 different banks (no conflicts). Same bytes as v2.
 */
template <typename T, typename Op>
__global__ void reduce_smem_sequential(const T *x, long long n, float *partial)
{
    __shared__ float s[TREE];
    unsigned tid = threadIdx.x;
    long long i = (long long)blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? to_float(x[i]) : Op::identity();
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] = Op::combine(s[tid], s[tid + stride]);
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = s[0];
}

static size_t reduce_sequential_workspace(reduce_op, wb_dtype, long long n) { return tree_workspace(n, TREE); }

static const char *reduce_sequential(reduce_op op, wb_dtype dtype, const void *x, long long n, float *out,
                                         void *ws, size_t ws_bytes)
{
    return dispatch(op, dtype, [&](auto t, auto o) {
        using T = decltype(t);
        using Op = decltype(o);
        return tree_passes<T>(reduce_smem_sequential<T, Op>, reduce_smem_sequential<float, Op>, TREE,
                              (const T *)x, n, out, (float *)ws, ws_bytes);
    });
}

/**
 * @brief v4 — first combine during the load, then shuffles for the last 32.
 *
 * In v3 half the threads go idle after the first step. Here each thread loads two
 * elements (i and i + 256) and combines them before touching shared memory, so a
 * block covers 512 elements: half the blocks, half the barriers and shared-memory
 * traffic per element. The tree stops at 64 values; warp 0 finishes with five
 * __shfl_down_sync steps and no barrier.
 */
template <typename T, typename Op>
__global__ void reduce_load_two_then_shuffle(const T *x, long long n, float *partial)
{
    __shared__ float s[TREE];
    unsigned tid = threadIdx.x;
    long long i = (long long)blockIdx.x * (2 * blockDim.x) + tid;
    float v = i < n ? to_float(x[i]) : Op::identity();
    if (i + blockDim.x < n) v = Op::combine(v, to_float(x[i + blockDim.x]));
    s[tid] = v;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 32; stride /= 2) {
        if (tid < stride) s[tid] = v = Op::combine(v, s[tid + stride]);
        __syncthreads();
    }
    if (tid < 32) {
        v = warp_reduce<Op>(Op::combine(s[tid], s[tid + 32]));
        if (tid == 0) partial[blockIdx.x] = v;
    }
}

static size_t reduce_load_two_workspace(reduce_op, wb_dtype, long long n) { return tree_workspace(n, 2 * TREE); }

static const char *reduce_load_two(reduce_op op, wb_dtype dtype, const void *x, long long n, float *out,
                                       void *ws, size_t ws_bytes)
{
    return dispatch(op, dtype, [&](auto t, auto o) {
        using T = decltype(t);
        using Op = decltype(o);
        return tree_passes<T>(reduce_load_two_then_shuffle<T, Op>, reduce_load_two_then_shuffle<float, Op>,
                              2 * TREE, (const T *)x, n, out, (float *)ws, ws_bytes);
    });
}

/* ---------------------------------------------------------------------------
 * v5, v6 — grid-stride: one block per resident slot, each thread accumulating
 * many elements in a register; two passes, no atomics: deterministic.
 * ------------------------------------------------------------------------- */

/** @brief Threads per block of the grid-stride variants, short. */
#define GRID REDUCE_GRID_THREADS

/**
 * @brief v5 — grid-stride loop, warp shuffles, deterministic two-pass finish.
 *
 * The grid fills the GPU once (SMs × resident blocks, a fixed number for a given
 * GPU), so each thread adds n / (grid × 512) elements in a register: per element
 * one load and one add, no shared memory, no barrier. Each block ends with one
 * block_reduce and writes its partial; a second launch of the same kernel with one
 * block reduces the partials. The order of every addition depends only on n and
 * the grid, never on timing: the result is bit-identical run to run.
 */
template <typename T, typename Op>
__global__ void reduce_grid_stride(const T *__restrict__ x, long long n, float *__restrict__ partial)
{
    float acc = Op::identity();
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc = Op::combine(acc, to_float(x[i]));
    acc = block_reduce<Op>(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* Blocks of the first pass: enough to fill the GPU once, fewer for small n. */
template <typename T, typename Op>
static int grid_stride_blocks(long long work_items)
{
    static int fill = 0; /* one per instantiation, asked once */
    if (fill == 0) fill = wb_blocks_to_fill_gpu((const void *)reduce_grid_stride<T, Op>, GRID, 0);
    long long want = ceil_div(work_items, GRID);
    return (int)(want < 1 ? 1 : want < fill ? want : fill);
}

/* The second pass: one block over the first pass's partials. */
template <typename Op>
static void finish_partials(const float *partial, int count, float *out)
{
    reduce_grid_stride<float, Op><<<1, GRID>>>(partial, count, out);
    WB_CHECK_LAUNCH("reduce_grid_stride (second pass)");
}

static size_t reduce_grid_stride_workspace(reduce_op op, wb_dtype dtype, long long n)
{
    return dispatch(op, dtype, [&](auto t, auto o) {
        return (size_t)grid_stride_blocks<decltype(t), decltype(o)>(n) * sizeof(float);
    });
}

static const char *reduce_grid_stride_two_pass(reduce_op op, wb_dtype dtype, const void *x, long long n,
                                                   float *out, void *ws, size_t ws_bytes)
{
    if (n < 1) return "needs n >= 1";
    return dispatch(op, dtype, [&](auto t, auto o) -> const char * {
        using T = decltype(t);
        using Op = decltype(o);
        int blocks = grid_stride_blocks<T, Op>(n);
        if (ws_bytes < blocks * sizeof(float)) return "workspace too small";
        reduce_grid_stride<T, Op><<<blocks, GRID>>>((const T *)x, n, blocks == 1 ? out : (float *)ws);
        WB_CHECK_LAUNCH("reduce_grid_stride");
        if (blocks > 1) finish_partials<Op>((const float *)ws, blocks, out);
        return NULL;
    });
}

/** @brief Combine the 16 bytes of a uint4 as 4 floats... */
template <typename Op>
static __device__ __forceinline__ float combine16(float acc, uint4 raw, float)
{
    acc = Op::combine(acc, __uint_as_float(raw.x));
    acc = Op::combine(acc, __uint_as_float(raw.y));
    acc = Op::combine(acc, __uint_as_float(raw.z));
    return Op::combine(acc, __uint_as_float(raw.w));
}

/** @brief ... or as 8 halves (4 half2, each widened with one instruction). */
template <typename Op>
static __device__ __forceinline__ float combine16(float acc, uint4 raw, __half)
{
    const __half2 *h = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float2 f = __half22float2(h[k]);
        acc = Op::combine(Op::combine(acc, f.x), f.y);
    }
    return acc;
}

/** @brief Independent 16-byte loads each thread has in flight per loop step. */
#define LOADS_IN_FLIGHT 4

/**
 * @brief v6 — v5 with 16-byte loads, four of them in flight per thread.
 *
 * Each load instruction now brings 16 bytes (4 floats or 8 halves) instead of 4
 * or 2, so a warp issues a quarter (an eighth for fp16) of v5's load instructions
 * and loop iterations. The four loads of one step are issued before any is used,
 * so each thread keeps 64 bytes in flight: enough, over the whole GPU, to cover the
 * memory latency (Little's law: bandwidth × latency ≈ 3 TB/s × 0.6 µs ≈ 2 MB).
 * The tail (fewer than one vector) is read by the first threads one by one.
 * Contract: x aligned to 16 bytes. Deterministic as v5.
 */
template <typename T, typename Op>
__global__ void reduce_vectorized(const T *__restrict__ x, long long n, float *__restrict__ partial)
{
    const int per_vec = 16 / sizeof(T);
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    long long n_vec = n / per_vec;
    long long stride = (long long)gridDim.x * blockDim.x;
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = Op::identity();
    long long i = first;
    for (; i + (LOADS_IN_FLIGHT - 1) * stride < n_vec; i += LOADS_IN_FLIGHT * stride) {
        uint4 v[LOADS_IN_FLIGHT];
#pragma unroll
        for (int k = 0; k < LOADS_IN_FLIGHT; ++k) v[k] = xv[i + k * stride];
#pragma unroll
        for (int k = 0; k < LOADS_IN_FLIGHT; ++k) acc = combine16<Op>(acc, v[k], T());
    }
    for (; i < n_vec; i += stride) acc = combine16<Op>(acc, xv[i], T());
    long long tail = n_vec * per_vec + first;
    if (tail < n) acc = Op::combine(acc, to_float(x[tail]));
    acc = block_reduce<Op>(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <typename T, typename Op>
static int vectorized_blocks(long long n)
{
    static int fill = 0;
    if (fill == 0) fill = wb_blocks_to_fill_gpu((const void *)reduce_vectorized<T, Op>, GRID, 0);
    long long want = ceil_div(n / (16 / (long long)sizeof(T)), (long long)GRID * LOADS_IN_FLIGHT);
    return (int)(want < 1 ? 1 : want < fill ? want : fill);
}

static size_t reduce_vectorized_workspace(reduce_op op, wb_dtype dtype, long long n)
{
    return dispatch(op, dtype, [&](auto t, auto o) {
        return (size_t)vectorized_blocks<decltype(t), decltype(o)>(n) * sizeof(float);
    });
}

static const char *reduce_vectorized_two_pass(reduce_op op, wb_dtype dtype, const void *x, long long n,
                                                  float *out, void *ws, size_t ws_bytes)
{
    if (n < 1) return "needs n >= 1";
    if (((uintptr_t)x & 15u) != 0) return "needs x aligned to 16 bytes";
    return dispatch(op, dtype, [&](auto t, auto o) -> const char * {
        using T = decltype(t);
        using Op = decltype(o);
        int blocks = vectorized_blocks<T, Op>(n);
        if (ws_bytes < blocks * sizeof(float)) return "workspace too small";
        reduce_vectorized<T, Op><<<blocks, GRID>>>((const T *)x, n, blocks == 1 ? out : (float *)ws);
        WB_CHECK_LAUNCH("reduce_vectorized");
        if (blocks > 1) finish_partials<Op>((const float *)ws, blocks, out);
        return NULL;
    });
}

/* ---------------------------------------------------------------------------
 * The peer: CUB's DeviceReduce (CUDA Toolkit), tuned per architecture.
 * ------------------------------------------------------------------------- */

/** @brief fp16 → fp32 on the fly, so CUB accumulates fp16 input in fp32 as our variants do. */
struct HalfToFloat {
    /** @brief h widened to fp32. */
    __device__ float operator()(__half h) const { return __half2float(h); }
};

/* One call for both uses of CUB's two-phase API: temp == NULL asks the size. */
static cudaError_t cub_reduce(reduce_op op, wb_dtype dtype, const void *x, long long n, float *out,
                              void *temp, size_t *temp_bytes)
{
    if (dtype == WB_F32 && op == REDUCE_SUM) return cub::DeviceReduce::Sum(temp, *temp_bytes, (const float *)x, out, n);
    if (dtype == WB_F32) return cub::DeviceReduce::Max(temp, *temp_bytes, (const float *)x, out, n);
#if CUB_VERSION >= 200800
    if (op == REDUCE_SUM)
        return cub::DeviceReduce::TransformReduce(temp, *temp_bytes, (const __half *)x, out, n,
                                                  cuda::std::plus<float>(), HalfToFloat(), 0.0f);
    return cub::DeviceReduce::TransformReduce(temp, *temp_bytes, (const __half *)x, out, n,
                                              cuda::maximum<float>(), HalfToFloat(), -INFINITY);
#else
    /* Older CUB has no TransformReduce: an iterator widens each fp16 element as Reduce reads it, the same work */
    cub::TransformInputIterator<float, HalfToFloat, const __half *> xf((const __half *)x, HalfToFloat());
    if (op == REDUCE_SUM) return cub::DeviceReduce::Reduce(temp, *temp_bytes, xf, out, n, cub::Sum(), 0.0f);
    return cub::DeviceReduce::Reduce(temp, *temp_bytes, xf, out, n, cub::Max(), -INFINITY);
#endif
}

static size_t reduce_cub_workspace(reduce_op op, wb_dtype dtype, long long n)
{
    size_t bytes = 0;
    WB_CUDA_CHECK(cub_reduce(op, dtype, NULL, n, NULL, NULL, &bytes));
    return bytes;
}

static const char *reduce_cub(reduce_op op, wb_dtype dtype, const void *x, long long n, float *out, void *ws,
                                  size_t ws_bytes)
{
    if (n < 1) return "needs n >= 1";
    if (ws_bytes < reduce_cub_workspace(op, dtype, n)) return "workspace too small";
    WB_CUDA_CHECK(cub_reduce(op, dtype, x, n, out, ws, &ws_bytes));
    return NULL;
}

extern "C" const reduce_variant reduce_variants[] = {
    {"v1", "atomic per element into one float", 0, 0, reduce_atomic_workspace, reduce_atomic},
    {"v2", "smem tree, interleaved (divergent warps)", 0, 1, reduce_interleaved_workspace, reduce_interleaved},
    {"v3", "smem tree, sequential addressing", 0, 1, reduce_sequential_workspace, reduce_sequential},
    {"v4", "2 loads per thread, shuffles for last 32", 0, 1, reduce_load_two_workspace, reduce_load_two},
    {"v5", "grid-stride + shuffles, two-pass", 0, 1, reduce_grid_stride_workspace, reduce_grid_stride_two_pass},
    {"v6", "v5 + 16-byte loads, 4 in flight", 0, 1, reduce_vectorized_workspace, reduce_vectorized_two_pass},
    {"cub", "CUB DeviceReduce (peer)", 1, 1, reduce_cub_workspace, reduce_cub},
    {"ex", "your kernel (exercise.cu)", 0, 1, reduce_exercise_workspace, reduce_exercise},
};
extern "C" const int reduce_variant_count = sizeof reduce_variants / sizeof reduce_variants[0];
