/**
 * @file stages/01_vector_add/kernels.h
 * @brief Stage 01 — c = a + b: the launchers and the table of variants.
 */
#ifndef STAGE01_KERNELS_H
#define STAGE01_KERNELS_H

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Threads per block of every variant: 8 warps, a common sweet spot (see the exercises). */
#define VECADD_THREADS_PER_BLOCK 256

/**
 * @brief A launcher: enqueue c = a + b over n elements of the variant's type.
 * @return NULL when launched, or why this variant cannot take these arguments
 */
typedef const char *(*vecadd_launch_fn)(const void *a, const void *b, void *c, long long n);

/** @brief One variant of the stage. */
typedef struct {
    const char *id;          /**< "v1", … in teaching order */
    const char *what;        /**< one line for the table */
    wb_dtype dtype;          /**< element type of a, b and c */
    vecadd_launch_fn launch; /**< its launcher */
} vecadd_variant;

/** @brief The exercise slot (exercise.cu): your float4 kernel, the variant `ex`. */
const char *vecadd_exercise(const void *a, const void *b, void *c, long long n);

/** @brief The variants in teaching order, then the exercise slot. */
extern const vecadd_variant vecadd_variants[];
/** @brief How many there are. */
extern const int vecadd_variant_count;

#ifdef __cplusplus
}
#endif

#endif /* STAGE01_KERNELS_H */
