/**
 * @file stages/09_paged_attention/exercise.cu
 * @brief Your kernel (variant `ex`): decode attention through the page table, a
 *        warp per (sequence, query head), fp16 storage.
 *
 * **What to write.** `paged_decode_exercise`: warp w of the grid serves sequence
 * b = w / Hq, query head h = w % Hq, whose K/V head is h / (Hq / Hkv). The one
 * query row is q[b][h][0..d). Walk the context t = 0 .. lens[b] − 1 through the
 * block table: token t lives on page block_tables[b·max_pages_per_seq + t /
 * block_size], in slot t % block_size, and its key is
 * k_pool[((page·Hkv + kv_head)·block_size + slot)·d + i] (V the same). Each
 * lane takes the dimensions i = lane, lane + 32, ... of the head: its share of
 * q·k, a warp sum by shuffles, times `scale`, is the token's score. Keep the
 * online softmax of stage 05 (a running max m, the sum d of exp(score − m)) and
 * the lane's share of o = Σ exp(score − m)·v, rescaled whenever m grows; at the
 * end write o[b][h][i] = o_i / d for every i < d, in fp16. Every length is at
 * least 1.
 *
 * **Predict first.** A warp per row reads each K/V byte once, but only B·Hq
 * warps run: 96 at B8 Hq12, 12 at B1. On the H200 v2 (a block per row) reached
 * 36% of the copy roof at B8 d64 context 4096 and 5% at B1 context 32768, v3
 * (the context split among blocks) 69% and 67%: where will one warp per row
 * land, and which of the two problems hurts it more?
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage09_exercise --output-on-failure` and
 * `build/bin/stage09_paged_attention --variant ex`.
 *
 * **The worked answer** is v2, `launch_paged` and its kernel in kernels.cu
 * (warps of a block share a row there; the walk through the pages is the same).
 */
#include <cuda_fp16.h>
#include <math.h>

#include "cuda_check.h"
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once paged_decode_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief Warps per block: 4 (sequence, head) rows each. */
#define EX_WARPS 4

/** @brief o[b][h] = softmax(scale · q[b][h]·Kᵀ) · V over sequence b's context, through its block table. */
__global__ void paged_decode_exercise(decode_problem p)
{
    /* Your code. The warp's row and the lane:
     *     int row = blockIdx.x * EX_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
     *     if (row >= p.B * p.Hq) return;
     *     int b = row / p.Hq, h = row % p.Hq, kv_head = h / (p.Hq / p.Hkv);
     * decode_problem (kernels.h) holds the tensors as untyped pointers, since the variants also take fp32: this slot
     * takes fp16, so cast them:
     *     const __half *q = (const __half *)p.q, *k = (const __half *)p.k_pool, *v = (const __half *)p.v_pool;
     *     __half *o = (__half *)p.o;
     * p.block_tables and p.lens are ints; __half2float() and __float2half() convert. A lane holds o for the
     * dimensions lane, lane + 32, ... in registers: at most 4 (the launcher takes d <= 128). Then the walk over
     * the context, and o. */
}

extern "C" const char *decode_exercise(const decode_problem *p)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (p->dtype != WB_F16) return "takes fp16";
    if (p->B < 1 || p->Hq < 1 || p->Hkv < 1 || p->Hq % p->Hkv || p->d < 1) return "needs B, Hq, Hkv, d >= 1, Hq % Hkv == 0";
    if (p->d > 128) return "needs d <= 128 (a lane holds at most 4 dimensions of o)";
    unsigned blocks = (unsigned)((p->B * p->Hq + EX_WARPS - 1) / EX_WARPS);
    paged_decode_exercise<<<blocks, 32 * EX_WARPS>>>(*p);
    WB_CHECK_LAUNCH("paged_decode_exercise");
    return NULL;
}
