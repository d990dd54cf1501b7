/**
 * @file rope.h
 * @brief CPU reference of stage 07: rotary position embeddings (RoPE), in float64.
 *
 * A head vector x of even length d is cut into d/2 pairs; pair i of the token at
 * position p is rotated by the angle θ_i(p) = p · base^(−2i/d). Two conventions
 * pick the pairs:
 *
 * - **rotate-half** (GPT-NeoX, LLaMA, Hugging Face's `rotate_half`): pair i is
 *   (x[i], x[i + d/2]);
 * - **interleaved** (GPT-J, the original RoFormer): pair i is (x[2i], x[2i + 1]).
 *
 * Each pair (a, b) becomes (a·cos θ − b·sin θ, b·cos θ + a·sin θ). Because the
 * rotation of q at position m and of k at position n combine in the dot product
 * as a rotation by (m − n)·ω_i, q·k depends only on the distance m − n.
 */
#ifndef WB_REF_ROPE_H
#define WB_REF_ROPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Which elements form a pair. */
typedef enum {
    ROPE_ROTATE_HALF = 0, /**< (x[i], x[i + d/2]): GPT-NeoX, LLaMA */
    ROPE_INTERLEAVED = 1  /**< (x[2i], x[2i + 1]): GPT-J */
} rope_style;

/** @brief The angle of pair i at position pos, in float64: pos · base^(−2i/d). */
double ref_rope_angle(long long pos, int i, int d, double base);

/**
 * @brief Rotate x (shape [B, H, N, d], row-major) into y; token n is at position
 *        start_pos + n. x and y may be the same array (in place).
 */
void ref_rope(const float *x, float *y, int B, int H, int N, int d, long long start_pos, double base,
              rope_style style);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_ROPE_H */
