/**
 * @file attention.h
 * @brief CPU reference of stages 06 and 09: scaled dot-product attention of one
 *        query row, with its log-sum-exp.
 *
 * For a query q and keys k_0 … k_{n−1} with values v_0 … v_{n−1} (d floats each):
 *
 *     s_j = scale · q·k_j,   m = max_j s_j,   L = m + log Σ_j exp(s_j − m),
 *     o   = Σ_j exp(s_j − L) · v_j.
 *
 * L, the row's log-sum-exp (natural log), is what a backward pass keeps instead
 * of the probabilities. A causal row i sees keys 0 … i: the caller passes
 * n = i + 1. Everything is accumulated in float64; n = 0 (no visible key) gives
 * o = 0 and L = −∞.
 */
#ifndef WB_REF_ATTENTION_H
#define WB_REF_ATTENTION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief One query row of attention.
 * @param q        d floats
 * @param k        n keys, `stride` floats apart (d used of each)
 * @param v        n values, `stride` floats apart
 * @param n        number of keys it sees
 * @param d        head dimension
 * @param stride   floats from one key (value) to the next
 * @param scale    multiplies q·k (usually 1/√d)
 * @param o        receives d floats
 * @param lse      receives L (may be NULL)
 */
void ref_attention_row(const float *q, const float *k, const float *v, size_t n, size_t d, size_t stride,
                       float scale, float *o, float *lse);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_ATTENTION_H */
