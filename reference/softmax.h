/**
 * @file softmax.h
 * @brief CPU reference of stage 05: row-wise softmax.
 *
 * Softmax of a row x[0..C): y_j = exp(x_j − m) / Σ_k exp(x_k − m) with m = max x.
 * Subtracting m changes nothing mathematically and keeps every exponent ≤ 0, so
 * nothing overflows. Accumulation is in float64.
 *
 * Masked rows: entries of −∞ (a causal mask) get probability 0. A row that is
 * entirely −∞ has no finite entry to normalise by; this workbook defines its
 * output as all zeros (as FlashAttention does), never NaN. NaN in the input gives
 * NaN in that row.
 */
#ifndef WB_REF_SOFTMAX_H
#define WB_REF_SOFTMAX_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief y = softmax(x) over each of `rows` rows of `cols` floats (row-major). */
void ref_softmax(const float *x, float *y, size_t rows, size_t cols);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_SOFTMAX_H */
