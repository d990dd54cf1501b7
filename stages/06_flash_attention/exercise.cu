/**
 * @file stages/06_flash_attention/exercise.cu
 * @brief Your kernel (variant `ex`): attention with K/V tiles in shared memory
 *        and the online softmax, a thread per query row (fp32, d <= 128).
 *
 * **What to write.** `attention_tiled_exercise`: block (blockIdx.x, blockIdx.y)
 * serves query rows blockIdx.x·64 … +63 of head blockIdx.y (= b·H + h). Each
 * thread keeps its query row q and an output row o (d floats) in registers.
 * Walk the keys in tiles of EX_KEYS_PER_TILE: the block copies the tile's K and
 * V rows into shared memory, a barrier, then each thread scores its query
 * against every key of the tile (s = scale · q·k; with `causal`, keys after the
 * query's own position are skipped), folds each score into its running max m and
 * sum l (rescaling l and o by exp(m_old − m_new) when m grows, as in stage 05's
 * online softmax), adds exp(s − m)·v into o, and a barrier before the next tile.
 * Finally o / l is the row of O. Q, K, V, O are [B, H, N, d] row-major.
 *
 * **Predict first.** Every K/V tile is read once per block of 64 queries, not
 * once per query: how many times fewer bytes than v1, which writes and reads the
 * whole N×N score matrix? The page's table has v2 (the same idea) beside v4
 * (tensor cores): predict the ratio from FLOPs per byte of shared memory first.
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage06_exercise --output-on-failure` and
 * `build/bin/stage06_flash_attention --variant ex --dtype fp32`.
 *
 * **The worked answer** is v2, `launch_row_per_thread` and its kernel in kernels.cu.
 */
#include <math.h>

#include "cuda_check.h"
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once attention_tiled_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief Query rows a block: a thread each. */
#define EX_QUERY_ROWS 64
/** @brief Keys a tile: 32 rows of K and of V, at d = 128 32 KB of shared memory. */
#define EX_KEYS_PER_TILE 32
/** @brief The longest head the registers hold. */
#define EX_MAX_D 128

/** @brief O = softmax(scale · Q·Kᵀ (masked when causal)) · V for 64 query rows of one head. */
__global__ void attention_tiled_exercise(attention_problem p)
{
    /* Your code. The tiles, the head's rows and the thread's query:
     *     __shared__ float k_tile[EX_KEYS_PER_TILE][EX_MAX_D], v_tile[EX_KEYS_PER_TILE][EX_MAX_D];
     *     long long head = (long long)blockIdx.y * p.N * p.d;
     *     const float *Q = (const float *)p.q + head, *K = (const float *)p.k + head, *V = (const float *)p.v + head;
     *     int row = blockIdx.x * EX_QUERY_ROWS + threadIdx.x;
     * Every thread helps load each tile, even one whose row is past N (it must still
     * reach the barriers); only rows < N write O. */
}

extern "C" const char *attention_exercise(const attention_problem *p)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (p->dtype != WB_F32) return "takes fp32";
    if (p->d < 1 || p->d > EX_MAX_D) return "needs 1 <= d <= 128";
    if (p->B * p->H > 65535) return "needs B·H <= 65535 (grid y limit)";
    dim3 grid((unsigned)((p->N + EX_QUERY_ROWS - 1) / EX_QUERY_ROWS), (unsigned)(p->B * p->H));
    attention_tiled_exercise<<<grid, EX_QUERY_ROWS>>>(*p);
    WB_CHECK_LAUNCH("attention_tiled_exercise");
    return NULL;
}
