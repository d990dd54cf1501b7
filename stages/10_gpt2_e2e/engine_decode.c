/**
 * @file stages/10_gpt2_e2e/engine_decode.c
 * @brief The decode step loop every variant shares: a step's inputs, its
 *        kernels (v1's and v2's kernel by kernel, in a CUDA graph; v3-v5's one
 *        persistent kernel), and steps queued on the GPU (engine_generate).
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

/**
 * The kernels of one decode step, every argument the same from step to step
 * (the step's tokens, positions, slots, block tables and lengths are in device
 * buffers uploaded before): so they can be captured once into a CUDA graph and
 * replayed. Stage 09 is told the longest possible context (max_T): partitions
 * past a sequence's length exit at once.
 */
static const char *decode_kernels_fused(gpt2_engine *e, int n);

/** Whether a decode step of n sequences takes v2's fused kernels (else v1's): up to 8 rows, and in fp16 on sm_80+
 *  up to 64 (v2's batch path, from DECODE_BATCH_MIN_ROWS rows). */
static int fused_step(const gpt2_engine *e, int n)
{
    return e->fused_decode && (n <= DECODE_MAX_ROWS || (e->skinny_linear && n <= SKINNY_MAX_ROWS));
}

/** Stage 09's attention of layer l for the n sequences of a decode step: q_rows against the paged cache, into att. */
static const char *decode_attention(gpt2_engine *e, int n, int l)
{
    const gpt2_config *c = &e->cfg;
    int H = c->n_head, d = c->C / H;
    decode_problem dp = {n, H, H, d, ENGINE_BLOCK_SIZE, e->kv.max_pages_per_seq, c->max_T, (long long)n * c->max_T,
                         1.0f / sqrtf((float)d), e->dtype, e->q_rows, e->k_pool[l], e->v_pool[l], e->step_d.tables,
                         e->step_d.lens, e->att, e->decode_workspace, e->decode_workspace_bytes, e->decode_counters, NULL,
                         fused_step(e, n) && e->dependent_launch, NULL /* no tile counters: stage 09's v6 is not a decode choice here */};
    return decode_variants[e->decode_variant].launch(&dp);
}

/** Whether v5's own kernel takes a step of n sequences: one sequence, at any context (its attention, one block a
 *  head, reads a context past 256 tokens in several passes of the block's warps; still faster than v4's step, whose
 *  attention splits it over the idle blocks). */
static int one_row_step_takes(const gpt2_engine *e, int n) { return e->path->one_row_step && n == 1; }

/** @brief The persistent step's arguments for n sequences, with the step's inputs `in` (device) and its argmax keys
 *         to `best`; for the one-row step (`one_row`), its own arguments too (v5: its layer table and buffers). */
static decode_step_args persistent_step_args(const gpt2_engine *e, int n, const engine_step_inputs *in,
                                             unsigned long long *best, int one_row)
{
    const gpt2_config *c = &e->cfg;
    decode_step_args a = {.layers = e->d_layers,
                          .L = c->n_layer, .C = c->C, .H = c->n_head, .V = c->vocab, .M = n,
                          .wte = e->wte, .wpe = e->wpe, .lnf_w = e->lnf_w, .lnf_b = e->lnf_b,
                          .tokens = in->tokens, .positions = in->positions, .slots = in->slots,
                          .tables = in->tables, .lens = in->lens, .max_pages = e->kv.max_pages_per_seq,
                          .block_size = ENGINE_BLOCK_SIZE, .x = e->x, .q = e->q_rows, .att = e->att,
                          .hidden = e->hidden, .logits = e->logits, .ldy = e->vocab_padded, .best = best,
                          .barrier = e->d_barrier, .trace = e->d_trace,
                          .att_parts = e->d_att_parts};
    if (one_row && e->one_row_state) e->path->one_row_args(e, &a);
    return a;
}

/** @brief Launch a step: v5's kernel where it takes the step (`one_row`), else the variant's. */
static const char *launch_step_kernel(const gpt2_engine *e, const decode_step_args *a, int one_row)
{
    return one_row ? e->path->one_row_step(e->dtype, a) : e->path->step(e->dtype, a);
}

int engine_persistent_step(const gpt2_engine *e, int n)
{
    if (!e->path->step || n > DECODE_MAX_ROWS) return 0;
    /* the arguments a step would take: the same sizes, so the size asked is the size launched */
    decode_step_args a = persistent_step_args(e, n, &e->step_d, e->d_best, 0);
    size_t smem = e->path->step_smem(e->dtype, &a), limit = wb_current_smem_per_block();
    if (one_row_step_takes(e, n)) { /* v5: its steps take its kernel */
        a = persistent_step_args(e, n, &e->step_d, e->d_best, 1);
        size_t one_row = e->path->one_row_smem(e->dtype, &a);
        if (!one_row || one_row > limit) return 0;
    }
    return smem && smem <= limit;
}

const decode_path *engine_step_path(const gpt2_engine *e, int n)
{
    if (!fused_step(e, n)) return &decode_paths[0];                 /* v1's kernels */
    if (!engine_persistent_step(e, n)) return &decode_paths[1];     /* v2's fused kernels */
    if (!e->path->one_row_step || one_row_step_takes(e, n)) return e->path;
    const decode_path *p = e->path; /* v5 at other steps: the variant whose step is theirs without a row step */
    while (p > decode_paths && (p->one_row_step || p->step != e->path->step)) --p;
    return p;
}

/** v3-v5's decode step for n sequences: one cooperative kernel (and a memset) runs what v2 launches as 62 kernels. */
static const char *decode_kernels_persistent(gpt2_engine *e, int n)
{
    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    double mark = wb_wall_ms();
    const int one_row = one_row_step_takes(e, n);
    decode_step_args a = persistent_step_args(e, n, &e->step_d, e->d_best, one_row);
    TRY(launch_step_kernel(e, &a, one_row));
    engine_charge(e, &p->whole_step, &mark);
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
    engine_charge(e, &p->other, &mark);
    for (int l = 0; l < c->n_layer; ++l) {
        TRY(engine_block_head(e, l, n, &mark));
        TRY(gpt2_split_qkv(e->dtype, e->qkv, n, C, H, NULL, NULL, NULL, e->q_rows, e->k_rows, e->v_rows));
        kv_append_args ka = {e->dtype, n, H, d, ENGINE_BLOCK_SIZE, e->k_rows, e->v_rows, e->step_d.slots,
                             e->k_pool[l], e->v_pool[l]};
        TRY(kv_variants[e->kv_variant].append(&ka));
        engine_charge(e, &p->kv_append, &mark);
        TRY(decode_attention(e, n, l));
        engine_charge(e, &p->attention, &mark);
        TRY(engine_block_tail(e, l, n, &mark));
    }
    TRY(engine_layernorm(e, e->x, e->lnf_w, e->lnf_b, e->ln, n));
    engine_charge(e, &p->layernorm, &mark);
    TRY(engine_linear(e, e->ln, e->wte_t, NULL, e->logits, n, e->vocab_padded, C, GELU_NONE));
    TRY(gpt2_argmax(e->dtype, e->logits, n, V, e->vocab_padded, e->d_next));
    engine_charge(e, &p->lm_head, &mark);
    return NULL;
}

/**
 * v2's decode step: per block, the QKV linear with LayerNorm before it and
 * the K/V append after it, stage 09's attention, and three more linears with
 * their LayerNorm, bias, GELU and residual add fused in; then the LM head with
 * the final LayerNorm and the argmax fused in (its keys start at zero: the
 * memset). On sm_90 each linear starts as a programmatic dependent of the
 * kernel before it: its first weights stream while that kernel finishes.
 * From 3 rows in fp16 on sm_80 (`batch`) the linears run on tensor cores:
 * QKV, proj, fc and the head as the batch linear (every block holds all the
 * rows), QKV and fc with their LayerNorm folded into the weights (`fold`:
 * each block works out its rows' statistics), fc-proj, whose 4C inputs do not
 * fit, as the batch linear a slice of C inputs at a time and a second pass,
 * which at the last layer ends with ln_f for the head. Past DECODE_BATCH_MAX_K
 * inputs the linears are the skinny one, and proj and fc-proj end with the
 * next LayerNorm (ln_next) for the linear after.
 */
static const char *decode_kernels_fused(gpt2_engine *e, int n)
{
    const gpt2_config *c = &e->cfg;
    int C = c->C, H = c->n_head, L = c->n_layer, batch = e->skinny_linear && n >= DECODE_BATCH_MIN_ROWS;
    const int fold = batch && e->qkv_wt_folded[0]; /* the engine folded ln_1 and ln_2 where the batch linear takes C */
    const void *x_in = batch && !fold ? e->ln : e->x; /* what QKV and fc read: x, or past 768 inputs x normalised */
    float *ws = e->small_m_workspace;
    size_t wsf = e->small_m_floats;
    engine_profile dummy, *p = e->profile ? e->profile : &dummy;
    double mark = wb_wall_ms();
    WB_CUDA_CHECK(cudaMemsetAsync(e->d_best, 0, (size_t)n * sizeof(unsigned long long), cudaStreamPerThread));
    TRY(gpt2_embed(e->dtype, e->step_d.tokens, e->step_d.positions, e->wte, e->wpe, e->x, n, C));
    if (batch && !fold) TRY(engine_layernorm(e, e->x, e->ln1_w[0], e->ln1_b[0], e->ln, n));
    engine_charge(e, &p->other, &mark);
    for (int l = 0; l < L; ++l) {
        const int last = l + 1 == L;
        decode_linear_args qkv = {.epilogue = DECODE_QKV_APPEND, .x = x_in, .ln_w = batch ? NULL : e->ln1_w[l],
                                  .ln_b = e->ln1_b[l], .w_t = fold ? e->qkv_wt_folded[l] : e->qkv_wt[l],
                                  .bias = fold ? e->qkv_b_folded[l] : e->qkv_b[l], .y = e->q_rows, .M = n, .N = 3 * C,
                                  .K = C, .k_pool = e->k_pool[l], .v_pool = e->v_pool[l], .slots = e->step_d.slots,
                                  .H = H, .block_size = ENGINE_BLOCK_SIZE, .dependent_launch = e->dependent_launch,
                                  .ln_folded = fold};
        decode_batch_args qkv_b = {.w = e->qkv_w[l], .partials = ws, .partials_floats = wsf};
        TRY(gpt2_decode_linear(e->dtype, &qkv, batch ? &qkv_b : NULL));
        engine_charge(e, &p->linear, &mark);
        TRY(decode_attention(e, n, l));
        engine_charge(e, &p->attention, &mark);
        decode_linear_args proj = {.epilogue = DECODE_RESIDUAL, .x = e->att, .w_t = e->proj_wt[l],
                                   .bias = e->proj_b[l], .y = e->x, .M = n, .N = C, .K = C,
                                   .dependent_launch = e->dependent_launch};
        decode_linear_args fc = {.epilogue = DECODE_GELU, .x = x_in, .ln_w = batch ? NULL : e->ln2_w[l],
                                 .ln_b = e->ln2_b[l], .w_t = fold ? e->fc_wt_folded[l] : e->fc_wt[l],
                                 .bias = fold ? e->fc_b_folded[l] : e->fc_b[l], .y = e->hidden, .M = n, .N = 4 * C,
                                 .K = C, .dependent_launch = e->dependent_launch, .ln_folded = fold};
        decode_linear_args fcproj = {.epilogue = DECODE_RESIDUAL, .x = e->hidden, .w_t = e->fcproj_wt[l],
                                     .bias = e->fcproj_b[l], .y = e->x, .M = n, .N = C, .K = 4 * C,
                                     .dependent_launch = e->dependent_launch};
        /* the batch path: room for partial sums, the skinny linear's weights (past DECODE_BATCH_MAX_K inputs), and
         * the LayerNorm that ends proj's and fc-proj's residual add where the linear after does not fold it (ln_f) */
        const float *next_w = last ? e->lnf_w : e->ln1_w[l + 1], *next_b = last ? e->lnf_b : e->ln1_b[l + 1];
        decode_batch_args proj_b = {e->proj_w[l], ws, wsf, fold ? NULL : e->ln2_w[l], e->ln2_b[l], fold ? NULL : e->ln},
                          fc_b = {.w = e->fc_w[l], .partials = ws, .partials_floats = wsf},
                          fcproj_b = {e->fcproj_w[l], ws, wsf, fold && !last ? NULL : next_w, next_b,
                                      fold && !last ? NULL : e->ln};
        TRY(gpt2_decode_linear(e->dtype, &proj, batch ? &proj_b : NULL));
        TRY(gpt2_decode_linear(e->dtype, &fc, batch ? &fc_b : NULL));
        TRY(gpt2_decode_linear(e->dtype, &fcproj, batch ? &fcproj_b : NULL));
        engine_charge(e, &p->linear, &mark);
    }
    /* the LM head reads wte itself: [V][C] is already each token's C weights contiguous (the batch path: the rows
     * fc-proj's second pass normalised, and wte_t for the skinny linear past DECODE_BATCH_MAX_K inputs) */
    decode_linear_args head = {.epilogue = DECODE_LOGITS_ARGMAX, .x = batch ? e->ln : e->x,
                               .ln_w = batch ? NULL : e->lnf_w, .ln_b = e->lnf_b, .w_t = e->wte, .y = e->logits,
                               .ldy = e->vocab_padded, .M = n, .N = c->vocab, .K = C, .best = e->d_best,
                               .dependent_launch = e->dependent_launch};
    decode_batch_args head_b = {.w = e->wte_t, .partials = ws, .partials_floats = wsf};
    TRY(gpt2_decode_linear(e->dtype, &head, batch ? &head_b : NULL));
    engine_charge(e, &p->lm_head, &mark);
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
    e->graph_exec = exec, e->graph_n = n;
    return NULL;
}

/** The step's graph for n sequences, captured the first time (and again when n changes), launched. */
static const char *launch_graph(gpt2_engine *e, int n)
{
    if (!e->graph_exec || e->graph_n != n) TRY(capture_decode(e, n));
    WB_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)e->graph_exec, cudaStreamPerThread));
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

/**
 * The step's rows, longest context first: order[r] is the caller's index of
 * row r. Stage 09's attention gives each (row, head) a block, and the GPU
 * hands blocks out in their order. At 64 rows (768 blocks) that is two waves,
 * and in the caller's order the last wave holds whichever rows come last: when
 * long rows do, their blocks run almost alone at the end of the kernel.
 * Longest first is the classic rule for such a list (LPT scheduling): the
 * short blocks fill in behind the long ones. Every other kernel of the step
 * treats its rows alike, and no row's result depends on another's.
 */
static void longest_first(const gpt2_engine *e, int n, const int *seqs, int *order)
{
    for (int i = 0; i < n; ++i) { /* insertion sort: equal lengths keep the caller's order */
        int len = kv_seq_len(&e->kv, seqs[i]), j = i;
        for (; j > 0 && kv_seq_len(&e->kv, seqs[order[j - 1]]) < len; --j) order[j] = order[j - 1];
        order[j] = i;
    }
}

/** The tokens a step chose, row r's into out[order[r]]: from its argmax keys (`keys`: v2-v5's LM head leaves one a
 *  sequence), or with keys NULL from v1's argmax (d_next). */
static void step_tokens_to_host(const gpt2_engine *e, int n, const unsigned long long *keys, const int *order, int *out)
{
    unsigned long long row_keys[64];
    int row_next[64];
    if (keys) WB_CUDA_CHECK(cudaMemcpy(row_keys, keys, (size_t)n * sizeof row_keys[0], cudaMemcpyDeviceToHost));
    else WB_CUDA_CHECK(cudaMemcpy(row_next, e->d_next, (size_t)n * sizeof row_next[0], cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; ++r) out[order[r]] = keys ? gpt2_argmax_key_token(row_keys[r], e->cfg.vocab) : row_next[r];
}

const char *engine_decode(gpt2_engine *e, int n, const int *seqs, const int *tokens, int *next, float *logits)
{
    const gpt2_config *c = &e->cfg;
    if (n < 1 || n > e->max_seqs) return "decode: batch size out of range";
    engine_step_inputs *in = &e->step_h; /* filled here, uploaded with one copy */
    kv_page_copy copies[64];
    int n_copies = 0, order[64], row_seqs[64], row_tokens[64]; /* max_seqs <= 64 */
    longest_first(e, n, seqs, order);
    for (int r = 0; r < n; ++r) row_seqs[r] = seqs[order[r]], row_tokens[r] = tokens ? tokens[order[r]] : 0;
    TRY(step_inputs(e, n, row_seqs, tokens ? row_tokens : NULL, in, copies, &n_copies));
    TRY(copy_pages(e, copies, n_copies));
    /* everything up to row n of the tables, in one asynchronous copy (the host buffer is pinned; it is rewritten
     * only after this step's result has been copied back, which waits for the copy) */
    WB_CUDA_CHECK(cudaMemcpyAsync(e->step_d.slots, in->slots, step_inputs_bytes(e, in, n), cudaMemcpyHostToDevice,
                                  cudaStreamPerThread));

    if (e->profile || !e->use_graphs) {
        TRY(decode_kernels(e, n));
    } else {
        TRY(launch_graph(e, n));
    }
    step_tokens_to_host(e, n, fused_step(e, n) ? e->d_best : NULL, order, next);
    const size_t row_bytes = (size_t)e->vocab_padded * (e->dtype == WB_F16 ? 2 : 4);
    for (int r = 0; logits && r < n; ++r) /* the checks' logits, row by row into the caller's order */
        engine_logits_to_host(e, (const char *)e->logits + r * row_bytes, 1, logits + (size_t)order[r] * c->vocab);
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
 * is copied between two kernels, in stream order. v1's and v2's CUDA graphs
 * read their inputs from step_d and leave their tokens in d_next or keys in
 * d_best: a one-block kernel before each queued graph copies the step's
 * inputs to step_d and its tokens from those (serving 64 sequences 557-560 µs
 * a step against 573-576 one by one, H200).
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

/** Whether queued steps of n sequences replay a step's CUDA graph (v1, v2, and v3-v5 past their persistent step's
 *  rows); steps without a graph (profiled, or kernel by kernel) run one by one. */
static int graph_step_queues(const gpt2_engine *e, int n)
{
    return !engine_persistent_step(e, n) && e->use_graphs && !e->profile;
}

/** Work out and queue steps s0 … s0 + queued − 1 (queue `q`, 0 or 1): their inputs, one upload, the barriers' memset,
 *  the kernels, the fed tokens back to h_fed[q], and the event queue_done[q] after them. */
static const char *enqueue_steps(gpt2_engine *e, int n, const int *seqs, const int *tokens, int s0, int queued, int q)
{
    kv_page_copy copies[ENGINE_QUEUE_STEPS][64];
    int n_copies[ENGINE_QUEUE_STEPS];
    engine_step_inputs *h = e->queue_h[q];
    const int graph = graph_step_queues(e, n);
    for (int j = 0; j < queued; ++j) {
        n_copies[j] = 0;
        TRY(step_inputs(e, n, seqs, s0 + j ? NULL : tokens, &h[j], copies[j], &n_copies[j]));
    }
    size_t bytes = (size_t)(queued - 1) * e->queue_step_bytes + step_inputs_bytes(e, &h[0], n);
    WB_CUDA_CHECK(cudaMemcpyAsync(e->queue_d[0].slots, h[0].slots, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
    /* each queued persistent step its own barrier counter, all zeroed by one memset: no memset between two steps */
    if (!graph)
        WB_CUDA_CHECK(cudaMemsetAsync(e->d_barrier + 1, 0, (size_t)queued * sizeof(unsigned), cudaStreamPerThread));
    for (int j = 0; j < queued; ++j) {
        const int s = s0 + j;
        TRY(copy_pages(e, copies[j], n_copies[j]));
        if (graph) { /* the graph reads its inputs where engine_decode uploads them: this step's go there, and its
                      * tokens are those the step before chose, its argmax keys or v1's argmax (step 0: `tokens`) */
            const int keys = fused_step(e, n);
            TRY(gpt2_queued_step_inputs(e->step_d.slots, e->queue_d[j].slots, step_inputs_bytes(e, &h[j], n) / 4,
                                        s && keys ? e->d_best : NULL, s && !keys ? e->d_next : NULL,
                                        e->step_d.tokens, e->d_fed + (size_t)j * n, n, e->cfg.vocab));
            TRY(launch_graph(e, n));
            continue;
        }
        const int one_row = one_row_step_takes(e, n);
        decode_step_args a = persistent_step_args(e, n, &e->queue_d[j], queued_keys(e, s), one_row);
        a.prev_best = s ? queued_keys(e, s - 1) : NULL; /* step 0 takes `tokens` */
        a.fed_tokens = e->d_fed + (size_t)j * n;
        a.barrier = e->d_barrier + 1 + j, a.barrier_zeroed = 1;
        /* a queued v5 step zeroes the keys the step after it raises, as it ends (decode_tagged.cu); steps 0 and 1, and
         * a step after one of another kernel, get the launcher's memset */
        const int tagged = one_row && e->path->tagged;
        a.best_zeroed = s >= 2 && e->queued_step_tagged;
        e->queued_step_tagged = tagged;
        TRY(launch_step_kernel(e, &a, one_row));
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
    const int graph = graph_step_queues(e, n);
    if (!graph && !engine_persistent_step(e, n)) { /* no graph: step by step, each step fed the one before's tokens
                                                    * where it wrote them */
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
    /* a graph takes its rows longest first, as engine_decode does (each step adds a token to every row, so the
     * order holds for all of them); the tokens go in and come back in the caller's order */
    int order[64], row_seqs[64], row_tokens[64];
    for (int r = 0; r < n; ++r) order[r] = r;
    if (graph) longest_first(e, n, seqs, order);
    for (int r = 0; r < n; ++r) row_seqs[r] = seqs[order[r]], row_tokens[r] = tokens[order[r]];
    const int Q = e->queue_steps, queues = (steps + Q - 1) / Q;
    const char *why = NULL;
    for (int k = 0; k <= queues && !why; ++k) {
        if (k < queues) why = enqueue_steps(e, n, row_seqs, row_tokens, k * Q, queue_length(steps, Q, k), k % 2);
        if (k == 0 || why) continue;
        /* queue k − 1's tokens: those fed to its steps s0 + 1 …, chosen by the steps before them */
        const int s0 = (k - 1) * Q, queued = queue_length(steps, Q, k - 1);
        const int *fed = queue_fed_tokens(e, (k - 1) % 2);
        WB_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e->queue_done[(k - 1) % 2]));
        for (int j = s0 ? 0 : 1; j < queued; ++j)
            for (int r = 0; r < n; ++r) out[(size_t)(s0 + j - 1) * n + order[r]] = fed[(size_t)j * n + r];
    }
    if (why) { /* steps queued before the error may still run: let them end before the caller frees anything */
        WB_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
        return why;
    }
    if (steps) /* the last step's tokens: a graph's where engine_decode reads them, a persistent step's keys */
        step_tokens_to_host(e, n, !graph ? queued_keys(e, steps - 1) : fused_step(e, n) ? e->d_best : NULL, order,
                            out + (size_t)(steps - 1) * n);
    return NULL;
}

void engine_release(gpt2_engine *e, int seq) { kv_free_seq(&e->kv, seq); }
