/**
 * @file stages/07_rope/exercise.cu
 * @brief Your kernel (variant `ex`): RoPE with sine and cosine computed in the
 *        kernel, a thread per pair, Q and K in one launch (fp32).
 *
 * **What to write.** `rope_exercise_kernel`: thread p of blockIdx.y = 0 rotates
 * pair p of Q, of blockIdx.y = 1 pair p of K (pairs = B·H·N·d/2 each). Pair p is
 * pair i = p mod d/2 of row r = p / (d/2), and row r is token r mod N, at position
 * start_pos + r mod N. Its angle is θ = position · ω_i, with ω_i given as two
 * floats (inv_freq[2i] + inv_freq[2i+1], hi and lo). The pair is (x[i],
 * x[i + d/2]) for ROPE_ROTATE_HALF and (x[2i], x[2i+1]) for ROPE_INTERLEAVED;
 * it becomes (a·cos θ − b·sin θ, b·cos θ + a·sin θ). Write to q_out / k_out
 * (which may be q / k themselves).
 *
 * **Predict first.** θ reaches 32 768 radians at the check's largest position:
 * what error does θ = position · ω in fp32 carry there (relative 6e-8), and
 * will the check's fp32 tolerance (4e-6 absolute) catch it? Computing θ and its
 * sine in double is one way out; v2's `reduced_angle` is the fast one.
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage07_exercise --output-on-failure` and
 * `build/bin/stage07_rope --variant ex --dtype fp32`.
 *
 * **The worked answer** is v2, `rope_fused` in kernels.cu (and v3 for Q and K in one launch).
 */
#include <math.h>

#include "cuda_check.h"
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once rope_exercise_kernel is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief Rotate pair blockIdx.x·blockDim.x + threadIdx.x of Q (blockIdx.y 0) or K (1). */
__global__ void rope_exercise_kernel(rope_args a, long long pairs)
{
    /* Your code. The tensor and the pair:
     *     const float *x = (const float *)(blockIdx.y ? a.k : a.q);
     *     float *y = (float *)(blockIdx.y ? a.k_out : a.q_out);
     *     long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
     *     if (p >= pairs) return;
     * then i, the row, the position, θ, the pair's two indices, and the rotation. */
}

extern "C" const char *rope_exercise(const rope_args *a)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (a->dtype != WB_F32) return "takes fp32";
    if (a->d < 2 || a->d % 2) return "needs an even d";
    long long pairs = (long long)a->B * a->H * a->N * (a->d / 2);
    if (pairs < 1) return "needs B, H, N >= 1";
    if ((pairs + 255) / 256 > 2147483647LL) return "too many pairs for one grid";
    rope_exercise_kernel<<<dim3((unsigned)((pairs + 255) / 256), 2), 256>>>(*a, pairs);
    WB_CHECK_LAUNCH("rope_exercise_kernel");
    return NULL;
}
