/**
 * @file stages/01_vector_add/exercise.cu
 * @brief Your kernel (variant `ex`): c = a + b in fp32 with 16-byte loads and a tail.
 *
 * **What to write.** A grid-stride kernel that reads a and b as `float4` (four
 * floats in one 16-byte load), adds them, writes c as `float4`, and then adds the
 * last n mod 4 elements one by one: the tail. n can be anything from 1 up; a, b
 * and c are 16-byte aligned (the launcher checks it).
 *
 * **Predict first.** v2 (one float a load) reaches about 86% of the copy roof
 * on the H200, v3 about 98%: where will yours land? Which sizes of the check
 * would fail if you forgot the tail, and what would the failing elements hold?
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage01_exercise --output-on-failure` (the check:
 * every size of --check, twice each, outputs poisoned with NaN first) and
 * `build/bin/stage01_vector_add --variant ex` (timed beside nothing else) or
 * with no --variant (beside v1-v4).
 *
 * **The worked answer** is v3, `vector_add_float4` in kernels.cu: read it after.
 */
#include <stdint.h>

#include "cuda_check.h"
#include "device.h"  /* wb_blocks_to_fill_gpu */
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once vector_add_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief c[i] = a[i] + b[i] for i < n: float4 loads and stores over the first n/4·4 elements, then the tail. */
__global__ void vector_add_exercise(const float4 *a, const float4 *b, float4 *c, long long n)
{
    /* Your code. A grid-stride loop: start at blockIdx.x * blockDim.x + threadIdx.x, step by
     * gridDim.x * blockDim.x. Then the tail: at most 3 elements, as floats. */
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
