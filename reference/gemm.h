/**
 * @file gemm.h
 * @brief CPU reference of stage 03: C = A·B, row-major, accumulated in float64.
 *
 * A is M×K, B is K×N, C is M×N, all row-major (element (i, j) of an R×S matrix at
 * index i·S + j). For large products the reference is computed for a sample of
 * rows only (every element of those rows), which keeps a 4096³ check to about a
 * second of CPU time.
 */
#ifndef WB_REF_GEMM_H
#define WB_REF_GEMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief C[r][:] = A[r][:]·B for each row r in rows[0..n_rows), in float64, rounded
 *        to float. rows == NULL means every row (n_rows is then M).
 */
void ref_gemm_rows(const float *A, const float *B, float *C, int M, int N, int K, const int *rows, int n_rows);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_GEMM_H */
