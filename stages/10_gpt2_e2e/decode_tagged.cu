/**
 * @file stages/10_gpt2_e2e/decode_tagged.cu
 * @brief v6: v5's step at 1 row (fp16, sm_90) with attention and proj in
 *        one phase, by head (proj_heads.cuh), and no grid barriers: every
 *        phase's outputs carry the step's tag, and each phase polls the words
 *        it reads. With the tuning that only this step needs, each where
 *        it acts: the LayerNorms folded into the weights, the rows' loads
 *        before the weights', attention's addresses in shifts.
 *
 * A grid barrier costs each phase about 1 µs (0.99 µs alone on the H100, the
 * fastest of eight designs measured), and only then do the blocks fetch the
 * rows the phase before wrote: a trip to L2 more. But a phase waits for the
 * phase before only because it reads its outputs. So v6 stores each output
 * as one 32-bit word, its fp16 bits in the low half and the step's tag in
 * the high half (NCCL's "LL" protocol, in halves of 32 bits), and the reader
 * polls the words it needs until every one carries this step's tag: the
 * data is its own flag. A 32-bit store is single-copy atomic, so a word is
 * never half new; no fence orders it, since no other write has to be seen
 * with it. A scratch chain of 192 all-to-all phases on 132 blocks took
 * 1.33-1.39 µs a phase polled against 1.67-1.72 with a barrier and a row
 * read (H100).
 *
 * Each buffer is written once a step (x before each layer, each layer's
 * q/k/v and hidden layer: DECODE_TAGGED_WORDS), so a word never changes
 * between two reads of one step; the next step writes it again with the
 * next tag, a kernel later. Tags run 1 … 65 535 and the buffers start at
 * zero, so a word no step wrote never passes.
 *
 * proj's sums are added by 12 heads with atomics, so no tag can mark them
 * done: each sum counts its parts in its low bits (add_counted), and fc's
 * rows wait until the count says H. They come in two halves chosen by the
 * step's parity, and each step zeroes the other half for the next.
 */
#include "tagged_rows.cuh"

#include <stdlib.h>

#include "engine.h" /* v6's set-up, at the end */
#include "fp16.h"
#include "model.h"

/**
 * @brief v6: attention and proj in one phase, no grid barrier. Each phase's outputs go to
 *        their tagged words (finish_phase_tagged) and the next phase polls
 *        the words it reads (stage_tagged_rows, stage_proj_sum_rows_tagged,
 *        attention_head_tagged). QKV's and fc's LayerNorm are folded into
 *        their weights (the engine uploads them folded: row_statistics), and
 *        their dot products load first (run_phase_ring_loads_first).
 */
__global__ void __launch_bounds__(STEP_THREADS, 1) decode_step_tagged(decode_step_args a)
{
    using T = __half;
    constexpr int ROWS = 1;
    extern __shared__ __align__(16) unsigned char smem[];
    const int C = a.C, M = a.M, L = a.L, P = 5 * L + 1;
    decode_layer_weights *layers = reinterpret_cast<decode_layer_weights *>(smem); /* [L] */
    T *rows = reinterpret_cast<T *>(layers + L);                                   /* [4C] */
    float *partial = reinterpret_cast<float *>(rows + 4 * C);                     /* [units] */
    int *tables = reinterpret_cast<int *>(partial + step_max_units(C, gridDim.x, false)); /* [max_pages] */
    __shared__ uint64_t ring_bars[RING_LINEARS];
    __shared__ unsigned ring_start[RING_LINEARS];
    const int plan_entries = ring_plan_entries(L, a.V, gridDim.x, sizeof(T), true);
    RingPlan *plan = reinterpret_cast<RingPlan *>(smem + step_plan_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x, false));
    WeightRing ring = {reinterpret_cast<uint4 *>(smem + step_ring_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x,
                                                                         false, plan_entries)),
                       a.ring_chunks, ring_bars, ring_start, plan, 4 * L, 0, 0, 0, 0, true, RING_PRODUCER_LAST_WARP};
    __shared__ StepInputs in;
    __shared__ unsigned long long block_best[ROWS];
    __shared__ float2 ln_stats[ROWS]; /* the row's (mean, 1/σ), for the epilogue (row_statistics) */
    TaggedTrace trace = {{a.trace, 0, P}};
    trace.mark(0);
    Prefetched pre;
    unsigned long long best = 0;
    /* the keys are zeroed by the launcher, or by the step before (below): nothing here would order a zero before the
     * LM head's atomics */
    load_step_inputs<ROWS>(a, layers, tables, in, block_best, false);
    /* the step's tag, and which half of tagged_acc its proj sums use (read before this block writes anything; block 0
     * adds 1 as the step ends, after every block's outputs have reached it) */
    const unsigned epoch = __ldcg(a.epoch), tag = step_tag(epoch);
    long long *const counted_acc = a.tagged_acc + (long long)(epoch & 1) * L * C;
    __syncthreads();
    /* no barrier: the step zeroes the other half of its sums, for the next step (the step before used it) */
    long long *const next_acc = a.tagged_acc + (long long)((epoch + 1) & 1) * L * C;
    for (long long k = (long long)blockIdx.x * STEP_THREADS + threadIdx.x; k < (long long)L * C;
         k += (long long)gridDim.x * STEP_THREADS)
        next_acc[k] = 0;
    plan_ring_by_head(a, layers, ring, plan);
    __syncthreads();
    if (ring.is_producer()) {
        ring.init();
        ring.request(PACED_FIRST_LINEARS);
    }
    __syncthreads(); /* the mbarriers are initialised before any thread waits on one */

    for (int i = 0; i < P; ++i) {
        if (i < 5 * L && i % 5 == PHASE_PROJ) { /* done in the attention phase */
            ++trace.phase;
            continue;
        }
        const bool attention = i < 5 * L && i % 5 == PHASE_ATTENTION;
        const bool from_ring = !attention && i < 5 * L;
        LinearPhase d;
        LinearShare share;
        bool one_pass = false; /* the LM head's LayerNorm, in one pass */
        bool folded = false;   /* QKV's or fc's LayerNorm, folded into the weights */
        if (!attention) {
            d = describe_phase(a, layers, i);
            if (i % 5 == PHASE_FCPROJ) d.resid = a.att; /* x + proj, as fc's rows left it */
            share = share_of<T>(d.w, d.N, d.K, d.epilogue != DECODE_LOGITS_ARGMAX);
            folded = d.ln_w && i < 5 * L;
            one_pass = !folded && d.ln_w != NULL;
            prefetch_epilogue<T, ROWS>(share, pre, d.bias, (const T *)d.resid, d.N, M, NULL, NULL, d.K,
                                       folded ? d.bias + d.N : NULL); /* the folded weights' sums */
            if (one_pass) prefetch_ln_chunks<T>(pre, d.ln_w, d.ln_b, d.K);
        }
        if (i > 0) trace.enter(); /* the rows wait for their own words */
        if (attention) { /* the block's head's attention into rows, times its slice of proj */
            const decode_layer_weights &W = layers[i / 5];
            const int j = 4 * (i / 5) + 1;
            int head; /* -1: a block past G·H, with no head */
            const LinearShare proj = proj_head_share(a, W.proj_heads, &head);
            if (head >= 0) attention_head_tagged(a, in, (const T *)W.k_pool, (const T *)W.v_pool, i / 5, head, rows, tag);
            __syncthreads(); /* the head's outputs are in rows */
            trace.mark(2);
            ring.wait(j);
            long long *acc = counted_acc + (long long)(i / 5) * C;
            if (head >= 0) proj_head_dots(proj, ring, j, rows, [&](int n, float part) { add_counted(acc, n, part); });
            trace.mark(3);
            __syncthreads(); /* every read of proj's weights is done: they go back */
            if (ring.is_producer()) ring.give_back();
        } else {
            if (i % 5 == PHASE_FC) { /* x + proj's bias + the heads' sums (the LayerNorm is folded) */
                const LinearShare fcproj = share_of<T>(layers[i / 5].fcproj_wt, C, 4 * C, true);
                stage_proj_sum_rows_tagged(a, layers[i / 5].proj_b, counted_acc + (long long)(i / 5) * C,
                                           tagged_x(a, i / 5), tag, rows, fcproj.n0, fcproj.n0 + fcproj.outs);
            } else if (one_pass) { /* the LM head's row, then its LayerNorm in place */
                stage_tagged_rows(tagged_x(a, L), rows, d.K, tag);
                stage_layernorm_rows<T, ROWS, true>(rows, rows, M, d.K, pre, a);
            } else if (d.src) { /* QKV's x, fc-proj's hidden layer */
                stage_tagged_rows(i % 5 == PHASE_QKV ? tagged_x(a, i / 5) : tagged_hidden(a, i / 5), rows, d.K, tag);
            } else { /* the first QKV's row: the embedding (block 0 also writes it to x's tagged words) */
                for (int e = threadIdx.x; e < C; e += STEP_THREADS) {
                    const float v = load((const T *)a.wte, (long long)step_token(a, 0) * C + e) +
                                    load((const T *)a.wpe, (long long)__ldg(a.positions) * C + e);
                    store(rows, e, v);
                    if (blockIdx.x == 0) store_tagged(tagged_x(a, 0) + e, v, tag);
                }
                __syncthreads();
            }
            trace.mark(2);
            const bool head = d.epilogue == DECODE_LOGITS_ARGMAX;
            if (from_ring) {
                if (ring.is_producer()) ring.request(paced_request_end(d.linear, i % 5));
                /* QKV's and fc's (K = 768), their statistics included, wait for their weights themselves */
                if (share.S == 1 && share.chunks == 32 * LOADS_FIRST_LANE_CHUNKS) {
                    run_phase_ring_loads_first(share, ring, d.linear, rows, partial, folded ? ln_stats : NULL);
                } else {
                    if (folded && threadIdx.x / 32 == STATS_WARP) row_statistics(rows, d.K, ln_stats);
                    ring.wait(d.linear);
                    run_phase_ring<T, ROWS>(share, ring, d.linear, rows, d.K, partial);
                }
            } else {
                if (ring.is_producer()) ring.request();
                run_head_ring_ffma<T, ROWS>(share, ring, 4 * L, rows, d.K, best, a);
            }
            trace.mark(3);
            if (!head)
                finish_phase_tagged(d.epilogue, share, partial, pre, d.bias, d.N, a, in, d.k_pool, d.v_pool,
                                    folded ? ln_stats : NULL,
                                    i % 5 == PHASE_QKV ? tagged_qkv(a, i / 5)
                                    : i % 5 == PHASE_FC ? tagged_hidden(a, i / 5)
                                                        : tagged_x(a, i / 5 + 1),
                                    tag);
        }
        if (i + 1 < P) trace.leave();
        if (from_ring && ring.is_producer()) ring.give_back();
    }
    argmax_to_step<ROWS>(a, block_best, threadIdx.x % 32, best);
    /* the next step's tag, and the keys the next queued step raises (this step read its tokens there) zeroed. Block 0
     * gets here only after every block's last fc-proj outputs have reached it, so every block has read this step's
     * epoch and tokens (the first things it did) */
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) atomicAdd(a.epoch, 1u);
        if (threadIdx.x < M && a.prev_best) a.prev_best[threadIdx.x] = 0;
    }
    trace.mark(1);
}

/** @brief The launch state of v6's kernel. */
static StepLaunch &tagged_launch()
{
    static StepLaunch s;
    step_static_smem(decode_step_tagged, s);
    return s;
}

size_t gpt2_step_tagged_smem(wb_dtype dtype, const decode_step_args *a)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (tagged_step_refused(dtype, a, cc, sms)) return 0;
    return merged_ring_offset(a, sms) + (size_t)ring_largest_share(a->C, sms, 2, true) * 16 + tagged_launch().static_smem;
}

const char *gpt2_step_tagged(wb_dtype dtype, const decode_step_args *a)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (const char *why = tagged_step_refused(dtype, a, cc, sms)) return why;
    decode_step_args args = *a;
    args.barrier = NULL; /* none: v6 meets no barrier */
    /* no zero of the keys inside the step, which meets no barrier: nothing would order it before the LM head's atomics
     * (engine_generate's queued v6 steps zero them for the step after) */
    if (!a->best_zeroed) WB_CUDA_CHECK(cudaMemsetAsync(a->best, 0, (size_t)a->M * sizeof *a->best, cudaStreamPerThread));
    return launch_ring_step(decode_step_tagged, tagged_launch(), args, merged_ring_offset(a, sms),
                            ring_largest_share(a->C, sms, 2, true), false, "launch of decode_step_tagged");
}

/* ------------------------------------------------------------------ v6's and v7's set-up (host) */

/** @brief v6's (and v7's) own state: its layer table and what it points to beyond the engine's, and its buffers. */
struct TaggedState {
    decode_layer_weights *layers; /**< [L] on the device: QKV's and fc's weights and biases folded, proj's by head;
                                       v7: fc-proj's as [4C][C], each hidden unit's C weights contiguous */
    void **owned;                 /**< [5L] the folded weights and biases and proj by head, to free */
    unsigned *tagged;             /**< the tagged rows (decode_step_args.tagged), zeroed once: tag 0 is no step's */
    long long *tagged_acc;        /**< proj's counted sums, zeroed once */
    long long *mlp_acc;           /**< v7: the MLP's counted sums, zeroed once */
    unsigned *epoch;              /**< the steps' counter */
};

/** @brief `bytes` of device memory, zeroed. */
static void *tagged_zeroed(size_t bytes, const char *what)
{
    void *p = wb_device_alloc(bytes, what);
    WB_CUDA_CHECK(cudaMemset(p, 0, bytes));
    return p;
}

/**
 * @brief A LayerNorm folded into the linear after it (model.h: gpt2_fold_layernorm; row_statistics above), uploaded:
 *        the folded weights as [N][K], like the engine's, into *w_out; [2][N], the bias with the shifts folded in and
 *        then the sums of each output's folded weights, into *bias_out.
 */
static const char *upload_folded(const float *w, const float *bias, const float *g, const float *b, int K, int N,
                                 void **w_out, void **bias_out)
{
    float *folded = (float *)malloc((size_t)K * N * sizeof *folded);
    float *bias_sums = (float *)malloc((size_t)2 * N * sizeof *bias_sums);
    /* the sums are of the weights as the upload rounds them to fp16 */
    const int ok = folded && bias_sums && gpt2_fold_layernorm(w, bias, g, b, K, N, wb_round_to_half, folded, bias_sums) == 0;
    if (ok) {
        *w_out = wb_device_upload_transposed(folded, K, N, WB_F16, "folded weight, transposed");
        *bias_out = wb_device_upload(bias_sums, (size_t)2 * N, WB_F32, "folded bias and sums");
    }
    free(folded), free(bias_sums);
    return ok ? NULL : "out of host memory";
}

/** @brief v6's set-up, and v7's (`mlp_slices`: fc-proj's weights as [4C][C], and the MLP's counted sums). */
static const char *tagged_setup(gpt2_engine *e, const gpt2_model *m, bool mlp_slices)
{
    const int L = e->cfg.n_layer, C = e->cfg.C, H = e->cfg.n_head, d = C / H;
    TaggedState *s = (TaggedState *)calloc(1, sizeof *s);
    decode_layer_weights *t = (decode_layer_weights *)malloc((size_t)L * sizeof *t);
    if (s) s->owned = (void **)calloc((size_t)5 * L, sizeof(void *));
    if (!s || !t || !s->owned) return free(t), free(s), "out of host memory";
    e->one_row_state = s;
    WB_CUDA_CHECK(cudaMemcpy(t, e->d_layers, (size_t)L * sizeof *t, cudaMemcpyDeviceToHost)); /* the engine's table */
    for (int l = 0; l < L; ++l) {
        const gpt2_block *b = &m->w.blocks[l];
        void **own = s->owned + 5 * l;
        const char *why = upload_folded(b->qkv_w, b->qkv_b, b->ln1_w, b->ln1_b, C, 3 * C, &own[0], &own[1]);
        if (!why) why = upload_folded(b->fc_w, b->fc_b, b->ln2_w, b->ln2_b, C, 4 * C, &own[2], &own[3]);
        if (why) return free(t), why;
        /* proj_wt ([C][C], each output's C inputs) by head, [H][C][64]: head h's 64 inputs of every output, one 2-D
         * copy a head */
        own[4] = wb_device_alloc((size_t)C * C * sizeof(__half), "proj weight by head");
        for (int h = 0; h < H; ++h)
            WB_CUDA_CHECK(cudaMemcpy2D((char *)own[4] + (size_t)h * C * d * sizeof(__half), (size_t)d * sizeof(__half),
                                       (const char *)e->proj_wt[l] + (size_t)h * d * sizeof(__half),
                                       (size_t)C * sizeof(__half), (size_t)d * sizeof(__half), (size_t)C,
                                       cudaMemcpyDeviceToDevice));
        t[l].qkv_wt = own[0], t[l].qkv_b = (const float *)own[1];
        t[l].fc_wt = own[2], t[l].fc_b = (const float *)own[3];
        t[l].proj_heads = own[4];
        if (mlp_slices) t[l].fcproj_wt = e->fcproj_w[l]; /* a block's hidden units' rows: one run for the ring */
    }
    s->layers = (decode_layer_weights *)wb_device_alloc((size_t)L * sizeof *t, "v6's layer table");
    WB_CUDA_CHECK(cudaMemcpy(s->layers, t, (size_t)L * sizeof *t, cudaMemcpyHostToDevice));
    free(t);
    s->tagged = (unsigned *)tagged_zeroed((size_t)DECODE_TAGGED_WORDS(L, C) * sizeof(unsigned), "tagged rows");
    s->tagged_acc = (long long *)tagged_zeroed((size_t)DECODE_TAGGED_ACC(L, C) * sizeof(long long), "proj's counted sums");
    if (mlp_slices)
        s->mlp_acc = (long long *)tagged_zeroed((size_t)DECODE_TAGGED_ACC(L, C) * DECODE_MLP_COPIES * sizeof(long long),
                                                "MLP's counted sums");
    s->epoch = (unsigned *)tagged_zeroed(sizeof(unsigned), "steps' counter");
    return NULL;
}

extern "C" const char *gpt2_tagged_setup(gpt2_engine *e, const gpt2_model *m) { return tagged_setup(e, m, false); }

extern "C" const char *gpt2_mlp_setup(gpt2_engine *e, const gpt2_model *m) { return tagged_setup(e, m, true); }

extern "C" void gpt2_tagged_args(const gpt2_engine *e, decode_step_args *a)
{
    const TaggedState *s = (const TaggedState *)e->one_row_state;
    a->layers = s->layers, a->tagged = s->tagged, a->tagged_acc = s->tagged_acc, a->mlp_acc = s->mlp_acc;
    a->epoch = s->epoch;
}

extern "C" void gpt2_tagged_free(gpt2_engine *e)
{
    TaggedState *s = (TaggedState *)e->one_row_state;
    for (int i = 0; s->owned && i < 5 * e->cfg.n_layer; ++i) WB_CUDA_CHECK(cudaFree(s->owned[i]));
    void *d[] = {s->layers, s->tagged, s->tagged_acc, s->mlp_acc, s->epoch};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i) WB_CUDA_CHECK(cudaFree(d[i]));
    free(s->owned), free(s);
    e->one_row_state = NULL;
}
