/**
 * @file layernorm.h
 * @brief CPU reference of stage 05: GPT-2's LayerNorm, in float64 with the
 *        two-pass variance (mean first, then the mean of squared deviations), the
 *        numerically safe form.
 */
#ifndef WB_REF_LAYERNORM_H
#define WB_REF_LAYERNORM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief GPT-2's LayerNorm over each row: y = (x − mean) · rstd · weight + bias,
 *        rstd = 1 / sqrt(var + eps), var the biased (1/C) variance.
 * @param x      rows × cols input
 * @param weight cols scales (γ)
 * @param bias   cols shifts (β)
 * @param eps    added to the variance (GPT-2: 1e-5)
 * @param y      rows × cols output
 * @param mean   rows means (what a backward pass needs); may be NULL
 * @param rstd   rows reciprocal standard deviations; may be NULL
 * @param rows   number of rows
 * @param cols   row length
 */
void ref_layernorm(const float *x, const float *weight, const float *bias, float eps, float *y, float *mean,
                   float *rstd, size_t rows, size_t cols);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_LAYERNORM_H */
