/**
 * @file stages/07_rope/kernels.h
 * @brief Stage 07 — rotary position embeddings on Q and K: launchers, the table of
 *        variants, and the angle-accuracy study.
 */
#ifndef STAGE07_KERNELS_H
#define STAGE07_KERNELS_H

#include "dtype.h"
#include "rope.h" /* rope_style: ROPE_ROTATE_HALF, ROPE_INTERLEAVED */

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Everything one RoPE call needs. Q and K are [B, H, N, d], row-major. */
typedef struct {
    wb_dtype dtype;          /**< storage type of q, k and the outputs (math is fp32) */
    rope_style style;        /**< which elements form a pair */
    const void *q;           /**< queries, device */
    const void *k;           /**< keys, device */
    void *q_out;             /**< rotated queries (may equal q: in place) */
    void *k_out;             /**< rotated keys (may equal k) */
    int B;                   /**< batch */
    int H;                   /**< heads */
    int N;                   /**< tokens; token n is at position start_pos + n */
    int d;                   /**< head dimension, even */
    long long start_pos;     /**< position of token 0 (a decode step: N = 1 at the next position) */
    const float *cos_sin;    /**< v1's table: [start_pos + N][d/2] pairs (cos θ, sin θ), fp32, device */
    const float *inv_freq;   /**< [d/2] pairs (hi, lo): base^(−2i/d) as the sum of two floats, device */
} rope_args;

/** @brief A launcher: rotate Q and K. Returns NULL, or why the variant cannot take the arguments. */
typedef const char *(*rope_launch_fn)(const rope_args *a);

/** @brief One variant. */
typedef struct {
    const char *id;         /**< "v1", … */
    const char *what;       /**< one line for the table */
    int reads_table;        /**< 1 when it reads the cos/sin table (its bytes count) */
    rope_launch_fn launch;  /**< its launcher */
} rope_variant;

/** @brief The exercise slot (exercise.cu), the variant `ex`: your in-kernel sin/cos rotation, fp32. */
const char *rope_exercise(const rope_args *a);

/** @brief The variants in teaching order, then the exercise slot. */
extern const rope_variant rope_variants[];
/** @brief How many. */
extern const int rope_variant_count;

/** @brief The ways of computing sin θ and cos θ that the angle study compares. */
enum {
    ANGLE_F32_SINCOSF,   /**< θ = pos · inv_freq in fp32, then sincosf (accurate for the θ it is given) */
    ANGLE_F32_FAST,      /**< θ in fp32, then __sincosf (hardware approximation, no range reduction) */
    ANGLE_REDUCED_FAST,  /**< θ as two floats, reduced mod 2π, then __sincosf: what v2 and v3 do */
    ANGLE_METHODS
};

/**
 * @brief For each position and pair, compute (sin θ, cos θ) by every method of the
 *        study into out[((p · d/2) + i) · ANGLE_METHODS · 2 + 2·method + {0, 1}].
 * @param positions device array of n_pos positions
 * @param n_pos     how many
 * @param d         head dimension
 * @param inv_freq  device [d/2] (hi, lo) pairs
 * @param out       device, n_pos · d/2 · ANGLE_METHODS · 2 floats
 */
void rope_angle_study(const long long *positions, int n_pos, int d, const float *inv_freq, float *out);

#ifdef __cplusplus
}
#endif

#endif /* STAGE07_KERNELS_H */
