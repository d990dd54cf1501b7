/**
 * @file stages/04_fused_gelu_linear/kernels_sm90.cu
 * @brief Stage 04's v5: bias and GELU in the epilogue of stage 03's v10, the
 *        Hopper GEMM (TMA + wgmma). Built for sm_90a only, in a library of its own.
 */
#include <cuda_fp16.h>

#include "bias_gelu.cuh"   /* BiasGelu */
#include "gemm_hopper.cuh" /* stage 03: launch_hgemm_wgmma (v10) */
#include "kernels.h"

extern "C" const char *linear_v5_wgmma(const linear_args *a)
{
    const __half *X = (const __half *)a->X, *W = (const __half *)a->W;
    __half *Y = (__half *)a->Y;
    if (a->gelu == GELU_TANH) return launch_hgemm_wgmma(X, W, Y, a->M, a->N, a->K, BiasGelu<GELU_TANH>{a->bias});
    if (a->gelu == GELU_NONE) return launch_hgemm_wgmma(X, W, Y, a->M, a->N, a->K, BiasGelu<GELU_NONE>{a->bias});
    return launch_hgemm_wgmma(X, W, Y, a->M, a->N, a->K, BiasGelu<GELU_ERF>{a->bias});
}
