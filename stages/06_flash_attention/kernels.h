/**
 * @file stages/06_flash_attention/kernels.h
 * @brief Stage 06 — attention forward, from naive to FlashAttention-2 on tensor
 *        cores: the problem, the launchers and the table of variants.
 *
 * O = softmax(scale · Q·Kᵀ [+ causal mask]) · V for each of B·H heads, with Q, K,
 * V and O stored [B, H, N, d] (row-major, d contiguous), in fp32 or fp16 with
 * fp32 math. Every variant also writes L, each query row's log-sum-exp (natural
 * log, fp32, [B, H, N]): the one number per row a backward pass needs to
 * recompute the probabilities instead of storing them.
 */
#ifndef STAGE06_KERNELS_H
#define STAGE06_KERNELS_H

#include <stddef.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Largest head dimension the fused variants (v1–v5, v7) take; v6 and the peer take any. */
#define ATTENTION_MAX_HEAD_DIM 128

/** @brief Query rows of every head v6 takes at a time: its workspace is B·H·this·N scores. */
#define ATTENTION_CHUNK_ROWS 256

/** @brief One attention problem: shapes, scale, mask, and the device buffers. */
typedef struct {
    int B;           /**< batch */
    int H;           /**< heads */
    int N;           /**< sequence length (queries = keys) */
    int d;           /**< head dimension */
    float scale;     /**< multiplies Q·Kᵀ (1/√d by default) */
    int causal;      /**< 1: query i sees keys 0 … i only */
    wb_dtype dtype;  /**< storage of Q, K, V, O */
    const void *q;   /**< [B, H, N, d], device */
    const void *k;   /**< [B, H, N, d], device */
    const void *v;   /**< [B, H, N, d], device */
    void *o;         /**< [B, H, N, d], device */
    float *lse;      /**< [B, H, N] log-sum-exp of each query row, device */
    float *workspace;       /**< v1's score matrix S (NULL for the others) */
    size_t workspace_bytes; /**< its size */
} attention_problem;

/**
 * @brief Bytes of the score matrix v1 keeps in memory: B·H·N² floats. This is
 *        what the tiled variants never allocate.
 */
size_t attention_naive_workspace_bytes(int B, int H, int N);

/**
 * @brief A launcher: checks the variant's contract, then launches.
 * @return NULL when launched, or why the variant cannot take this problem
 */
typedef const char *(*attention_launch_fn)(const attention_problem *p);

/**
 * @brief Bytes of the unfused library peer's workspace: the fp32 score matrix S
 *        and P rounded to fp16 for the second GEMM (6 bytes per score).
 */
size_t attention_unfused_workspace_bytes(int B, int H, int N);

/**
 * @brief Bytes of v6's workspace: the fp32 scores and fp16 probabilities of
 *        ATTENTION_CHUNK_ROWS query rows (or N, if fewer) of every head — linear in N.
 */
size_t attention_chunked_workspace_bytes(int B, int H, int N);

/** @brief Release what the peer and v6 keep between launches (the cuBLAS handle, v6's workspace). */
void attention_release(void);

/** @brief One variant. */
typedef struct {
    const char *id;              /**< "v1", … in teaching order; the peer's name */
    const char *what;            /**< one line for the table */
    int min_cc;                  /**< compute capability it needs, 10·major + minor (75 = T4) */
    int needs_workspace;         /**< 1: p->workspace must hold attention_naive_workspace_bytes(); 2: attention_unfused_workspace_bytes() */
    int is_peer;                 /**< 1: the library peer (the tables' roof), not a lesson */
    int writes_lse;              /**< 1: it writes p->lse (the peer's softmax does not keep the row sums) */
    attention_launch_fn launch;  /**< its launcher */
} attention_variant;

/**
 * @brief v7, FlashAttention on Hopper (kernels_sm90.cu: TMA, a producer and two or three
 *        consumer warpgroups, wgmma): built for sm_90a in a library of its own; refuses any GPU
 *        but compute capability 9.0. fp16, d = 64 or 128.
 * @return NULL when launched, or why it cannot take the problem
 */
const char *attention_v7_wgmma(const attention_problem *p);

/** @brief The exercise slot (exercise.cu), the variant `ex`: your tiled online-softmax attention, fp32. */
const char *attention_exercise(const attention_problem *p);

/** @brief The variants in teaching order. */
extern const attention_variant attention_variants[];
/** @brief How many. */
extern const int attention_variant_count;

#ifdef __cplusplus
}
#endif

#endif /* STAGE06_KERNELS_H */
