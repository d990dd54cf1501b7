/** @file rng.c @brief splitmix64 and the fill helpers built on it. */
#include "rng.h"

#include "fp16.h"

#include <math.h>

void wb_rng_seed(wb_rng *rng, uint64_t seed) { rng->state = seed; }

uint64_t wb_rng_next(wb_rng *rng)
{
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float wb_rng_uniform(wb_rng *rng, float lo, float hi)
{
    float unit = (float)(wb_rng_next(rng) >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
    return lo + (hi - lo) * unit;
}

int wb_rng_int(wb_rng *rng, int lo, int hi)
{
    uint64_t span = (uint64_t)((int64_t)hi - lo + 1);
    return (int)(lo + (int64_t)(wb_rng_next(rng) % span));
}

int wb_rng_log_uniform(wb_rng *rng, int lo, int hi)
{
    double u = (double)(wb_rng_next(rng) >> 11) / 9007199254740992.0; /* 53 bits: [0, 1) */
    return (int)fmin(hi, floor(exp(log(lo) + u * (log(hi + 1.0) - log(lo)))));
}

uint64_t wb_seed_for(uint64_t run_seed, uint64_t a, uint64_t b)
{
    wb_rng r;
    wb_rng_seed(&r, run_seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full));
    return wb_rng_next(&r);
}

void wb_fill_uniform_f32(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    wb_rng r;
    wb_rng_seed(&r, seed);
    for (size_t i = 0; i < n; ++i) x[i] = wb_rng_uniform(&r, lo, hi);
}

void wb_fill_int_f32(float *x, size_t n, int lo, int hi, uint64_t seed)
{
    wb_rng r;
    wb_rng_seed(&r, seed);
    for (size_t i = 0; i < n; ++i) x[i] = (float)wb_rng_int(&r, lo, hi);
}

void wb_fill_uniform_f16(uint16_t *x, size_t n, float lo, float hi, uint64_t seed)
{
    wb_rng r;
    wb_rng_seed(&r, seed);
    for (size_t i = 0; i < n; ++i) x[i] = wb_float_to_half(wb_rng_uniform(&r, lo, hi));
}
