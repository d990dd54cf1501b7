/**
 * @file reduce.h
 * @brief CPU references of stage 02: the sum and the maximum of an array.
 *
 * The sum is accumulated in float64 with Neumaier's compensation, so its own error
 * is far below anything an fp32 GPU reduction can reach: it stands in for the
 * exact sum. It also returns Σ|x|, which bounds the rounding error of any fp32
 * summation order (Higham, "Accuracy and Stability of Numerical Algorithms", §4):
 * |computed − exact| ≤ γ · Σ|x| with γ ≈ depth × 2⁻²⁴ for a tree of that depth.
 */
#ifndef WB_REF_REDUCE_H
#define WB_REF_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A sum and the sum of magnitudes that bounds its rounding error. */
typedef struct {
    double sum;     /**< Σ x, compensated float64 */
    double abs_sum; /**< Σ |x| */
} ref_sum_result;

/** @brief Σ x over n floats (n >= 1). */
ref_sum_result ref_sum_f32(const float *x, size_t n);
/** @brief Σ x over n fp16 values (bits), each converted to float exactly first. */
ref_sum_result ref_sum_f16(const uint16_t *x, size_t n);
/** @brief max x over n floats (n >= 1); exact. NaN inputs are not expected. */
float ref_max_f32(const float *x, size_t n);
/** @brief max x over n fp16 values (bits), as a float; exact. */
float ref_max_f16(const uint16_t *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_REDUCE_H */
