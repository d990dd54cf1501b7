/** @file vector_add.c @brief c = a + b on the CPU. */
#include "vector_add.h"

#include "fp16.h"

void ref_vector_add_f32(const float *a, const float *b, float *c, size_t n)
{
    for (size_t i = 0; i < n; ++i) c[i] = (float)((double)a[i] + (double)b[i]);
}

void ref_vector_add_f16(const uint16_t *a, const uint16_t *b, uint16_t *c, size_t n)
{
    /* Two fp16 values add exactly in float (24-bit significand), so one rounding
     * to fp16 after the float sum is the correctly rounded fp16 sum. */
    for (size_t i = 0; i < n; ++i) c[i] = wb_float_to_half(wb_half_to_float(a[i]) + wb_half_to_float(b[i]));
}
