/**
 * @file fp16.h
 * @brief Host-side fp16 (IEEE binary16) conversions, from the toolkit's cuda_fp16.
 *
 * The host programs are C, and cuda_fp16.h's conversions are C++; these wrappers
 * (compiled by nvcc in fp16.cu) give C the same round-to-nearest-even conversion
 * the GPU uses, so CPU references and GPU kernels agree bit for bit on fp16 inputs.
 * An fp16 value is carried on the host as its 16 bits in a uint16_t.
 */
#ifndef WB_FP16_H
#define WB_FP16_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Round a float to the nearest fp16 (ties to even); returns its bits. */
uint16_t wb_float_to_half(float x);
/** @brief The float value of fp16 bits (exact: every fp16 is a float). */
float wb_half_to_float(uint16_t h);
/** @brief x rounded to the nearest fp16 (ties to even), as a float: what storing it as fp16 keeps. */
float wb_round_to_half(float x);
/** @brief Convert n floats to fp16 bits, rounding to nearest even. */
void wb_floats_to_halves(const float *src, uint16_t *dst, size_t n);
/** @brief Convert n fp16 values (bits) to floats. */
void wb_halves_to_floats(const uint16_t *src, float *dst, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* WB_FP16_H */
