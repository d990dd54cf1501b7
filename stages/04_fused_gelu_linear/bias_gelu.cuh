/**
 * @file stages/04_fused_gelu_linear/bias_gelu.cuh
 * @brief The fused epilogue — bias and GELU applied to an accumulator on its way
 *        out — and the activations it and the elementwise kernels share.
 *
 * Included by kernels.cu (v1–v6, the peers' bias+GELU kernel) and by kernels_sm90.cu
 * (v7–v11, on stage 03's Hopper GEMMs, built for sm_90a alone).
 */
#ifndef STAGE04_BIAS_GELU_CUH
/** @brief Include guard. */
#define STAGE04_BIAS_GELU_CUH

#include "fast_math.cuh" /* exp2_approx, LOG2E */
#include "gelu.h"         /* gelu_kind */

/**
 * @brief GELU, tanh approximation (GPT-2's gelu_new): 0.5·x·(1 + tanh(u)),
 *        u = √(2/π)·(x + 0.044715·x³).
 *
 * Computed as x / (1 + e^(−2u)) — the same function, since 0.5·(1 + tanh u) is the
 * logistic of 2u — with e^(−2u) = 2^(x·(a + b·x²)), log2(e) folded into the two
 * constants. Inside a GEMM the instruction count is what matters: a multiply, an
 * FMA, a multiply, the hardware's ex2, an add and `__fdividef` (the hardware's
 * reciprocal and a multiply): 7 instructions, two of them on the special-function
 * unit. The ex2 is PTX's `.ftz` form: `__expf` (`ex2.approx.f32`) adds three
 * instructions per element to scale results below 2^-126, which here only ever
 * meet a 1 they cannot change. Both are within 2 ulp; where 2^(…) overflows, the
 * quotient is −0, GELU's limit.
 */
static __device__ __forceinline__ float gelu_tanh(float x)
{
    const float a = -2.0f * 0.7978845608028654f * LOG2E; /* −2·√(2/π)·log2(e) */
    const float b = a * 0.044715f;
    return __fdividef(x, 1.0f + exp2_approx(x * fmaf(b, x * x, a)));
}

/**
 * @brief GELU, tanh approximation, with the hardware's tanh (sm_75+, stage 04's v10):
 *        h + h·tanh(u), h = x/2 — 6 instructions, one of them on the special-function unit.
 *
 * PTX documents `tanh.approx.f32`'s error as about 2^-11, and near GELU's negative
 * tail (tanh u → −1) the sum 1 + tanh u cancels, so what reaches the result is an
 * absolute error: up to about 0.5·|x|·2^-11 = 2.4e-4·|x|. Well inside fp16's tolerance for the O(1) values a layer makes,
 * but not the 2-ulp relative accuracy of gelu_tanh; hence a variant of its own.
 */
static __device__ __forceinline__ float gelu_tanh_hw(float x)
{
    const float k = 0.7978845608028654f, c = k * 0.044715f; /* √(2/π), √(2/π)·0.044715 */
    float t, h = 0.5f * x;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x * fmaf(c, x * x, k)));
    return fmaf(h, t, h);
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
/**
 * @brief What the epilogues have in common: the bias, and a column's term of it as a GEMM
 *        that stages the tile's terms in shared memory (v9–v11) loads it, once per tile.
 */
struct ColumnBias {
    const float *bias; /**< N entries, or NULL */
    /** @brief bias[column], or 0 without a bias. */
    __device__ __forceinline__ float column_term(int column) const { return bias ? __ldg(bias + column) : 0.0f; }
};

/** @brief The fused epilogue of v3–v9 (see above). */
template <int KIND>
struct BiasGelu : ColumnBias {
    /** @brief GELU(value + bias[column]). */
    __device__ __forceinline__ float operator()(float value, int column) const
    {
        if (bias) value += __ldg(bias + column);
        return activate(KIND, value);
    }
    /** @brief The same in two steps, for a GEMM that stages the tile's terms (v9): GELU(value + term),
     *         term = column_term(column) from shared memory. */
    __device__ __forceinline__ float finish(float value, float term) const { return activate(KIND, value + term); }
};

/**
 * @brief Call f(BiasGelu<KIND>{bias}) with the KIND `gelu` names: the one place where the run-time choice of
 *        activation becomes the template argument every fused variant compiles in.
 */
template <typename F>
static const char *with_bias_gelu(gelu_kind gelu, const float *bias, F f)
{
    if (gelu == GELU_TANH) return f(BiasGelu<GELU_TANH>{bias});
    if (gelu == GELU_NONE) return f(BiasGelu<GELU_NONE>{bias});
    return f(BiasGelu<GELU_ERF>{bias});
}

/**
 * @brief v10's and v11's epilogue: BiasGelu<GELU_TANH> with the hardware's tanh (gelu_tanh_hw),
 *        for a GEMM that stages the tile's bias (column_term / finish only).
 */
struct BiasGeluHwTanh : ColumnBias {
    /** @brief GELU(value + term), per element. */
    __device__ __forceinline__ float finish(float value, float term) const { return gelu_tanh_hw(value + term); }
};

#endif /* STAGE04_BIAS_GELU_CUH */
