/**
 * @file stages/10_gpt2_e2e/engine.c
 * @brief GPT-2 on the GPU (see engine.h): every step is a call to an earlier
 *        stage's launcher, through its header.
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
#include "timing.h"

/** Propagate a launcher's refusal. */
#define TRY(call)                         \
    do {                                  \
        const char *why_ = (call);        \
        if (why_) return why_;            \
    } while (0)

/** With profiling on: wait for the GPU and charge the time since the last mark to `bucket`. */
static void charge(gpt2_engine *e, double *bucket, double *mark)
{
    if (!e->profile) return;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    double t = wb_wall_ms();
    *bucket += t - *mark;
    *mark = t;
}

static int find_linear(const char *id, wb_dtype dtype)
{
    for (int i = 0; i < linear_variant_count; ++i)
        if (strcmp(linear_variants[i].id, id) == 0 && linear_variants[i].dtype == dtype) return i;
    return -1;
}

static int find_attention(const char *id)
{
    for (int i = 0; i < attention_variant_count; ++i)
        if (strcmp(attention_variants[i].id, id) == 0) return i;
    return -1;
}

static float *upload_f32(const float *src, size_t n, const char *what) { return wb_device_upload(src, n, WB_F32, what); }

/** @brief `bytes` of device memory, zeroed. */
static void *device_zeroed(size_t bytes, const char *what)
{
    void *p = wb_device_alloc(bytes, what);
    WB_CUDA_CHECK(cudaMemset(p, 0, bytes));
    return p;
}

/**
 * v7: a LayerNorm folded into the linear after it (model.h: gpt2_fold_layernorm; decode_tagged.cu: row_statistics),
 * uploaded: the folded weights as [N][K], like the others, into *w_out; [2][N], the bias with the shifts folded in
 * and then the sums of each output's folded weights, into *bias_out.
 */
static const char *upload_folded(const float *w, const float *bias, const float *g, const float *b, int K, int N,
                                 wb_dtype dtype, void **w_out, float **bias_out)
{
    float *folded = malloc((size_t)K * N * sizeof *folded), *bias_sums = malloc((size_t)2 * N * sizeof *bias_sums);
    float (*round)(float) = dtype == WB_F16 ? wb_round_to_half : NULL; /* as the upload rounds it */
    int ok = folded && bias_sums && gpt2_fold_layernorm(w, bias, g, b, K, N, round, folded, bias_sums) == 0;
    if (ok) {
        *w_out = wb_device_upload_transposed(folded, K, N, dtype, "folded weight, transposed");
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
     * fp16: v7, the Hopper GEMM, on a compute capability 9.0 GPU, v6 on sm_80, v5 (WMMA) on the T4),
     * stage 05's LayerNorm v3, stage 06's best for the precision, stage 09's v3 */
    e->linear_variant = find_linear(dtype == WB_F16 ? (cc == 90 ? "v7" : cc >= 80 ? "v6" : "v5") : "v4", dtype);
    e->layernorm_variant = 2;
    e->attention_variant = find_attention(dtype == WB_F16 ? (cc >= 80 ? "v5" : "v4") : "v3");
    e->decode_variant = 2;
    if (e->linear_variant < 0 || e->attention_variant < 0) return "a kernel variant is missing from an earlier stage";
    if (max_seqs > 64) return "at most 64 sequences at once";
    if (!path) return "no decode variant given (decode_paths[] in variants.c)";
    if (linear_variants[e->linear_variant].min_cc > cc) return "needs sm_75 (stage 04's linears)";
    if (dtype == WB_F16 && d != 64 && d != 128) return "fp16 needs a head dimension of 64 or 128 (stage 06's tensor-core attention)";
    if (d != 64 && d != 128) return "needs a head dimension of 64 or 128 (stage 09's paged attention)";
    int fused_decode = path->fused_linears;
    if (fused_decode && C % 8) return "the fused decode (v2) needs C to be a multiple of 8 (16-byte loads of fp16)";
    if (path->step && d != DECODE_STEP_HEAD_DIM) return "the persistent decode step (v3-v7) needs heads of 64";
    if (path->min_cc > cc) return path->min_cc_why;
    if (path->fp16_only && dtype != WB_F16) return "takes fp16 storage only (attention and proj in one phase)";
    e->path = path;
    e->fused_decode = fused_decode;
    /* the persistent kernel of every step, and v6's or v7's for the steps of 1 sequence they take */
    e->step = path->step, e->step_smem = path->step_smem;
    e->merged_step = path->one_row_step, e->merged_step_smem = path->one_row_smem;
    e->l2_prefetch = 1; /* v3 asks L2 for the next linear's weights (0 or 2 ahead measured no different: the page) */
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
    void ***mats[] = {&e->qkv_w,      &e->proj_w,    &e->fc_w,       &e->fcproj_w,       &e->qkv_wt,
                      &e->proj_wt,    &e->fc_wt,     &e->fcproj_wt,  &e->proj_heads,     &e->qkv_wt_folded,
                      &e->fc_wt_folded};
    float ***vecs[] = {&e->qkv_b, &e->proj_b, &e->fc_b,  &e->fcproj_b,     &e->ln1_w,
                       &e->ln1_b, &e->ln2_w,  &e->ln2_b, &e->qkv_b_folded, &e->fc_b_folded};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; ++i) { /* the transposed ones stay NULL in v1, by head
                                                                  * before v6, folded before v7 */
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
        e->qkv_b[l] = upload_f32(b->qkv_b, (size_t)3 * C, "qkv bias");
        e->proj_b[l] = upload_f32(b->proj_b, (size_t)C, "proj bias");
        if (e->merged_step) { /* v6, v7: proj_wt ([C][C], each output's C inputs) by head: [H][C][64] */
            const size_t es = wb_dtype_bytes(dtype);
            e->proj_heads[l] = wb_device_alloc((size_t)C * C * es, "proj weight by head");
            for (int h = 0; h < H; ++h) /* head h's 64 inputs of every output, one 2-D copy */
                WB_CUDA_CHECK(cudaMemcpy2D((char *)e->proj_heads[l] + (size_t)h * C * d * es, (size_t)d * es,
                                           (const char *)e->proj_wt[l] + (size_t)h * d * es, (size_t)C * es,
                                           (size_t)d * es, (size_t)C, cudaMemcpyDeviceToDevice));
        }
        e->fc_b[l] = upload_f32(b->fc_b, (size_t)4 * C, "fc bias");
        e->fcproj_b[l] = upload_f32(b->fcproj_b, (size_t)C, "fc proj bias");
        e->ln1_w[l] = upload_f32(b->ln1_w, (size_t)C, "ln_1 weight");
        e->ln1_b[l] = upload_f32(b->ln1_b, (size_t)C, "ln_1 bias");
        e->ln2_w[l] = upload_f32(b->ln2_w, (size_t)C, "ln_2 weight");
        e->ln2_b[l] = upload_f32(b->ln2_b, (size_t)C, "ln_2 bias");
        if (path->tagged) { /* v7: ln_1 into QKV, ln_2 into fc */
            TRY(upload_folded(b->qkv_w, b->qkv_b, b->ln1_w, b->ln1_b, C, 3 * C, dtype, &e->qkv_wt_folded[l],
                               &e->qkv_b_folded[l]));
            TRY(upload_folded(b->fc_w, b->fc_b, b->ln2_w, b->ln2_b, C, 4 * C, dtype, &e->fc_wt_folded[l],
                               &e->fc_b_folded[l]));
        }
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

    if (e->step) { /* v3-v7 read every block's pointers from one table */
        decode_layer_weights *t = wb_host_alloc((size_t)L * sizeof *t, "layer table");
        for (int l = 0; l < L; ++l)
            t[l] = (decode_layer_weights){e->qkv_wt[l], e->proj_wt[l], e->fc_wt[l], e->fcproj_wt[l], e->qkv_b[l],
                                          e->proj_b[l], e->fc_b[l], e->fcproj_b[l], e->ln1_w[l], e->ln1_b[l],
                                          e->ln2_w[l], e->ln2_b[l], e->k_pool[l], e->v_pool[l],
                                          e->proj_heads[l], NULL};
        e->d_layers = wb_device_alloc((size_t)L * sizeof *t, "layer table");
        WB_CUDA_CHECK(cudaMemcpy(e->d_layers, t, (size_t)L * sizeof *t, cudaMemcpyHostToDevice));
        if (path->tagged) { /* v7: the same table, QKV's and fc's weights and biases folded */
            for (int l = 0; l < L; ++l) {
                t[l].qkv_wt = e->qkv_wt_folded[l], t[l].qkv_b = e->qkv_b_folded[l];
                t[l].fc_wt = e->fc_wt_folded[l], t[l].fc_b = e->fc_b_folded[l];
            }
            e->d_layers_folded = wb_device_alloc((size_t)L * sizeof *t, "folded layer table");
            WB_CUDA_CHECK(cudaMemcpy(e->d_layers_folded, t, (size_t)L * sizeof *t, cudaMemcpyHostToDevice));
        }
        free(t);
        e->d_barrier = wb_device_alloc((1 + ENGINE_QUEUE_STEPS) * sizeof(unsigned), "grid barriers"); /* see .h */
    }
    if (path->proj_sums) /* v6: every layer's sums of proj's parts (the step zeroes them as it starts) */
        e->d_proj_acc = wb_device_alloc((size_t)L * DECODE_PROJ_ACC_ROW(C) * sizeof(long long), "proj's fixed-point sums");
    if (path->tagged) { /* v7, zeroed once: tag 0 is no step's, and the first step's sums start at zero */
        e->d_tagged = device_zeroed((size_t)DECODE_TAGGED_WORDS(L, C) * sizeof(unsigned), "tagged rows");
        e->d_tagged_acc = device_zeroed((size_t)DECODE_TAGGED_ACC(L, C) * sizeof(long long), "proj's counted sums");
        e->d_epoch = device_zeroed(sizeof(unsigned), "steps' counter");
    }
    if (path->split_attention) { /* v5-v7; NaN until a split writes its part, so that a part never written shows */
        size_t bytes = (size_t)decode_att_parts_floats(c->n_head) * sizeof(float);
        e->d_att_parts = wb_device_alloc(bytes, "split attention's parts");
        WB_CUDA_CHECK(cudaMemset(e->d_att_parts, 0xff, bytes));
    }

    /* scratch */
    size_t R = (size_t)e->max_tokens, T = (size_t)c->max_T;
    e->x = wb_device_alloc(R * C * es, "x");
    e->ln = wb_device_alloc(R * C * es, "ln");
    e->att = wb_device_alloc(R * C * es, "att");
    e->tmp = wb_device_alloc(R * C * es, "tmp");
    e->qkv = wb_device_alloc(R * 3 * C * es, "qkv");
    e->hidden = wb_device_alloc(R * 4 * C * es, "hidden");
    e->logits = wb_device_alloc(R * Vp * es, "logits");
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
        e->small_m_floats = f > e->small_m_floats ? f : e->small_m_floats;
    }
    e->small_m_workspace = wb_device_alloc(e->small_m_floats * 4, "small-M workspace");
    e->mean = wb_device_alloc(R * 4, "mean");
    e->rstd = wb_device_alloc(R * 4, "rstd");
    e->decode_workspace_bytes = decode_workspace_bytes(max_seqs, H, H, d, c->max_T);
    e->decode_workspace = wb_device_alloc(e->decode_workspace_bytes, "decode workspace");
    e->decode_counters = device_zeroed((size_t)max_seqs * H * sizeof(int), "decode counters");
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
    if (e->graph_exec) WB_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)e->graph_exec));
    for (int l = 0; e->qkv_w && l < e->cfg.n_layer; ++l) {
        void *d[] = {e->qkv_w[l], e->proj_w[l], e->fc_w[l], e->fcproj_w[l], e->qkv_b[l], e->proj_b[l], e->fc_b[l],
                     e->fcproj_b[l], e->ln1_w[l], e->ln1_b[l], e->ln2_w[l], e->ln2_b[l], e->k_pool[l], e->v_pool[l],
                     e->qkv_wt[l], e->proj_wt[l], e->fc_wt[l], e->fcproj_wt[l], /* NULL in v1 */
                     e->proj_heads[l], /* NULL before v6 */
                     e->qkv_wt_folded[l], e->fc_wt_folded[l], e->qkv_b_folded[l], e->fc_b_folded[l]}; /* v7 */
        for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i) WB_CUDA_CHECK(cudaFree(d[i]));
    }
    void *d[] = {e->wte, e->wpe, e->wte_t, e->lnf_w, e->lnf_b, e->x, e->ln, e->att, e->tmp, e->qkv, e->hidden,
                 e->logits, e->q_heads, e->k_heads, e->v_heads, e->o_heads, e->q_rows, e->k_rows, e->v_rows, e->lse,
                 e->mean, e->rstd, e->decode_workspace, e->decode_counters, e->small_m_workspace, e->d_tokens, e->d_positions, e->d_next, e->d_slots,
                 e->step_d.slots, e->d_best, e->d_layers, e->d_barrier, e->queue_d[0].slots, e->d_queue_best, e->d_fed,
                 e->d_att_parts, e->d_proj_acc, e->d_layers_folded, e->d_tagged, e->d_tagged_acc,
                 e->d_epoch};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i) WB_CUDA_CHECK(cudaFree(d[i]));
    void *h[] = {e->qkv_w, e->proj_w, e->fc_w, e->fcproj_w, e->qkv_wt, e->proj_wt, e->fc_wt, e->fcproj_wt, e->qkv_b, e->proj_b, e->fc_b, e->fcproj_b, e->ln1_w,
                 e->ln1_b, e->ln2_w, e->ln2_b, e->k_pool, e->v_pool, e->h_slots, e->proj_heads, e->qkv_wt_folded,
                 e->fc_wt_folded, e->qkv_b_folded, e->fc_b_folded};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; ++i) free(h[i]);
    if (e->step_h.slots) WB_CUDA_CHECK(cudaFreeHost(e->step_h.slots));
    if (e->queue_h[0][0].slots) WB_CUDA_CHECK(cudaFreeHost(e->queue_h[0][0].slots));
    if (e->h_fed) WB_CUDA_CHECK(cudaFreeHost(e->h_fed));
    for (int q = 0; q < 2; ++q)
        if (e->queue_done[q]) WB_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)e->queue_done[q]));
    kv_destroy(&e->kv);
    memset(e, 0, sizeof *e);
}

/** Byte offset of row r in a buffer of rows `width` elements wide. */
static void *row_ptr(const gpt2_engine *e, void *base, size_t r, size_t width)
{
    return (char *)base + r * width * wb_dtype_bytes(e->dtype);
}

static const char *linear(gpt2_engine *e, const void *X, const void *W, const float *b, void *Y, int M, int N, int K,
                          gelu_kind g)
{
    if (M <= 8) /* a decode step: this stage's small-M kernel streams W instead of tiling it */
        return gpt2_linear_small_m(e->dtype, X, W, b, Y, M, N, K, g == GELU_TANH, e->small_m_workspace,
                                   e->small_m_floats);
    linear_args a = {X, W, b, Y, M, N, K, g};
    return linear_variants[e->linear_variant].launch(&a);
}

static const char *layernorm(gpt2_engine *e, const void *x, const float *w, const float *b, void *y, int rows)
{
    return layernorm_variants[e->layernorm_variant].launch(e->dtype, x, w, b, GPT2_LN_EPS, y, e->mean, e->rstd, rows,
                                                           e->cfg.C);
}

/** The MLP half and the residuals, shared by prefill and decode: x += proj(att); x += fcproj(gelu(fc(ln2(x)))). */
static const char *block_tail(gpt2_engine *e, int l, int rows, double *mark)
{
    int C = e->cfg.C;
    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    TRY(linear(e, e->att, e->proj_w[l], e->proj_b[l], e->tmp, rows, C, C, GELU_NONE));
    charge(e, &p->linear, mark);
    TRY(gpt2_residual_add(e->dtype, e->x, e->tmp, (long long)rows * C));
    charge(e, &p->other, mark);
    TRY(layernorm(e, e->x, e->ln2_w[l], e->ln2_b[l], e->ln, rows));
    charge(e, &p->layernorm, mark);
    TRY(linear(e, e->ln, e->fc_w[l], e->fc_b[l], e->hidden, rows, 4 * C, C, GELU_TANH));
    TRY(linear(e, e->hidden, e->fcproj_w[l], e->fcproj_b[l], e->tmp, rows, C, 4 * C, GELU_NONE));
    charge(e, &p->linear, mark);
    TRY(gpt2_residual_add(e->dtype, e->x, e->tmp, (long long)rows * C));
    charge(e, &p->other, mark);
    return NULL;
}

/** Copy `rows` rows of logits (V of each padded row) to the host as fp32. */
static void logits_to_host(const gpt2_engine *e, const void *src, int rows, float *dst)
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
    charge(e, &p->other, &mark);
    TRY(gpt2_embed(e->dtype, e->d_tokens, e->d_positions, e->wte, e->wpe, e->x, R, C));
    charge(e, &p->other, &mark);
    for (int l = 0; l < c->n_layer; ++l) {
        TRY(layernorm(e, e->x, e->ln1_w[l], e->ln1_b[l], e->ln, R));
        charge(e, &p->layernorm, &mark);
        TRY(linear(e, e->ln, e->qkv_w[l], e->qkv_b[l], e->qkv, R, 3 * C, C, GELU_NONE));
        charge(e, &p->linear, &mark);
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
        charge(e, &p->attention, &mark);
        kv_append_args ka = {e->dtype, R, H, d, ENGINE_BLOCK_SIZE, e->k_rows, e->v_rows, e->d_slots,
                             e->k_pool[l], e->v_pool[l]};
        TRY(kv_variants[1].append(&ka)); /* stage 08's v2 */
        charge(e, &p->kv_append, &mark);
        TRY(block_tail(e, l, R, &mark));
    }
    TRY(layernorm(e, e->x, e->lnf_w, e->lnf_b, e->ln, R));
    charge(e, &p->layernorm, &mark);
    if (all_logits) {
        TRY(linear(e, e->ln, e->wte_t, NULL, e->logits, R, e->vocab_padded, C, GELU_NONE));
        TRY(gpt2_argmax(e->dtype, e->logits, R, V, e->vocab_padded, e->d_next));
        int *all_next = wb_host_alloc((size_t)R * 4, "next");
        WB_CUDA_CHECK(cudaMemcpy(all_next, e->d_next, (size_t)R * 4, cudaMemcpyDeviceToHost));
        for (int i = 0, off = 0; i < n; off += lens[i++]) next[i] = all_next[off + lens[i] - 1];
        free(all_next);
        logits_to_host(e, e->logits, R, all_logits);
    } else { /* only each prompt's last position needs logits: gather those rows first */
        size_t es = wb_dtype_bytes(e->dtype);
        for (int i = 0, off = 0; i < n; off += lens[i++])
            WB_CUDA_CHECK(cudaMemcpyAsync(row_ptr(e, e->tmp, (size_t)i, (size_t)C),
                                          row_ptr(e, e->ln, (size_t)(off + lens[i] - 1), (size_t)C), (size_t)C * es,
                                          cudaMemcpyDeviceToDevice, cudaStreamPerThread));
        TRY(linear(e, e->tmp, e->wte_t, NULL, e->logits, n, e->vocab_padded, C, GELU_NONE));
        TRY(gpt2_argmax(e->dtype, e->logits, n, V, e->vocab_padded, e->d_next));
        WB_CUDA_CHECK(cudaMemcpy(next, e->d_next, (size_t)n * 4, cudaMemcpyDeviceToHost));
    }
    charge(e, &p->lm_head, &mark);
    return NULL;
}

/**
 * The kernels of one decode step, every argument the same from step to step
 * (the step's tokens, positions, slots, block tables and lengths are in device
 * buffers uploaded before): so they can be captured once into a CUDA graph and
 * replayed. Stage 09 is told the longest possible context (max_T): partitions
 * past a sequence's length exit at once.
 */
static const char *decode_kernels_fused(gpt2_engine *e, int n);

/** Whether a decode step of n sequences takes v2's fused kernels (else v1's). */
static int fused_step(const gpt2_engine *e, int n) { return e->fused_decode && n <= DECODE_MAX_ROWS; }

/** Stage 09's attention of layer l for the n sequences of a decode step: q_rows against the paged cache, into att. */
static const char *decode_attention(gpt2_engine *e, int n, int l)
{
    const gpt2_config *c = &e->cfg;
    int H = c->n_head, d = c->C / H;
    decode_problem dp = {n, H, H, d, ENGINE_BLOCK_SIZE, e->kv.max_pages_per_seq, c->max_T, (long long)n * c->max_T,
                         1.0f / sqrtf((float)d), e->dtype, e->q_rows, e->k_pool[l], e->v_pool[l], e->step_d.tables,
                         e->step_d.lens, e->att, e->decode_workspace, e->decode_workspace_bytes, e->decode_counters, NULL,
                         fused_step(e, n) && e->dependent_launch, NULL /* no tile counters: v6 is not a decode choice here */};
    return decode_variants[e->decode_variant].launch(&dp);
}

/**
 * @brief Whether a step of n sequences with the context lengths of `host`
 *        (its inputs on the host) runs v6's or v7's kernel: at 1 row, where
 *        one pass of a block's warps covers the context. Past it, their
 *        attention (one block a head) would read the context in two passes,
 *        where v5's phases split it over the idle blocks. The host knows
 *        every step's lengths before it launches the step (engine_generate
 *        works them out a queue ahead), so it chooses the kernel.
 */
static int step_is_merged(const gpt2_engine *e, int n, const engine_step_inputs *host)
{
    if (!e->merged_step || n != 1) return 0;
    return host->lens[0] <= gpt2_decode_step_pass_tokens(e->dtype);
}

/** @brief The persistent step's arguments for n sequences, with the step's inputs `in` (device) and its argmax keys
 *         to `best`; v7's folded weights for its own steps (`merged`). */
static decode_step_args persistent_step_args(const gpt2_engine *e, int n, const engine_step_inputs *in,
                                             unsigned long long *best, int merged)
{
    const gpt2_config *c = &e->cfg;
    decode_step_args a = {.layers = merged && e->d_layers_folded ? e->d_layers_folded : e->d_layers,
                          .L = c->n_layer, .C = c->C, .H = c->n_head, .V = c->vocab, .M = n,
                          .wte = e->wte, .wpe = e->wpe, .lnf_w = e->lnf_w, .lnf_b = e->lnf_b,
                          .tokens = in->tokens, .positions = in->positions, .slots = in->slots,
                          .tables = in->tables, .lens = in->lens, .max_pages = e->kv.max_pages_per_seq,
                          .block_size = ENGINE_BLOCK_SIZE, .x = e->x, .q = e->q_rows, .att = e->att,
                          .hidden = e->hidden, .logits = e->logits, .ldy = e->vocab_padded, .best = best,
                          .barrier = e->d_barrier, .l2_prefetch = e->l2_prefetch, .trace = e->d_trace,
                          .att_parts = e->d_att_parts, .proj_acc = e->d_proj_acc, .tagged = e->d_tagged,
                          .tagged_acc = e->d_tagged_acc, .epoch = e->d_epoch};
    return a;
}

/** @brief Launch a step: v6's or v7's kernel where it takes the step (`merged`), else the variant's. */
static const char *launch_step_kernel(const gpt2_engine *e, const decode_step_args *a, int merged)
{
    return merged ? e->merged_step(e->dtype, a) : e->step(e->dtype, a);
}

int engine_persistent_step(const gpt2_engine *e, int n)
{
    if (!e->step || n > DECODE_MAX_ROWS) return 0;
    /* the arguments a step would take: the same sizes, so the size asked is the size launched */
    decode_step_args a = persistent_step_args(e, n, &e->step_d, e->d_best, 0);
    size_t smem = e->step_smem(e->dtype, &a), limit = wb_current_smem_per_block();
    if (e->merged_step && n == 1) { /* v6, v7: their steps take their kernel */
        a = persistent_step_args(e, n, &e->step_d, e->d_best, 1);
        size_t merged = e->merged_step_smem(e->dtype, &a);
        if (!merged || merged > limit) return 0;
    }
    return smem && smem <= limit;
}

/** v3-v7's decode step for n sequences: one cooperative kernel (and a memset) runs what v2 launches as 62 kernels. */
static const char *decode_kernels_persistent(gpt2_engine *e, int n)
{
    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    double mark = wb_wall_ms();
    const int merged = step_is_merged(e, n, &e->step_h);
    decode_step_args a = persistent_step_args(e, n, &e->step_d, e->d_best, merged);
    TRY(launch_step_kernel(e, &a, merged));
    charge(e, &p->whole_step, &mark);
    return NULL;
}

static const char *decode_kernels(gpt2_engine *e, int n)
{
    if (engine_persistent_step(e, n)) return decode_kernels_persistent(e, n);
    if (fused_step(e, n)) return decode_kernels_fused(e, n);
    const gpt2_config *c = &e->cfg;
    int C = c->C, H = c->n_head, d = C / H, V = c->vocab;
    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    double mark = wb_wall_ms();
    TRY(gpt2_embed(e->dtype, e->step_d.tokens, e->step_d.positions, e->wte, e->wpe, e->x, n, C));
    charge(e, &p->other, &mark);
    for (int l = 0; l < c->n_layer; ++l) {
        TRY(layernorm(e, e->x, e->ln1_w[l], e->ln1_b[l], e->ln, n));
        charge(e, &p->layernorm, &mark);
        TRY(linear(e, e->ln, e->qkv_w[l], e->qkv_b[l], e->qkv, n, 3 * C, C, GELU_NONE));
        charge(e, &p->linear, &mark);
        TRY(gpt2_split_qkv(e->dtype, e->qkv, n, C, H, NULL, NULL, NULL, e->q_rows, e->k_rows, e->v_rows));
        kv_append_args ka = {e->dtype, n, H, d, ENGINE_BLOCK_SIZE, e->k_rows, e->v_rows, e->step_d.slots,
                             e->k_pool[l], e->v_pool[l]};
        TRY(kv_variants[1].append(&ka));
        charge(e, &p->kv_append, &mark);
        TRY(decode_attention(e, n, l));
        charge(e, &p->attention, &mark);
        TRY(block_tail(e, l, n, &mark));
    }
    TRY(layernorm(e, e->x, e->lnf_w, e->lnf_b, e->ln, n));
    charge(e, &p->layernorm, &mark);
    TRY(linear(e, e->ln, e->wte_t, NULL, e->logits, n, e->vocab_padded, C, GELU_NONE));
    TRY(gpt2_argmax(e->dtype, e->logits, n, V, e->vocab_padded, e->d_next));
    charge(e, &p->lm_head, &mark);
    return NULL;
}

/**
 * v2's decode step for n <= DECODE_MAX_ROWS sequences: per block, the QKV
 * linear with LayerNorm before it and the K/V append after it, stage 09's
 * attention, and three more linears with their LayerNorm, bias, GELU and
 * residual add fused in; then the LM head with the final LayerNorm and the
 * argmax fused in (its keys start at zero: the memset). On sm_90 each linear
 * starts as a programmatic dependent of the kernel before it: its first
 * weights stream while that kernel finishes.
 */
static const char *decode_kernels_fused(gpt2_engine *e, int n)
{
    const gpt2_config *c = &e->cfg;
    int C = c->C, H = c->n_head;
    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    double mark = wb_wall_ms();
    WB_CUDA_CHECK(cudaMemsetAsync(e->d_best, 0, (size_t)n * sizeof(unsigned long long), cudaStreamPerThread));
    TRY(gpt2_embed(e->dtype, e->step_d.tokens, e->step_d.positions, e->wte, e->wpe, e->x, n, C));
    charge(e, &p->other, &mark);
    for (int l = 0; l < c->n_layer; ++l) {
        decode_linear_args qkv = {.epilogue = DECODE_QKV_APPEND, .x = e->x, .ln_w = e->ln1_w[l], .ln_b = e->ln1_b[l],
                                  .w_t = e->qkv_wt[l], .bias = e->qkv_b[l], .y = e->q_rows, .M = n, .N = 3 * C,
                                  .K = C, .k_pool = e->k_pool[l], .v_pool = e->v_pool[l], .slots = e->step_d.slots,
                                  .H = H, .block_size = ENGINE_BLOCK_SIZE, .dependent_launch = e->dependent_launch};
        TRY(gpt2_decode_linear(e->dtype, &qkv));
        charge(e, &p->linear, &mark);
        TRY(decode_attention(e, n, l));
        charge(e, &p->attention, &mark);
        decode_linear_args proj = {.epilogue = DECODE_RESIDUAL, .x = e->att, .w_t = e->proj_wt[l],
                                   .bias = e->proj_b[l], .y = e->x, .M = n, .N = C, .K = C,
                                   .dependent_launch = e->dependent_launch};
        decode_linear_args fc = {.epilogue = DECODE_GELU, .x = e->x, .ln_w = e->ln2_w[l], .ln_b = e->ln2_b[l],
                                 .w_t = e->fc_wt[l], .bias = e->fc_b[l], .y = e->hidden, .M = n, .N = 4 * C, .K = C,
                                 .dependent_launch = e->dependent_launch};
        decode_linear_args fcproj = {.epilogue = DECODE_RESIDUAL, .x = e->hidden, .w_t = e->fcproj_wt[l],
                                     .bias = e->fcproj_b[l], .y = e->x, .M = n, .N = C, .K = 4 * C,
                                     .dependent_launch = e->dependent_launch};
        TRY(gpt2_decode_linear(e->dtype, &proj));
        TRY(gpt2_decode_linear(e->dtype, &fc));
        TRY(gpt2_decode_linear(e->dtype, &fcproj));
        charge(e, &p->linear, &mark);
    }
    /* the LM head reads wte itself: [V][C] is already each token's C weights contiguous */
    decode_linear_args head = {.epilogue = DECODE_LOGITS_ARGMAX, .x = e->x, .ln_w = e->lnf_w, .ln_b = e->lnf_b,
                               .w_t = e->wte, .y = e->logits, .ldy = e->vocab_padded, .M = n, .N = c->vocab, .K = C,
                               .best = e->d_best, .dependent_launch = e->dependent_launch};
    TRY(gpt2_decode_linear(e->dtype, &head));
    charge(e, &p->lm_head, &mark);
    return NULL;
}

/**
 * Capture decode_kernels into a CUDA graph for batch size n. A step is about
 * 12·11 + 4 small kernels; launched one by one, each costs the CPU a few
 * microseconds and leaves the GPU a gap. A graph is launched with one call and
 * its kernels follow each other without the host. (The kernels go to the
 * per-thread default stream, which can be captured: the workbook is built with
 * --default-stream per-thread.)
 */
static const char *capture_decode(gpt2_engine *e, int n)
{
    if (e->graph_exec) WB_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)e->graph_exec));
    e->graph_exec = NULL;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    WB_CUDA_CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed));
    const char *why = decode_kernels(e, n);
    WB_CUDA_CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph));
    if (why) {
        WB_CUDA_CHECK(cudaGraphDestroy(graph));
        return why;
    }
    WB_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    WB_CUDA_CHECK(cudaGraphDestroy(graph));
    e->graph_exec = exec, e->graph_n = n, e->graph_merged = step_is_merged(e, n, &e->step_h);
    return NULL;
}

/**
 * One decode step's inputs, on the host: each sequence's position, its slot in
 * the page pools (the block manager appends one token to each), the context
 * lengths and block tables; and its token, when `tokens` is not NULL. The
 * pages that the step must copy first (copy-on-write) go to `copies`.
 */
static const char *step_inputs(gpt2_engine *e, int n, const int *seqs, const int *tokens, engine_step_inputs *in,
                               kv_page_copy *copies, int *n_copies)
{
    int ones[64]; /* one new token per sequence (max_seqs <= 64) */
    for (int i = 0; i < 64; ++i) ones[i] = 1;
    for (int i = 0; i < n; ++i) {
        int len = kv_seq_len(&e->kv, seqs[i]);
        if (len < 0 || len >= e->cfg.max_T)
            return len < 0 ? "decode: unknown sequence" : "decode: a sequence is at the end of the context";
        in->positions[i] = len;
        if (tokens) in->tokens[i] = tokens[i];
    }
    kv_status st = kv_append(&e->kv, seqs, ones, n, in->slots, copies, n_copies);
    if (st != KV_OK) return kv_status_string(st);
    int max_pages = e->kv.max_pages_per_seq;
    for (int i = 0; i < n; ++i) {
        in->lens[i] = kv_seq_len(&e->kv, seqs[i]);
        const int *t = kv_block_table(&e->kv, seqs[i]);
        for (int pg = 0; pg < max_pages; ++pg)
            in->tables[i * max_pages + pg] = pg < kv_pages_for(&e->kv, in->lens[i]) ? t[pg] : 0;
    }
    return NULL;
}

/** @brief The bytes of a step's inputs up to row n of its block tables (the last field): what a step uploads. */
static size_t step_inputs_bytes(const gpt2_engine *e, const engine_step_inputs *in, int n)
{
    return (size_t)((char *)(in->tables + (size_t)n * e->kv.max_pages_per_seq) - (char *)in->slots);
}

/** @brief Copy-on-write of shared pages (forked sequences), every layer, before the step that appends to them. */
static const char *copy_pages(gpt2_engine *e, const kv_page_copy *copies, int n_copies)
{
    const gpt2_config *c = &e->cfg;
    for (int i = 0; i < n_copies; ++i)
        for (int l = 0; l < c->n_layer; ++l)
            TRY(kv_copy_page(e->dtype, e->k_pool[l], e->v_pool[l], c->n_head, c->C / c->n_head, ENGINE_BLOCK_SIZE,
                             copies[i].src_page, copies[i].dst_page, copies[i].n_tokens));
    return NULL;
}

const char *engine_decode(gpt2_engine *e, int n, const int *seqs, const int *tokens, int *next, float *logits)
{
    const gpt2_config *c = &e->cfg;
    if (n < 1 || n > e->max_seqs) return "decode: batch size out of range";
    engine_step_inputs *in = &e->step_h; /* filled here, uploaded with one copy */
    kv_page_copy copies[64];
    int n_copies = 0;
    TRY(step_inputs(e, n, seqs, tokens, in, copies, &n_copies));
    TRY(copy_pages(e, copies, n_copies));
    /* everything up to row n of the tables, in one asynchronous copy (the host buffer is pinned; it is rewritten
     * only after this step's result has been copied back, which waits for the copy) */
    WB_CUDA_CHECK(cudaMemcpyAsync(e->step_d.slots, in->slots, step_inputs_bytes(e, in, n), cudaMemcpyHostToDevice,
                                  cudaStreamPerThread));

    if (e->profile || !e->use_graphs) {
        TRY(decode_kernels(e, n));
    } else {
        if (!e->graph_exec || e->graph_n != n || e->graph_merged != step_is_merged(e, n, in))
            TRY(capture_decode(e, n)); /* v6, v7: the step's kernel changed with its context */
        WB_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)e->graph_exec, cudaStreamPerThread));
    }
    if (fused_step(e, n)) { /* v2-v7's LM head leaves an argmax key per sequence */
        unsigned long long keys[DECODE_MAX_ROWS];
        WB_CUDA_CHECK(cudaMemcpy(keys, e->d_best, (size_t)n * sizeof keys[0], cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) next[i] = gpt2_argmax_key_token(keys[i], c->vocab);
    } else {
        WB_CUDA_CHECK(cudaMemcpy(next, e->d_next, (size_t)n * 4, cudaMemcpyDeviceToHost));
    }
    if (logits) logits_to_host(e, e->logits, n, logits);
    return NULL;
}

/*
 * engine_decode waits for each step: the next step's token is its result.
 * The host then works out the next step's inputs, copies them up and
 * launches, and the GPU waits for all of it: 30-37 µs a step on the H100
 * (the traced step against the timed one). But a step's inputs other than
 * its tokens — positions, slots, block tables — do not depend on the tokens.
 * So engine_generate works them out for up to queue_steps steps (a queue),
 * uploads them in one copy, and queues the steps' kernels without waiting:
 * each step reads its tokens from the argmax keys of the step before
 * (decode_step_args.prev_best), in two buffers that the steps take in turn,
 * and writes the tokens it was fed to d_fed, copied back to the host after
 * the queue's last kernel. A page that a step must copy first (copy-on-write)
 * is copied between two kernels, in stream order.
 *
 * The host waits for a queue's tokens only after it has worked out and queued
 * the next queue: the GPU never waits for the host between two queues. The
 * next queue's uploads and memset are in stream order after this queue's
 * kernels, so one device buffer serves both; its pinned host inputs and the
 * tokens copied back take two buffers in turn.
 */

/** The argmax keys queued step s writes (step s + 1 reads them): two buffers, by the step's parity. */
static unsigned long long *queued_keys(const gpt2_engine *e, int s)
{
    return e->d_queue_best + (size_t)(s % 2) * e->max_seqs;
}

/** Queue q's tokens copied back (pinned host memory, [ENGINE_QUEUE_STEPS][max_seqs]): the tokens its steps were fed. */
static int *queue_fed_tokens(const gpt2_engine *e, int q)
{
    return e->h_fed + (size_t)q * ENGINE_QUEUE_STEPS * e->max_seqs;
}

/** Work out and queue steps s0 … s0 + queued − 1 (queue `q`, 0 or 1): their inputs, one upload, the barriers' memset,
 *  the kernels, the fed tokens back to h_fed[q], and the event queue_done[q] after them. */
static const char *enqueue_steps(gpt2_engine *e, int n, const int *seqs, const int *tokens, int s0, int queued, int q)
{
    kv_page_copy copies[ENGINE_QUEUE_STEPS][64];
    int n_copies[ENGINE_QUEUE_STEPS];
    engine_step_inputs *h = e->queue_h[q];
    for (int j = 0; j < queued; ++j) {
        n_copies[j] = 0;
        TRY(step_inputs(e, n, seqs, s0 + j ? NULL : tokens, &h[j], copies[j], &n_copies[j]));
    }
    size_t bytes = (size_t)(queued - 1) * e->queue_step_bytes + step_inputs_bytes(e, &h[0], n);
    WB_CUDA_CHECK(cudaMemcpyAsync(e->queue_d[0].slots, h[0].slots, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
    /* each queued step its own barrier counter, all zeroed by one memset: no memset between two steps */
    WB_CUDA_CHECK(cudaMemsetAsync(e->d_barrier + 1, 0, (size_t)queued * sizeof(unsigned), cudaStreamPerThread));
    for (int j = 0; j < queued; ++j) {
        const int s = s0 + j;
        TRY(copy_pages(e, copies[j], n_copies[j]));
        const int merged = step_is_merged(e, n, &h[j]);
        decode_step_args a = persistent_step_args(e, n, &e->queue_d[j], queued_keys(e, s), merged);
        a.prev_best = s ? queued_keys(e, s - 1) : NULL; /* step 0 takes `tokens` */
        a.fed_tokens = e->d_fed + (size_t)j * n;
        a.barrier = e->d_barrier + 1 + j, a.barrier_zeroed = 1;
        /* a queued v7 step zeroes the keys the step after it raises, as it ends (decode_tagged.cu); steps 0 and 1, and
         * a step after one of another kernel, get the launcher's memset */
        const int tagged = merged && e->path->tagged;
        a.best_zeroed = s >= 2 && e->queued_step_tagged;
        e->queued_step_tagged = tagged;
        TRY(launch_step_kernel(e, &a, merged));
    }
    WB_CUDA_CHECK(cudaMemcpyAsync(queue_fed_tokens(e, q), e->d_fed,
                                  (size_t)queued * n * sizeof(int), cudaMemcpyDeviceToHost, cudaStreamPerThread));
    WB_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e->queue_done[q], cudaStreamPerThread));
    return NULL;
}

/** Steps in queue k of `steps` cut into queues of Q: Q, the last maybe fewer. */
static int queue_length(int steps, int Q, int k)
{
    return steps - k * Q < Q ? steps - k * Q : Q;
}

const char *engine_generate(gpt2_engine *e, int n, const int *seqs, const int *tokens, int steps, int *out)
{
    if (n < 1 || n > e->max_seqs || steps < 0) return "generate: batch size or steps out of range";
    if (e->queue_steps < 1 || e->queue_steps > ENGINE_QUEUE_STEPS) return "generate: queue_steps must be 1..32";
    if (!engine_persistent_step(e, n)) { /* v1, v2, or rows that do not fit: step by step, each step fed the one
                                          * before's tokens where it wrote them */
        const char *why = NULL;
        for (int s = 0; s < steps && !why; ++s)
            why = engine_decode(e, n, seqs, s ? out + (size_t)(s - 1) * n : tokens, out + (size_t)s * n, NULL);
        return why;
    }
    for (int i = 0; i < n; ++i) { /* every step fits in the context (a full page pool can still stop it) */
        int len = kv_seq_len(&e->kv, seqs[i]);
        if (len < 0) return "decode: unknown sequence";
        if (len + steps > e->cfg.max_T) return "generate: a sequence would pass the end of the context";
    }
    const int Q = e->queue_steps, queues = (steps + Q - 1) / Q;
    const char *why = NULL;
    for (int k = 0; k <= queues && !why; ++k) {
        if (k < queues) why = enqueue_steps(e, n, seqs, tokens, k * Q, queue_length(steps, Q, k), k % 2);
        if (k == 0 || why) continue;
        /* queue k − 1's tokens: those fed to its steps s0 + 1 …, chosen by the steps before them */
        const int s0 = (k - 1) * Q, queued = queue_length(steps, Q, k - 1);
        const int *fed = queue_fed_tokens(e, (k - 1) % 2);
        WB_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e->queue_done[(k - 1) % 2]));
        for (int j = s0 ? 0 : 1; j < queued; ++j)
            memcpy(out + (size_t)(s0 + j - 1) * n, fed + (size_t)j * n, (size_t)n * sizeof(int));
    }
    if (why) { /* steps queued before the error may still run: let them end before the caller frees anything */
        WB_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
        return why;
    }
    if (steps) { /* the last step's tokens: its argmax keys */
        unsigned long long keys[64];
        WB_CUDA_CHECK(cudaMemcpy(keys, queued_keys(e, steps - 1), (size_t)n * sizeof keys[0], cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) out[(size_t)(steps - 1) * n + i] = gpt2_argmax_key_token(keys[i], e->cfg.vocab);
    }
    return NULL;
}

void engine_release(gpt2_engine *e, int seq) { kv_free_seq(&e->kv, seq); }
