/**
 * @file gpt2.h
 * @brief CPU reference of stage 10: the whole GPT-2 forward pass in fp32, over a
 *        full sequence and as a KV-cached step, the ground truth of the GPU.
 *
 * GPT-2 as Hugging Face defines it: learned position embeddings; L blocks of
 * x += proj(attn(ln_1(x))), x += fc_proj(gelu_tanh(fc(ln_2(x)))); a final
 * LayerNorm; logits = x · wteᵀ (the LM head is the token embedding). LayerNorm
 * eps 1e-5, attention scale 1/√(C/H), causal. Linear weights are stored
 * [in][out] (the Conv1D layout of the Hugging Face files): y = x·W + b.
 */
#ifndef WB_REF_GPT2_H
#define WB_REF_GPT2_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Sizes of a GPT-2 model (124M: V 50257, max_T 1024, L 12, H 12, C 768). */
typedef struct {
    int vocab;    /**< V, tokens */
    int max_T;    /**< positions */
    int n_layer;  /**< L, blocks */
    int n_head;   /**< H, attention heads (C % H == 0) */
    int C;        /**< channels */
} gpt2_config;

/** @brief One block's weights. */
typedef struct {
    const float *ln1_w;    /**< [C] ln_1 gain */
    const float *ln1_b;    /**< [C] ln_1 shift */
    const float *qkv_w;    /**< [C][3C]: q, k, v side by side */
    const float *qkv_b;    /**< [3C] */
    const float *proj_w;   /**< [C][C] attention output projection */
    const float *proj_b;   /**< [C] */
    const float *ln2_w;    /**< [C] ln_2 gain */
    const float *ln2_b;    /**< [C] ln_2 shift */
    const float *fc_w;     /**< [C][4C] MLP up */
    const float *fc_b;     /**< [4C] */
    const float *fcproj_w; /**< [4C][C] MLP down */
    const float *fcproj_b; /**< [C] */
} gpt2_block;

/** @brief All weights (fp32). */
typedef struct {
    const float *wte;           /**< [V][C] token embedding, also the LM head */
    const float *wpe;           /**< [max_T][C] position embedding */
    const gpt2_block *blocks;   /**< [L] */
    const float *lnf_w;         /**< [C] final LayerNorm gain */
    const float *lnf_b;         /**< [C] final LayerNorm shift */
} gpt2_weights;

/** @brief GPT-2's LayerNorm epsilon. */
#define GPT2_LN_EPS 1e-5f

/**
 * @brief Full forward pass of one sequence: logits at every position.
 * @param cfg    sizes
 * @param w      weights
 * @param T      tokens
 * @param tokens T token ids (each < vocab), T <= max_T
 * @param logits receives [T][vocab]
 */
void ref_gpt2_forward(const gpt2_config *cfg, const gpt2_weights *w, const int *tokens, int T, float *logits);

/** @brief The KV cache of one sequence for the incremental step: K and V of every layer and position. */
typedef struct {
    float *k;  /**< [L][max_T][C] */
    float *v;  /**< [L][max_T][C] */
    int len;   /**< positions filled */
} ref_gpt2_cache;

/** @brief Allocate an empty cache. @return 0, or −1 when out of memory */
int ref_gpt2_cache_init(ref_gpt2_cache *c, const gpt2_config *cfg);
/** @brief Free it. */
void ref_gpt2_cache_free(ref_gpt2_cache *c);

/**
 * @brief One incremental step: token at position c->len attends to the cached
 *        positions and itself; its K and V are appended; logits of the next token.
 * @param cfg    sizes
 * @param w      weights
 * @param c      the sequence's cache
 * @param token  the token at position c->len
 * @param logits receives [vocab]
 * @return 0, or −1 when the cache is full (len == max_T)
 */
int ref_gpt2_step(const gpt2_config *cfg, const gpt2_weights *w, ref_gpt2_cache *c, int token, float *logits);

#ifdef __cplusplus
}
#endif

#endif /* WB_REF_GPT2_H */
