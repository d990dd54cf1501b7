/**
 * @file stages/10_gpt2_e2e/kernels.h
 * @brief Stage 10's own kernels: the glue between the earlier stages' kernels
 *        (embedding, residual add, splitting Q, K, V into the layouts stages 06,
 *        08 and 09 take, merging heads, argmax). Everything heavy comes from the
 *        earlier stages through their headers.
 */
#ifndef STAGE10_KERNELS_H
#define STAGE10_KERNELS_H

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief x[r] = wte[tokens[r]] + wpe[positions[r]] for r < rows (C wide; wte,
 *        wpe and x in `dtype`).
 */
const char *gpt2_embed(wb_dtype dtype, const int *tokens, const int *positions, const void *wte, const void *wpe,
                       void *x, int rows, int C);

/** @brief x += y, n elements (the residual connection). */
const char *gpt2_residual_add(wb_dtype dtype, void *x, const void *y, long long n);

/**
 * @brief Split qkv rows [rows][3C] (q, k, v side by side, heads of d = C/H in each).
 *        Any output may be NULL. Heads layout ([H][rows][d], one sequence: what
 *        stage 06 takes with B = 1): q_heads, k_heads, v_heads. Rows layout
 *        ([rows][C], what stage 08's append and stage 09's q take): q_rows,
 *        k_rows, v_rows.
 */
const char *gpt2_split_qkv(wb_dtype dtype, const void *qkv, int rows, int C, int H, void *q_heads, void *k_heads,
                           void *v_heads, void *q_rows, void *k_rows, void *v_rows);

/** @brief out[rows][C] = heads [H][rows][d] with the heads side by side again (stage 06's O back to rows). */
const char *gpt2_merge_heads(wb_dtype dtype, const void *heads, void *out, int rows, int C, int H);

/**
 * @brief next[r] = argmax of the first V entries of logits row r (rows `ld`
 *        apart); ties go to the lowest id (as a CPU loop would). A block per
 *        row: stage 02's tree reduction, with the index carried along.
 */
const char *gpt2_argmax(wb_dtype dtype, const void *logits, int rows, int V, int ld, int *next);

/**
 * @brief Y = act(X·W + bias) for a few rows (1 <= M <= 8): the linear layer of
 *        a decode step. At M = 1 a tiled GEMM computes 127 padding rows of its
 *        128-row tile and reads W with a handful of blocks; here each element of
 *        W is read once, by one thread, and K is split across blocks so that
 *        the whole GPU streams W (partial sums in `workspace`, then a pass that
 *        adds them with the bias and the activation).
 * @param dtype storage of X, W and Y
 * @param X     [M][K], device
 * @param W     [K][N], device
 * @param bias  [N] fp32, or NULL
 * @param Y     [M][N], device
 * @param M     rows (1..8)
 * @param N     columns of W and Y
 * @param K     columns of X, rows of W
 * @param gelu 1: GELU (tanh form) after the bias; 0: none
 * @param workspace fp32 scratch of at least gpt2_small_m_workspace_floats(N, K)
 * @param workspace_floats its size
 */
const char *gpt2_linear_small_m(wb_dtype dtype, const void *X, const void *W, const float *bias, void *Y, int M, int N,
                                int K, int gelu, float *workspace, size_t workspace_floats);

/** @brief Scratch gpt2_linear_small_m needs for an N-column layer, in floats. */
size_t gpt2_small_m_workspace_floats(int N, int K);

#ifdef __cplusplus
}
#endif

#endif /* STAGE10_KERNELS_H */
