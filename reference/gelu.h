/**
 * @file gelu.h
 * @brief CPU reference of stage 04: GELU both ways, and Y = GELU(X·W + b).
 *
 * GELU(x) = x·Φ(x), Φ the standard normal CDF. The exact form uses erf; GPT-2's
 * `gelu_new` (and cuBLASLt's GELU epilogue) the tanh approximation
 * 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). They differ by up to about 5e-4.
 */
#ifndef WB_REF_GELU_H
#define WB_REF_GELU_H

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Which GELU. */
typedef enum {
    GELU_TANH = 0, /**< the tanh approximation (GPT-2's gelu_new) */
    GELU_ERF = 1,  /**< the exact form, with erf */
    GELU_NONE = 2  /**< no activation: the plain linear layer, y = x·W + b (stage 10's other layers) */
} gelu_kind;

/** @brief GELU, tanh approximation, in float64. */
double ref_gelu_tanh(double x);
/** @brief GELU, exact (erf), in float64. */
double ref_gelu_erf(double x);

/**
 * @brief Y[r][:] = GELU(X[r][:]·W + b) for the rows given (rows == NULL: all M).
 *        X is M×K, W is K×N (GPT-2's Conv1D layout, [in, out]), b has N entries or
 *        is NULL (no bias). The product comes from ref_gemm_rows (float64).
 */
void ref_linear_gelu_rows(const float *X, const float *W, const float *b, gelu_kind kind, float *Y, int M, int N, int K,
                          const int *rows, int n_rows);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_GELU_H */
