/**
 * @file tests/exercises/stage05_right.cu
 * @brief A sample for stage 05's exercise slot: a right online softmax (the check passes).
 *
 * stage05_wrong_scale.cu includes this file with SAMPLE_SUM_NOT_RESCALED defined: the one line marked by it is that
 * sample's mistake.
 *
 * Built into the slot with -DWB_EXERCISE_05=tests/exercises/stage05_right.cu
 * (scripts/check_exercises.sh proves the grader with it).
 */
#include <math.h>

#include "cuda_check.h"
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once softmax_online_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 1

/** @brief Rows per block: one warp each. */
#define EX_ROWS_PER_BLOCK 4

/** @brief y = softmax(x) along each of `rows` rows of `cols` floats: row blockIdx.x · EX_ROWS_PER_BLOCK + warp. */
__global__ void softmax_online_exercise(const float *x, float *y, int rows, int cols)
{
    int row = blockIdx.x * EX_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float *xr = x + (long long)row * cols;
    float *yr = y + (long long)row * cols;
    float m = -INFINITY, d = 0.0f;
    for (int j = lane; j < cols; j += 32) {
        float v = xr[j];
        if (v > m) {
#ifndef SAMPLE_SUM_NOT_RESCALED
            d = d * expf(m - v) + 1.0f; /* the sum so far, rescaled to the new max */
#else
            d = d + 1.0f; /* stage05_wrong_scale.cu: the sum so far not rescaled to the new max */
#endif
            m = v;
        } else if (v > -INFINITY) {
            d += expf(v - m);
        }
    }
    for (int mask = 16; mask > 0; mask /= 2) { /* merge the lanes' pairs, each sum rescaled to the larger max */
        float m2 = __shfl_xor_sync(0xffffffffu, m, mask), d2 = __shfl_xor_sync(0xffffffffu, d, mask);
        float mm = fmaxf(m, m2);
        d = mm == -INFINITY ? 0.0f : d * expf(m - mm) + d2 * expf(m2 - mm);
        m = mm;
    }
    float shift = m == -INFINITY ? 0.0f : m, inv = d > 0.0f ? 1.0f / d : 0.0f; /* a fully masked row: zeros */
    for (int j = lane; j < cols; j += 32) yr[j] = expf(xr[j] - shift) * inv;
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
