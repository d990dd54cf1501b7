/** @file args.c @brief The option parser of every stage program. */
#include "args.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { OPT_CHECK, OPT_VARIANT, OPT_ITERS, OPT_WARMUP, OPT_SEED, OPT_CSV, OPT_CHECK_MAX, N_COMMON };

/* The common options, as a table like the stages' own (dest filled in per call). */
static void common_table(wb_option t[N_COMMON], wb_common_opts *c)
{
    const wb_option table[N_COMMON] = {
        {"--check", NULL, "correctness only, over a sweep of sizes (what ctest runs)", WB_OPT_FLAG,
         &c->check, 0, 0, 0, NULL},
        {"--variant", "K", "run one variant: its id (v1, v2, ..., or a peer's name) or number",
         WB_OPT_STRING, NULL, 0, 0, 0, NULL},
        {"--iters", "N", "timed runs per variant; the median is reported (default 50)", WB_OPT_INT,
         &c->iters, 1, 1, 100000, NULL},
        {"--warmup", "N", "untimed runs before timing (default 5)", WB_OPT_INT, &c->warmup, 1, 0,
         100000, NULL},
        {"--seed", "S", "seed of the random inputs (default 1234)", WB_OPT_INT, &c->seed, 1, 0,
         LLONG_MAX, NULL},
        {"--csv", "FILE", "also write the results as CSV (the plots' input)", WB_OPT_STRING, &c->csv,
         0, 0, 0, NULL},
        {"--check-max", "N", "with --check: leave out sizes above N (for sanitizer runs)",
         WB_OPT_INT, &c->check_max, 1, 1, LLONG_MAX, NULL},
    };
    memcpy(t, table, sizeof table);
}

static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return WB_ARGS_ERROR;
}

/* "v1 v2 v3 cub" into buf */
static void list_variants(const wb_program *prog, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; prog->variant_ids && prog->variant_ids[i]; ++i) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "%s%s", i ? " " : "", prog->variant_ids[i]);
    }
}

static int count_variants(const wb_program *prog)
{
    int n = 0;
    while (prog->variant_ids && prog->variant_ids[n]) ++n;
    return n;
}

static int parse_variant(const wb_program *prog, const char *text, int *out, char *err, size_t len)
{
    int n = count_variants(prog);
    for (int i = 0; i < n; ++i)
        if (strcmp(text, prog->variant_ids[i]) == 0) return *out = i, WB_ARGS_OK;
    char *end = NULL;
    errno = 0;
    long k = strtol(text, &end, 10);
    if (errno == 0 && end != text && *end == '\0' && k >= 1 && k <= n) return *out = (int)k - 1, WB_ARGS_OK;
    char ids[512];
    list_variants(prog, ids, sizeof ids);
    return fail(err, len, "unknown variant '%s' (allowed: %s, or a number 1..%d)", text, ids, n);
}

static int parse_int(const wb_option *o, const char *text, long long *out, char *err, size_t len)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < o->min || v > o->max)
        return fail(err, len, "%s wants an integer in %lld..%lld, got '%s'", o->name, o->min, o->max, text);
    *out = v;
    return WB_ARGS_OK;
}

static int parse_choice(const wb_option *o, const char *text, int *out, char *err, size_t len)
{
    char allowed[256] = "";
    for (int i = 0; o->choices[i]; ++i) {
        if (strcmp(text, o->choices[i]) == 0) return *out = i, WB_ARGS_OK;
        size_t used = strlen(allowed);
        snprintf(allowed + used, sizeof allowed - used, "%s%s", i ? ", " : "", o->choices[i]);
    }
    return fail(err, len, "%s wants one of %s, got '%s'", o->name, allowed, text);
}

static const wb_option *find(const char *name, size_t name_len, const wb_option *a, int na,
                             const wb_option *b, int nb)
{
    for (int i = 0; i < na + nb; ++i) {
        const wb_option *o = i < na ? &a[i] : &b[i - na];
        if (strlen(o->name) == name_len && strncmp(o->name, name, name_len) == 0) return o;
    }
    return NULL;
}

int wb_parse_args(int argc, char **argv, const wb_program *prog, wb_common_opts *common,
                  const wb_option *extra, int n_extra, char *err, size_t err_len)
{
    wb_common_opts defaults = {0, -1, 50, 5, 1234, NULL, LLONG_MAX};
    *common = defaults;
    wb_option table[N_COMMON];
    common_table(table, common);
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return WB_ARGS_HELP;
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const wb_option *o = strncmp(arg, "--", 2) == 0 ? find(arg, name_len, table, N_COMMON, extra, n_extra) : NULL;
        if (!o) {
            char names[1024] = "";
            for (int k = 0; k < N_COMMON + n_extra; ++k) {
                size_t used = strlen(names);
                snprintf(names + used, sizeof names - used, "%s ", k < N_COMMON ? table[k].name : extra[k - N_COMMON].name);
            }
            return fail(err, err_len, "unknown option '%s' (allowed: %s--help)", arg, names);
        }
        if (o->kind == WB_OPT_FLAG) {
            if (eq) return fail(err, err_len, "%s takes no value, got '%s'", o->name, arg);
            *(int *)o->dest = 1;
            continue;
        }
        int n_values = o->kind == WB_OPT_INT ? o->count : 1;
        const char *values[8];
        int have = 0;
        if (eq) values[have++] = eq + 1;
        while (have < n_values && i + 1 < argc) values[have++] = argv[++i];
        if (have < n_values || (n_values > 1 && eq))
            return fail(err, err_len, "%s needs %d value%s (%s)", o->name, n_values, n_values > 1 ? "s" : "",
                        o->metavar ? o->metavar : "");
        int rc = WB_ARGS_OK;
        if (o == &table[OPT_VARIANT])
            rc = parse_variant(prog, values[0], &common->variant, err, err_len);
        else if (o->kind == WB_OPT_INT)
            for (int k = 0; k < n_values && rc == WB_ARGS_OK; ++k)
                rc = parse_int(o, values[k], (long long *)o->dest + k, err, err_len);
        else if (o->kind == WB_OPT_CHOICE)
            rc = parse_choice(o, values[0], (int *)o->dest, err, err_len);
        else
            *(const char **)o->dest = values[0];
        if (rc != WB_ARGS_OK) return rc;
    }
    return WB_ARGS_OK;
}

static void print_option(FILE *out, const wb_option *o)
{
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    fprintf(out, "  %-20s %s\n", left, o->help);
}

void wb_print_usage(FILE *out, const wb_program *prog, const wb_option *extra, int n_extra)
{
    wb_common_opts dummy;
    wb_option table[N_COMMON];
    common_table(table, &dummy);
    char ids[512];
    list_variants(prog, ids, sizeof ids);
    fprintf(out, "usage: %s [options]\n%s\n\n", prog->name, prog->summary);
    fprintf(out, "%s\n\n", prog->no_options ? prog->no_options
                                            : "With no options every variant is checked against the CPU reference and timed.");
    fprintf(out, "stage options:\n");
    for (int i = 0; i < n_extra; ++i) print_option(out, &extra[i]);
    fprintf(out, "common options:\n");
    for (int i = 0; i < N_COMMON; ++i) print_option(out, &table[i]);
    fprintf(out, "  %-20s %s\n\n", "--help", "this text");
    if (prog->variant_help) {
        fprintf(out, "variants (--variant ID):\n");
        for (int i = 0; prog->variant_ids[i]; ++i) fprintf(out, "  %-6s %s\n", prog->variant_ids[i], prog->variant_help[i]);
    } else {
        fprintf(out, "variants: %s\n", ids);
    }
    fprintf(out, "exit codes: 0 all good, 1 a check failed, 2 bad arguments, 77 no CUDA device (or --variant ex before exercise.cu is written)\n");
}

void wb_parse_args_or_exit(int argc, char **argv, const wb_program *prog, wb_common_opts *common,
                           const wb_option *extra, int n_extra)
{
    char err[1024];
    int rc = wb_parse_args(argc, argv, prog, common, extra, n_extra, err, sizeof err);
    if (rc == WB_ARGS_HELP) {
        wb_print_usage(stdout, prog, extra, n_extra);
        exit(0);
    }
    if (rc == WB_ARGS_ERROR) wb_usage_error_exit(prog, "%s", err);
}

void wb_usage_error_exit(const wb_program *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s --help'.\n", prog->name);
    va_end(ap);
    exit(WB_EXIT_USAGE);
}
