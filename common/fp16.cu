/** @file fp16.cu @brief fp16 conversions for C host code, through cuda_fp16's host functions. */
#include "fp16.h"

#include <cuda_fp16.h>
#include <string.h>

extern "C" uint16_t wb_float_to_half(float x)
{
    __half h = __float2half_rn(x);
    uint16_t bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}

extern "C" float wb_half_to_float(uint16_t bits)
{
    __half h;
    memcpy(&h, &bits, sizeof bits);
    return __half2float(h);
}

extern "C" float wb_round_to_half(float x) { return wb_half_to_float(wb_float_to_half(x)); }

extern "C" void wb_floats_to_halves(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; ++i) dst[i] = wb_float_to_half(src[i]);
}

extern "C" void wb_halves_to_floats(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; ++i) dst[i] = wb_half_to_float(src[i]);
}
