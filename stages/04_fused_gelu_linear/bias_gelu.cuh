/**
 * @file stages/04_fused_gelu_linear/bias_gelu.cuh
 * @brief The fused epilogue — bias and GELU applied to an accumulator on its way
 *        out — and the activations it and the elementwise kernels share.
 *
 * Included by kernels.cu (v1–v4, the peers' bias+GELU kernel) and by kernels_sm90.cu
 * (v5, on stage 03's Hopper GEMM, built for sm_90a alone).
 */
#ifndef STAGE04_BIAS_GELU_CUH
/** @brief Include guard. */
#define STAGE04_BIAS_GELU_CUH

#include "gelu.h" /* gelu_kind */

/**
 * @brief GELU, tanh approximation (GPT-2's gelu_new): 0.5·x·(1 + tanh(u)),
 *        u = √(2/π)·(x + 0.044715·x³).
 *
 * Computed as x / (1 + e^(−2u)) — the same function, since 0.5·(1 + tanh u) is the
 * logistic of 2u — with −2u = x·(a + b·x²) folded into two constants. Inside a GEMM the
 * instruction count is what matters: one multiply, one FMA, one multiply, `__expf`
 * (a multiply and the hardware's ex2), an add and `__fdividef` (the hardware's
 * reciprocal and a multiply): 8 instructions. A plain `/` would be PTX's `div.rn.f32`,
 * which ptxas expands into a reciprocal, refinement steps and a branch to a slow path.
 * Both intrinsics are within 2 ulp; where e^(−2u) overflows, the quotient is −0,
 * GELU's limit.
 */
static __device__ __forceinline__ float gelu_tanh(float x)
{
    const float a = -2.0f * 0.7978845608028654f; /* −2·√(2/π) */
    const float b = a * 0.044715f;
    return __fdividef(x, 1.0f + __expf(x * fmaf(b, x * x, a)));
}

/** @brief GELU, exact: 0.5·x·(1 + erf(x/√2)). */
static __device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }

/** @brief The activation of a gelu_kind (GELU_NONE: none, for the layers without one). */
static __device__ __forceinline__ float activate(int kind, float v)
{
    return kind == GELU_TANH ? gelu_tanh(v) : kind == GELU_ERF ? gelu_erf(v) : v;
}

/**
 * @brief The fused epilogue: add the column's bias, apply GELU — on the accumulator,
 *        before the store. The GELU form is a template argument, so only one of them
 *        is compiled into the GEMM (the erf form costs registers the GEMM needs).
 */
template <int KIND>
struct BiasGelu {
    const float *bias; /**< N entries, or NULL */
    /** @brief GELU(value + bias[column]). */
    __device__ __forceinline__ float operator()(float value, int column) const
    {
        if (bias) value += __ldg(bias + column);
        return activate(KIND, value);
    }
};

#endif /* STAGE04_BIAS_GELU_CUH */
