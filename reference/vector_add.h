/**
 * @file vector_add.h
 * @brief CPU reference of stage 01: c[i] = a[i] + b[i].
 *
 * The sum of two floats computed in double is exact, so rounding it once to
 * float (or to fp16) gives the correctly rounded result, which is what IEEE
 * addition on the GPU (FADD, HADD2) returns too: the check is exact.
 */
#ifndef WB_REF_VECTOR_ADD_H
#define WB_REF_VECTOR_ADD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief c = a + b over n floats, correctly rounded. */
void ref_vector_add_f32(const float *a, const float *b, float *c, size_t n);
/** @brief c = a + b over n fp16 values (bits), each sum rounded once to fp16, as __hadd2 does. */
void ref_vector_add_f16(const uint16_t *a, const uint16_t *b, uint16_t *c, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_VECTOR_ADD_H */
