/**
 * @file stages/10_gpt2_e2e/engine.c
 * @brief GPT-2 on the GPU (see engine.h), its set-up: the weights, the paged
 *        cache and the scratch, as every variant shares them, and what the
 *        variant's row of decode_paths[] asks for. The forward passes are in
 *        engine_forward.c (prefill) and engine_decode.c (the step loop).
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

/** The index of the variant `id` in an earlier stage's table of `count` entries of `stride` bytes, each starting with
 *  its id (as every stage's variant struct does), or -1. */
static int find_variant(const void *table, size_t stride, int count, const char *id)
{
    for (int i = 0; i < count; ++i)
        if (strcmp(*(const char *const *)((const char *)table + (size_t)i * stride), id) == 0) return i;
    return -1;
}

static float *upload_f32(const float *src, size_t n, const char *what) { return wb_device_upload(src, n, WB_F32, what); }

/**
 * @brief A LayerNorm folded into the linear after it (model.h: gpt2_fold_layernorm), uploaded: the folded weights
 *        as [N][K], in fp16, into *w_out; [2][N], the bias with the shifts folded in and then the sums of each
 *        output's folded weights (of the weights as the upload rounds them), into *bias_out.
 */
static const char *upload_folded(const float *w, const float *bias, const float *g, const float *b, int K, int N,
                                 void **w_out, float **bias_out)
{
    float *folded = malloc((size_t)K * N * sizeof *folded), *bias_sums = malloc((size_t)2 * N * sizeof *bias_sums);
    const int ok = folded && bias_sums && gpt2_fold_layernorm(w, bias, g, b, K, N, wb_round_to_half, folded, bias_sums) == 0;
    if (ok) {
        *w_out = wb_device_upload_transposed(folded, K, N, WB_F16, "folded weight, transposed");
        *bias_out = upload_f32(bias_sums, (size_t)2 * N, "folded bias and sums");
    }
    free(folded), free(bias_sums);
    return ok ? NULL : "out of host memory";
}

/** Lay a decode step's inputs out from `base` (slots first: 8-byte aligned) into `v`; returns their bytes. */
static size_t step_inputs_at(void *base, int max_seqs, int pages_per_seq, engine_step_inputs *v)
{
    v->slots = (int64_t *)base;
    v->tokens = (int *)(v->slots + max_seqs);
    v->positions = v->tokens + max_seqs;
    v->lens = v->positions + max_seqs;
    v->tables = v->lens + max_seqs;
    return (size_t)((char *)(v->tables + (size_t)max_seqs * pages_per_seq) - (char *)base);
}

const char *engine_init(gpt2_engine *e, const gpt2_model *m, wb_dtype dtype, const decode_path *path, int max_seqs,
                        int max_tokens)
{
    memset(e, 0, sizeof *e);
    const gpt2_config *c = &m->cfg;
    e->cfg = *c, e->dtype = dtype, e->max_seqs = max_seqs;
    e->max_tokens = max_tokens < max_seqs ? max_seqs : max_tokens;
    int C = c->C, V = c->vocab, L = c->n_layer, H = c->n_head, d = C / H;
    int cc;
    wb_current_gpu(&cc, NULL);
    /* the kernels: stage 04's fused linear (fp32: v4, split-K where the tiles fill under two waves, as at 32 rows;
     * fp16: v11 on a compute capability 9.0 GPU, v6 on sm_80, v5 (WMMA) on the T4; in fp16 from sm_80 a decode batch
     * of 1-64 rows takes this stage's skinny linear instead), stage 05's LayerNorm v3, stage 06's best for the
     * precision, stage 08's append v2, stage 09's v5 (split, the lean inner loop) */
    e->linear_variant = find_variant(linear_variants, sizeof linear_variants[0], linear_variant_count,
                                     dtype == WB_F16 ? (cc == 90 ? "v11" : cc >= 80 ? "v6" : "v5") : "v4");
    e->skinny_linear = dtype == WB_F16 && cc >= 80;
    e->layernorm_variant = find_variant(layernorm_variants, sizeof layernorm_variants[0], layernorm_variant_count, "v3");
    e->attention_variant = find_variant(attention_variants, sizeof attention_variants[0], attention_variant_count,
                                        dtype == WB_F16 ? (cc >= 80 ? "v5" : "v4") : "v3");
    e->decode_variant = find_variant(decode_variants, sizeof decode_variants[0], decode_variant_count, "v5");
    e->kv_variant = find_variant(kv_variants, sizeof kv_variants[0], kv_variant_count, "v2");
    if (e->linear_variant < 0 || e->layernorm_variant < 0 || e->attention_variant < 0 || e->decode_variant < 0 ||
        e->kv_variant < 0)
        return "a kernel variant is missing from an earlier stage";
    if (max_seqs > 64) return "at most 64 sequences at once";
    if (!path) return "no decode variant given (decode_paths[] in variants.c)";
    if (linear_variants[e->linear_variant].min_cc > cc) return "needs sm_75 (stage 04's linears)";
    if (dtype == WB_F16 && d != 64 && d != 128) return "fp16 needs a head dimension of 64 or 128 (stage 06's tensor-core attention)";
    if (d != 64 && d != 128) return "needs a head dimension of 64 or 128 (stage 09's paged attention)";
    int fused_decode = path->fused_linears;
    if (fused_decode && C % 8) return "the fused decode (v2) needs C to be a multiple of 8 (16-byte loads of fp16)";
    if (path->step && d != DECODE_STEP_HEAD_DIM) return "the persistent decode step (v3-v5) needs heads of 64";
    if (path->min_cc > cc) return path->min_cc_why;
    if (path->fp16_only && dtype != WB_F16) return "takes fp16 storage only (attention and proj in one phase)";
    e->path = path;
    e->fused_decode = fused_decode;
    e->dependent_launch = fused_decode && cc >= 90; /* programmatic dependent launch: sm_90 */

    /* weights: matrices in the engine's precision, LayerNorm and biases fp32; wte also transposed for the LM head */
    const gpt2_weights *w = &m->w;
    e->wte = wb_device_upload(w->wte, (size_t)V * C, dtype, "wte");
    e->wpe = wb_device_upload(w->wpe, (size_t)c->max_T * C, dtype, "wpe");
    int Vp = e->vocab_padded = (V + 7) / 8 * 8;
    float *wt = calloc((size_t)Vp * C, 4);
    if (!wt) return "out of host memory";
    for (int v = 0; v < V; ++v)
        for (int k = 0; k < C; ++k) wt[(size_t)k * Vp + v] = w->wte[(size_t)v * C + k];
    e->wte_t = wb_device_upload(wt, (size_t)Vp * C, dtype, "wte transposed");
    free(wt);
    void ***mats[] = {&e->qkv_w, &e->proj_w, &e->fc_w, &e->fcproj_w, &e->qkv_wt, &e->proj_wt, &e->fc_wt, &e->fcproj_wt,
                      &e->qkv_wt_folded, &e->fc_wt_folded};
    float ***vecs[] = {&e->qkv_b, &e->proj_b, &e->fc_b, &e->fcproj_b, &e->ln1_w, &e->ln1_b, &e->ln2_w, &e->ln2_b,
                       &e->qkv_b_folded, &e->fc_b_folded};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; ++i) { /* the transposed ones stay NULL in v1 */
        *mats[i] = wb_host_alloc((size_t)L * sizeof(void *), "layer table");
        memset(*mats[i], 0, (size_t)L * sizeof(void *));
    }
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; ++i) {
        *vecs[i] = wb_host_alloc((size_t)L * sizeof(float *), "layer table");
        memset(*vecs[i], 0, (size_t)L * sizeof(float *));
    }
    e->k_pool = wb_host_alloc((size_t)L * sizeof(void *), "layer table");
    e->v_pool = wb_host_alloc((size_t)L * sizeof(void *), "layer table");
    for (int l = 0; l < L; ++l) {
        const gpt2_block *b = &w->blocks[l];
        e->qkv_w[l] = wb_device_upload(b->qkv_w, (size_t)C * 3 * C, dtype, "qkv weight");
        e->proj_w[l] = wb_device_upload(b->proj_w, (size_t)C * C, dtype, "proj weight");
        e->fc_w[l] = wb_device_upload(b->fc_w, (size_t)C * 4 * C, dtype, "fc weight");
        e->fcproj_w[l] = wb_device_upload(b->fcproj_w, (size_t)4 * C * C, dtype, "fc proj weight");
        if (fused_decode) { /* prefill's GEMM reads [K][N], v2's decode linear [N][K]: both are kept */
            e->qkv_wt[l] = wb_device_upload_transposed(b->qkv_w, C, 3 * C, dtype, "qkv weight, transposed");
            e->proj_wt[l] = wb_device_upload_transposed(b->proj_w, C, C, dtype, "proj weight, transposed");
            e->fc_wt[l] = wb_device_upload_transposed(b->fc_w, C, 4 * C, dtype, "fc weight, transposed");
            e->fcproj_wt[l] = wb_device_upload_transposed(b->fcproj_w, 4 * C, C, dtype, "fc proj weight, transposed");
        }
        /* QKV and fc with their LayerNorm folded in: for v2's batch path and v5, which both take C <= 768 only */
        if (fused_decode && e->skinny_linear && C <= DECODE_BATCH_MAX_K) {
            TRY(upload_folded(b->qkv_w, b->qkv_b, b->ln1_w, b->ln1_b, C, 3 * C, &e->qkv_wt_folded[l], &e->qkv_b_folded[l]));
            TRY(upload_folded(b->fc_w, b->fc_b, b->ln2_w, b->ln2_b, C, 4 * C, &e->fc_wt_folded[l], &e->fc_b_folded[l]));
        }
        e->qkv_b[l] = upload_f32(b->qkv_b, (size_t)3 * C, "qkv bias");
        e->proj_b[l] = upload_f32(b->proj_b, (size_t)C, "proj bias");
        e->fc_b[l] = upload_f32(b->fc_b, (size_t)4 * C, "fc bias");
        e->fcproj_b[l] = upload_f32(b->fcproj_b, (size_t)C, "fc proj bias");
        e->ln1_w[l] = upload_f32(b->ln1_w, (size_t)C, "ln_1 weight");
        e->ln1_b[l] = upload_f32(b->ln1_b, (size_t)C, "ln_1 bias");
        e->ln2_w[l] = upload_f32(b->ln2_w, (size_t)C, "ln_2 weight");
        e->ln2_b[l] = upload_f32(b->ln2_b, (size_t)C, "ln_2 bias");
    }
    e->lnf_w = upload_f32(w->lnf_w, (size_t)C, "ln_f weight");
    e->lnf_b = upload_f32(w->lnf_b, (size_t)C, "ln_f bias");

    /* the paged cache: room for every sequence at full length (stage 08's block manager decides where) */
    int pages_per_seq = (c->max_T + ENGINE_BLOCK_SIZE - 1) / ENGINE_BLOCK_SIZE;
    if (kv_init(&e->kv, max_seqs * pages_per_seq, ENGINE_BLOCK_SIZE, max_seqs, pages_per_seq, 0) != KV_OK)
        return "out of host memory for the block manager";
    size_t es = wb_dtype_bytes(dtype), pool = (size_t)e->kv.num_pages * H * ENGINE_BLOCK_SIZE * d * es;
    for (int l = 0; l < L; ++l) {
        e->k_pool[l] = wb_device_alloc(pool, "K pool");
        e->v_pool[l] = wb_device_alloc(pool, "V pool");
    }

    if (e->path->step) { /* v3-v5 read every block's pointers from one table */
        decode_layer_weights *t = wb_host_alloc((size_t)L * sizeof *t, "layer table");
        for (int l = 0; l < L; ++l)
            t[l] = (decode_layer_weights){e->qkv_wt[l], e->proj_wt[l], e->fc_wt[l], e->fcproj_wt[l], e->qkv_b[l],
                                          e->proj_b[l], e->fc_b[l], e->fcproj_b[l], e->ln1_w[l], e->ln1_b[l],
                                          e->ln2_w[l], e->ln2_b[l], e->k_pool[l], e->v_pool[l], NULL, NULL};
        e->d_layers = wb_device_alloc((size_t)L * sizeof *t, "layer table");
        WB_CUDA_CHECK(cudaMemcpy(e->d_layers, t, (size_t)L * sizeof *t, cudaMemcpyHostToDevice));
        free(t);
        if (path->one_row_setup) TRY(path->one_row_setup(e, m)); /* v5's own weights and buffers */
        e->d_barrier = wb_device_alloc((1 + ENGINE_QUEUE_STEPS) * sizeof(unsigned), "grid barriers"); /* see .h */
    }
    if (path->split_attention) { /* v4, v5; NaN until a split writes its part, so that a part never written shows */
        size_t bytes = (size_t)decode_att_parts_floats(c->n_head) * sizeof(float);
        e->d_att_parts = wb_device_alloc(bytes, "split attention's parts");
        WB_CUDA_CHECK(cudaMemset(e->d_att_parts, 0xff, bytes));
    }

    /* scratch */
    size_t R = (size_t)e->max_tokens, T = (size_t)c->max_T;
    e->x = wb_device_alloc(R * C * es, "x");
    e->ln = wb_device_alloc(R * C * es, "ln");
    e->att = wb_device_alloc(R * C * es, "att");
    /* the linears' outputs start zeroed: stage 04's v11 stores its tiles by TMA, which compute-sanitizer's initcheck
     * does not count as writes */
    e->tmp = wb_device_alloc_zeroed(R * C * es, "tmp");
    e->qkv = wb_device_alloc_zeroed(R * 3 * C * es, "qkv");
    e->hidden = wb_device_alloc_zeroed(R * 4 * C * es, "hidden");
    e->logits = wb_device_alloc_zeroed(R * Vp * es, "logits");
    size_t heads = R > T ? R : T; /* equal-length prompts go to stage 06 together: [B][H][T][d] */
    e->q_heads = wb_device_alloc(heads * C * es, "q heads");
    e->k_heads = wb_device_alloc(heads * C * es, "k heads");
    e->v_heads = wb_device_alloc(heads * C * es, "v heads");
    e->o_heads = wb_device_alloc(heads * C * es, "o heads");
    e->q_rows = wb_device_alloc(R * C * es, "q rows");
    e->k_rows = wb_device_alloc(R * C * es, "k rows");
    e->v_rows = wb_device_alloc(R * C * es, "v rows");
    e->lse = wb_device_alloc((size_t)H * heads * 4, "lse");
    const int shapes[][2] = {{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}, {Vp, C}}; /* N, K of every linear */
    for (int i = 0; i < 5; ++i) {
        size_t f = gpt2_small_m_workspace_floats(shapes[i][0], shapes[i][1]);
        if (e->skinny_linear) { /* the batch linear's partials share the buffer */
            size_t g = gpt2_skinny_workspace_floats(shapes[i][0], shapes[i][1]);
            f = g > f ? g : f;
        }
        e->small_m_floats = f > e->small_m_floats ? f : e->small_m_floats;
    }
    e->small_m_workspace = wb_device_alloc(e->small_m_floats * 4, "small-M workspace");
    e->mean = wb_device_alloc(R * 4, "mean");
    e->rstd = wb_device_alloc(R * 4, "rstd");
    e->decode_workspace_bytes = decode_workspace_bytes(max_seqs, H, H, d, c->max_T);
    e->decode_workspace = wb_device_alloc(e->decode_workspace_bytes, "decode workspace");
    e->decode_counters = wb_device_alloc_zeroed((size_t)max_seqs * H * sizeof(int), "decode counters");
    e->d_tokens = wb_device_alloc(R * 4, "tokens");
    e->d_positions = wb_device_alloc(R * 4, "positions");
    e->d_next = wb_device_alloc(R * 4, "next tokens");
    e->d_best = wb_device_alloc((size_t)max_seqs * sizeof(unsigned long long), "argmax keys");
    e->d_slots = wb_device_alloc(R * 8, "slots");
    e->h_slots = wb_host_alloc(R * 8, "slots");
    /* a decode step's inputs: one block, pinned on the host, so that one asynchronous copy uploads them (five
     * synchronous copies cost ~50 µs a step, a quarter of v3's step) */
    size_t step_bytes = step_inputs_at(NULL, max_seqs, pages_per_seq, &e->step_h);
    void *host;
    WB_CUDA_CHECK(cudaMallocHost(&host, step_bytes));
    step_inputs_at(host, max_seqs, pages_per_seq, &e->step_h);
    step_inputs_at(wb_device_alloc(step_bytes, "decode step inputs"), max_seqs, pages_per_seq, &e->step_d);
    /* engine_generate's queue: the inputs of ENGINE_QUEUE_STEPS steps, and the keys and tokens steps pass on */
    e->queue_step_bytes = (step_bytes + 15) & ~(size_t)15; /* each step's slots (int64) stay aligned */
    unsigned char *queue_host, *queue_dev = wb_device_alloc(ENGINE_QUEUE_STEPS * e->queue_step_bytes, "queued steps");
    WB_CUDA_CHECK(cudaMallocHost((void **)&queue_host, 2 * ENGINE_QUEUE_STEPS * e->queue_step_bytes));
    for (int j = 0; j < ENGINE_QUEUE_STEPS; ++j) {
        for (int q = 0; q < 2; ++q)
            step_inputs_at(queue_host + (q * ENGINE_QUEUE_STEPS + j) * e->queue_step_bytes, max_seqs, pages_per_seq,
                           &e->queue_h[q][j]);
        step_inputs_at(queue_dev + j * e->queue_step_bytes, max_seqs, pages_per_seq, &e->queue_d[j]);
    }
    e->queue_steps = ENGINE_QUEUE_STEPS;
    e->d_queue_best = wb_device_alloc((size_t)2 * max_seqs * sizeof(unsigned long long), "queued argmax keys");
    e->d_fed = wb_device_alloc((size_t)ENGINE_QUEUE_STEPS * max_seqs * sizeof(int), "queued tokens"); /* [steps][n] */
    WB_CUDA_CHECK(cudaMallocHost((void **)&e->h_fed, (size_t)2 * ENGINE_QUEUE_STEPS * max_seqs * sizeof(int)));
    for (int q = 0; q < 2; ++q)
        WB_CUDA_CHECK(cudaEventCreateWithFlags((cudaEvent_t *)&e->queue_done[q], cudaEventDisableTiming));
    e->use_graphs = 1;
    return NULL;
}

void engine_free(gpt2_engine *e)
{
    if (e->one_row_state) e->path->one_row_free(e);
    if (e->graph_exec) WB_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)e->graph_exec));
    for (int l = 0; e->qkv_w && l < e->cfg.n_layer; ++l) {
        void *d[] = {e->qkv_w[l], e->proj_w[l], e->fc_w[l], e->fcproj_w[l], e->qkv_b[l], e->proj_b[l], e->fc_b[l],
                     e->fcproj_b[l], e->ln1_w[l], e->ln1_b[l], e->ln2_w[l], e->ln2_b[l], e->k_pool[l], e->v_pool[l],
                     e->qkv_wt[l], e->proj_wt[l], e->fc_wt[l], e->fcproj_wt[l], /* NULL in v1 */
                     e->qkv_wt_folded[l], e->qkv_b_folded[l], e->fc_wt_folded[l], e->fc_b_folded[l]};
        for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i) WB_CUDA_CHECK(cudaFree(d[i]));
    }
    void *d[] = {e->wte, e->wpe, e->wte_t, e->lnf_w, e->lnf_b, e->x, e->ln, e->att, e->tmp, e->qkv, e->hidden,
                 e->logits, e->q_heads, e->k_heads, e->v_heads, e->o_heads, e->q_rows, e->k_rows, e->v_rows, e->lse,
                 e->mean, e->rstd, e->decode_workspace, e->decode_counters, e->small_m_workspace, e->d_tokens, e->d_positions, e->d_next, e->d_slots,
                 e->step_d.slots, e->d_best, e->d_layers, e->d_barrier, e->queue_d[0].slots, e->d_queue_best, e->d_fed,
                 e->d_att_parts};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i) WB_CUDA_CHECK(cudaFree(d[i]));
    void *h[] = {e->qkv_w, e->proj_w, e->fc_w, e->fcproj_w, e->qkv_wt, e->proj_wt, e->fc_wt, e->fcproj_wt,
                 e->qkv_wt_folded, e->fc_wt_folded, e->qkv_b, e->proj_b, e->fc_b, e->fcproj_b, e->ln1_w, e->ln1_b,
                 e->ln2_w, e->ln2_b, e->qkv_b_folded, e->fc_b_folded, e->k_pool, e->v_pool, e->h_slots};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; ++i) free(h[i]);
    if (e->step_h.slots) WB_CUDA_CHECK(cudaFreeHost(e->step_h.slots));
    if (e->queue_h[0][0].slots) WB_CUDA_CHECK(cudaFreeHost(e->queue_h[0][0].slots));
    if (e->h_fed) WB_CUDA_CHECK(cudaFreeHost(e->h_fed));
    for (int q = 0; q < 2; ++q)
        if (e->queue_done[q]) WB_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)e->queue_done[q]));
    kv_destroy(&e->kv);
    memset(e, 0, sizeof *e);
}
