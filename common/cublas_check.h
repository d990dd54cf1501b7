/**
 * @file cublas_check.h
 * @brief cuBLAS calls checked like CUDA calls: a failure names the call and
 *        %file:line, then exits(1). Header-only, for the stages that link cuBLAS.
 */
#ifndef WB_CUBLAS_CHECK_H
#define WB_CUBLAS_CHECK_H

#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>

/** @brief Print `cuBLAS error at %file:line in <call>: <status>` and exit(1). */
static inline void wb_cublas_fail(cublasStatus_t status, const char *call, const char *file, int line)
{
    fprintf(stderr, "cuBLAS error at %s:%d in %s: %s\n", file, line, call, cublasGetStatusString(status));
    exit(1);
}

/** @brief Run a cuBLAS call; on failure name the call and %file:line, then exit(1). */
#define WB_CUBLAS_CHECK(call)                                                  \
    do {                                                                       \
        cublasStatus_t wb_st_ = (call);                                        \
        if (wb_st_ != CUBLAS_STATUS_SUCCESS) wb_cublas_fail(wb_st_, #call, __FILE__, __LINE__); \
    } while (0)

#endif /* WB_CUBLAS_CHECK_H */
