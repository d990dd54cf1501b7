/**
 * @file stages/04_fused_gelu_linear/kernels_sm90.cu
 * @brief Stage 04's Hopper variants: bias and GELU in the epilogue of stage 03's v10,
 *        the Hopper GEMM (TMA + wgmma) — v7; of stage 03's v11, the same made persistent —
 *        v8; of stage 03's v13, whose epilogue runs in registers and stores by TMA and
 *        which splits a half-empty last wave along K, with the tile's bias staged in
 *        shared memory — v9; v10 is v9 with the hardware's tanh, v11 is v10 on stage 03's
 *        v14 (its tile shape chosen from the waves). Built for sm_90a only, in a library
 *        of its own.
 */
#include <cuda_fp16.h>

#include "bias_gelu.cuh"   /* BiasGelu */
#include "gemm_hopper.cuh" /* stage 03: launch_hgemm_wgmma (v10), …_persistent (v11), …_tma_store (v13) */
#include "kernels.h"

/** @brief One of stage 03's Hopper launchers on a's fp16 matrices, with the epilogue epi. */
template <typename Launch, typename Epilogue>
static const char *launch_fp16(const linear_args *a, Launch launch, Epilogue epi)
{
    return launch((const __half *)a->X, (const __half *)a->W, (__half *)a->Y, a->M, a->N, a->K, epi);
}

/** @brief v7, v8 or v9: one of stage 03's Hopper launchers with the epilogue of a->gelu. */
template <typename Launch>
static const char *launch_bias_gelu(const linear_args *a, Launch launch)
{
    return with_bias_gelu(a->gelu, a->bias, [&](auto epi) { return launch_fp16(a, launch, epi); });
}

/** @brief v9's and v10's GEMM: stage 03's v13 with the epilogue's column terms staged in shared memory. */
static constexpr auto v13_staged_columns = [](auto... args) { return launch_hgemm_wgmma_tma_store<true>(args..., true); };

extern "C" const char *linear_v7_wgmma(const linear_args *a)
{
    return launch_bias_gelu(a, [](auto... args) { return launch_hgemm_wgmma(args...); });
}

extern "C" const char *linear_v8_wgmma_persistent(const linear_args *a)
{
    return launch_bias_gelu(a, [](auto... args) { return launch_hgemm_wgmma_persistent(args...); });
}

extern "C" const char *linear_v9_staged_bias(const linear_args *a)
{
    return launch_bias_gelu(a, v13_staged_columns);
}

extern "C" const char *linear_v10_hw_tanh(const linear_args *a)
{
    if (a->gelu != GELU_TANH) return linear_v9_staged_bias(a); /* the hardware tanh serves the tanh form only */
    return launch_fp16(a, v13_staged_columns, BiasGeluHwTanh{a->bias});
}

/** @brief v11's GEMM: stage 03's v14 (the tile from the waves), column terms staged as v9's. */
static constexpr auto v14_staged_columns = [](auto... args) { return launch_hgemm_wgmma_tile_from_waves<true>(args...); };

extern "C" const char *linear_v11_tile_from_waves(const linear_args *a)
{
    if (a->gelu != GELU_TANH) return launch_bias_gelu(a, v14_staged_columns); /* as v10: tanh.approx serves tanh only */
    return launch_fp16(a, v14_staged_columns, BiasGeluHwTanh{a->bias});
}

extern "C" void linear_sm90_release(void) { hopper_tail_release(); }
