/**
 * @file stages/10_gpt2_e2e/exercise.cu
 * @brief Your kernel (variant `ex`): the decode linear with its LayerNorm fused,
 *        y = GELU(LayerNorm(x)·W + b) for 1-8 rows, fp32.
 *
 * **What to write.** `decode_linear_exercise`, the kernel a decode step runs
 * most: x is [M][K] (M = 1..8 sequences, one new token each), W is given
 * transposed, [N][K], so that the K weights of one output are contiguous.
 * First each block normalises the M rows of x: mean and 1/√(variance + 1e-5)
 * of each row, then (x − mean)·rstd·ln_w[k] + ln_b[k] (ln_w NULL: no LayerNorm);
 * keep the normalised rows in shared memory (8 rows of K ≤ 3080 floats fit in
 * 98 KB: the launcher asks for it). Then each warp takes one output n at a time:
 * its lanes read w_t[n][k] for k = lane, lane + 32, ... (one pass over W serves
 * all M rows), form the M dot products, sum each across the warp by shuffles,
 * add bias[n] and write y[m][n] = GELU(·), tanh form (stage 04's).
 *
 * **Predict first.** The step is bound by reading W once: at K 768 × N 2304 in
 * fp32 that is 7.1 MB, 1.7 µs at the H200's copy roof. v2's kernel (16-byte
 * loads, several loads in flight a lane) reaches most of that on the page's
 * "decode linear alone" table: with one 4-byte load a lane in flight, how far
 * below will yours land?
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage10_exercise --output-on-failure` (the same
 * shapes and rows as v1's and v2's linear checks) and
 * `build/bin/stage10_gpt2_e2e --bench --variant ex --dtype fp32` (its rows of the
 * decode-linear-alone table).
 *
 * **The worked answer** is v2's `decode_linear_fused` in decode_fused.cu.
 */
#include "cuda_check.h"
#include "device.h" /* wb_current_gpu, wb_current_smem_per_block */
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once decode_linear_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief Warps per block. */
#define EX_WARPS 8

/** @brief y = GELU(LayerNorm(x)·W + b): LayerNorm into dynamic shared memory (M·K floats), then a warp per output. */
__global__ void decode_linear_exercise(decode_linear_args a)
{
    /* Your code. The normalised rows and the warp:
     *     extern __shared__ float xn[];   (a.M rows of a.K floats)
     *     int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
     * decode_linear_args (kernels.h) holds x, w_t and y as untyped pointers, since v2 also takes fp16: this slot
     * takes fp32, so cast them:
     *     const float *x = (const float *)a.x, *w_t = (const float *)a.w_t;
     *     float *y = (float *)a.y;
     * a.ln_w, a.ln_b and a.bias are const float * (ln_w NULL: no LayerNorm; bias NULL: none). Outputs
     * n = blockIdx.x·EX_WARPS + warp, then + gridDim.x·EX_WARPS, ... up to a.N. */
}

extern "C" const char *gpt2_decode_linear_exercise(wb_dtype dtype, const decode_linear_args *a)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (dtype != WB_F32) return "takes fp32";
    if (a->epilogue != DECODE_GELU) return "takes the GELU epilogue";
    if (a->M < 1 || a->M > DECODE_MAX_ROWS || a->N < 1 || a->K < 1) return "needs 1..8 rows, N, K >= 1";
    size_t smem = (size_t)a->M * a->K * sizeof(float);
    if (smem > wb_current_smem_per_block()) return "M rows of K floats exceed a block's shared memory";
    static size_t configured = 48 * 1024; /* more than 48 KB of dynamic shared memory must be asked for */
    if (smem > configured) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(decode_linear_exercise, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)wb_current_smem_per_block()));
        configured = wb_current_smem_per_block();
    }
    int sms;
    wb_current_gpu(NULL, &sms);
    int blocks = (a->N + EX_WARPS - 1) / EX_WARPS;
    if (blocks > 4 * sms) blocks = 4 * sms; /* the warps loop over the outputs */
    decode_linear_exercise<<<blocks, 32 * EX_WARPS, smem>>>(*a);
    WB_CHECK_LAUNCH("decode_linear_exercise");
    return NULL;
}
