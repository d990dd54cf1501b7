/**
 * @file stages/03_gemm/exercise.cu
 * @brief Your kernel (variant `ex`): C = A·B in fp32 with shared-memory tiles.
 *
 * **What to write.** `sgemm_tiled_exercise`: a block of 32×32 threads computes a
 * 32×32 tile of C (row-major A M×K, B K×N, C M×N). Step along K 32 at a time:
 * each thread loads one element of A's tile and one of B's into shared memory
 * (zero where the tile runs past M, N or K), a barrier, each thread adds the
 * 32 products of its row of A's tile and column of B's tile, another barrier
 * before the next tiles overwrite these. Each element of A and B is then read
 * from DRAM N/32 and M/32 times instead of N and M times.
 *
 * **Predict first.** At 4096³ on the H200, v2 (no shared memory, coalesced)
 * reached 5.9 TFLOP/s, 0.11× cuBLAS's 51.4; v3 (this kernel) 8.7, 0.17×. Why is
 * the tiled kernel still so far from cuBLAS (count the shared-memory loads per
 * FMA)? What does the check say if the second barrier is left out?
 *
 * **Run it.** Set EXERCISE_WRITTEN to 1, rebuild, then
 * `ctest --test-dir build -R stage03_exercise --output-on-failure` and
 * `build/bin/stage03_gemm --variant ex`.
 *
 * **The worked answer** is v3, `sgemm_smem_tiled` in kernels.cu.
 */
#include "cuda_check.h"
#include "kernels.h"
#include "measure.h" /* WB_EXERCISE_NOT_WRITTEN */

/** @brief 1 once sgemm_tiled_exercise is written; until then the launcher reports the slot as not written. */
#define EXERCISE_WRITTEN 0

/** @brief Tile edge: 32×32 outputs a block, 32 of K a step. */
#define EX_TILE 32

/** @brief C = A·B: block (blockIdx.y, blockIdx.x) computes C's tile at row blockIdx.y·32, column blockIdx.x·32. */
__global__ void sgemm_tiled_exercise(const float *A, const float *B, float *C, int M, int N, int K)
{
    /* Your code. The tiles and the thread's element of C:
     *     __shared__ float As[EX_TILE][EX_TILE], Bs[EX_TILE][EX_TILE];
     *     int row = blockIdx.y * EX_TILE + threadIdx.y, col = blockIdx.x * EX_TILE + threadIdx.x;
     * then the loop over K in steps of EX_TILE, and C[row·N + col] where row < M and col < N. */
}

extern "C" const char *gemm_exercise(const void *A, const void *B, void *C, int M, int N, int K)
{
    if (!EXERCISE_WRITTEN) return WB_EXERCISE_NOT_WRITTEN;
    if (M < 1 || N < 1 || K < 1) return "needs M, N, K >= 1";
    if ((M + EX_TILE - 1) / EX_TILE > 65535) return "needs M <= 65535 * 32 (grid y limit)";
    dim3 grid((N + EX_TILE - 1) / EX_TILE, (M + EX_TILE - 1) / EX_TILE), block(EX_TILE, EX_TILE);
    sgemm_tiled_exercise<<<grid, block>>>((const float *)A, (const float *)B, (float *)C, M, N, K);
    WB_CHECK_LAUNCH("sgemm_tiled_exercise");
    return NULL;
}
