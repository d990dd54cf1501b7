/** @file gemm.c @brief Matrix product on the CPU, in float64. */
#include "gemm.h"

#include <stdlib.h>

void ref_gemm_rows(const float *A, const float *B, float *C, int M, int N, int K, const int *rows, int n_rows)
{
    double *acc = malloc(sizeof(double) * (size_t)(N > 0 ? N : 1));
    if (!acc) return;
    for (int t = 0; t < (rows ? n_rows : M); ++t) {
        int r = rows ? rows[t] : t;
        for (int j = 0; j < N; ++j) acc[j] = 0.0;
        for (int k = 0; k < K; ++k) { /* i-k-j order: B is read row by row */
            double a = A[(size_t)r * K + k];
            const float *b = B + (size_t)k * N;
            for (int j = 0; j < N; ++j) acc[j] += a * b[j];
        }
        for (int j = 0; j < N; ++j) C[(size_t)r * N + j] = (float)acc[j];
    }
    free(acc);
}
