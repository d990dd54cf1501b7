/**
 * @file stages/02_reduction/exercise.cu
 * @brief Your kernel (variant `ex`): a block's sum by warp shuffles, inside v5's
 *        two-pass grid-stride reduction (fp32 sum).
 *
 * **What to write.** `block_sum_exercise`: every thread of a block brings one
 * float; thread 0 must return their sum. The shape of v4-v6's finish: each warp
 * adds its 32 values with `__shfl_down_sync` (5 steps: 16, 8, 4, 2, 1 lanes
 * apart), lane 0 of each warp writes its warp's sum to shared memory, and after
 * a barrier the first warp adds those (at most 32) sums the same way. The kernel
 * around it (a grid-stride loop, a partial per block, a second pass of one block
 * over the partials) is written; it calls yours once per block.
 *
 * **Predict first.** The block sum runs once per block and the loop before it
 * once per element: will your kernel be as fast as v5 (96.0% of the copy roof
 * on the H200)? What goes wrong if the barrier between the warps' writes and the
 * first warp's reads is missing, and which tool finds it when the check passes
 * by luck? (`ctest -R stage02_racecheck` runs every variant under racecheck.)
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage02_exercise --output-on-failure` and
 * `build/bin/stage02_reduction --variant ex --op sum --dtype fp32`.
 *
 * **The worked answer** is `block_reduce` in block_reduce.cuh, which v4-v6 call.
 */
#include "cuda_check.h"
#include "device.h"  /* wb_blocks_to_fill_gpu */
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once block_sum_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief Threads per block: 16 warps. */
#define EX_THREADS 512

/** @brief The sum of `v` over the block's EX_THREADS threads, in thread 0 (other threads' return values unused). */
static __device__ float block_sum_exercise(float v)
{
    /* Your code: each warp's sum by shuffles; each warp's lane 0 writes it to
     *     __shared__ float warp_sums[EX_THREADS / 32];
     * a barrier; then the first warp adds warp_sums[] by shuffles. */
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
