/** @file cuda_check.c @brief The fatal path of WB_CUDA_CHECK and WB_CHECK_LAUNCH. */
#include "cuda_check.h"

#include <stdio.h>
#include <stdlib.h>

void wb_cuda_fail(cudaError_t err, const char *call, const char *file, int line)
{
    fprintf(stderr, "CUDA error at %s:%d in %s: %s: %s\n", file, line, call,
            cudaGetErrorName(err), cudaGetErrorString(err));
    exit(1);
}
