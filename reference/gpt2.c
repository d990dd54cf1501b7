/**
 * @file gpt2.c
 * @brief The CPU reference of GPT-2 (see gpt2.h). Two independent paths: the
 *        full-sequence forward computes every position's Q, K, V at once and
 *        masks; the step computes one position against a cache. Tests check
 *        that they agree.
 */
#include "gpt2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "gelu.h"
#include "layernorm.h"

/** y[T][N] = x[T][K]·W[K][N] + b (b may be NULL); fp32 with the k loop outside for cache order. */
static void linear(const float *x, const float *W, const float *b, float *y, int T, int K, int N)
{
    for (int t = 0; t < T; ++t) {
        float *yt = y + (size_t)t * N;
        for (int n = 0; n < N; ++n) yt[n] = b ? b[n] : 0.0f;
        for (int k = 0; k < K; ++k) {
            float xk = x[(size_t)t * K + k];
            const float *wk = W + (size_t)k * N;
            for (int n = 0; n < N; ++n) yt[n] += xk * wk[n];
        }
    }
}

/** logits[T][V] = x[T][C]·wteᵀ. */
static void lm_head(const float *x, const float *wte, float *logits, int T, int C, int V)
{
    for (int t = 0; t < T; ++t)
        for (int v = 0; v < V; ++v) {
            float s = 0.0f;
            for (int c = 0; c < C; ++c) s += x[(size_t)t * C + c] * wte[(size_t)v * C + c];
            logits[(size_t)t * V + v] = s;
        }
}

/** The MLP half of a block on T rows: x += fc_proj(gelu(fc(ln_2(x)))). */
static void mlp(const gpt2_block *b, float *x, float *ln, float *hidden, float *tmp, int T, int C)
{
    ref_layernorm(x, b->ln2_w, b->ln2_b, GPT2_LN_EPS, ln, NULL, NULL, (size_t)T, (size_t)C);
    linear(ln, b->fc_w, b->fc_b, hidden, T, C, 4 * C);
    for (size_t i = 0; i < (size_t)T * 4 * C; ++i) hidden[i] = (float)ref_gelu_tanh(hidden[i]);
    linear(hidden, b->fcproj_w, b->fcproj_b, tmp, T, 4 * C, C);
    for (size_t i = 0; i < (size_t)T * C; ++i) x[i] += tmp[i];
}

void ref_gpt2_forward(const gpt2_config *cfg, const gpt2_weights *w, const int *tokens, int T, float *logits)
{
    int C = cfg->C, H = cfg->n_head, hd = C / H;
    float *x = malloc((size_t)T * C * 4), *ln = malloc((size_t)T * C * 4), *qkv = malloc((size_t)T * 3 * C * 4);
    float *att = malloc((size_t)T * C * 4), *tmp = malloc((size_t)T * C * 4), *hidden = malloc((size_t)T * 4 * C * 4);
    if (!x || !ln || !qkv || !att || !tmp || !hidden) abort();
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c)
            x[(size_t)t * C + c] = w->wte[(size_t)tokens[t] * C + c] + w->wpe[(size_t)t * C + c];
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < cfg->n_layer; ++l) {
        const gpt2_block *b = &w->blocks[l];
        ref_layernorm(x, b->ln1_w, b->ln1_b, GPT2_LN_EPS, ln, NULL, NULL, (size_t)T, (size_t)C);
        linear(ln, b->qkv_w, b->qkv_b, qkv, T, C, 3 * C);
        for (int t = 0; t < T; ++t) /* causal: position t sees keys 0 … t, read in place with stride 3C */
            for (int h = 0; h < H; ++h)
                ref_attention_row(qkv + (size_t)t * 3 * C + h * hd, qkv + C + h * hd, qkv + 2 * C + h * hd,
                                  (size_t)t + 1, (size_t)hd, (size_t)3 * C, scale, att + (size_t)t * C + h * hd, NULL);
        linear(att, b->proj_w, b->proj_b, tmp, T, C, C);
        for (size_t i = 0; i < (size_t)T * C; ++i) x[i] += tmp[i];
        mlp(b, x, ln, hidden, tmp, T, C);
    }
    ref_layernorm(x, w->lnf_w, w->lnf_b, GPT2_LN_EPS, ln, NULL, NULL, (size_t)T, (size_t)C);
    lm_head(ln, w->wte, logits, T, C, cfg->vocab);
    free(x), free(ln), free(qkv), free(att), free(tmp), free(hidden);
}

int ref_gpt2_cache_init(ref_gpt2_cache *c, const gpt2_config *cfg)
{
    size_t n = (size_t)cfg->n_layer * cfg->max_T * cfg->C;
    c->k = malloc(n * 4), c->v = malloc(n * 4), c->len = 0;
    if (!c->k || !c->v) {
        ref_gpt2_cache_free(c);
        return -1;
    }
    return 0;
}

void ref_gpt2_cache_free(ref_gpt2_cache *c)
{
    free(c->k), free(c->v);
    c->k = c->v = NULL, c->len = 0;
}

int ref_gpt2_step(const gpt2_config *cfg, const gpt2_weights *w, ref_gpt2_cache *c, int token, float *logits)
{
    int C = cfg->C, H = cfg->n_head, hd = C / H, pos = c->len;
    if (pos >= cfg->max_T) return -1;
    float *x = malloc((size_t)C * 4), *ln = malloc((size_t)C * 4), *qkv = malloc((size_t)3 * C * 4);
    float *att = malloc((size_t)C * 4), *tmp = malloc((size_t)C * 4), *hidden = malloc((size_t)4 * C * 4);
    if (!x || !ln || !qkv || !att || !tmp || !hidden) abort();
    for (int i = 0; i < C; ++i) x[i] = w->wte[(size_t)token * C + i] + w->wpe[(size_t)pos * C + i];
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < cfg->n_layer; ++l) {
        const gpt2_block *b = &w->blocks[l];
        float *kc = c->k + (size_t)l * cfg->max_T * C, *vc = c->v + (size_t)l * cfg->max_T * C;
        ref_layernorm(x, b->ln1_w, b->ln1_b, GPT2_LN_EPS, ln, NULL, NULL, 1, (size_t)C);
        linear(ln, b->qkv_w, b->qkv_b, qkv, 1, C, 3 * C);
        memcpy(kc + (size_t)pos * C, qkv + C, (size_t)C * 4); /* append this position's K and V */
        memcpy(vc + (size_t)pos * C, qkv + 2 * C, (size_t)C * 4);
        for (int h = 0; h < H; ++h)
            ref_attention_row(qkv + h * hd, kc + h * hd, vc + h * hd, (size_t)pos + 1, (size_t)hd, (size_t)C, scale,
                              att + h * hd, NULL);
        linear(att, b->proj_w, b->proj_b, tmp, 1, C, C);
        for (int i = 0; i < C; ++i) x[i] += tmp[i];
        mlp(b, x, ln, hidden, tmp, 1, C);
    }
    ref_layernorm(x, w->lnf_w, w->lnf_b, GPT2_LN_EPS, ln, NULL, NULL, 1, (size_t)C);
    lm_head(ln, w->wte, logits, 1, C, cfg->vocab);
    c->len = pos + 1;
    free(x), free(ln), free(qkv), free(att), free(tmp), free(hidden);
    return 0;
}
