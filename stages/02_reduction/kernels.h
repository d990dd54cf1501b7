/**
 * @file stages/02_reduction/kernels.h
 * @brief Stage 02 — sum and max of an array: the launchers and the table of variants.
 */
#ifndef STAGE02_KERNELS_H
#define STAGE02_KERNELS_H

#include <stddef.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Threads per block of the tree variants (v2–v4): a power of two, as their trees need. */
#define REDUCE_TREE_THREADS 256
/** @brief Threads per block of the grid-stride variants (v5, v6) and of their second pass. */
#define REDUCE_GRID_THREADS 512

/** @brief The operation. */
typedef enum {
    REDUCE_SUM, /**< Σ x, accumulated in fp32 */
    REDUCE_MAX  /**< max x */
} reduce_op;

/**
 * @brief A launcher: enqueue out[0] = op(x[0..n)) with x of type dtype, accumulating in fp32.
 * @param op              sum or max
 * @param dtype           element type of x
 * @param x               the input, device memory
 * @param n               elements, at least 1
 * @param out             the one result, device memory
 * @param workspace       scratch of at least workspace_bytes(op, dtype, n) bytes, device memory
 * @param workspace_bytes its size
 * @return NULL when launched, or why the variant cannot take these arguments
 */
typedef const char *(*reduce_launch_fn)(reduce_op op, wb_dtype dtype, const void *x, long long n,
                                        float *out, void *workspace, size_t workspace_bytes);
/** @brief Scratch bytes a variant needs for n elements (partial results, CUB's temp storage). */
typedef size_t (*reduce_workspace_fn)(reduce_op op, wb_dtype dtype, long long n);

/** @brief One variant of the stage. */
typedef struct {
    const char *id;                  /**< "v1", …, or "cub" for the peer */
    const char *what;                /**< one line for the table */
    int is_peer;                     /**< 1 for the library */
    int deterministic;               /**< 1: bit-identical results run to run (no atomics) */
    reduce_workspace_fn workspace;   /**< scratch it needs */
    reduce_launch_fn launch;         /**< its launcher */
} reduce_variant;

/** @brief The exercise slot (exercise.cu), the variant `ex`: your block sum by warp shuffles, fp32 sum. */
const char *reduce_exercise(reduce_op op, wb_dtype dtype, const void *x, long long n, float *out, void *workspace,
                            size_t workspace_bytes);
/** @brief Its scratch: a partial per block. */
size_t reduce_exercise_workspace(reduce_op op, wb_dtype dtype, long long n);

/** @brief The variants in teaching order, then the peer, then the exercise slot. */
extern const reduce_variant reduce_variants[];
/** @brief How many there are. */
extern const int reduce_variant_count;

#ifdef __cplusplus
}
#endif

#endif /* STAGE02_KERNELS_H */
