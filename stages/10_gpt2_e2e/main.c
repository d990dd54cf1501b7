/**
 * @file stages/10_gpt2_e2e/main.c
 * @brief Stage 10 host program: GPT-2 greedy generation on the GPU from the
 *        earlier stages' kernels; --check against the CPU reference, --bench
 *        for tokens per second.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "compare.h"
#include "cuda_check.h"
#include "device.h"
#include "engine.h"
#include "gpt2.h"
#include "linear_alone.h"
#include "model.h"
#include "report.h"
#include "rng.h"
#include "timing.h"
#include "tokenizer.h"

/** The decode paths in teaching order (engine_init's variant: index + 1); each runs in fp32 and fp16 where its
 *  hardware allows. Prefill is v1's in every variant. */
static const char *const variant_ids[] = {"v1", "v2", "v3", "v4", "v5", "v6", "v7", NULL};
static const char *const variant_what[] = {"layer by layer: stages 03-09's kernels",
                                           "v1 + the fused decode linear (LayerNorm, epilogue in the GEMV)",
                                           "v2's step as one persistent kernel (grid barriers)",
                                           "v3 + the weights by the copy engine into a ring in smem",
                                           "v4 + the LM head through the ring, weights evict-first in L2",
                                           "v5 + attention and proj in one phase at batch 1",
                                           "v6 + no grid barriers: the rows tagged with the step"};
/** One line each for --help: the idea, the hardware, the problems it takes. */
static const char *const variant_help[] = {
    "layer by layer from stages 03-09's kernels; a small-M linear at decode (sm_75; fp16: sm_80)",
    "v1 + the fused decode linear: LayerNorm, bias, GELU, residual, K/V append, argmax in the GEMV (sm_75)",
    "v2's decode step as one persistent kernel, its blocks meeting at grid barriers (sm_75; 1-8 sequences)",
    "v3 + the weights brought by the copy engine into a ring in shared memory (sm_90)",
    "v4 + the LM head through the ring, the weights evict-first in L2; fp16 tensor cores at 4-8 sequences (sm_90)",
    "v5 + attention and proj in one phase at batch 1 (fp16, sm_90; other steps run v5's kernel)",
    "v6 + no grid barriers: each output tagged with the step, each phase polls its rows (fp16, sm_90)"};
enum { N_VARIANTS = 7 };
static const char *const dtype_choices[] = {"all", "fp32", "fp16", NULL};
/** @brief Whether --dtype's choice (0 all, 1 fp32, 2 fp16) takes `dtype`. */
static int dtype_chosen(int choice, wb_dtype dtype) { return choice == 0 || (choice == 1) == (dtype == WB_F32); }

/** Logits tolerances against the CPU reference (see the page): fp32, and fp16 (activations rounded every layer). */
static const wb_tolerance logits_tol_f32 = {1e-3, 1e-3}, logits_tol_f16 = {6e-2, 3e-2};

/** Hugging Face transformers (eager, PyTorch 2.11) measured on an H100, tokens/s: batch-1 greedy decode, fp32
 *  (a note under the table: the decode rows' roof is the bytes a step must read, at the copy bandwidth). */
#define PEER_DECODE_B1_FP32 112.0
/** @brief The peer's prefill, B8 x T1024, fp32, tokens/s. */
#define PEER_PREFILL_FP32 138000.0
/** @brief The same in fp16. */
#define PEER_PREFILL_FP16 492000.0

/** "464,2068,…" → ids; 0 on success, else a message. */
static const char *parse_ids(const char *s, int **ids, int *n)
{
    *n = 0;
    *ids = malloc((strlen(s) / 2 + 2) * sizeof(int));
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 100000000) return "--prompt-ids wants comma-separated non-negative integers";
        (*ids)[(*n)++] = (int)v;
        p = end;
        if (*p == ',') ++p;
        else if (*p) return "--prompt-ids wants comma-separated non-negative integers";
    }
    return *n ? NULL : "--prompt-ids is empty";
}

/* ---------------------------------------------------------------- --check */

/** Compare and print one check; returns 1 when it failed. */
static int report_check(const char *what, wb_compare_result r)
{
    printf("  %-58s worst %.3g (%.2f of tol) %s\n", what, r.max_abs_err, r.worst_frac, r.ok ? "ok" : "FAIL");
    return !r.ok;
}

/**
 * The checks of one precision on one model: (1) prefill logits at every
 * position against the CPU reference, for prompts of several lengths served
 * together; (2) decode steps through the paged cache against the CPU
 * reference's cached step, and (fp32) the greedy tokens; (3) decode against
 * recomputing the whole sequence with prefill; (4) the batch against each
 * sequence decoded alone.
 */
static int check_model(const gpt2_model *m, const char *model, int v, wb_dtype dtype, int *checks)
{
    const gpt2_config *c = &m->cfg;
    const int full_size = c->C >= 256; /* GPT-2's own sizes: short prompts (the CPU reference is slow) */
    int V = c->vocab, failed = 0;
    wb_tolerance tol = dtype == WB_F16 ? logits_tol_f16 : logits_tol_f32;
    gpt2_engine e;
    const char *why = engine_init(&e, m, dtype, v + 1, 8, 3 * c->max_T);
    printf("%s (V %d, L %d, H %d, C %d), %s %s: %s:\n", model, V, c->n_layer, c->n_head, c->C, variant_ids[v],
           wb_dtype_name(dtype), variant_what[v]);
    if (why) {
        printf("  skipped: %s\n", why);
        return 0;
    }
    /* 8 sequences, the most a fused or persistent step takes: every row of its tiles holds a sequence */
    enum { N_PROMPTS = 8, STEPS = 6 };
    static const int full_lens[N_PROMPTS] = {8, 5, 3, 2, 1, 4, 6, 7}, tiny_lens[N_PROMPTS] = {1, 17, 0, 3, 9, 30, 2, 5};
    int lens[N_PROMPTS], offs[N_PROMPTS], seqs[N_PROMPTS], total = 0; /* offs: where each prompt's tokens start */
    for (int i = 0; i < N_PROMPTS; ++i) {
        lens[i] = full_size ? full_lens[i] : i == 2 ? c->max_T / 2 : tiny_lens[i]; /* one long prompt: many pages */
        seqs[i] = i, offs[i] = total, total += lens[i];
    }
    int *tokens = malloc((size_t)(total + N_PROMPTS * STEPS) * sizeof(int));
    wb_rng r;
    wb_rng_seed(&r, 77);
    for (int i = 0; i < total; ++i) tokens[i] = wb_rng_int(&r, 0, V - 1);
    float *gpu = malloc((size_t)total * V * 4), *ref = malloc((size_t)c->max_T * V * 4);
    int next[N_PROMPTS];
    char what[128];
    /* (2)'s buffers and reference caches, freed at done: also when a step fails */
    ref_gpt2_cache caches[N_PROMPTS];
    int caches_made = 0;
    float *step_ref = NULL, *step_gpu = NULL, *batch_logits = NULL;

    /* (1) prefill of the prompts together: every position against the reference's full forward */
    why = engine_prefill(&e, N_PROMPTS, seqs, tokens, lens, next, gpu);
    if (why) {
        printf("  prefill: %s\n", why);
        failed++;
        goto done;
    }
    for (int i = 0; i < N_PROMPTS; ++i) {
        ref_gpt2_forward(c, &m->w, tokens + offs[i], lens[i], ref);
        snprintf(what, sizeof what, "prefill logits, prompt of %d tokens, every position", lens[i]);
        failed += report_check(what, wb_compare_f32(gpu + (size_t)offs[i] * V, ref, (size_t)lens[i] * V, tol, what, 3));
        ++*checks;
    }

    /* (2) decode: the sequences together, against the reference's cached step; greedy tokens (fp32) */
    step_ref = malloc((size_t)V * 4), step_gpu = malloc((size_t)N_PROMPTS * V * 4);
    batch_logits = malloc((size_t)STEPS * N_PROMPTS * V * 4); /* [step][sequence][V], for (4) */
    int cur[N_PROMPTS], generated[N_PROMPTS][STEPS], greedy_same = 1, greedy_compared = 0;
    for (int i = 0; i < N_PROMPTS; ++i) {
        ref_gpt2_cache_init(&caches[i], c);
        caches_made = i + 1;
        for (int t = 0; t < lens[i]; ++t) ref_gpt2_step(c, &m->w, &caches[i], tokens[offs[i] + t], step_ref);
        cur[i] = next[i];
    }
    double worst_frac = 0;
    int decode_ok = 1;
    for (int s = 0; s < STEPS; ++s) {
        int nxt[N_PROMPTS];
        why = engine_decode(&e, N_PROMPTS, seqs, cur, nxt, step_gpu);
        if (why) {
            printf("  decode: %s\n", why);
            failed++;
            goto done;
        }
        memcpy(batch_logits + (size_t)s * N_PROMPTS * V, step_gpu, (size_t)N_PROMPTS * V * 4);
        for (int i = 0; i < N_PROMPTS; ++i) {
            ref_gpt2_step(c, &m->w, &caches[i], cur[i], step_ref);
            wb_compare_result cr = wb_compare_f32(step_gpu + (size_t)i * V, step_ref, (size_t)V, tol, "decode logits", 3);
            decode_ok &= cr.ok;
            worst_frac = fmax(worst_frac, cr.worst_frac);
            /* the reference's greedy token, unless its top two are closer than the tolerance (a tie either way) */
            int best = 0, second = -1;
            for (int v = 1; v < V; ++v)
                if (step_ref[v] > step_ref[best]) second = best, best = v;
                else if (second < 0 || step_ref[v] > step_ref[second]) second = v;
            if (step_ref[best] - step_ref[second] > 2 * (tol.atol + tol.rtol * fabs(step_ref[best]))) {
                greedy_compared++;
                greedy_same &= nxt[i] == best;
            }
            generated[i][s] = cur[i];
            cur[i] = nxt[i];
        }
    }
    printf("  %-58s worst %.2f of tol %s\n", "decode logits through the paged cache, 8 sequences x 6", worst_frac,
           decode_ok ? "ok" : "FAIL");
    failed += !decode_ok, ++*checks;
    /* where the reference's top two are further apart than twice the tolerance, the GPU's argmax cannot differ */
    printf("  %-58s %d of %d compared %s\n", "greedy tokens equal the reference's", greedy_compared, N_PROMPTS * STEPS,
           greedy_same ? "ok" : "FAIL");
    failed += !greedy_same, ++*checks;

    /* (3) decode equals recomputing: prefill prompt + generated tokens, last position's logits */
    for (int i = 0; i < N_PROMPTS; ++i) engine_release(&e, seqs[i]);
    {
        int i = 1, off = offs[1], n_all = lens[1] + STEPS;
        int *all = malloc((size_t)n_all * sizeof(int));
        memcpy(all, tokens + off, (size_t)lens[1] * sizeof(int));
        for (int s = 0; s < STEPS; ++s) all[lens[1] + s] = generated[i][s]; /* the tokens fed at each step */
        float *recomputed = malloc((size_t)n_all * V * 4);
        int one_next, seq = 5;
        why = engine_prefill(&e, 1, &seq, all, &n_all, &one_next, recomputed);
        engine_release(&e, seq);
        if (!why) {
            /* step_gpu holds the last step's logits: sequence 1 after its token at position lens[1] + STEPS − 1 */
            wb_compare_result cr = wb_compare_f32(step_gpu + (size_t)i * V, recomputed + (size_t)(n_all - 1) * V,
                                                  (size_t)V, tol, "decode vs recompute", 3);
            failed += report_check("paged decode equals recomputing the sequence (prefill)", cr), ++*checks;
        } else {
            printf("  recompute: %s\n", why);
            failed++;
        }
        free(all), free(recomputed);
    }

    /* (4) the batch equals smaller batches of the same sequences, fed the tokens the batch generated: each
     * sequence alone (1 row of the step), then the first three together (4 rows). Logits, not tokens: v5 runs
     * its dot products on tensor cores from 4 rows and on FFMA below, so its sums differ in order */
    {
        double worst = 0;
        int same = 1;
        for (int group = 0; group <= N_PROMPTS && same; ++group) {
            int first = group < N_PROMPTS ? group : 0, n = group < N_PROMPTS ? 1 : 3, gseqs[3], tok[3], nx[3];
            for (int j = 0; j < n; ++j) gseqs[j] = first + j;
            why = engine_prefill(&e, n, gseqs, tokens + offs[first], &lens[first], nx, NULL);
            for (int s = 0; !why && s < STEPS; ++s) {
                for (int j = 0; j < n; ++j) tok[j] = generated[first + j][s];
                why = engine_decode(&e, n, gseqs, tok, nx, step_gpu);
                for (int j = 0; !why && j < n; ++j) {
                    wb_compare_result cr = wb_compare_f32(step_gpu + (size_t)j * V,
                                                          batch_logits + ((size_t)s * N_PROMPTS + first + j) * V,
                                                          (size_t)V, tol, "batch vs smaller batch", 3);
                    same &= cr.ok;
                    worst = fmax(worst, cr.worst_frac);
                }
            }
            for (int j = 0; j < n; ++j) engine_release(&e, gseqs[j]);
            if (why) printf("  smaller batch: %s\n", why), same = 0;
        }
        printf("  %-58s worst %.2f of tol %s\n", "batch of 8 equals each alone and 3 together (logits)", worst,
               same ? "ok" : "FAIL");
        failed += !same, ++*checks;
    }

    /* (5) the same steps queued on the GPU (engine_generate, 4 at a time: the queue also starts over once), each
     * step fed the step before's tokens there: the tokens equal those the steps chose one by one in (2) */
    {
        int first[N_PROMPTS], queued[STEPS][N_PROMPTS], same = 1;
        why = engine_prefill(&e, N_PROMPTS, seqs, tokens, lens, first, NULL);
        e.queue_steps = 4;
        if (!why) why = engine_generate(&e, N_PROMPTS, seqs, first, STEPS, &queued[0][0]);
        e.queue_steps = ENGINE_QUEUE_STEPS;
        for (int i = 0; i < N_PROMPTS; ++i) {
            same &= why || first[i] == generated[i][0];
            for (int s = 0; s < STEPS && !why; ++s) same &= queued[s][i] == (s + 1 < STEPS ? generated[i][s + 1] : cur[i]);
            engine_release(&e, seqs[i]);
        }
        if (why) printf("  queued steps: %s\n", why), same = 0;
        printf("  %-58s %s\n", "steps queued on the GPU choose the tokens of (2)", same ? "ok" : "FAIL");
        failed += !same, ++*checks;
    }
    /* (5b) the same at 1 row, where v6's and v7's own steps run: sequence 0 alone, its steps one by one
     * (engine_decode, each fed the token the step before chose), then queued (engine_generate, 4 at a time): the same
     * tokens. v7's queued steps zero the keys of the step after them, and its steps one by one get a memset */
    {
        int seq = 0, first_by_step, first_queued, tok, by_step[STEPS], queued[STEPS], same = 1;
        why = engine_prefill(&e, 1, &seq, tokens + offs[0], &lens[0], &first_by_step, NULL);
        tok = first_by_step;
        for (int s = 0; s < STEPS && !why; ++s) why = engine_decode(&e, 1, &seq, &tok, &by_step[s], NULL), tok = by_step[s];
        engine_release(&e, seq);
        if (!why) why = engine_prefill(&e, 1, &seq, tokens + offs[0], &lens[0], &first_queued, NULL);
        e.queue_steps = 4;
        if (!why) why = engine_generate(&e, 1, &seq, &first_queued, STEPS, queued);
        e.queue_steps = ENGINE_QUEUE_STEPS;
        engine_release(&e, seq);
        same = !why && first_queued == first_by_step;
        for (int s = 0; s < STEPS && same; ++s) same &= queued[s] == by_step[s];
        if (why) printf("  queued steps, 1 row: %s\n", why);
        printf("  %-58s %s\n", "1 row: steps queued choose the tokens of steps one by one", same ? "ok" : "FAIL");
        failed += !same, ++*checks;
    }
done:
    for (int i = 0; i < caches_made; ++i) ref_gpt2_cache_free(&caches[i]);
    free(step_ref), free(step_gpu), free(batch_logits);
    free(tokens), free(gpu), free(ref);
    engine_free(&e);
    return failed;
}

/**
 * (6) Long contexts, on a tiny model whose context is 1024 (the one of (1)-(5) has 64): one sequence at a time after
 * prompts of 200, 300, 600 and 900 tokens, then three together after 2, 450 and 900, two decode steps each. The
 * steps are fed seeded tokens, not their own argmax, so that the reference's logits are worked out once for every
 * variant. Attention then takes several passes of a block's warps, and v5 splits it over 2-4 blocks (fp32 from 129
 * tokens of context, fp16 from 257); beside a sequence of 900 tokens, the one of 2 leaves some of its splits empty.
 */
enum { LONG_GROUPS = 5, LONG_STEPS = 2, LONG_MAX_SEQS = 3, LONG_LOGIT_ROWS = (4 + 3) * LONG_STEPS };
static const int long_alone[4] = {200, 300, 600, 900}, long_together[LONG_MAX_SEQS] = {2, 450, 900};

/** Group g's sequences (1, or 3 for the last) and their prompt lengths; returns how many. */
static int long_group(int g, int *lens)
{
    int n = g < 4 ? 1 : LONG_MAX_SEQS;
    for (int j = 0; j < n; ++j) lens[j] = g < 4 ? long_alone[g] : long_together[j];
    return n;
}

/** Group g's tokens for (6), seeded: its prompts one after another, then each step's fed tokens; returns how many
 *  prompt tokens come first. `tokens` holds 2·max_T. */
static int long_group_tokens(int g, int V, int *tokens)
{
    int lens[LONG_MAX_SEQS], n = long_group(g, lens), total = 0;
    for (int j = 0; j < n; ++j) total += lens[j];
    wb_rng r;
    wb_rng_seed(&r, 78 + (uint64_t)g);
    for (int i = 0; i < total + LONG_STEPS * n; ++i) tokens[i] = wb_rng_int(&r, 0, V - 1);
    return total;
}

/** The reference's logits for (6), [LONG_LOGIT_ROWS][V] in the order group, step, sequence. */
static void long_context_reference(const gpt2_model *m, float *ref)
{
    const gpt2_config *c = &m->cfg;
    int row = 0, *tokens = malloc((size_t)2 * c->max_T * sizeof(int));
    float *scratch = malloc((size_t)c->vocab * 4);
    for (int g = 0; g < LONG_GROUPS; ++g) {
        int lens[LONG_MAX_SEQS], n = long_group(g, lens), off = 0, total = long_group_tokens(g, c->vocab, tokens);
        ref_gpt2_cache caches[LONG_MAX_SEQS];
        for (int j = 0; j < n; ++j) {
            ref_gpt2_cache_init(&caches[j], c);
            for (int t = 0; t < lens[j]; ++t) ref_gpt2_step(c, &m->w, &caches[j], tokens[off + t], scratch);
            off += lens[j];
        }
        for (int s = 0; s < LONG_STEPS; ++s)
            for (int j = 0; j < n; ++j, ++row)
                ref_gpt2_step(c, &m->w, &caches[j], tokens[total + s * n + j], ref + (size_t)row * c->vocab);
        for (int j = 0; j < n; ++j) ref_gpt2_cache_free(&caches[j]);
    }
    free(tokens), free(scratch);
}

/** (6) for variant v in `dtype` against the reference's logits `ref`. */
static int check_long_contexts(const gpt2_model *m, int v, wb_dtype dtype, const float *ref, int *checks)
{
    const gpt2_config *c = &m->cfg;
    const int V = c->vocab;
    wb_tolerance tol = dtype == WB_F16 ? logits_tol_f16 : logits_tol_f32;
    gpt2_engine e;
    const char *why = engine_init(&e, m, dtype, v + 1, LONG_MAX_SEQS, 2 * c->max_T);
    if (why) {
        printf("  %-4s %s long contexts: skipped: %s\n", variant_ids[v], wb_dtype_name(dtype), why);
        return 0;
    }
    float *logits = malloc((size_t)LONG_MAX_SEQS * V * 4);
    int *tokens = malloc((size_t)2 * c->max_T * sizeof(int)), ok = 1, row = 0;
    double worst = 0;
    for (int g = 0; g < LONG_GROUPS && !why; ++g) {
        int lens[LONG_MAX_SEQS], seqs[LONG_MAX_SEQS], feed[LONG_MAX_SEQS], next[LONG_MAX_SEQS];
        int n = long_group(g, lens), total = long_group_tokens(g, V, tokens);
        for (int j = 0; j < n; ++j) seqs[j] = j;
        why = engine_prefill(&e, n, seqs, tokens, lens, next, NULL);
        for (int s = 0; s < LONG_STEPS && !why; ++s) {
            for (int j = 0; j < n; ++j) feed[j] = tokens[total + s * n + j];
            for (int i = 0; i < n * V; ++i) logits[i] = NAN; /* poisoned: a row the step does not write fails */
            why = engine_decode(&e, n, seqs, feed, next, logits);
            for (int j = 0; j < n && !why; ++j, ++row) {
                wb_compare_result cr = wb_compare_f32(logits + (size_t)j * V, ref + (size_t)row * V, (size_t)V, tol,
                                                      "long context", 3);
                ok &= cr.ok;
                worst = fmax(worst, cr.worst_frac);
            }
        }
        for (int j = 0; j < n; ++j) engine_release(&e, seqs[j]);
    }
    if (why) printf("  %-4s %s long contexts: %s\n", variant_ids[v], wb_dtype_name(dtype), why), ok = 0;
    printf("  %-4s %s %-48s worst %.2f of tol %s\n", variant_ids[v], wb_dtype_name(dtype),
           "decode after 200-900 tokens, alone and 3 together", worst, ok ? "ok" : "FAIL");
    ++*checks;
    free(logits), free(tokens);
    engine_free(&e);
    return !ok;
}

/* ---------------------------------------------------------------- --bench */

/** Median of a few repetitions of fn, ms. */
static double time_prefill(gpt2_engine *e, int B, int T, const int *tokens, int reps)
{
    int *seqs = malloc((size_t)B * 4), *lens = malloc((size_t)B * 4), *next = malloc((size_t)B * 4);
    for (int b = 0; b < B; ++b) seqs[b] = b, lens[b] = T;
    double best = INFINITY;
    for (int r = 0; r < reps + 1; ++r) {
        WB_CUDA_CHECK(cudaDeviceSynchronize());
        double t0 = wb_wall_ms();
        const char *why = engine_prefill(e, B, seqs, tokens, lens, next, NULL);
        WB_CUDA_CHECK(cudaDeviceSynchronize());
        double t = wb_wall_ms() - t0;
        for (int b = 0; b < B; ++b) engine_release(e, b);
        if (why) {
            fprintf(stderr, "prefill: %s\n", why);
            return NAN;
        }
        if (r > 0 && t < best) best = t; /* the first run warms up */
    }
    free(seqs), free(lens), free(next);
    return best;
}

/**
 * `steps` greedy decode steps of the B live sequences `seqs`, each step's tokens fed back as the next step's
 * (cur: the first step's tokens); *ms gets the milliseconds per step. `prof`: profile the steps.
 */
static const char *timed_steps(gpt2_engine *e, int B, const int *seqs, int *cur, int steps, engine_profile *prof,
                               double *ms)
{
    int *nx = malloc((size_t)B * sizeof(int));
    const char *why = NULL;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    e->profile = prof;
    double t0 = wb_wall_ms();
    for (int s = 0; s < steps && !why; ++s) {
        why = engine_decode(e, B, seqs, cur, nx, NULL);
        memcpy(cur, nx, (size_t)B * sizeof(int));
    }
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    *ms = (wb_wall_ms() - t0) / steps;
    e->profile = NULL;
    free(nx);
    return why;
}

/** The same steps queued on the GPU (engine_generate, which waits for the last): ms per step. */
static const char *timed_generate(gpt2_engine *e, int B, const int *seqs, const int *cur, int steps, double *ms)
{
    int *out = malloc((size_t)B * steps * sizeof(int));
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    double t0 = wb_wall_ms();
    const char *why = engine_generate(e, B, seqs, cur, steps, out);
    *ms = (wb_wall_ms() - t0) / steps;
    free(out);
    return why;
}

/** Runs of a timed decode (each a prefill, then the steps): the rows give their median. */
enum { DECODE_RUNS = 5 };

/** ms per greedy step of B sequences after a prompt each, the median of DECODE_RUNS runs (one run with `prof`, which
 *  profiles it): step by step, or (queued) the steps queued on the GPU. */
static double time_decode(gpt2_engine *e, int B, int prompt, int steps, const int *tokens, engine_profile *prof,
                          int queued)
{
    int *seqs = malloc((size_t)B * 4), *lens = malloc((size_t)B * 4), *cur = malloc((size_t)B * 4);
    double t[DECODE_RUNS];
    const char *why = NULL;
    const int runs = prof ? 1 : DECODE_RUNS;
    for (int r = 0; r < runs && !why; ++r) {
        for (int b = 0; b < B; ++b) seqs[b] = b, lens[b] = prompt;
        why = engine_prefill(e, B, seqs, tokens, lens, cur, NULL);
        if (!why && queued) why = timed_generate(e, B, seqs, cur, steps, &t[r]);
        else if (!why) why = timed_steps(e, B, seqs, cur, steps, prof, &t[r]);
        for (int b = 0; b < B; ++b) engine_release(e, b);
    }
    if (why) fprintf(stderr, "decode: %s\n", why);
    free(seqs), free(lens), free(cur);
    return why ? NAN : wb_median(t, runs);
}

/** One row of the bench table: `tokens` a step (or a prefill) in `ms`, against `limit` tokens per second. The
 *  problem's name ends with the precision (the tables and plots group by it). */
static void add_row(wb_report *rep, const char *problem, wb_dtype dtype, const char *size, int v, double ms,
                    double tokens, double limit)
{
    char name[128];
    snprintf(name, sizeof name, "%s, %s", problem, wb_dtype_name(dtype));
    wb_row row = {.problem = name, .size = size, .variant = variant_ids[v], .what = variant_what[v],
                  .unit = "tok/s", .roof = limit, .ok = 1};
    row.status = isnan(ms) ? WB_ROW_REJECTED : WB_ROW_RAN;
    row.note = "failed";
    row.time.median_ms = row.time.min_ms = row.time.max_ms = ms;
    row.throughput = tokens / (ms * 1e-3);
    wb_report_add(rep, &row);
}

static void print_profile(const char *what, const engine_profile *p)
{
    double total = p->layernorm + p->linear + p->attention + p->kv_append + p->lm_head + p->other + p->whole_step;
    if (p->whole_step > 0) {
        printf("  %-30s total %8.3f ms: one persistent kernel per step %4.1f%%, other %4.1f%%\n", what, total,
               100 * p->whole_step / total, 100 * (total - p->whole_step) / total);
        return;
    }
    printf("  %-30s total %8.3f ms: linear %4.1f%%, attention %4.1f%%, LM head %4.1f%%, LayerNorm %4.1f%%, "
           "KV append %4.1f%%, other %4.1f%%\n",
           what, total, 100 * p->linear / total, 100 * p->attention / total, 100 * p->lm_head / total,
           100 * p->layernorm / total, 100 * p->kv_append / total, 100 * p->other / total);
}

/** Trace point w (0 start, 1 arrival, 2 rows ready, 3 dot products done) of block b in phase p of P, ns. */
static double trace_at(const unsigned long long *h, int P, int b, int p, int w)
{
    return (double)h[((size_t)b * P + p) * 4 + w];
}

/**
 * v3-v7: one decode step of B sequences (prompts of `prompt` tokens) traced
 * inside the persistent kernel — when each block starts each phase and when
 * it arrives at the barrier that ends it — and summarised per kind of phase:
 * the phase's time from the first block's start to the next phase's first
 * start, the mean and the slowest block's work, and the barrier (the last
 * arrival to the first start after it).
 */
static void print_step_trace(gpt2_engine *e, int B, int prompt, const int *tokens)
{
    int L = e->cfg.n_layer, P = 5 * L + 1, sms, seqs[8], lens[8], cur[8], nx[8];
    if (!engine_persistent_step(e, B)) {
        printf("  (no trace: batch %d does not take the persistent step)\n", B);
        return;
    }
    wb_current_gpu(NULL, &sms);
    for (int b = 0; b < B; ++b) seqs[b] = b, lens[b] = prompt;
    const char *why = engine_prefill(e, B, seqs, tokens, lens, cur, NULL);
    size_t n = (size_t)sms * P * 4;
    unsigned long long *h = malloc(n * sizeof *h);
    if (!why) why = engine_decode(e, B, seqs, cur, nx, NULL); /* warm */
    int graphs = e->use_graphs;
    e->use_graphs = 0, e->d_trace = wb_device_alloc(n * sizeof *h, "trace");
    WB_CUDA_CHECK(cudaMemset(e->d_trace, 0, n * sizeof *h)); /* v6 and v7 leave proj's phases unmarked */
    if (!why) why = engine_decode(e, B, seqs, nx, cur, NULL);
    WB_CUDA_CHECK(cudaMemcpy(h, e->d_trace, n * sizeof *h, cudaMemcpyDeviceToHost));
    WB_CUDA_CHECK(cudaFree(e->d_trace));
    e->d_trace = NULL, e->use_graphs = graphs;
    for (int b = 0; b < B; ++b) engine_release(e, b);
    if (why) {
        printf("  (no trace: %s)\n", why);
        free(h);
        return;
    }
    static const char *const kinds[] = {"QKV + LayerNorm + K/V append", "attention", "proj + residual",
                                        "fc + LayerNorm + GELU", "fc-proj + residual", "LM head + LayerNorm + argmax"};
    /* per kind: the phase (first start to the next phase's first start), the mean block's rows (start to rows
     * ready, LayerNorm included), dot products, epilogue (to its arrival), the slowest block's work, the barrier */
    double wall[6] = {0}, rows[6] = {0}, dots[6] = {0}, epi[6] = {0}, slowest[6] = {0}, barrier[6] = {0};
    double t0 = 0, t_end = 0;
    int count[6] = {0};
    for (int p = 0; p < P; ++p) {
        int k = p == P - 1 ? 5 : p % 5, q = p + 1; /* q: the next phase that ran (v6, v7 run no proj phase) */
        if (trace_at(h, P, 0, p, 0) == 0) continue;
        while (q < P && trace_at(h, P, 0, q, 0) == 0) ++q;
        double first = INFINITY, last_arrival = 0, next = INFINITY, most = 0, r = 0, dd = 0, ee = 0;
        for (int b = 0; b < sms; ++b) {
            double start = trace_at(h, P, b, p, 0), arrive = trace_at(h, P, b, p, 1);
            first = fmin(first, start), last_arrival = fmax(last_arrival, arrive), most = fmax(most, arrive - start);
            if (trace_at(h, P, b, p, 2)) /* attention's phase marks none of the two (v24's merged phase does) */
                r += trace_at(h, P, b, p, 2) - start, dd += trace_at(h, P, b, p, 3) - trace_at(h, P, b, p, 2),
                    ee += arrive - trace_at(h, P, b, p, 3);
            if (q < P) next = fmin(next, trace_at(h, P, b, q, 0));
        }
        if (p == 0) t0 = first;
        if (p + 1 == P) next = last_arrival, t_end = last_arrival;
        wall[k] += next - first, slowest[k] += most, barrier[k] += next - last_arrival;
        rows[k] += r / sms, dots[k] += dd / sms, epi[k] += ee / sms;
        count[k]++;
    }
    printf("  inside one step, batch %d, context %d (globaltimer; µs per phase, mean over the %d phases of a kind and "
           "the %d blocks; the step %.1f µs):\n", B, prompt + 2, L, sms, (t_end - t0) * 1e-3);
    printf("    %-30s %7s %7s %7s %8s %8s %8s\n", "phase", "time", "rows", "dots", "epilogue", "slowest", "barrier");
    for (int k = 0; k < 6; ++k)
        if (!count[k])
            printf("    %-30s (none: with attention, v6 and v7)\n", kinds[k]);
        else
            printf("    %-30s %7.2f %7.2f %7.2f %8.2f %8.2f %8.2f\n", kinds[k], wall[k] / count[k] * 1e-3,
               rows[k] / count[k] * 1e-3, dots[k] / count[k] * 1e-3, epi[k] / count[k] * 1e-3,
               slowest[k] / count[k] * 1e-3, barrier[k] / count[k] * 1e-3);
    free(h);
}

/** The serving table: up to 64 sequences with prompts of 16..512 tokens (seeded), prefilled 8 at a time. */
enum { SERVE_MAX_SEQS = 64, SERVE_MIN_PROMPT = 16, SERVE_MAX_PROMPT = 512, SERVE_GROUP = 8, SERVE_STEPS = 32,
       SERVE_PROFILED_STEPS = 4 };

/**
 * Serve B sequences of mixed prompt lengths `lens` (prompts one after another
 * in `tokens`): prefill them 8 at a time, take one untimed decode step (it
 * captures the graph for batch B), then time `steps` steps of all B together;
 * ms per step. Then, with `prof`, profile SERVE_PROFILED_STEPS more steps of the
 * same sequences (no second prefill).
 */
static double time_serving(gpt2_engine *e, int B, const int *lens, const int *tokens, int steps, engine_profile *prof)
{
    int seqs[SERVE_MAX_SEQS] = {0}, cur[SERVE_MAX_SEQS] = {0}, started = 0;
    const char *why = NULL;
    for (int b = 0; b < B; ++b) seqs[b] = b;
    for (int off = 0; started < B && !why;) {
        int g = B - started < SERVE_GROUP ? B - started : SERVE_GROUP;
        why = engine_prefill(e, g, seqs + started, tokens + off, lens + started, cur + started, NULL);
        for (int i = 0; i < g; ++i) off += lens[started + i];
        if (!why) started += g;
    }
    double t = NAN, untimed;
    if (!why) why = timed_steps(e, B, seqs, cur, 1, NULL, &untimed); /* captures the graph for batch B */
    if (!why) why = timed_steps(e, B, seqs, cur, steps, NULL, &t);
    if (!why && prof) why = timed_steps(e, B, seqs, cur, SERVE_PROFILED_STEPS, prof, &untimed);
    if (why) fprintf(stderr, "serving, batch %d: %s\n", B, why);
    for (int b = 0; b < started; ++b) engine_release(e, b);
    return why ? NAN : t;
}

/**
 * The decode roof: the tokens per second of batch B if a step took only the time to read, at the copy bandwidth,
 * what it must read: every weight once (the LM head all of wte, wpe one row), and each sequence's K and V at its
 * context length (`kv_tokens`: the contexts of the B sequences added up).
 */
static double decode_limit(const wb_device *dev, const gpt2_model *m, wb_dtype dtype, int B, double kv_tokens)
{
    const gpt2_config *c = &m->cfg;
    const double elem = (double)wb_dtype_bytes(dtype), weights = ((double)m->n_params - (double)c->max_T * c->C) * elem;
    const double kv = 2.0 * c->n_layer * c->C * elem * kv_tokens;
    return B * dev->copy_gbps * 1e9 / (weights + kv);
}

/** The timed steps' summary rows (where the time goes inside a step), v3-v7. */
static void print_traces(gpt2_engine *e, int prompt, int steps, const int *tokens)
{
    print_step_trace(e, 1, prompt, tokens);
    print_step_trace(e, 8, prompt, tokens);
    print_step_trace(e, 1, prompt + steps - 2, tokens); /* and at the last timed step's context (attention grows) */
}

static int bench(const wb_device *dev, const gpt2_model *m, const wb_common_opts *opt, int dtype_choice)
{
    wb_report rep;
    wb_report_begin(&rep, "stage10", dev->name, stdout);
    enum { PB = 8, PT = 1024, PROMPT = 128, STEPS = 128 };
    static const int serve_batches[] = {1, 8, 32, 64};
    const gpt2_config *c = &m->cfg;
    int T = PT < c->max_T ? PT : c->max_T;
    wb_rng r;
    wb_rng_seed(&r, (uint64_t)opt->seed);
    /* the serving table's prompt lengths (16..512, or up to half the context), then enough random tokens for them
     * all and for the B8 x T prefill */
    int serve_lens[SERVE_MAX_SEQS], serve_total = 0, max_prompt = SERVE_MAX_PROMPT < c->max_T / 2 ? SERVE_MAX_PROMPT : c->max_T / 2;
    for (int i = 0; i < SERVE_MAX_SEQS; ++i) {
        serve_lens[i] = wb_rng_int(&r, max_prompt < SERVE_MIN_PROMPT ? 1 : SERVE_MIN_PROMPT, max_prompt);
        serve_total += serve_lens[i];
    }
    int n_tokens = serve_total > PB * T ? serve_total : PB * T;
    int *tokens = malloc((size_t)n_tokens * sizeof(int));
    for (int i = 0; i < n_tokens; ++i) tokens[i] = wb_rng_int(&r, 0, c->vocab - 1);
    const int prompt = PROMPT < c->max_T / 2 ? PROMPT : c->max_T / 2;
    const int steps = STEPS < c->max_T - prompt ? STEPS : c->max_T - prompt - 1;
    const double context = prompt + (steps + 1) / 2.0; /* the timed steps' mean context */
    char size[64], problem[96];
    bench_linears_alone(dev, opt, dtype_choice, &rep); /* the GEMV lesson: the decode step's linear layer, alone */
    for (int v = 0; v < N_VARIANTS; ++v)
        for (int f = 0; f < 2; ++f) {
            const wb_dtype dtype = f ? WB_F16 : WB_F32;
            if ((opt->variant >= 0 && opt->variant != v) || !dtype_chosen(dtype_choice, dtype)) continue;
            gpt2_engine e;
            const char *why = engine_init(&e, m, dtype, v + 1, SERVE_MAX_SEQS, PB * T);
            if (why) {
                printf("%s %s: skipped: %s\n", variant_ids[v], wb_dtype_name(dtype), why);
                continue;
            }
            const double limit1 = decode_limit(dev, m, dtype, 1, context), limit8 = decode_limit(dev, m, dtype, PB, PB * context);
            double ms;
            if (v == 0) { /* prefill is v1's in every variant */
                snprintf(size, sizeof size, "B%d x T%d", PB, T);
                ms = time_prefill(&e, PB, T, tokens, 3);
                add_row(&rep, "prefill, tokens per second", dtype, size, v, ms, (double)PB * T,
                        dtype == WB_F16 ? PEER_PREFILL_FP16 : PEER_PREFILL_FP32);
            }
            snprintf(size, sizeof size, "batch 1, prompt %d, %d steps", prompt, steps);
            e.use_graphs = 0;
            ms = time_decode(&e, 1, prompt, steps, tokens, NULL, 0);
            add_row(&rep, "greedy decode, batch 1, kernel by kernel", dtype, size, v, ms, 1.0, limit1);
            e.use_graphs = 1;
            ms = time_decode(&e, 1, prompt, steps, tokens, NULL, 0);
            add_row(&rep, "greedy decode, batch 1, CUDA graph", dtype, size, v, ms, 1.0, limit1);
            if (v >= 2) { /* the persistent step, its tokens fed back on the GPU */
                ms = time_decode(&e, 1, prompt, steps, tokens, NULL, 1);
                add_row(&rep, "greedy decode, batch 1, steps queued on the GPU", dtype, size, v, ms, 1.0, limit1);
            }
            snprintf(size, sizeof size, "batch %d, prompt %d, %d steps", PB, prompt, steps);
            ms = time_decode(&e, PB, prompt, steps, tokens, NULL, 0);
            add_row(&rep, "greedy decode, batch 8, CUDA graph", dtype, size, v, ms, (double)PB, limit8);
            if (v >= 2) {
                ms = time_decode(&e, PB, prompt, steps, tokens, NULL, 1);
                add_row(&rep, "greedy decode, batch 8, steps queued on the GPU", dtype, size, v, ms, (double)PB, limit8);
            }
            /* where the time goes: one profiled prefill and one profiled decode step (synchronised per kernel kind) */
            engine_profile pp = {0}, pd = {0};
            printf("%s %s, where the time goes (each kind of kernel synchronised, so launch gaps are charged too):\n",
                   variant_ids[v], wb_dtype_name(dtype));
            if (v == 0) {
                e.profile = &pp;
                time_prefill(&e, PB, T, tokens, 1);
                pp.layernorm /= 2, pp.linear /= 2, pp.attention /= 2, pp.kv_append /= 2, pp.lm_head /= 2, pp.other /= 2;
                e.profile = NULL;
                print_profile("prefill B8 x T1024", &pp);
            }
            time_decode(&e, 1, prompt, 8, tokens, &pd, 0);
            print_profile("decode batch 1, 8 steps", &pd);
            if (v >= 2) print_traces(&e, prompt, steps, tokens);
            /* the serving table: B sequences of mixed prompt lengths decoded together through the paged cache
             * (v2-v7 take batches of up to 8; larger batches take v1's kernels) */
            for (size_t i = 0; i < sizeof serve_batches / sizeof serve_batches[0]; ++i) {
                int B = serve_batches[i], lo = max_prompt, hi = 0;
                double kv_tokens = 0;
                for (int b = 0; b < B; ++b) {
                    lo = serve_lens[b] < lo ? serve_lens[b] : lo;
                    hi = serve_lens[b] > hi ? serve_lens[b] : hi;
                    kv_tokens += serve_lens[b] + (SERVE_STEPS + 1) / 2.0;
                }
                snprintf(problem, sizeof problem, "serving, batch %d, mixed prompt lengths", B);
                snprintf(size, sizeof size, "prompts %d..%d, %d steps", lo, hi, SERVE_STEPS);
                engine_profile ps = {0};
                ms = time_serving(&e, B, serve_lens, tokens, SERVE_STEPS, &ps);
                add_row(&rep, problem, dtype, size, v, ms, (double)B, decode_limit(dev, m, dtype, B, kv_tokens));
                snprintf(problem, sizeof problem, "serving batch %d, %d steps", B, SERVE_PROFILED_STEPS);
                print_profile(problem, &ps);
            }
            engine_free(&e);
        }
    free(tokens);
    printf("\n%% of roof: prefill rows against Hugging Face transformers (eager, PyTorch 2.11, measured on an H100: "
           "%.0f tok/s fp32, %.0f fp16); decode and serving rows against the bytes a step must read (every weight "
           "once, each sequence's K and V at its mean context) at the copy bandwidth (HF's batch-1 fp32 decode on "
           "the H100: %.0f tok/s)\n", PEER_PREFILL_FP32, PEER_PREFILL_FP16, PEER_DECODE_B1_FP32);
    return wb_report_finish(&rep, opt->csv);
}

/* ---------------------------------------------------------------- main */

/** @brief Parse arguments, read the weights and tokenizer (errors: exit 2), open the GPU (or exit 77), then run. */
int main(int argc, char **argv)
{
    long long steps = 32, batch = 1, heads = 0;
    int dtype_choice = 0, bench_flag = 0;
    const char *weights = NULL, *prompt = NULL, *prompt_ids = NULL, *vocab = NULL, *merges = NULL;
    const wb_option extra[] = {
        {"--weights", "FILE", "a GPT-2 model.safetensors (default: random weights of the 124M shape)", WB_OPT_STRING, &weights, 0, 0, 0, NULL},
        {"--heads", "H", "attention heads (default: the model's width over 64, 12 in the 124M shape, as every GPT-2 "
                         "size)", WB_OPT_INT, &heads, 1, 1, 4096, NULL},
        {"--prompt", "TEXT", "the prompt, with --vocab and --merges", WB_OPT_STRING, &prompt, 0, 0, 0, NULL},
        {"--vocab", "FILE", "GPT-2's vocab.json", WB_OPT_STRING, &vocab, 0, 0, 0, NULL},
        {"--merges", "FILE", "GPT-2's merges.txt", WB_OPT_STRING, &merges, 0, 0, 0, NULL},
        {"--prompt-ids", "IDS", "the prompt as token ids: 464,2068,... (default: 464,2068,7586,21831)", WB_OPT_STRING, &prompt_ids, 0, 0, 0, NULL},
        {"--steps", "N", "tokens to generate (default 32)", WB_OPT_INT, &steps, 1, 1, 1 << 20, NULL},
        {"--batch", "B", "sequences served together: the prompt cut to B different lengths (default 1)", WB_OPT_INT, &batch, 1, 1, 64, NULL},
        {"--dtype", "T", "storage: fp32, fp16 or all (default all; generating text: fp32 unless fp16)", WB_OPT_CHOICE,
         &dtype_choice, 0, 0, 0, dtype_choices},
        {"--bench", NULL, "tokens per second: prefill B8 x T1024, greedy decode, serving", WB_OPT_FLAG, &bench_flag, 0, 0, 0, NULL},
    };
    const wb_program prog = {"stage10_gpt2_e2e", "Stage 10: GPT-2 end to end (prefill + paged greedy decode) from the "
                             "earlier stages' kernels. With no options: text from the prompt (v1, fp32).", variant_ids,
                             variant_help};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 10);
    if (prompt && (!vocab || !merges))
        wb_usage_error_exit(&prog, "--prompt needs --vocab and --merges (or give --prompt-ids)");
    if (prompt && prompt_ids) wb_usage_error_exit(&prog, "give --prompt or --prompt-ids, not both");
    if (prompt) {
        if (!*prompt) wb_usage_error_exit(&prog, "--prompt is empty (give at least one character)");
        long bad = tok_utf8_error(prompt, strlen(prompt));
        if (bad >= 0)
            wb_usage_error_exit(&prog, "--prompt is not valid UTF-8 (byte %ld of %zu, 0x%02x)", bad + 1, strlen(prompt),
                                (unsigned char)prompt[bad]);
    }
    int *ids = NULL, n_ids = 0;
    if (!prompt) {
        const char *why = parse_ids(prompt_ids ? prompt_ids : "464,2068,7586,21831", &ids, &n_ids);
        if (why) wb_usage_error_exit(&prog, "%s, got '%s'", why, prompt_ids);
    }
    /* the tokenizer and the weights are read before any CUDA call: a bad file is a usage error (exit 2) on any
     * machine; the tokenizer first, as it is the cheaper of the two */
    char err[512];
    gpt2_tokenizer *tok = NULL;
    if (vocab || merges) {
        if (!vocab || !merges) wb_usage_error_exit(&prog, "--vocab and --merges go together");
        tok = tok_load(vocab, merges, err, sizeof err);
        if (!tok) {
            fprintf(stderr, "%s: %s\n", prog.name, err);
            return WB_EXIT_USAGE;
        }
    }
    if (prompt) {
        n_ids = tok_encode(tok, prompt, strlen(prompt), NULL, 0);
        ids = malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof(int));
        if (n_ids <= 0 || tok_encode(tok, prompt, strlen(prompt), ids, n_ids) != n_ids) {
            fprintf(stderr, "%s: --prompt does not encode with this vocabulary\n", prog.name);
            return WB_EXIT_USAGE;
        }
    }
    gpt2_model model;
    memset(&model, 0, sizeof model);
    if (weights) {
        if (gpt2_model_load(weights, (int)heads, &model, err, sizeof err)) {
            fprintf(stderr, "%s: --weights %s: %s\n", prog.name, weights, err);
            return WB_EXIT_USAGE;
        }
    } else if (!opt.check) {
        gpt2_config cfg = gpt2_config_124m();
        if (heads) cfg.n_head = (int)heads;
        if (cfg.C % cfg.n_head) {
            fprintf(stderr, "%s: --heads %lld does not divide C = %d\n", prog.name, heads, cfg.C);
            return WB_EXIT_USAGE;
        }
        gpt2_model_random(&model, &cfg, (uint64_t)opt.seed);
    }
    if (!opt.check) {
        for (int i = 0; i < n_ids; ++i)
            if (ids[i] >= model.cfg.vocab) {
                fprintf(stderr, "%s: token id %d is outside the model's vocabulary (%d)\n", prog.name, ids[i], model.cfg.vocab);
                return WB_EXIT_USAGE;
            }
        if (n_ids + steps > model.cfg.max_T) {
            fprintf(stderr, "%s: prompt (%d tokens) + --steps %lld exceeds the context of %d\n", prog.name, n_ids, steps,
                    model.cfg.max_T);
            return WB_EXIT_USAGE;
        }
    }

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    int ok = 1;
    if (opt.check) {
        int checks = 0, failed = 0;
        gpt2_config tiny = {300, 64, 2, 2, 128};
        gpt2_model m;
        /* (1)-(5) on a tiny random model, (6) on one with a context of 1024; the full-size random model too where the
         * sweep is whole (not under the sanitizers), and the --weights file's model where one is given */
        gpt2_model_random(&m, &tiny, (uint64_t)opt.seed);
        for (int v = 0; v < N_VARIANTS; ++v)
            for (int f = 0; f < 2; ++f)
                if ((opt.variant < 0 || opt.variant == v) && dtype_chosen(dtype_choice, f ? WB_F16 : WB_F32))
                    failed += check_model(&m, "tiny random model", v, f ? WB_F16 : WB_F32, &checks);
        gpt2_model_free(&m);
        gpt2_config tiny_long = tiny;
        tiny_long.max_T = 1024;
        gpt2_model_random(&m, &tiny_long, (uint64_t)opt.seed + 2);
        float *long_ref = malloc((size_t)LONG_LOGIT_ROWS * tiny_long.vocab * 4);
        long_context_reference(&m, long_ref);
        printf("tiny random model with a context of %d, long contexts against the CPU reference:\n", tiny_long.max_T);
        for (int v = 0; v < N_VARIANTS; ++v)
            for (int f = 0; f < 2; ++f)
                if ((opt.variant < 0 || opt.variant == v) && dtype_chosen(dtype_choice, f ? WB_F16 : WB_F32))
                    failed += check_long_contexts(&m, v, f ? WB_F16 : WB_F32, long_ref, &checks);
        free(long_ref);
        gpt2_model_free(&m);
        printf("the decode linear alone, against the CPU reference:\n");
        failed += check_linears_alone(opt.variant, dtype_choice, &checks);
        const gpt2_model *big = NULL;
        if (weights) {
            big = &model;
        } else if (opt.check_max >= 100000000) {
            gpt2_config full = gpt2_config_124m();
            gpt2_model_random(&m, &full, (uint64_t)opt.seed + 1);
            big = &m;
        }
        for (int v = 0; big && v < N_VARIANTS; ++v)
            for (int f = 0; f < 2; ++f)
                if ((opt.variant < 0 || opt.variant == v) && dtype_chosen(dtype_choice, f ? WB_F16 : WB_F32))
                    failed += check_model(big, weights ? weights : "full-size random model", v, f ? WB_F16 : WB_F32,
                                          &checks);
        if (big == &m) gpt2_model_free(&m);
        printf("stage10 --check: %d checks, %d failed\n", checks, failed);
        ok = failed == 0 && checks > 0;
    } else if (bench_flag) {
        printf("stage10_gpt2_e2e --bench: %s\n", weights ? weights : "random weights of the 124M shape (no --weights given)");
        wb_measure_copy_bandwidth(&dev); /* the decode rows' roof */
        wb_device_print(&dev, stdout);
        ok = bench(&dev, &model, &opt, dtype_choice);
    } else {
        int v = opt.variant >= 0 ? opt.variant : 0;
        wb_dtype dtype = dtype_choice == 2 ? WB_F16 : WB_F32;
        printf("GPT-2 (%s): V %d, context %d, %d layers, %d heads, C %d, %s\n",
               weights ? weights : "random weights, 124M shape: no --weights given, the text is noise", model.cfg.vocab,
               model.cfg.max_T, model.cfg.n_layer, model.cfg.n_head, model.cfg.C, wb_dtype_name(dtype));
        gpt2_engine e;
        const char *why = engine_init(&e, &model, dtype, v + 1, (int)batch, (int)(batch * n_ids));
        int B = (int)batch, *seqs = malloc((size_t)B * 4), *lens = malloc((size_t)B * 4), *cur = malloc((size_t)B * 4);
        int *nx = malloc((size_t)B * 4), *all = malloc((size_t)B * n_ids * 4), total = 0;
        int **out = malloc((size_t)B * sizeof(int *));
        for (int b = 0; b < B; ++b) { /* sequence b: the prompt's first n_ids − b tokens (at least one) */
            seqs[b] = b, lens[b] = n_ids - b > 0 ? n_ids - b : 1;
            memcpy(all + total, ids, (size_t)lens[b] * 4);
            total += lens[b];
            out[b] = malloc((size_t)steps * 4);
        }
        double t0 = wb_wall_ms();
        if (!why) why = engine_prefill(&e, B, seqs, all, lens, cur, NULL);
        double t1 = wb_wall_ms();
        for (int s = 0; !why && s < steps; ++s) {
            for (int b = 0; b < B; ++b) out[b][s] = cur[b];
            if (s + 1 < steps) why = engine_decode(&e, B, seqs, cur, nx, NULL), memcpy(cur, nx, (size_t)B * 4);
        }
        double t2 = wb_wall_ms();
        if (why) {
            fprintf(stderr, "%s: %s\n", prog.name, why);
            ok = 0;
        } else {
            for (int b = 0; b < B; ++b) {
                printf("sequence %d (%d prompt tokens):", b, lens[b]);
                for (int s = 0; s < steps; ++s) printf(" %d", out[b][s]);
                printf("\n");
                if (tok) {
                    char text[8192];
                    long n = tok_decode(tok, out[b], (int)steps, text, sizeof text - 1);
                    if (n >= 0) printf("  text: %.*s\n", (int)(n < 8191 ? n : 8191), text);
                }
            }
            printf("prefill %.2f ms; decode %.1f tokens/s per sequence (%d sequences)\n", t1 - t0,
                   steps > 1 ? (steps - 1) / ((t2 - t1) * 1e-3) : 0.0, B);
        }
        for (int b = 0; b < B; ++b) free(out[b]);
        free(out), free(seqs), free(lens), free(cur), free(nx), free(all);
        engine_free(&e);
    }
    gpt2_model_free(&model);
    tok_free(tok);
    free(ids);
    wb_device_close(&dev);
    return ok ? 0 : 1;
}
