/**
 * @file rng.h
 * @brief Seeded, reproducible random data (splitmix64): the same seed gives the same
 *        inputs on every machine, so a failure can be replayed with `--seed`.
 */
#ifndef WB_RNG_H
#define WB_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Generator state: one 64-bit word (splitmix64, Steele et al. 2014). */
typedef struct {
    uint64_t state; /**< advanced by a fixed odd constant on every draw */
} wb_rng;

/** @brief Start a generator from a seed (any value, 0 included). */
void wb_rng_seed(wb_rng *rng, uint64_t seed);
/** @brief Next 64 random bits. */
uint64_t wb_rng_next(wb_rng *rng);
/** @brief Uniform float in [lo, hi), from 24 random bits (every value a float can take on a 2^-24 grid). */
float wb_rng_uniform(wb_rng *rng, float lo, float hi);
/** @brief Uniform integer in [lo, hi] (both ends included). */
int wb_rng_int(wb_rng *rng, int lo, int hi);
/**
 * @brief Log-uniform integer in [lo, hi] (1 <= lo <= hi): many small values, a
 *        few large — the sequence lengths a chat server sees (stages 08, 09).
 */
int wb_rng_log_uniform(wb_rng *rng, int lo, int hi);

/**
 * @brief Derive a seed for one data set from the run's seed and labels, so every
 *        size and every input of a sweep gets its own independent stream.
 */
uint64_t wb_seed_for(uint64_t run_seed, uint64_t a, uint64_t b);

/** @brief Fill x[0..n) with uniform floats in [lo, hi). */
void wb_fill_uniform_f32(float *x, size_t n, float lo, float hi, uint64_t seed);
/** @brief Fill x[0..n) with uniform integers in [lo, hi], stored as floats (sums of them are exact in fp32 up to 2^24). */
void wb_fill_int_f32(float *x, size_t n, int lo, int hi, uint64_t seed);
/** @brief Fill x[0..n) with fp16 bits of uniform values in [lo, hi), rounded to nearest fp16. */
void wb_fill_uniform_f16(uint16_t *x, size_t n, float lo, float hi, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif /* WB_RNG_H */
