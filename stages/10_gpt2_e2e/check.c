/**
 * @file stages/10_gpt2_e2e/check.c
 * @brief Stage 10's --check: every chosen variant and precision against the
 *        CPU reference (reference/gpt2.c), on tiny random models, the
 *        full-size one with --check-full, and a --weights file's model; the
 *        checks are numbered as on the page.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "engine.h"
#include "gpt2.h"
#include "linear_alone.h"
#include "model.h"
#include "rng.h"
#include "stage10.h"

/** Logits tolerances against the CPU reference (see the page): fp32, and fp16 (activations rounded every layer). */
static const wb_tolerance logits_tol_f32 = {1e-3, 1e-3}, logits_tol_f16 = {6e-2, 3e-2};

/** The logits' tolerance of storage `dtype`. */
static wb_tolerance logits_tol(wb_dtype dtype) { return dtype == WB_F16 ? logits_tol_f16 : logits_tol_f32; }

/**
 * One decode step of the n sequences `seqs`, fed `feed`, its logits against the reference's rows `ref` ([n][V]):
 * `logits` ([n][V]) poisoned first, so that a row the step does not write fails; *ok and *worst updated. NULL, or
 * why the step did not run. (6) and (7).
 */
static const char *decode_against(gpt2_engine *e, int n, const int *seqs, const int *feed, int *next, float *logits,
                                  const float *ref, wb_tolerance tol, int *ok, double *worst)
{
    const int V = e->cfg.vocab;
    for (int i = 0; i < n * V; ++i) logits[i] = NAN;
    const char *why = engine_decode(e, n, seqs, feed, next, logits);
    for (int j = 0; j < n && !why; ++j) {
        wb_compare_result cr = wb_compare_f32(logits + (size_t)j * V, ref + (size_t)j * V, (size_t)V, tol, "decode", 3);
        *ok &= cr.ok;
        *worst = fmax(*worst, cr.worst_frac);
    }
    return why;
}

/** Compare and print one check; returns 1 when it failed. */
static int report_check(const char *what, wb_compare_result r)
{
    printf("  %-58s worst %.3g (%.2f of tol) %s\n", what, r.max_abs_err, r.worst_frac, r.ok ? "ok" : "FAIL");
    return !r.ok;
}

/**
 * The checks of variant v in one precision on one model: (1) prefill logits at
 * every position against the CPU reference, for prompts of several lengths
 * served together; (2) decode steps through the paged cache against the CPU
 * reference's cached step, and the greedy tokens; (3) decode against
 * recomputing the whole sequence with prefill; (4) the batch against each
 * sequence decoded alone and three together (`sanitizer_sweep`: sequence 0
 * alone and the three); (5) the same steps queued on the GPU.
 */
static int check_model(const gpt2_model *m, const char *model, int v, wb_dtype dtype, int sanitizer_sweep,
                       int *checks)
{
    const gpt2_config *c = &m->cfg;
    const int full_size = c->C >= 256; /* GPT-2's own sizes: short prompts (the CPU reference is slow) */
    int V = c->vocab, failed = 0;
    wb_tolerance tol = logits_tol(dtype);
    gpt2_engine e;
    const char *why = engine_init(&e, m, dtype, &decode_paths[v], 8, 3 * c->max_T);
    printf("%s (V %d, L %d, H %d, C %d), %s %s: %s:\n", model, V, c->n_layer, c->n_head, c->C, variant_ids[v],
           wb_dtype_name(dtype), decode_paths[v].what);
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
     * sequence alone (1 row of the step), then the first three together (4 rows). Logits, not tokens: v4 runs
     * its dot products on tensor cores from 4 rows and on FFMA below, so its sums differ in order */
    {
        double worst = 0;
        int same = 1;
        for (int group = 0; group <= N_PROMPTS && same; ++group) {
            if (sanitizer_sweep && group > 0 && group < N_PROMPTS) continue; /* sequence 0 alone and 3 together */
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
    /* (5b) the same at 1 row, where v5's own steps run: sequence 0 alone, its steps one by one
     * (engine_decode, each fed the token the step before chose), then queued (engine_generate, 4 at a time): the same
     * tokens. v5's queued steps zero the keys of the step after them, and its steps one by one get a memset */
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
 * variant. Attention then takes several passes of a block's warps, and v4 splits it over 2-4 blocks (fp32 from 129
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
static int check_long_contexts(const gpt2_model *m, int v, wb_dtype dtype, const float *ref, int sanitizer_sweep,
                               int *checks)
{
    const gpt2_config *c = &m->cfg;
    const int V = c->vocab;
    wb_tolerance tol = logits_tol(dtype);
    gpt2_engine e;
    const char *why = engine_init(&e, m, dtype, &decode_paths[v], LONG_MAX_SEQS, 2 * c->max_T);
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
        if (sanitizer_sweep && g < LONG_GROUPS - 1) { /* the three together only: 2, 450 and 900 tokens */
            row += LONG_STEPS * n;
            continue;
        }
        for (int j = 0; j < n; ++j) seqs[j] = j;
        why = engine_prefill(&e, n, seqs, tokens, lens, next, NULL);
        for (int s = 0; s < LONG_STEPS && !why; ++s, row += n) {
            for (int j = 0; j < n; ++j) feed[j] = tokens[total + s * n + j];
            why = decode_against(&e, n, seqs, feed, next, logits, ref + (size_t)row * V, tol, &ok, &worst);
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

/**
 * (7) Batches past the persistent step's 8 rows, as the serving table's: 33 and 64 sequences with prompts of 1-40
 * seeded tokens (prefilled 8 at a time), two decode steps fed seeded tokens, every sequence's logits against the
 * reference's cached step. Past 8 sequences v2-v5 run v2's kernels (fp16 from sm_80: its batch path, the
 * LayerNorms folded into QKV and fc) or v1's (engine_step_path). Under the sanitizers 9 sequences, once: the same
 * kernels, at a fraction of racecheck's time.
 */
static int check_large_batches(const gpt2_model *m, int v, wb_dtype dtype, int sanitizer_sweep, int *checks)
{
    enum { MOST = 64, MAX_PROMPT = 40, STEPS = 2, GROUP = 8 };
    const int batches[] = {sanitizer_sweep ? 9 : 33, MOST};
    const gpt2_config *c = &m->cfg;
    const int V = c->vocab;
    wb_tolerance tol = logits_tol(dtype);
    gpt2_engine e;
    const char *why = engine_init(&e, m, dtype, &decode_paths[v], MOST, GROUP * MAX_PROMPT);
    if (why) {
        printf("  %-4s %s large batches: skipped: %s\n", variant_ids[v], wb_dtype_name(dtype), why);
        return 0;
    }
    const decode_path *ran = engine_step_path(&e, batches[0]);
    if (sanitizer_sweep && ran != e.path) { /* under the sanitizers, once: with the variant whose kernels these are */
        printf("  %-4s %s large batches: %s's kernels, checked there\n", variant_ids[v], wb_dtype_name(dtype), ran->id);
        engine_free(&e);
        return 0;
    }
    int lens[MOST], seqs[MOST], feed[MOST], next[MOST], *tokens = malloc((size_t)MOST * (MAX_PROMPT + STEPS) * 4), ok = 1;
    float *logits = malloc((size_t)MOST * V * 4), *ref = malloc((size_t)MOST * V * 4);
    ref_gpt2_cache *caches = malloc(MOST * sizeof *caches);
    double worst = 0;
    for (int b = 0; b < (sanitizer_sweep ? 1 : 2) && !why; ++b) { /* under the sanitizers the first only */
        const int n = batches[b];
        int total = 0, made = 0; /* made: the reference caches begun */
        wb_rng r;
        wb_rng_seed(&r, 90 + (uint64_t)b);
        for (int j = 0; j < n; ++j) lens[j] = wb_rng_int(&r, 1, MAX_PROMPT), seqs[j] = j, total += lens[j];
        for (int i = 0; i < total + n * STEPS; ++i) tokens[i] = wb_rng_int(&r, 0, V - 1);
        for (int j = 0, off = 0; j < n && !why; off += lens[j], ++j) {
            if (j % GROUP == 0) why = engine_prefill(&e, n - j < GROUP ? n - j : GROUP, seqs + j, tokens + off, lens + j,
                                                     next + j, NULL);
            ref_gpt2_cache_init(&caches[j], c);
            made = j + 1;
            for (int t = 0; t < lens[j]; ++t) ref_gpt2_step(c, &m->w, &caches[j], tokens[off + t], ref);
        }
        for (int s = 0; s < STEPS && !why; ++s) {
            for (int j = 0; j < n; ++j) {
                feed[j] = tokens[total + s * n + j];
                ref_gpt2_step(c, &m->w, &caches[j], feed[j], ref + (size_t)j * V);
            }
            why = decode_against(&e, n, seqs, feed, next, logits, ref, tol, &ok, &worst);
        }
        for (int j = 0; j < made; ++j) ref_gpt2_cache_free(&caches[j]);
        for (int j = 0; j < n; ++j) engine_release(&e, seqs[j]); /* a sequence never started: a no-op */
    }
    if (why) printf("  %-4s %s large batches: %s\n", variant_ids[v], wb_dtype_name(dtype), why), ok = 0;
    printf("  %-4s %s %-48s worst %.2f of tol %s\n", variant_ids[v], wb_dtype_name(dtype),
           sanitizer_sweep ? "decode of 9 sequences, mixed prompts" : "decode of 33 and of 64 sequences, mixed prompts",
           worst, ok ? "ok" : "FAIL");
    ++*checks;
    free(tokens), free(logits), free(ref), free(caches);
    engine_free(&e);
    return !ok;
}

int stage10_check(const gpt2_model *file_model, const char *weights, int check_full, const wb_common_opts *opt,
              int dtype_choice)
{
    int checks = 0, failed = 0;
    run_case cases[2 * N_VARIANTS];
    const int n_cases = chosen_cases(opt->variant, dtype_choice, cases);
    gpt2_config tiny = {300, 64, 2, 2, 128};
    gpt2_model m;
    /* (1)-(5) and (7) on tiny random models, (6) on one with a context of 1024; the full-size random model too with
     * --check-full (ctest's stage10_check_full, label exhaustive), and the --weights file's model where one is given */
    gpt2_model_random(&m, &tiny, (uint64_t)opt->seed);
    /* under the sanitizers (--check-max below 100000) (4) and (6) take fewer groups: every kernel and path still
     * runs, a few times instead of many */
    const int sanitizer_sweep = opt->check_max < 100000;
    for (int k = 0; k < n_cases; ++k)
        failed += check_model(&m, "tiny random model", cases[k].v, cases[k].dtype, sanitizer_sweep, &checks);
    gpt2_model_free(&m);
    gpt2_config tiny_long = tiny;
    tiny_long.max_T = 1024;
    gpt2_model_random(&m, &tiny_long, (uint64_t)opt->seed + 2);
    float *long_ref = malloc((size_t)LONG_LOGIT_ROWS * tiny_long.vocab * 4);
    long_context_reference(&m, long_ref);
    printf("tiny random model with a context of %d, long contexts against the CPU reference:\n", tiny_long.max_T);
    for (int k = 0; k < n_cases; ++k)
        failed += check_long_contexts(&m, cases[k].v, cases[k].dtype, long_ref, sanitizer_sweep, &checks);
    free(long_ref);
    gpt2_model_free(&m);
    /* 4 heads of 64 and C = 256: fc-proj's 4C = 1024 inputs pass DECODE_BATCH_MAX_K, and the batch linear takes
     * them in slices (decode_fused.cu's launch_batch_sliced) */
    const gpt2_config wide = {300, 64, 2, 4, 256};
    gpt2_model_random(&m, &wide, (uint64_t)opt->seed + 3);
    printf("tiny random model (C %d), batches past 8 sequences against the CPU reference:\n", wide.C);
    for (int k = 0; k < n_cases; ++k)
        failed += check_large_batches(&m, cases[k].v, cases[k].dtype, sanitizer_sweep, &checks);
    gpt2_model_free(&m);
    printf("the decode linear alone, against the CPU reference:\n");
    failed += check_linears_alone(opt->variant, dtype_choice, &checks);
    const gpt2_model *big = file_model;
    if (!file_model && check_full) {
        gpt2_config full = gpt2_config_124m();
        gpt2_model_random(&m, &full, (uint64_t)opt->seed + 1);
        big = &m;
    }
    for (int k = 0; big && k < n_cases; ++k)
        failed += check_model(big, weights ? weights : "full-size random model", cases[k].v, cases[k].dtype, 0, &checks);
    if (big == &m) gpt2_model_free(&m);
    printf("stage10 --check: %d checks, %d failed\n", checks, failed);
    return failed == 0 && checks > 0;
}
