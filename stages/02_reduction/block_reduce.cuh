/**
 * @file stages/02_reduction/block_reduce.cuh
 * @brief Stage 02's reduction building blocks, shared with later stages: the
 *        operations (SumOp, MaxOp), a warp reduction by shuffles, and a block
 *        reduction through 32 floats of shared memory.
 *
 * Stage 05 (softmax, LayerNorm) reduces rows with these: include this header,
 * never a copy of it.
 */
#ifndef STAGE02_BLOCK_REDUCE_CUH
#define STAGE02_BLOCK_REDUCE_CUH

#include <math.h>

/** @brief Σ: identity 0, combine by +. */
struct SumOp {
    /** @brief 0: the sum of nothing. */
    static __device__ __forceinline__ float identity() { return 0.0f; }
    /** @brief a + b. */
    static __device__ __forceinline__ float combine(float a, float b) { return a + b; }
};

/** @brief max: identity −∞, combine by fmaxf. */
struct MaxOp {
    /** @brief −∞: the max of nothing (0 would be wrong for all-negative data). */
    static __device__ __forceinline__ float identity() { return -INFINITY; }
    /** @brief The larger of a and b. */
    static __device__ __forceinline__ float combine(float a, float b) { return fmaxf(a, b); }
};

/**
 * @brief Reduce a warp's 32 values with shuffles: after 5 steps lane 0 holds the result.
 *
 * __shfl_down_sync reads a register of another lane directly: no shared memory, no
 * __syncthreads, one instruction per step (SHFL) instead of a store, a barrier and
 * a load.
 */
template <typename Op>
static __device__ __forceinline__ float warp_reduce(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v = Op::combine(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

/**
 * @brief Reduce a block's values (blockDim.x a multiple of 32): each warp by
 *        shuffles, the warps' results through 32 floats of shared memory, then warp 0
 *        by shuffles again. The result is valid in thread 0.
 */
template <typename Op>
static __device__ __forceinline__ float block_reduce(float v)
{
    __shared__ float warp_results[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_reduce<Op>(v);
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? warp_results[lane] : Op::identity();
        v = warp_reduce<Op>(v);
    }
    return v;
}

/**
 * @brief Reduce a warp's 32 values so that every lane gets the result: the
 *        butterfly (__shfl_xor_sync) exchanges values in both directions.
 */
template <typename Op>
static __device__ __forceinline__ float warp_allreduce(float v)
{
#pragma unroll
    for (int mask = 16; mask > 0; mask /= 2) v = Op::combine(v, __shfl_xor_sync(0xffffffffu, v, mask));
    return v;
}

/**
 * @brief Reduce a block's values (blockDim.x a multiple of 32) so that every
 *        thread gets the result. Safe to call several times in a row: it starts
 *        with a barrier, so no warp overwrites the shared slots while another still
 *        reads the previous call's.
 */
template <typename Op>
static __device__ __forceinline__ float block_allreduce(float v)
{
    __shared__ float warp_results[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_allreduce<Op>(v);
    __syncthreads(); /* the previous call's readers are done */
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    v = lane < warps ? warp_results[lane] : Op::identity();
    return warp_allreduce<Op>(v);
}

#endif /* STAGE02_BLOCK_REDUCE_CUH */
