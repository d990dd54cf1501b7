/**
 * @file stages/05_softmax/exercise.cu
 * @brief Your kernel (variant `ex`): online softmax, a warp per row, fp32.
 *
 * **What to write.** `softmax_online_exercise`: each warp takes one row of `cols`
 * floats. Every lane walks its share of the row (j = lane, lane + 32, ...)
 * keeping a running max m and a sum d of exp(x − m): when an element larger than
 * m arrives, the sum so far was taken against the old max, so multiply it by
 * exp(m_old − m_new) first (a −∞ element, masked, adds nothing). Then the 32
 * lanes merge their (m, d) pairs with shuffles, each merge rescaling both sums
 * to the larger max, and every lane writes y = exp(x − m) / d for its share. A
 * row that is all −∞ (a fully masked row, in the check's causal-mask set) must
 * give zeros, not NaN. Two reads of x, one write of y.
 *
 * **Predict first.** Two reads and a write: at most two thirds of v4's speed
 * (one read, the row kept in registers, about 98% of the copy roof in fp32 on
 * the H200 at 131072×1024). Which of the check's sets would catch a sum that is
 * not rescaled when the max grows, and by how much would its rows be off?
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage05_exercise --output-on-failure` and
 * `build/bin/stage05_softmax --variant ex --op softmax --dtype fp32`.
 *
 * **The worked answer** is v3, `softmax_online` in kernels.cu (a block per row;
 * its `merge` and `warp_merge` are the step you write here).
 */
#include <math.h>

#include "cuda_check.h"
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once softmax_online_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief Rows per block: one warp each. */
#define EX_ROWS_PER_BLOCK 4

/** @brief y = softmax(x) along each of `rows` rows of `cols` floats: row blockIdx.x · EX_ROWS_PER_BLOCK + warp. */
__global__ void softmax_online_exercise(const float *x, float *y, int rows, int cols)
{
    /* Your code. The warp's row and the lane's place in it:
     *     int row = blockIdx.x * EX_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
     *     if (row >= rows) return;
     *     const float *xr = x + (long long)row * cols;   float *yr = y + (long long)row * cols;
     * then the lane's running (m, d), the warp's merge by __shfl_xor_sync, then y. */
}

extern "C" const char *softmax_exercise(wb_dtype dtype, const void *x, void *y, int rows, int cols)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (dtype != WB_F32) return "takes fp32";
    if (rows < 1 || cols < 1) return "needs rows, cols >= 1";
    unsigned blocks = (unsigned)((rows + EX_ROWS_PER_BLOCK - 1) / EX_ROWS_PER_BLOCK);
    softmax_online_exercise<<<blocks, 32 * EX_ROWS_PER_BLOCK>>>((const float *)x, (float *)y, rows, cols);
    WB_CHECK_LAUNCH("softmax_online_exercise");
    return NULL;
}
