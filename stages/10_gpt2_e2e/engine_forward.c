/**
 * @file stages/10_gpt2_e2e/engine_forward.c
 * @brief The forward pass every variant shares: a linear layer and a LayerNorm
 *        through the earlier stages' launchers, a block's tail, the logits,
 *        and prefill (every prompt token through the blocks at once).
 */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "04_fused_gelu_linear/kernels.h"
#include "05_softmax/kernels.h"
#include "06_flash_attention/kernels.h"
#include "08_paged_kv_cache/kernels.h"
#include "09_paged_attention/kernels.h"
#include "argmax_key.h"
#include "cuda_check.h"
#include "device.h"
#include "fp16.h"
#include "kernels.h"
#include "engine_internal.h"
#include "timing.h"

/** With profiling on: wait for the GPU and charge the time since the last mark to `bucket`. */
void engine_charge(gpt2_engine *e, double *bucket, double *mark)
{
    if (!e->profile) return;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    double t = wb_wall_ms();
    *bucket += t - *mark;
    *mark = t;
}

/** Byte offset of row r in a buffer of rows `width` elements wide. */
static void *row_ptr(const gpt2_engine *e, void *base, size_t r, size_t width)
{
    return (char *)base + r * width * wb_dtype_bytes(e->dtype);
}

const char *engine_linear(gpt2_engine *e, const void *X, const void *W, const float *b, void *Y, int M, int N, int K,
                          gelu_kind g)
{
    /* a decode batch of 1-64 rows in fp16 on sm_80: stage 03's GEMM in a tile of 64 rows, K split (even at 1 row
     * its 16-byte loads of W beat the small-M linear's 2-byte ones) */
    if (e->skinny_linear && M <= SKINNY_MAX_ROWS)
        return gpt2_linear_skinny(X, W, b, Y, M, N, K, g == GELU_TANH, e->small_m_workspace, e->small_m_floats);
    if (M <= 8) /* a decode step in fp32, or on the T4: the small-M kernel streams W instead of tiling it */
        return gpt2_linear_small_m(e->dtype, X, W, b, Y, M, N, K, g == GELU_TANH, e->small_m_workspace,
                                   e->small_m_floats);
    linear_args a = {X, W, b, Y, M, N, K, g};
    return linear_variants[e->linear_variant].launch(&a);
}

const char *engine_layernorm(gpt2_engine *e, const void *x, const float *w, const float *b, void *y, int rows)
{
    return layernorm_variants[e->layernorm_variant].launch(e->dtype, x, w, b, GPT2_LN_EPS, y, e->mean, e->rstd, rows,
                                                           e->cfg.C);
}

/** The first half of block l before attention, shared by prefill and decode: qkv = ln1(x)·W_qkv + b. */
const char *engine_block_head(gpt2_engine *e, int l, int rows, double *mark)
{
    int C = e->cfg.C;
    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    TRY(engine_layernorm(e, e->x, e->ln1_w[l], e->ln1_b[l], e->ln, rows));
    engine_charge(e, &p->layernorm, mark);
    TRY(engine_linear(e, e->ln, e->qkv_w[l], e->qkv_b[l], e->qkv, rows, 3 * C, C, GELU_NONE));
    engine_charge(e, &p->linear, mark);
    return NULL;
}

/** The MLP half and the residuals, shared by prefill and decode: x += proj(att); x += fcproj(gelu(fc(ln2(x)))). */
const char *engine_block_tail(gpt2_engine *e, int l, int rows, double *mark)
{
    int C = e->cfg.C;
    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    TRY(engine_linear(e, e->att, e->proj_w[l], e->proj_b[l], e->tmp, rows, C, C, GELU_NONE));
    engine_charge(e, &p->linear, mark);
    TRY(gpt2_residual_add(e->dtype, e->x, e->tmp, (long long)rows * C));
    engine_charge(e, &p->other, mark);
    TRY(engine_layernorm(e, e->x, e->ln2_w[l], e->ln2_b[l], e->ln, rows));
    engine_charge(e, &p->layernorm, mark);
    TRY(engine_linear(e, e->ln, e->fc_w[l], e->fc_b[l], e->hidden, rows, 4 * C, C, GELU_TANH));
    TRY(engine_linear(e, e->hidden, e->fcproj_w[l], e->fcproj_b[l], e->tmp, rows, C, 4 * C, GELU_NONE));
    engine_charge(e, &p->linear, mark);
    TRY(gpt2_residual_add(e->dtype, e->x, e->tmp, (long long)rows * C));
    engine_charge(e, &p->other, mark);
    return NULL;
}

/** Copy `rows` rows of logits (V of each padded row) to the host as fp32. */
void engine_logits_to_host(const gpt2_engine *e, const void *src, int rows, float *dst)
{
    size_t V = (size_t)e->cfg.vocab, Vp = (size_t)e->vocab_padded, n = (size_t)rows * V;
    if (e->dtype == WB_F16) {
        uint16_t *h = wb_host_alloc(n * 2, "logits");
        WB_CUDA_CHECK(cudaMemcpy2D(h, V * 2, src, Vp * 2, V * 2, (size_t)rows, cudaMemcpyDeviceToHost));
        wb_halves_to_floats(h, dst, n);
        free(h);
    } else {
        WB_CUDA_CHECK(cudaMemcpy2D(dst, V * 4, src, Vp * 4, V * 4, (size_t)rows, cudaMemcpyDeviceToHost));
    }
}

const char *engine_prefill(gpt2_engine *e, int n, const int *seqs, const int *tokens, const int *lens, int *next,
                           float *all_logits)
{
    const gpt2_config *c = &e->cfg;
    int C = c->C, H = c->n_head, d = C / H, V = c->vocab, R = 0;
    if (n < 1 || n > e->max_seqs) return "prefill: batch size out of range";
    for (int i = 0; i < n; ++i) {
        if (lens[i] < 1 || lens[i] > c->max_T) return "prefill: a prompt is empty or longer than the context";
        R += lens[i];
    }
    if (R > e->max_tokens) return "prefill: more prompt tokens than the engine was sized for";
    for (int i = 0; i < n; ++i)
        if (kv_add_seq(&e->kv, seqs[i]) != KV_OK) {
            for (int j = 0; j < i; ++j) kv_free_seq(&e->kv, seqs[j]);
            return "prefill: a sequence id is in use or out of range";
        }
    kv_page_copy copies[1];
    int n_copies = 0;
    kv_status st = kv_append(&e->kv, seqs, lens, n, e->h_slots, copies, &n_copies);
    if (st != KV_OK) {
        for (int i = 0; i < n; ++i) kv_free_seq(&e->kv, seqs[i]);
        return kv_status_string(st);
    }
    int *positions = wb_host_alloc((size_t)R * 4, "positions");
    for (int i = 0, r = 0; i < n; ++i)
        for (int t = 0; t < lens[i]; ++t) positions[r++] = t;
    WB_CUDA_CHECK(cudaMemcpy(e->d_tokens, tokens, (size_t)R * 4, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(e->d_positions, positions, (size_t)R * 4, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(e->d_slots, e->h_slots, (size_t)R * 8, cudaMemcpyHostToDevice));
    free(positions);

    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    double mark = wb_wall_ms();
    TRY(gpt2_embed(e->dtype, e->d_tokens, e->d_positions, e->wte, e->wpe, e->x, R, C));
    engine_charge(e, &p->other, &mark);
    for (int l = 0; l < c->n_layer; ++l) {
        TRY(engine_block_head(e, l, R, &mark));
        /* attention, causal within each prompt: prompts of one length go to stage 06 together ([B][H][T][d]),
         * others one at a time */
        int same = 1;
        for (int i = 1; i < n; ++i) same &= lens[i] == lens[0];
        for (int i = 0, off = 0; i < n; off += lens[i++]) {
            int T = lens[i];
            size_t slot = same ? (size_t)i * T : 0; /* where this prompt's heads go in the heads buffers */
            TRY(gpt2_split_qkv(e->dtype, row_ptr(e, e->qkv, (size_t)off, 3 * (size_t)C), T, C, H,
                               row_ptr(e, e->q_heads, slot, (size_t)C), row_ptr(e, e->k_heads, slot, (size_t)C),
                               row_ptr(e, e->v_heads, slot, (size_t)C), NULL,
                               row_ptr(e, e->k_rows, (size_t)off, (size_t)C), row_ptr(e, e->v_rows, (size_t)off, (size_t)C)));
            if (same && i < n - 1) continue;
            int B = same ? n : 1;
            attention_problem ap = {B, H, T, d, 1.0f / sqrtf((float)d), 1, e->dtype, e->q_heads, e->k_heads,
                                    e->v_heads, e->o_heads, e->lse, NULL, 0};
            TRY(attention_variants[e->attention_variant].launch(&ap));
            for (int b = 0; b < B; ++b) {
                int row0 = same ? b * T : off;
                TRY(gpt2_merge_heads(e->dtype, row_ptr(e, e->o_heads, (size_t)b * T, (size_t)C),
                                     row_ptr(e, e->att, (size_t)row0, (size_t)C), T, C, H));
            }
        }
        engine_charge(e, &p->attention, &mark);
        kv_append_args ka = {e->dtype, R, H, d, ENGINE_BLOCK_SIZE, e->k_rows, e->v_rows, e->d_slots,
                             e->k_pool[l], e->v_pool[l]};
        TRY(kv_variants[e->kv_variant].append(&ka));
        engine_charge(e, &p->kv_append, &mark);
        TRY(engine_block_tail(e, l, R, &mark));
    }
    TRY(engine_layernorm(e, e->x, e->lnf_w, e->lnf_b, e->ln, R));
    engine_charge(e, &p->layernorm, &mark);
    if (all_logits) {
        TRY(engine_linear(e, e->ln, e->wte_t, NULL, e->logits, R, e->vocab_padded, C, GELU_NONE));
        TRY(gpt2_argmax(e->dtype, e->logits, R, V, e->vocab_padded, e->d_next));
        int *all_next = wb_host_alloc((size_t)R * 4, "next");
        WB_CUDA_CHECK(cudaMemcpy(all_next, e->d_next, (size_t)R * 4, cudaMemcpyDeviceToHost));
        for (int i = 0, off = 0; i < n; off += lens[i++]) next[i] = all_next[off + lens[i] - 1];
        free(all_next);
        engine_logits_to_host(e, e->logits, R, all_logits);
    } else { /* only each prompt's last position needs logits: gather those rows first */
        size_t es = wb_dtype_bytes(e->dtype);
        for (int i = 0, off = 0; i < n; off += lens[i++])
            WB_CUDA_CHECK(cudaMemcpyAsync(row_ptr(e, e->tmp, (size_t)i, (size_t)C),
                                          row_ptr(e, e->ln, (size_t)(off + lens[i] - 1), (size_t)C), (size_t)C * es,
                                          cudaMemcpyDeviceToDevice, cudaStreamPerThread));
        TRY(engine_linear(e, e->tmp, e->wte_t, NULL, e->logits, n, e->vocab_padded, C, GELU_NONE));
        TRY(gpt2_argmax(e->dtype, e->logits, n, V, e->vocab_padded, e->d_next));
        WB_CUDA_CHECK(cudaMemcpy(next, e->d_next, (size_t)n * 4, cudaMemcpyDeviceToHost));
    }
    engine_charge(e, &p->lm_head, &mark);
    return NULL;
}

