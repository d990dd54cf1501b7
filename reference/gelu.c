/** @file gelu.c @brief GELU and the fused linear layer on the CPU, in float64. */
#include "gelu.h"

#include <math.h>

#include "gemm.h"

double ref_gelu_tanh(double x)
{
    const double k = 0.79788456080286535588; /* sqrt(2/pi) */
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

double ref_gelu_erf(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }

void ref_linear_gelu_rows(const float *X, const float *W, const float *b, gelu_kind kind, float *Y, int M, int N, int K,
                          const int *rows, int n_rows)
{
    for (int t = 0; t < (rows ? n_rows : M); ++t) { /* row by row: a row listed twice is not activated twice */
        int r = rows ? rows[t] : t;
        ref_gemm_rows(X, W, Y, M, N, K, &r, 1);
        float *y = Y + (long long)r * N;
        for (int j = 0; j < N; ++j) {
            double v = (double)y[j] + (b ? b[j] : 0.0);
            y[j] = (float)(kind == GELU_TANH ? ref_gelu_tanh(v) : kind == GELU_ERF ? ref_gelu_erf(v) : v);
        }
    }
}
