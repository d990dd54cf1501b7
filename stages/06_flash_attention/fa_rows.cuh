/**
 * @file stages/06_flash_attention/fa_rows.cuh
 * @brief What the tensor-core variants — v4, v5 (kernels.cu) and v7 (kernels_sm90.cu) —
 *        share about their accumulator rows: ln 2 (LOG2E is common/fast_math.cuh's), P packed into fp16
 *        pairs, and the last step of every query row (sum, divide, write O and L).
 *
 * Both mma.sync's m16n8 accumulators (v4, v5) and wgmma's (v7) give thread `lane` of a
 * warp two rows, lane/4 and lane/4 + 8 of the warp's 16, and of each 8-column slice the
 * columns 2·(lane%4) and +1: element e of slice n is row e/2, column 8n + 2·(lane%4) + e%2.
 */
#ifndef STAGE06_FA_ROWS_CUH
/** @brief Include guard. */
#define STAGE06_FA_ROWS_CUH

#include <cuda_fp16.h>

#include "fast_math.cuh" /* LOG2E */

/** @brief ln(2): converts a base-2 log-sum-exp back to natural log. */
#define LN2 0.6931471805599453f

/** @brief Two floats → one register of two fp16 (the lower index in the low half). */
static __device__ __forceinline__ unsigned pack_half2(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
}

/**
 * @brief Finish this thread's two query rows: add the 4 lanes' partial sums l, divide the
 *        unnormalised output, write O (fp16, rows < N only) and L = (m + log2 l)·ln 2.
 * @param acc    the output accumulators, [8-column slice][element]
 * @param m_log2 each row's running max, in base-2 units (already times scale·log2 e)
 */
template <int D>
static __device__ __forceinline__ void write_rows_fp16(const float (&acc)[D / 8][4], float (&l)[2],
                                                       const float (&m_log2)[2], const int (&my_row)[2], int N,
                                                       long long head, __half *o, float *lse, int lane)
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (my_row[h] >= N) continue;
        __half *orow = o + (head * N + my_row[h]) * D;
#pragma unroll
        for (int t = 0; t < D / 8; ++t)
            *reinterpret_cast<__half2 *>(orow + t * 8 + 2 * (lane % 4)) =
                __floats2half2_rn(acc[t][2 * h] * inv[h], acc[t][2 * h + 1] * inv[h]);
        if (lane % 4 == 0) lse[head * N + my_row[h]] = (m_log2[h] + log2f(l[h])) * LN2;
    }
}

#endif /* STAGE06_FA_ROWS_CUH */
