/**
 * @file stages/10_gpt2_e2e/host/model.h
 * @brief GPT-2's weights on the host: bound from a Hugging Face
 *        `model.safetensors` (checked tensor by tensor), or made at random
 *        (deterministic, for tests and for benchmarks without a download).
 */
#ifndef STAGE10_MODEL_H
#define STAGE10_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gpt2.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A model: sizes, and fp32 weights in one allocation. */
typedef struct {
    gpt2_config cfg;       /**< sizes */
    gpt2_weights w;        /**< pointers into `memory` */
    gpt2_block *blocks;    /**< the blocks w.blocks points to */
    float *memory;         /**< every weight */
    size_t n_params;       /**< floats in memory */
} gpt2_model;

/** @brief GPT-2 124M's sizes. */
gpt2_config gpt2_config_124m(void);

/**
 * @brief Bind a model to a parsed safetensors file: names with or without the
 *        `transformer.` prefix; sizes from wte [V, C], wpe [max_T, C] and the
 *        number of `h.N.` blocks; heads = C / 64 (every GPT-2 size has head
 *        dimension 64) unless n_head > 0; `lm_head.weight` and the attention
 *        mask buffers (`h.N.attn.bias`, `h.N.attn.masked_bias`) ignored.
 * @return 0, or −1 with a one-line reason naming the tensor in err
 */
int gpt2_model_from_safetensors(const st_file *f, int n_head, gpt2_model *m, char *err, size_t err_len);

/** @brief st_load + gpt2_model_from_safetensors. */
int gpt2_model_load(const char *path, int n_head, gpt2_model *m, char *err, size_t err_len);

/** @brief A random model of the given sizes (seeded; weights about as large as GPT-2's). @return 0 or −1 */
int gpt2_model_random(gpt2_model *m, const gpt2_config *cfg, uint64_t seed);

/** @brief Free the weights. */
void gpt2_model_free(gpt2_model *m);

/**
 * @brief Write a model as a safetensors file the way Hugging Face's
 *        `save_pretrained` does (F32, Conv1D weights [in, out], no lm_head,
 *        `h.N.attn.bias` mask buffers, a `__metadata__`), with or without the
 *        `transformer.` prefix.
 * @return 0, or −1 with a reason in err
 */
int gpt2_model_write(const gpt2_model *m, const char *path, int with_prefix, char *err, size_t err_len);

/**
 * @brief Fold a LayerNorm (gain g, shift b, [K]) into the linear after it (w
 *        [K][N], bias [N]), the decode step's v6 (decode_tagged.cu:
 *        row_statistics): LN(x)·w + bias = rstd·(x·w' − mean·Σ_k w'_k) +
 *        bias'. Writes w' = g_k·w_kn, each value passed through `round`
 *        (the storage's rounding; NULL keeps fp32), into w_folded [K][N], and
 *        into bias_sums [2][N] bias'_n = bias_n + Σ_k b_k·w_kn, then Σ_k of
 *        the rounded w'_kn (so that the mean's term takes away exactly what
 *        the folded weights multiplied it by). Sums in double.
 * @return 0, or −1 out of memory
 */
int gpt2_fold_layernorm(const float *w, const float *bias, const float *g, const float *b, int K, int N,
                        float (*round)(float), float *w_folded, float *bias_sums);

#ifdef __cplusplus
}
#endif

#endif /* STAGE10_MODEL_H */
