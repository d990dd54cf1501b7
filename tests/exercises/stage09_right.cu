/**
 * @file tests/exercises/stage09_right.cu
 * @brief A sample for stage 09's exercise slot: a right decode attention, a warp per row (the check passes; heads of at most 128).
 *
 * stage09_unwritten.cu includes this file with SAMPLE_HALF_UNWRITTEN defined: the one line marked by it is that
 * sample's mistake.
 *
 * Built into the slot with -DWB_EXERCISE_09=tests/exercises/stage09_right.cu
 * (scripts/check_exercises.sh proves the grader with it).
 */
#include <cuda_fp16.h>
#include <math.h>

#include "cuda_check.h"
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once paged_decode_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 1

/** @brief Warps per block: 4 (sequence, head) rows each. */
#define EX_WARPS 4

/** @brief o[b][h] = softmax(scale · q[b][h]·Kᵀ) · V over sequence b's context, through its block table. */
__global__ void paged_decode_exercise(decode_problem p)
{
    int row = blockIdx.x * EX_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= p.B * p.Hq) return;
    int b = row / p.Hq, h = row % p.Hq, kv_head = h / (p.Hq / p.Hkv);
    const __half *q = (const __half *)p.q + (long long)row * p.d;
    const __half *kp = (const __half *)p.k_pool, *vp = (const __half *)p.v_pool;
    __half *o = (__half *)p.o;
    float qv[4] = {0, 0, 0, 0}, acc[4] = {0, 0, 0, 0}; /* d <= 128: at most 4 dimensions a lane */
    for (int k = 0, i = lane; i < p.d && k < 4; ++k, i += 32) qv[k] = __half2float(q[i]);
    float m = -INFINITY, sum = 0.0f;
    for (int t = 0; t < p.lens[b]; ++t) {
        int page = p.block_tables[(long long)b * p.max_pages_per_seq + t / p.block_size];
        long long base = (((long long)page * p.Hkv + kv_head) * p.block_size + t % p.block_size) * p.d;
        float s = 0.0f;
        for (int k = 0, i = lane; i < p.d && k < 4; ++k, i += 32) s += qv[k] * __half2float(kp[base + i]);
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        s *= p.scale;
        float m_new = fmaxf(m, s), rescale = expf(m - m_new), w = expf(s - m_new);
        sum = sum * rescale + w;
        for (int k = 0, i = lane; i < p.d && k < 4; ++k, i += 32) acc[k] = acc[k] * rescale + w * __half2float(vp[base + i]);
        m = m_new;
    }
    float inv = 1.0f / sum;
#ifndef SAMPLE_HALF_UNWRITTEN
    for (int k = 0, i = lane; i < p.d; ++k, i += 32) o[(long long)row * p.d + i] = __float2half_rn(acc[k] * inv);
#else /* stage09_unwritten.cu: only the first 32 dimensions written; the rest keep the poison */
    if (lane < p.d) o[(long long)row * p.d + lane] = __float2half_rn(acc[0] * inv);
#endif
}

extern "C" const char *decode_exercise(const decode_problem *p)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (p->dtype != WB_F16) return "takes fp16";
    if (p->d > 128) return "takes heads of at most 128 (4 dimensions a lane)";
    if (p->B < 1 || p->Hq < 1 || p->Hkv < 1 || p->Hq % p->Hkv || p->d < 1) return "needs B, Hq, Hkv, d >= 1, Hq % Hkv == 0";
    unsigned blocks = (unsigned)((p->B * p->Hq + EX_WARPS - 1) / EX_WARPS);
    paged_decode_exercise<<<blocks, 32 * EX_WARPS>>>(*p);
    WB_CHECK_LAUNCH("paged_decode_exercise");
    return NULL;
}
