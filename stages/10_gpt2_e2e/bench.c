/**
 * @file stages/10_gpt2_e2e/bench.c
 * @brief Stage 10's --bench: prefill, greedy decode (step by step, with a CUDA
 *        graph, and queued on the GPU), the step traced inside the
 *        persistent kernel, and the serving table, for each chosen variant and
 *        precision; rows against the bytes a step must read.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "engine.h"
#include "linear_alone.h"
#include "rng.h"
#include "stage10.h"
#include "timing.h"

/** @brief Hugging Face transformers (eager, PyTorch 2.11, random weights of the 124M shape) on the GPUs the course
 *         was measured on (`python3 scripts/peers.py gpt2`): the "× peer" of a prefill row run on one of them; on
 *         another GPU the row has no peer until it is measured there. Tokens per second. */
typedef struct {
    const char *gpu;           /**< a substring of the device's name */
    double prefill_fp32;       /**< prefill, B8 x T1024, fp32 */
    double prefill_fp16;       /**< the same in fp16 */
    double decode_b1_fp32;     /**< batch-1 greedy decode, fp32 (a note under the table) */
} hf_peer;
static const hf_peer peers[] = {{"H100", 138000.0, 492000.0, 112.0}, {"H200", 143000.0, 471000.0, 111.0}};

/** The peer figures measured on this device, or NULL. */
static const hf_peer *peer_for(const wb_device *dev)
{
    for (size_t i = 0; i < sizeof peers / sizeof peers[0]; ++i)
        if (strstr(dev->name, peers[i].gpu)) return &peers[i];
    return NULL;
}

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

/** One row of the bench table: `tokens` a step (or a prefill) in `ms`, against `limit` tokens per second (a decode
 *  step's bytes at the copy roof; 0: none) or the peer's `peer` (0: none). The problem's name ends with the
 *  precision (the tables and plots group by it). */
static void add_row(wb_report *rep, const char *problem, wb_dtype dtype, const char *size, int v, double ms,
                    double tokens, double limit, double peer)
{
    char name[128];
    snprintf(name, sizeof name, "%s, %s", problem, wb_dtype_name(dtype));
    wb_row row = {.problem = name, .size = size, .variant = variant_ids[v], .what = decode_paths[v].what,
                  .unit = "tok/s", .roof = limit, .peer = peer, .ok = 1};
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
 * v3-v5: one decode step of B sequences (prompts of `prompt` tokens) traced
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
    e->use_graphs = 0, e->d_trace = wb_device_alloc_zeroed(n * sizeof *h, "trace"); /* v5 leaves proj's phases unmarked */
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
        int k = p == P - 1 ? 5 : p % 5, q = p + 1; /* q: the next phase that ran (v5 runs no proj phase) */
        if (trace_at(h, P, 0, p, 0) == 0) continue;
        while (q < P && trace_at(h, P, 0, q, 0) == 0) ++q;
        double first = INFINITY, last_arrival = 0, next = INFINITY, most = 0, r = 0, dd = 0, ee = 0;
        for (int b = 0; b < sms; ++b) {
            double start = trace_at(h, P, b, p, 0), arrive = trace_at(h, P, b, p, 1);
            first = fmin(first, start), last_arrival = fmax(last_arrival, arrive), most = fmax(most, arrive - start);
            if (trace_at(h, P, b, p, 2)) /* attention's phase marks none of the two (v5's, with proj in it, does) */
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
            printf("    %-30s (none: with attention, v5)\n", kinds[k]);
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
 * captures the graph for batch B), then time `steps` steps of all B together,
 * queued on the GPU (engine_generate); ms per step. Then, with `prof`, profile
 * SERVE_PROFILED_STEPS more steps of the same sequences (no second prefill).
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
    if (!why) why = timed_generate(e, B, seqs, cur, steps, &t);
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

/** The timed steps' summary rows (where the time goes inside a step), v3-v5. */
static void print_traces(gpt2_engine *e, int prompt, int steps, const int *tokens)
{
    print_step_trace(e, 1, prompt, tokens);
    print_step_trace(e, 8, prompt, tokens);
    print_step_trace(e, 1, prompt + steps - 2, tokens); /* and at the last timed step's context (attention grows) */
}

int stage10_bench(const wb_device *dev, const gpt2_model *m, const wb_common_opts *opt, int dtype_choice)
{
    const hf_peer *hf = peer_for(dev);
    run_case cases[2 * N_VARIANTS];
    const int n_cases = chosen_cases(opt->variant, dtype_choice, cases);
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
    for (int k = 0; k < n_cases; ++k) {
            const int v = cases[k].v;
            const wb_dtype dtype = cases[k].dtype;
            gpt2_engine e;
            const char *why = engine_init(&e, m, dtype, &decode_paths[v], SERVE_MAX_SEQS, PB * T);
            if (why) {
                printf("%s %s: skipped: %s\n", variant_ids[v], wb_dtype_name(dtype), why);
                continue;
            }
            const double limit1 = decode_limit(dev, m, dtype, 1, context), limit8 = decode_limit(dev, m, dtype, PB, PB * context);
            double ms;
            if (v == 0) { /* prefill is v1's in every variant: timed with the first */
                snprintf(size, sizeof size, "B%d x T%d", PB, T);
                ms = time_prefill(&e, PB, T, tokens, 3);
                double peer = hf ? (dtype == WB_F16 ? hf->prefill_fp16 : hf->prefill_fp32) : 0;
                add_row(&rep, "prefill, tokens per second", dtype, size, v, ms, (double)PB * T, 0, peer);
            }
            snprintf(size, sizeof size, "batch 1, prompt %d, %d steps", prompt, steps);
            e.use_graphs = 0;
            ms = time_decode(&e, 1, prompt, steps, tokens, NULL, 0);
            add_row(&rep, "greedy decode, batch 1, kernel by kernel", dtype, size, v, ms, 1.0, limit1, 0);
            e.use_graphs = 1;
            ms = time_decode(&e, 1, prompt, steps, tokens, NULL, 0);
            add_row(&rep, "greedy decode, batch 1, CUDA graph", dtype, size, v, ms, 1.0, limit1, 0);
            ms = time_decode(&e, 1, prompt, steps, tokens, NULL, 1); /* queued, the tokens fed back on the GPU */
            add_row(&rep, "greedy decode, batch 1, steps queued on the GPU", dtype, size, v, ms, 1.0, limit1, 0);
            snprintf(size, sizeof size, "batch %d, prompt %d, %d steps", PB, prompt, steps);
            const decode_path *ran = engine_step_path(&e, PB); /* a row names the kernel that ran */
            if (ran != e.path) {
                printf("%s %s, batch %d: %s's kernels run: the rows are %s's\n", variant_ids[v], wb_dtype_name(dtype),
                       PB, ran->id, ran->id);
            } else {
                ms = time_decode(&e, PB, prompt, steps, tokens, NULL, 0);
                add_row(&rep, "greedy decode, batch 8, CUDA graph", dtype, size, v, ms, (double)PB, limit8, 0);
                ms = time_decode(&e, PB, prompt, steps, tokens, NULL, 1);
                add_row(&rep, "greedy decode, batch 8, steps queued on the GPU", dtype, size, v, ms, (double)PB,
                        limit8, 0);
            }
            /* where the time goes: one profiled prefill and one profiled decode step (synchronised per kernel kind) */
            engine_profile pp = {0}, pd = {0};
            printf("%s %s, where the time goes (each kind of kernel synchronised, so launch gaps are charged too):\n",
                   variant_ids[v], wb_dtype_name(dtype));
            if (v == 0) { /* the prefill profile once, with the first variant */
                e.profile = &pp;
                time_prefill(&e, PB, T, tokens, 1);
                pp.layernorm /= 2, pp.linear /= 2, pp.attention /= 2, pp.kv_append /= 2, pp.lm_head /= 2, pp.other /= 2;
                e.profile = NULL;
                print_profile("prefill B8 x T1024", &pp);
            }
            time_decode(&e, 1, prompt, 8, tokens, &pd, 0);
            print_profile("decode batch 1, 8 steps", &pd);
            if (decode_paths[v].step) print_traces(&e, prompt, steps, tokens);
            /* the serving table: B sequences of mixed prompt lengths decoded together through the paged cache
             * (v3-v5's steps take batches of up to 8; larger ones run v2's kernels in fp16 from sm_80, else v1's) */
            for (size_t i = 0; i < sizeof serve_batches / sizeof serve_batches[0]; ++i) {
                int B = serve_batches[i], lo = max_prompt, hi = 0;
                double kv_tokens = 0;
                for (int b = 0; b < B; ++b) {
                    lo = serve_lens[b] < lo ? serve_lens[b] : lo;
                    hi = serve_lens[b] > hi ? serve_lens[b] : hi;
                    kv_tokens += serve_lens[b] + (SERVE_STEPS + 1) / 2.0;
                }
                /* a row names the kernel that ran: over 8 sequences v3-v5 run v2's or v1's kernels, and
                 * v5's own step takes 1 sequence */
                const decode_path *ran = engine_step_path(&e, B);
                if (ran != e.path) {
                    printf("%s %s, serving %d: %s's kernels run: the row is %s's\n", variant_ids[v],
                           wb_dtype_name(dtype), B, ran->id, ran->id);
                    continue;
                }
                snprintf(problem, sizeof problem, "serving, batch %d, mixed prompt lengths", B);
                snprintf(size, sizeof size, "prompts %d..%d, %d steps", lo, hi, SERVE_STEPS);
                engine_profile ps = {0};
                ms = time_serving(&e, B, serve_lens, tokens, SERVE_STEPS, &ps);
                add_row(&rep, problem, dtype, size, v, ms, (double)B, decode_limit(dev, m, dtype, B, kv_tokens), 0);
                snprintf(problem, sizeof problem, "serving batch %d, %d steps", B, SERVE_PROFILED_STEPS);
                print_profile(problem, &ps);
            }
            engine_free(&e);
        }
    free(tokens);
    if (hf)
        printf("\n× peer: prefill rows against Hugging Face transformers (eager, PyTorch 2.11, measured on an %s: "
               "%.0f tok/s fp32, %.0f fp16; its batch-1 fp32 decode: %.0f tok/s)", hf->gpu, hf->prefill_fp32,
               hf->prefill_fp16, hf->decode_b1_fp32);
    else
        printf("\n× peer: Hugging Face transformers was not measured on this GPU (python3 scripts/peers.py gpt2)");
    printf("; %% of roof: decode and serving rows against the bytes a step must read (every weight once, each "
           "sequence's K and V at its mean context) at the copy bandwidth\n");
    return wb_report_finish(&rep, opt->csv);
}

