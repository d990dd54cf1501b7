/**
 * @file stages/05_softmax/kernels.h
 * @brief Stage 05 — row-wise softmax and LayerNorm: launchers and tables of variants.
 *
 * Both operate on a rows × cols row-major matrix, one row at a time, in fp32 or
 * fp16 storage with fp32 math. LayerNorm's weight and bias are fp32, and it also
 * writes each row's mean and rstd (fp32), as GPT-2's training code keeps them.
 */
#ifndef STAGE05_KERNELS_H
#define STAGE05_KERNELS_H

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief A softmax launcher: y = softmax(x) along each row.
 * @param dtype storage type of x and y
 * @param x     rows × cols input, device
 * @param y     rows × cols output, device
 * @param rows  number of rows (>= 1)
 * @param cols  row length (>= 1)
 * @return NULL when launched, or why the variant cannot take this shape
 */
typedef const char *(*softmax_launch_fn)(wb_dtype dtype, const void *x, void *y, int rows, int cols);

/**
 * @brief A LayerNorm launcher: y = (x − mean)·rstd·weight + bias along each row.
 * @param dtype  storage type of x and y (weight, bias, mean, rstd are fp32)
 * @param x      rows × cols input, device
 * @param weight cols scales, device
 * @param bias   cols shifts, device
 * @param eps    added to the variance (GPT-2: 1e-5)
 * @param y      rows × cols output, device
 * @param mean   rows means, device
 * @param rstd   rows 1/sqrt(var + eps), device
 * @param rows   number of rows
 * @param cols   row length
 * @return NULL when launched, or why the variant cannot take this shape
 */
typedef const char *(*layernorm_launch_fn)(wb_dtype dtype, const void *x, const float *weight, const float *bias,
                                           float eps, void *y, float *mean, float *rstd, int rows, int cols);

/** @brief One softmax variant. */
typedef struct {
    const char *id;            /**< "v1", … in teaching order */
    const char *what;          /**< one line for the table */
    softmax_launch_fn launch;  /**< its launcher */
} softmax_variant;

/** @brief One LayerNorm variant. */
typedef struct {
    const char *id;             /**< "v1", … */
    const char *what;           /**< one line for the table */
    layernorm_launch_fn launch; /**< its launcher */
} layernorm_variant;

/** @brief The exercise slot (exercise.cu), the variant `ex`: your online softmax, a warp per row, fp32. */
const char *softmax_exercise(wb_dtype dtype, const void *x, void *y, int rows, int cols);

/** @brief Softmax variants in teaching order, then the exercise slot. */
extern const softmax_variant softmax_variants[];
/** @brief How many. */
extern const int softmax_variant_count;
/** @brief LayerNorm variants in teaching order. */
extern const layernorm_variant layernorm_variants[];
/** @brief How many. */
extern const int layernorm_variant_count;

/** @brief Longest row the register-held variants keep in registers (longer rows take the two-read path). */
#define ROW_IN_REGISTERS_MAX_COLS 16384

#ifdef __cplusplus
}
#endif

#endif /* STAGE05_KERNELS_H */
