/**
 * @file stages/03_gemm/kernels_sm90.cu
 * @brief Stage 03's v10–v14 launchers, in a library built for sm_90a only: the wgmma and
 *        TMA instructions of gemm_hopper.cuh exist on compute capability 9.0 alone.
 */
#include <cuda_fp16.h>

#include "gemm_hopper.cuh" /* v10: launch_hgemm_wgmma; v11: …_persistent; v12, v13: …_tma_store; v14 */
#include "gemm_tiles.cuh"  /* GemmIdentity */
#include "kernels.h"

extern "C" const char *gemm_v10_wgmma(const void *A, const void *B, void *C, int M, int N, int K)
{
    return launch_hgemm_wgmma((const __half *)A, (const __half *)B, (__half *)C, M, N, K, GemmIdentity());
}

extern "C" const char *gemm_v11_wgmma_persistent(const void *A, const void *B, void *C, int M, int N, int K)
{
    return launch_hgemm_wgmma_persistent((const __half *)A, (const __half *)B, (__half *)C, M, N, K, GemmIdentity());
}

extern "C" const char *gemm_v12_wgmma_tma_store(const void *A, const void *B, void *C, int M, int N, int K)
{
    return launch_hgemm_wgmma_tma_store((const __half *)A, (const __half *)B, (__half *)C, M, N, K, GemmIdentity(),
                                        false);
}

extern "C" const char *gemm_v13_wgmma_split_tail(const void *A, const void *B, void *C, int M, int N, int K)
{
    return launch_hgemm_wgmma_tma_store((const __half *)A, (const __half *)B, (__half *)C, M, N, K, GemmIdentity(),
                                        true);
}

extern "C" const char *gemm_v14_wgmma_tile_from_waves(const void *A, const void *B, void *C, int M, int N, int K)
{
    return launch_hgemm_wgmma_tile_from_waves((const __half *)A, (const __half *)B, (__half *)C, M, N, K,
                                              GemmIdentity());
}

extern "C" void gemm_sm90_release(void) { hopper_tail_release(); }
