/**
 * @file stages/10_gpt2_e2e/main.c
 * @brief Stage 10 host program: GPT-2 greedy generation on the GPU from the
 *        earlier stages' kernels; --check against the CPU reference (check.c),
 *        --bench for tokens per second (bench.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "04_fused_gelu_linear/kernels.h" /* linear_release */
#include "args.h"
#include "device.h"
#include "engine.h"
#include "gpt2.h"
#include "measure.h" /* wb_exit_status */
#include "model.h"
#include "stage10.h"
#include "timing.h"
#include "tokenizer.h"

static const char *const dtype_choices[] = {"all", "fp32", "fp16", NULL};


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

/**
 * The decode path of a run without --check or --bench: `variant` (-1: any) in `dtype_choice` (0: any). Where either is
 * free, the fastest this GPU runs: the last teaching variant its engine_init() takes, fp16 before fp32 (tensor
 * cores and half the bytes). Fills `e` and says which it chose; NULL, or why none runs.
 */
static const char *fast_path(gpt2_engine *e, const gpt2_model *model, int variant, int dtype_choice, int max_seqs,
                             int max_tokens, int *chosen, wb_dtype *dtype)
{
    const char *why = "no variant";
    for (int v = N_VARIANTS - 1; v >= 0; --v) {
        if (variant >= 0 && v != variant) continue;
        for (int f = 1; f >= 0; --f) { /* fp16 first */
            if (dtype_choice && dtype_choice != 1 + f) continue;
            *chosen = v, *dtype = f ? WB_F16 : WB_F32;
            why = engine_init(e, model, *dtype, &decode_paths[v], max_seqs, max_tokens);
            if (!why) return NULL;
            engine_free(e);
        }
    }
    return why;
}

/** Text from the prompt: `batch` sequences (the prompt cut to different lengths), `steps` tokens each, on the decode
 *  path fast_path() chooses; printed as ids, and as text with a tokenizer. The decode steps are queued on the GPU
 *  (engine_generate) after a warm-up of two steps. Returns 1 when it ran. */
static int generate(const gpt2_model *model, const char *weights, const gpt2_tokenizer *tok, const int *ids, int n_ids,
                    int steps, int batch, int variant, int dtype_choice)
{
    int ok = 1, v = 0, B = batch;
    wb_dtype dtype = WB_F32;
    gpt2_engine e;
    const char *why = fast_path(&e, model, variant, dtype_choice, B, B * n_ids, &v, &dtype);
    if (why) {
        fprintf(stderr, "stage10_gpt2_e2e: %s%s%s\n", variant >= 0 ? variant_ids[variant] : "no variant",
                variant >= 0 ? ": " : " runs here: ", why);
        return 0;
    }
    printf("GPT-2 (%s): V %d, context %d, %d layers, %d heads, C %d\n",
           weights ? weights : "random weights, 124M shape: no --weights given, the text is noise", model->cfg.vocab,
           model->cfg.max_T, model->cfg.n_layer, model->cfg.n_head, model->cfg.C);
    printf("decode: %s in %s, %s", variant_ids[v], wb_dtype_name(dtype), decode_paths[v].what);
    if (variant < 0 || !dtype_choice)
        printf(" (the fastest this GPU runs; --variant v1..%s and --dtype fp32|fp16 pick another)",
               decode_paths[N_VARIANTS - 1].id);
    printf("\n");
    int *seqs = malloc((size_t)B * 4), *lens = malloc((size_t)B * 4), *cur = malloc((size_t)B * 4);
    int *all = malloc((size_t)B * n_ids * 4), *chosen = malloc((size_t)B * steps * 4), total = 0;
    for (int b = 0; b < B; ++b) { /* sequence b: the prompt's first n_ids − b tokens (at least one) */
        seqs[b] = b, lens[b] = n_ids - b > 0 ? n_ids - b : 1;
        memcpy(all + total, ids, (size_t)lens[b] * 4);
        total += lens[b];
    }
    /* warm-up: the first steps of a path at a batch size build its CUDA graph and load its kernels, which is not
     * the decode rate: the same sequences are prefilled and run 2 steps, then released and started again */
    int *warm_out = malloc((size_t)2 * B * 4);
    why = engine_prefill(&e, B, seqs, all, lens, cur, NULL);
    if (!why && steps > 2) why = engine_generate(&e, B, seqs, cur, 2, warm_out);
    for (int b = 0; b < B; ++b) engine_release(&e, seqs[b]);
    free(warm_out);
    double t0 = wb_wall_ms();
    if (!why) why = engine_prefill(&e, B, seqs, all, lens, cur, NULL);
    double t1 = wb_wall_ms();
    /* token 0 of each sequence is prefill's; tokens 1 … steps − 1 come from steps − 1 decode steps */
    if (!why) why = engine_generate(&e, B, seqs, cur, steps - 1, chosen + B);
    double t2 = wb_wall_ms();
    if (why) {
        fprintf(stderr, "stage10_gpt2_e2e: %s\n", why);
        ok = 0;
    } else {
        memcpy(chosen, cur, (size_t)B * 4);
        int *out = malloc((size_t)steps * 4);
        for (int b = 0; b < B; ++b) {
            for (int s = 0; s < steps; ++s) out[s] = chosen[(size_t)s * B + b];
            printf("sequence %d (%d prompt tokens):", b, lens[b]);
            for (int s = 0; s < steps; ++s) printf(" %d", out[s]);
            printf("\n");
            if (tok) {
                char text[8192];
                long n = tok_decode(tok, out, steps, text, sizeof text - 1);
                if (n >= 0) printf("  text: %.*s\n", (int)(n < 8191 ? n : 8191), text);
            }
        }
        free(out);
        printf("prefill %.2f ms; decode %.1f tokens/s per sequence (%d sequences; %d steps queued on the GPU, "
               "timed by the host clock)\n", t1 - t0, steps > 1 ? (steps - 1) / ((t2 - t1) * 1e-3) : 0.0, B, steps - 1);
    }
    free(seqs), free(lens), free(cur), free(all), free(chosen);
    engine_free(&e);
    return ok;
}

/* ---------------------------------------------------------------- main */

/** @brief Parse arguments, read the weights and tokenizer (errors: exit 2), open the GPU (or exit 77), then run. */
int main(int argc, char **argv)
{
    variants_init(); /* the argument parser's lists of variants, from decode_paths[] */
    long long steps = 32, batch = 1, heads = 0;
    int dtype_choice = 0, bench_flag = 0, check_full = 0;
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
        {"--dtype", "T", "storage: fp32, fp16 or all (default all; generating text: the fastest this GPU runs)", WB_OPT_CHOICE,
         &dtype_choice, 0, 0, 0, dtype_choices},
        {"--bench", NULL, "tokens per second: prefill B8 x T1024, greedy decode, serving", WB_OPT_FLAG, &bench_flag, 0, 0, 0, NULL},
        {"--check-full", NULL, "with --check: the full-size 124M random model too (minutes: its CPU reference)",
         WB_OPT_FLAG, &check_full, 0, 0, 0, NULL},
    };
    const wb_program prog = {"stage10_gpt2_e2e", "Stage 10: GPT-2 end to end (prefill + paged greedy decode) from the "
                             "earlier stages' kernels.", (const char *const *)variant_ids,
                             (const char *const *)variant_help,
                             "With no options: text from the prompt on the fastest decode variant and precision this GPU runs "
                             "(random weights without --weights). "
                             "--check checks every variant against the CPU reference, --bench times them."};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 11);
    if (prompt && (!vocab || !merges))
        wb_usage_error_exit(&prog, "--prompt needs --vocab and --merges (or give --prompt-ids)");
    if (prompt && prompt_ids) wb_usage_error_exit(&prog, "give --prompt or --prompt-ids, not both");
    if (opt.variant == EXERCISE_VARIANT && !opt.check && !bench_flag)
        wb_usage_error_exit(&prog, "--variant ex is your decode linear alone: run it with --check or --bench");
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
        ok = stage10_check(weights ? &model : NULL, weights, check_full, &opt, dtype_choice);
    } else if (bench_flag) {
        printf("stage10_gpt2_e2e --bench: %s\n", weights ? weights : "random weights of the 124M shape (no --weights given)");
        wb_measure_copy_bandwidth(&dev); /* the decode rows' roof */
        wb_device_print(&dev, stdout);
        ok = stage10_bench(&dev, &model, &opt, dtype_choice);
    } else {
        ok = generate(&model, weights, tok, ids, n_ids, (int)steps, (int)batch, opt.variant, dtype_choice);
    }
    linear_release(); /* stage 04's workspaces (its split-K partials) */
    gpt2_model_free(&model);
    tok_free(tok);
    free(ids);
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
