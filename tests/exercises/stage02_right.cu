/**
 * @file tests/exercises/stage02_right.cu
 * @brief A sample for stage 02's exercise slot: a right block sum (the check passes; racecheck is clean).
 *
 * stage02_race.cu includes this file with SAMPLE_MISSING_BARRIER defined: the one line marked by it is that
 * sample's mistake.
 *
 * Built into the slot with -DWB_EXERCISE_02=tests/exercises/stage02_right.cu
 * (scripts/check_exercises.sh proves the grader with it).
 */
#include "cuda_check.h"
#include "device.h"  /* wb_blocks_to_fill_gpu */
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once block_sum_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 1

/** @brief Threads per block: 16 warps. */
#define EX_THREADS 512

/** @brief The sum of `v` over the block's EX_THREADS threads, in thread 0 (other threads' return values unused). */
static __device__ float block_sum_exercise(float v)
{
    __shared__ float warp_sums[EX_THREADS / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[warp] = v;
#ifndef SAMPLE_MISSING_BARRIER /* stage02_race.cu: the first warp may read warp_sums[] before the others wrote it */
    __syncthreads();
#endif
    if (warp == 0) {
        v = lane < EX_THREADS / 32 ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

/** @brief partial[blockIdx.x] = the block's sum of its grid-stride share of x[0..n). */
__global__ void reduce_sum_exercise(const float *__restrict__ x, long long n, float *__restrict__ partial)
{
    float acc = 0.0f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) acc += x[i];
    acc = block_sum_exercise(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/** @brief Blocks of the first pass: enough to fill the GPU once, fewer for small n. */
static int exercise_blocks(long long n)
{
    static int fill = 0;
    if (!fill) fill = wb_blocks_to_fill_gpu((const void *)reduce_sum_exercise, EX_THREADS, 0);
    long long want = (n + EX_THREADS - 1) / EX_THREADS;
    return (int)(want < fill ? want : fill);
}

extern "C" size_t reduce_exercise_workspace(reduce_op, wb_dtype, long long n)
{
    return (size_t)exercise_blocks(n) * sizeof(float);
}

extern "C" const char *reduce_exercise(reduce_op op, wb_dtype dtype, const void *x, long long n, float *out,
                                       void *ws, size_t ws_bytes)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (op != REDUCE_SUM || dtype != WB_F32) return "takes the sum of fp32 input";
    if (n < 1) return "needs n >= 1";
    int blocks = exercise_blocks(n);
    if (ws_bytes < blocks * sizeof(float)) return "workspace too small";
    reduce_sum_exercise<<<blocks, EX_THREADS>>>((const float *)x, n, blocks == 1 ? out : (float *)ws);
    WB_CHECK_LAUNCH("reduce_sum_exercise");
    if (blocks > 1) { /* the second pass: one block over the partials */
        reduce_sum_exercise<<<1, EX_THREADS>>>((const float *)ws, blocks, out);
        WB_CHECK_LAUNCH("reduce_sum_exercise (second pass)");
    }
    return NULL;
}
