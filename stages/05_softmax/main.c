/**
 * @file stages/05_softmax/main.c
 * @brief Stage 05 host program: softmax and LayerNorm over the rows of a matrix,
 *        fp32 and fp16, every variant checked against the CPU reference and timed.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "compare.h"
#include "cuda_check.h"
#include "device.h"
#include "fp16.h"
#include "kernels.h"
#include "layernorm.h"
#include "measure.h"
#include "report.h"
#include "rng.h"
#include "softmax.h"
#include "timing.h" /* wb_measure_copy_bandwidth: the roof */

/** @brief GPT-2's LayerNorm epsilon. */
#define LN_EPS 1e-5f

static const char *const variant_ids[] = {"v1", "v2", "v3", "v4", "v5", "ex", NULL};
/** One line per variant for --help: its idea, what it takes, the hardware it needs. */
static const char *const variant_help[] = {
    "softmax: a thread per row, 3 passes (uncoalesced); LayerNorm: a block per row, two-pass statistics, 3 reads (sm_75)",
    "softmax: a block per row, block reductions, 3 passes; LayerNorm: Welford, statistics in 1 pass, 2 reads (sm_75)",
    "softmax: online max and sum in 1 pass, 2 reads; LayerNorm: the row in registers, 4-wide loads, 1 read (rows over 16384 take v2's path; sm_75)",
    "softmax only: a warp per row, the row in registers, 1 read (rows of at most 1024; sm_75)",
    "softmax only: a block per row, the row in registers, 1 read (rows over 16384 take v3's online path; sm_75)",
    "softmax only: your online softmax, a warp per row, in exercise.cu (fp32; sm_75)"};
static const char *const op_choices[] = {"all", "softmax", "layernorm", NULL};
static const char *const dtype_choices[] = {"all", "fp32", "fp16", NULL};

/** @brief The two operations of the stage. */
typedef enum { OP_SOFTMAX, OP_LAYERNORM } op_kind;

/**
 * The input sets of the checks. Softmax: ordinary values; huge values (±1e30 in
 * fp32, ±3e4 in fp16) among ordinary ones; rows of equal values; a causal mask
 * (−∞ right of the diagonal) with the last row entirely −∞. LayerNorm: ordinary
 * values; a large mean against a small spread (50 ± 1: E[x²] − E[x]² would cancel);
 * rows of equal values (variance 0: y must equal the bias, with no NaN from 1/sqrt).
 */
typedef enum { DATA_UNIFORM, DATA_HUGE, DATA_EQUAL_ROWS, DATA_CAUSAL_MASK, DATA_OFFSET } dataset;
static const char *const dataset_names[] = {"uniform", "huge values", "equal rows", "causal mask", "mean 50"};

/** Tolerances per precision (see the page): fp32 covers a sequential fp32 sum of 65536 terms. */
static const wb_tolerance softmax_tol_f32 = {1e-9, 1e-4}, softmax_tol_f16 = {1e-6, 1e-3};
static const wb_tolerance ln_tol_f32 = {2e-4, 1e-4}, ln_tol_f16 = {4e-3, 2e-3};
static const wb_tolerance stats_tol = {1e-5, 1e-4};

/** One problem: inputs, references and device buffers. */
typedef struct {
    op_kind op;           /**< softmax or LayerNorm */
    wb_dtype dtype;       /**< storage type of x and y */
    int rows;             /**< rows */
    int cols;             /**< row length */
    float *x;             /**< host input as fp32 (for fp16: after rounding) */
    uint16_t *x16;        /**< host input, fp16 bits */
    float *w;             /**< LayerNorm weight (host) */
    float *b;             /**< LayerNorm bias (host) */
    float *ref;           /**< reference y */
    float *ref_mean;      /**< reference means */
    float *ref_rstd;      /**< reference rstd */
    float *got;           /**< GPU y as fp32 */
    uint16_t *got16;      /**< GPU y, fp16 bits */
    float *got_mean;      /**< GPU means */
    float *got_rstd;      /**< GPU rstd */
    void *d_x;            /**< device x */
    void *d_y;            /**< device y */
    float *d_w;           /**< device weight */
    float *d_b;           /**< device bias */
    float *d_mean;        /**< device means */
    float *d_rstd;        /**< device rstd */
} problem;

static void problem_init(problem *p, op_kind op, wb_dtype dtype, int rows, int cols)
{
    memset(p, 0, sizeof *p);
    size_t n = (size_t)rows * (size_t)cols, es = wb_dtype_bytes(dtype);
    p->op = op, p->dtype = dtype, p->rows = rows, p->cols = cols;
    p->x = wb_host_alloc(n * 4, "x");
    p->x16 = wb_host_alloc(n * 2, "x (fp16)");
    p->ref = wb_host_alloc(n * 4, "reference");
    p->got = wb_host_alloc(n * 4, "result");
    p->got16 = wb_host_alloc(n * 2, "result (fp16)");
    p->w = wb_host_alloc((size_t)cols * 4, "weight");
    p->b = wb_host_alloc((size_t)cols * 4, "bias");
    p->ref_mean = wb_host_alloc((size_t)rows * 4, "reference means");
    p->ref_rstd = wb_host_alloc((size_t)rows * 4, "reference rstd");
    p->got_mean = wb_host_alloc((size_t)rows * 4, "means");
    p->got_rstd = wb_host_alloc((size_t)rows * 4, "rstd");
    p->d_x = wb_device_alloc(n * es, "x");
    p->d_y = wb_device_alloc(n * es, "y");
    p->d_w = wb_device_alloc((size_t)cols * 4, "weight");
    p->d_b = wb_device_alloc((size_t)cols * 4, "bias");
    p->d_mean = wb_device_alloc((size_t)rows * 4, "means");
    p->d_rstd = wb_device_alloc((size_t)rows * 4, "rstd");
}

static void problem_free(problem *p)
{
    void *host[] = {p->x, p->x16, p->ref, p->got, p->got16, p->w, p->b, p->ref_mean, p->ref_rstd, p->got_mean, p->got_rstd};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; ++i) free(host[i]);
    void *dev[] = {p->d_x, p->d_y, p->d_w, p->d_b, p->d_mean, p->d_rstd};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) WB_CUDA_CHECK(cudaFree(dev[i]));
}

static void make_data(problem *p, dataset d, uint64_t seed)
{
    size_t n = (size_t)p->rows * (size_t)p->cols;
    float lo = p->op == OP_SOFTMAX ? -5.0f : -3.0f, hi = -lo;
    wb_fill_uniform_f32(p->x, n, lo, hi, seed);
    wb_rng r;
    wb_rng_seed(&r, seed ^ 0xABCDull);
    float huge = p->dtype == WB_F16 ? 3e4f : 1e30f;
    for (int i = 0; i < p->rows; ++i) {
        float *row = p->x + (size_t)i * p->cols;
        /* a multiple of 1/8: sums of a row of them are exact in fp32, so every
         * variant's mean is exactly c and y must be exactly the bias */
        float c = (float)wb_rng_int(&r, -32, 32) / 8.0f;
        for (int j = 0; j < p->cols; ++j) {
            if (d == DATA_HUGE && wb_rng_next(&r) % 64 == 0) row[j] = wb_rng_next(&r) % 2 ? huge : -huge;
            if (d == DATA_EQUAL_ROWS) row[j] = c;
            if (d == DATA_CAUSAL_MASK && (j > i % p->cols || (i == p->rows - 1 && p->rows > 1))) row[j] = -INFINITY;
            if (d == DATA_OFFSET) row[j] = 50.0f + row[j] / 3.0f;
        }
    }
    wb_fill_uniform_f32(p->w, (size_t)p->cols, 0.5f, 1.5f, seed + 1);
    wb_fill_uniform_f32(p->b, (size_t)p->cols, -0.5f, 0.5f, seed + 2);
    if (p->dtype == WB_F16) {
        wb_floats_to_halves(p->x, p->x16, n);
        wb_halves_to_floats(p->x16, p->x, n); /* the reference sees what the GPU sees */
    }
    if (p->op == OP_SOFTMAX)
        ref_softmax(p->x, p->ref, (size_t)p->rows, (size_t)p->cols);
    else
        ref_layernorm(p->x, p->w, p->b, LN_EPS, p->ref, p->ref_mean, p->ref_rstd, (size_t)p->rows, (size_t)p->cols);
    if (p->dtype == WB_F16) { /* an fp16 output can only be the reference rounded to fp16 */
        uint16_t *tmp = p->got16;
        wb_floats_to_halves(p->ref, tmp, n);
        wb_halves_to_floats(tmp, p->ref, n);
    }
    WB_CUDA_CHECK(cudaMemcpy(p->d_x, p->dtype == WB_F16 ? (void *)p->x16 : (void *)p->x, n * wb_dtype_bytes(p->dtype),
                             cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(p->d_w, p->w, (size_t)p->cols * 4, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(p->d_b, p->b, (size_t)p->cols * 4, cudaMemcpyHostToDevice));
}

/** What one run needs: the variant (of the problem's op) and the problem. */
typedef struct {
    int index;   /**< into softmax_variants or layernorm_variants */
    problem *p;  /**< the data */
} job;

static const char *variant_id(op_kind op, int i)
{
    return op == OP_SOFTMAX ? softmax_variants[i].id : layernorm_variants[i].id;
}

static const char *launch_variant(void *ctx)
{
    job *j = (job *)ctx;
    problem *p = j->p;
    if (p->op == OP_SOFTMAX) return softmax_variants[j->index].launch(p->dtype, p->d_x, p->d_y, p->rows, p->cols);
    return layernorm_variants[j->index].launch(p->dtype, p->d_x, p->d_w, p->d_b, LN_EPS, p->d_y, p->d_mean,
                                                p->d_rstd, p->rows, p->cols);
}

/** Poison every output, run once, compare y (and LayerNorm's mean and rstd). */
static const char *run_and_check(void *ctx, wb_compare_result *res)
{
    job *j = (job *)ctx;
    problem *p = j->p;
    size_t n = (size_t)p->rows * (size_t)p->cols;
    wb_poison(p->d_y, n * wb_dtype_bytes(p->dtype));
    wb_poison(p->d_mean, (size_t)p->rows * 4);
    wb_poison(p->d_rstd, (size_t)p->rows * 4);
    const char *why = launch_variant(j);
    if (why) return why;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    char label[96];
    snprintf(label, sizeof label, "%s %dx%d", variant_id(p->op, j->index), p->rows, p->cols);
    if (p->dtype == WB_F16) {
        WB_CUDA_CHECK(cudaMemcpy(p->got16, p->d_y, n * 2, cudaMemcpyDeviceToHost));
        wb_halves_to_floats(p->got16, p->got, n);
    } else {
        WB_CUDA_CHECK(cudaMemcpy(p->got, p->d_y, n * 4, cudaMemcpyDeviceToHost));
    }
    int half = p->dtype == WB_F16;
    wb_tolerance tol = p->op == OP_SOFTMAX ? (half ? softmax_tol_f16 : softmax_tol_f32) : (half ? ln_tol_f16 : ln_tol_f32);
    *res = wb_compare_f32(p->got, p->ref, n, tol, label, 5);
    if (p->op == OP_LAYERNORM) {
        WB_CUDA_CHECK(cudaMemcpy(p->got_mean, p->d_mean, (size_t)p->rows * 4, cudaMemcpyDeviceToHost));
        WB_CUDA_CHECK(cudaMemcpy(p->got_rstd, p->d_rstd, (size_t)p->rows * 4, cudaMemcpyDeviceToHost));
        wb_compare_result m = wb_compare_f32(p->got_mean, p->ref_mean, (size_t)p->rows, stats_tol, "mean", 3);
        wb_compare_result s = wb_compare_f32(p->got_rstd, p->ref_rstd, (size_t)p->rows, stats_tol, "rstd", 3);
        res->ok = res->ok && m.ok && s.ok;
        res->n_bad += m.n_bad + s.n_bad;
        res->worst_frac = fmax(res->worst_frac, fmax(m.worst_frac, s.worst_frac));
    }
    return NULL;
}

static int variant_count(op_kind op) { return op == OP_SOFTMAX ? softmax_variant_count : layernorm_variant_count; }

static const char *problem_name(const problem *p)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "%s, %s", p->op == OP_SOFTMAX ? "softmax" : "layernorm", wb_dtype_name(p->dtype));
    return buf;
}

/** Bytes a variant must move at the least: x read once, y written once (+ LayerNorm's w, b, mean, rstd). */
static double min_bytes(const problem *p)
{
    double bytes = 2.0 * p->rows * (double)p->cols * (double)wb_dtype_bytes(p->dtype);
    if (p->op == OP_LAYERNORM) bytes += 2.0 * 4.0 * p->cols + 2.0 * 4.0 * p->rows;
    return bytes;
}

static void bench_problem(const wb_device *dev, const wb_common_opts *opt, problem *p, wb_report *rep)
{
    make_data(p, DATA_UNIFORM, wb_seed_for((uint64_t)opt->seed, (uint64_t)p->rows, (uint64_t)p->cols));
    char size[64];
    snprintf(size, sizeof size, "%dx%d", p->rows, p->cols);
    for (int i = 0; i < variant_count(p->op); ++i) {
        if (opt->variant >= 0 && opt->variant != i) continue;
        job j = {i, p};
        const char *what = p->op == OP_SOFTMAX ? softmax_variants[i].what : layernorm_variants[i].what;
        wb_row row = {.problem = problem_name(p), .size = size, .variant = variant_id(p->op, i), .what = what,
                      .unit = "GB/s", .roof = dev->copy_gbps};
        wb_check_and_time(dev, opt, launch_variant, run_and_check, &j, &row);
        row.throughput = wb_gbps(min_bytes(p), row.time.median_ms);
        /* per element: softmax a max, a subtract, an exp, a sum and a multiply (5); LayerNorm a sum, a square and
         * its sum, a subtract, a multiply and an FMA (6) */
        row.bytes = min_bytes(p), row.flops = (p->op == OP_SOFTMAX ? 5.0 : 6.0) * p->rows * (double)p->cols;
        wb_report_add(rep, &row);
    }
}

/** --check for one input set: every variant, twice. */
static int check_problem(const wb_common_opts *opt, problem *p, dataset d, int *checks)
{
    make_data(p, d, wb_seed_for((uint64_t)opt->seed, (uint64_t)p->rows * 100003u + (uint64_t)p->cols, (uint64_t)d));
    printf("%6dx%-6d %-16s %-12s", p->rows, p->cols, problem_name(p), dataset_names[d]);
    int failed = 0;
    for (int i = 0; i < variant_count(p->op); ++i) {
        if (opt->variant >= 0 && opt->variant != i) continue;
        job j = {i, p};
        int r = wb_check_variant(variant_id(p->op, i), run_and_check, &j, 2);
        *checks += r >= 0;
        failed += r == 0;
    }
    printf("\n");
    return failed;
}

/** @brief Parse arguments, open the GPU (or exit 77), then --check or the timed tables. */
int main(int argc, char **argv)
{
    long long rows = 0, cols = 0;
    int op_choice = 0, dtype_choice = 0;
    const wb_option extra[] = {
        {"--rows", "R", "rows (default: the two benchmark shapes 16384x8192 and 131072x1024)", WB_OPT_INT, &rows, 1, 1,
         1 << 24, NULL},
        {"--cols", "C", "row length (with --rows)", WB_OPT_INT, &cols, 1, 1, 1 << 20, NULL},
        {"--op", "OP", "softmax, layernorm or all (default all)", WB_OPT_CHOICE, &op_choice, 0, 0, 0, op_choices},
        {"--dtype", "T", "fp32, fp16 or all (default all)", WB_OPT_CHOICE, &dtype_choice, 0, 0, 0, dtype_choices},
    };
    const wb_program prog = {"stage05_softmax",
                             "Stage 05: softmax and LayerNorm over the rows of a matrix (fp32 and fp16 storage).",
                             variant_ids, variant_help, NULL};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 4);
    if ((rows > 0) != (cols > 0)) {
        wb_usage_error_exit(&prog, "--rows and --cols go together (got only %s)", rows > 0 ? "--rows" : "--cols");
    }
    if (rows * cols > (1LL << 30)) {
        wb_usage_error_exit(&prog, "rows x cols must be at most 2^30 elements, got %lld", rows * cols);
    }

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    const op_kind ops[] = {OP_SOFTMAX, OP_LAYERNORM};
    const wb_dtype dtypes[] = {WB_F32, WB_F16};
    int ok;
    if (opt.check) {
        static const int shapes[][2] = {{1, 1},    {3, 1},    {2, 2},     {5, 3},    {7, 31},    {5, 32},
                                        {5, 33},   {4, 100},  {3, 255},   {2, 256},  {2, 257},   {9, 768},
                                        {17, 1024}, {3, 1025}, {5, 2047}, {2, 4097}, {3, 8191},  {2, 8192},
                                        {2, 16384}, {2, 16385}, {3, 65536}, {1000, 1000}, {4099, 64}};
        int checks = 0, failed = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
            if ((long long)shapes[s][0] * shapes[s][1] > opt.check_max) continue;
            for (int o = 0; o < 2; ++o)
                for (int t = 0; t < 2; ++t) {
                    if ((op_choice && op_choice - 1 != o) || (dtype_choice && dtype_choice - 1 != t)) continue;
                    problem p;
                    problem_init(&p, ops[o], dtypes[t], shapes[s][0], shapes[s][1]);
                    static const dataset softmax_sets[] = {DATA_UNIFORM, DATA_HUGE, DATA_EQUAL_ROWS, DATA_CAUSAL_MASK};
                    static const dataset ln_sets[] = {DATA_UNIFORM, DATA_OFFSET, DATA_EQUAL_ROWS};
                    const dataset *sets = o == 0 ? softmax_sets : ln_sets;
                    for (int d = 0; d < (o == 0 ? 4 : 3); ++d) failed += check_problem(&opt, &p, sets[d], &checks);
                    problem_free(&p);
                }
        }
        printf("stage05 --check: %d checks, %d failed\n", checks, failed);
        ok = failed == 0 && checks > 0;
    } else {
        /* long rows (a block each) and short ones (a warp each), 537 MB in fp16 and 1.07 GB in fp32: big enough
         * that the launch and the timer's fixed cost (a few µs) stay under 2% of the time on an H200 */
        static const int default_shapes[][2] = {{16384, 8192}, {131072, 1024}};
        int custom[1][2] = {{(int)rows, (int)cols}};
        const int(*shapes)[2] = rows > 0 ? (const int(*)[2])custom : default_shapes;
        int n_shapes = rows > 0 ? 1 : 2;
        printf("stage05_softmax: row-wise softmax and LayerNorm\n");
        wb_measure_copy_bandwidth(&dev);
        wb_device_print(&dev, stdout);
        printf("roof for this stage: the copy bandwidth; each variant is charged one read of x and one write of y\n");
        wb_report rep;
        wb_report_begin(&rep, "stage05", dev.name, stdout);
        for (int o = 0; o < 2; ++o)
            for (int t = 0; t < 2; ++t)
                for (int s = 0; s < n_shapes; ++s) {
                    if ((op_choice && op_choice - 1 != o) || (dtype_choice && dtype_choice - 1 != t)) continue;
                    problem p;
                    problem_init(&p, ops[o], dtypes[t], shapes[s][0], shapes[s][1]);
                    bench_problem(&dev, &opt, &p, &rep);
                    problem_free(&p);
                }
        ok = wb_report_finish(&rep, opt.csv);
    }
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
