/**
 * @file stages/10_gpt2_e2e/argmax_key.h
 * @brief v3's argmax as an atomicMax: a (value, token) pair packed into one
 *        64-bit integer whose unsigned order is "larger value first, then lower
 *        token". Host and device (the CPU test checks the order).
 *
 * The float's bits are flipped so that unsigned order is float order
 * (negatives: every bit; positives and zero: the sign bit), −0 counting as +0
 * as the comparison `>` does; the token goes in the low half inverted, so the
 * lower token is the larger key. NaN is key 0, below every number: a row of
 * NaN gives token 0, as the argmax kernel of v1/v2 does.
 */
#ifndef STAGE10_ARGMAX_KEY_H
#define STAGE10_ARGMAX_KEY_H

#include <string.h>

#ifdef __CUDACC__
/** @brief Callable from host and device code. */
#define ARGMAX_KEY_HD __host__ __device__
#else
#define ARGMAX_KEY_HD
#endif

/** @brief The key of value v at token (token >= 0). */
static inline ARGMAX_KEY_HD unsigned long long gpt2_argmax_key(float v, int token)
{
    if (v != v) return 0ull; /* NaN */
    if (v == 0.0f) v = 0.0f; /* −0 → +0 */
    unsigned int u;
    memcpy(&u, &v, sizeof u);
    u = u & 0x80000000u ? ~u : u | 0x80000000u;
    return (unsigned long long)u << 32 | (unsigned int)~(unsigned int)token;
}

/** @brief The token a key names; 0 for key 0 (no value was a number) or a token outside 0..V−1. */
static inline ARGMAX_KEY_HD int gpt2_argmax_key_token(unsigned long long key, int V)
{
    unsigned int token = ~(unsigned int)key;
    return key == 0ull || token >= (unsigned int)V ? 0 : (int)token;
}

#endif /* STAGE10_ARGMAX_KEY_H */
