/**
 * @file stages/08_paged_kv_cache/exercise.cu
 * @brief Your kernel (variant `ex`): the append of new K and V rows into their
 *        pages, a thread per element.
 *
 * **What to write.** `kv_append_exercise`: new_k and new_v are [n_tokens][H][d];
 * token t goes to the cache slot slots[t], which the block manager chose: page
 * slot / block_size, row slot mod block_size of that page. A pool is
 * [num_pages][H][block_size][d], so element (t, h, c) lands at
 * ((page·H + h)·block_size + row)·d + c, in k_pool and in v_pool. Every element
 * not in a new row must be left as it is (the check starts the pool from random
 * bytes and compares all of it, exactly).
 *
 * **Predict first.** A thread per element moves 2 or 4 bytes a load: v1 does
 * this and reached 24% of the copy roof at the fp16 prefill append (32×2048
 * tokens) on the H200, where v2's 16 bytes a thread reached 90%. Why does the
 * decode case (128 tokens, one each) sit near 3% whatever the kernel?
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage08_exercise --output-on-failure` and
 * `build/bin/stage08_paged_kv_cache --variant ex`. The gather is not part of the
 * exercise: its rows say so.
 *
 * **The worked answer** is v1, `kv_append_scalar` in kernels.cu.
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_check.h"
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once kv_append_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief Element blockIdx.x·blockDim.x + threadIdx.x of the new rows into its slot (T: float or __half, moved as is). */
template <typename T>
__global__ void kv_append_exercise(const T *new_k, const T *new_v, const int64_t *slots, T *k_pool, T *v_pool,
                                   int n_tokens, int H, int d, int block_size)
{
    /* Your code: which element (t, h, c) this thread moves, its page and row from slots[t],
     * and the two copies. */
}

static const char *append_exercise(const kv_append_args *a)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    long long n = (long long)a->n_tokens * a->H * a->d;
    if (n == 0) return NULL;
    if ((n + 255) / 256 > 2147483647LL) return "too many elements for one grid";
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (a->dtype == WB_F16)
        kv_append_exercise<__half><<<blocks, 256>>>((const __half *)a->new_k, (const __half *)a->new_v, a->slots,
                                                    (__half *)a->k_pool, (__half *)a->v_pool, a->n_tokens, a->H,
                                                    a->d, a->block_size);
    else
        kv_append_exercise<float><<<blocks, 256>>>((const float *)a->new_k, (const float *)a->new_v, a->slots,
                                                   (float *)a->k_pool, (float *)a->v_pool, a->n_tokens, a->H, a->d,
                                                   a->block_size);
    WB_CHECK_LAUNCH("kv_append_exercise");
    return NULL;
}

static const char *gather_exercise(const kv_gather_args *)
{
    return "the exercise is the append (see v1, v2 for the gather)";
}

extern "C" const kv_variant kv_exercise_variant = {"ex", "your kernel (exercise.cu)", append_exercise, gather_exercise};
