/**
 * @file common/fast_math.cuh
 * @brief Special-function shortcuts the kernels of several stages share.
 */
#ifndef WB_FAST_MATH_CUH
/** @brief Include guard. */
#define WB_FAST_MATH_CUH

/** @brief log2(e): e^x = 2^(x · LOG2E), how the kernels that work in base 2 (one exp2_approx per exponential) scale. */
#define LOG2E 1.4426950408889634f

/**
 * @brief 2^x on the special-function unit: one MUFU.EX2, results below 2^-126 flush
 *        to 0. `exp2f` and `__expf` (`ex2.approx.f32`) add three instructions around
 *        it to scale denormal results (a compare and two multiplies); the kernels
 *        that call this one use results where anything under 2^-126 counts as 0
 *        (softmax weights, GELU's 1 / (1 + 2^u)).
 */
static __device__ __forceinline__ float exp2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#endif /* WB_FAST_MATH_CUH */
