/**
 * @file tests/exercises/stage01_right.cu
 * @brief A sample for stage 01's exercise slot: a right kernel (the check passes).
 *
 * stage01_missing_tail.cu includes this file with SAMPLE_MISSING_TAIL defined: the one line marked by it is that
 * sample's mistake.
 *
 * Built into the slot with -DWB_EXERCISE_01=tests/exercises/stage01_right.cu (scripts/check_exercises.sh).
 */
#include <stdint.h>

#include "cuda_check.h"
#include "device.h"  /* wb_blocks_to_fill_gpu */
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once vector_add_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 1

/** @brief c[i] = a[i] + b[i] for i < n: float4 loads and stores over the first n/4·4 elements, then the tail. */
__global__ void vector_add_exercise(const float4 *a, const float4 *b, float4 *c, long long n)
{
    long long n4 = n / 4, stride = (long long)gridDim.x * blockDim.x;
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = first; i < n4; i += stride) {
        float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
#ifndef SAMPLE_MISSING_TAIL /* stage01_missing_tail.cu: the last n mod 4 elements keep the poison */
    long long tail = n4 * 4 + first;
    if (tail < n) ((float *)c)[tail] = ((const float *)a)[tail] + ((const float *)b)[tail];
#endif
}

extern "C" const char *vecadd_exercise(const void *a, const void *b, void *c, long long n)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (n < 1) return "needs n >= 1";
    if ((((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15u) != 0) return "needs a, b, c aligned to 16 bytes";
    static int fill = 0; /* blocks that fill the GPU once (the grid-stride loop does the rest) */
    if (!fill) fill = wb_blocks_to_fill_gpu((const void *)vector_add_exercise, VECADD_THREADS_PER_BLOCK, 0);
    long long needed = (n / 4 + VECADD_THREADS_PER_BLOCK) / VECADD_THREADS_PER_BLOCK;
    int blocks = needed < fill ? (int)needed : fill;
    vector_add_exercise<<<blocks, VECADD_THREADS_PER_BLOCK>>>((const float4 *)a, (const float4 *)b, (float4 *)c, n);
    WB_CHECK_LAUNCH("vector_add_exercise");
    return NULL;
}
