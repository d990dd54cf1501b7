/**
 * @file stages/02_reduction/main.c
 * @brief Stage 02 host program: sum and max of fp32 and fp16 arrays, every variant
 *        checked against the CPU reference and timed next to CUB.
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
#include "measure.h"
#include "reduce.h"
#include "report.h"
#include "rng.h"
#include "timing.h"

/** @brief The default size. 2^27 elements: 512 MiB of fp32 (256 MiB of fp16) read per reduction, 10x the
 *        H100's L2, so the timing measures DRAM, and a launch's few microseconds are a
 *        small fraction of the ~170 µs a pass takes at 3 TB/s. */
#define DEFAULT_N (1LL << 27)

/** @brief Runs of each deterministic variant whose results must agree to the bit. */
#define DETERMINISM_RUNS 10

static const char *const variant_ids[] = {"v1", "v2", "v3", "v4", "v5", "v6", "cub", "ex", NULL};
/** One line per variant for --help: its idea, what it takes, the hardware it needs. */
static const char *const variant_help[] = {
    "an atomic per element into one float (sum and max, fp32 and fp16 input, sm_75)",
    "shared-memory tree, interleaved addressing: divergent warps (sm_75)",
    "shared-memory tree, sequential addressing (sm_75)",
    "two loads per thread, warp shuffles for the last 32 (sm_75)",
    "grid-stride loop + shuffles, two passes: the same sum on every run (sm_75)",
    "v5 + 16-byte loads, 4 in flight (x 16-byte aligned; sm_75)",
    "CUB DeviceReduce, the library peer (sm_75)",
    "your kernel: a block sum by warp shuffles, in exercise.cu (sum of fp32 only; sm_75)"};
static const char *const op_choices[] = {"all", "sum", "max", NULL};
static const char *const dtype_choices[] = {"all", "fp32", "fp16", NULL};

/**
 * The input sets a check uses. For sums, integers (every partial sum is exact in
 * fp32 below 2^24, so the result must be exact: a dropped or doubled element can
 * not hide in rounding) and uniform reals (rounding bounded by Σ|x|). For max, a
 * planted maximum at a random index, and all-negative data with the maximum at
 * the last index (a wrong identity such as 0, or a lost tail, shows up).
 */
typedef enum { DATA_SUM_INTEGERS, DATA_SUM_UNIFORM, DATA_MAX_PLANTED, DATA_MAX_NEGATIVE_TAIL } dataset;
static const char *const dataset_names[] = {"integers", "uniform", "planted max", "negative, max at end"};

/** One input set on host and device, with its reference and tolerance. */
typedef struct {
    reduce_op op;      /**< sum or max */
    wb_dtype dtype;    /**< input type */
    long long n;       /**< elements */
    float *x;          /**< host input as fp32 (for fp16: the values after rounding) */
    uint16_t *x16;     /**< host input, fp16 bits */
    void *d_x;         /**< device input, of type dtype */
    float *d_out;      /**< device, the one result */
    void *d_ws;        /**< device workspace, large enough for every variant */
    size_t ws_bytes;   /**< its size */
    double ref;        /**< CPU reference */
    wb_tolerance tol;  /**< the check's tolerance for this input set */
} problem;

static void make_data(problem *p, dataset d, uint64_t seed)
{
    size_t n = (size_t)p->n;
    wb_rng r;
    wb_rng_seed(&r, seed);
    switch (d) {
    case DATA_SUM_INTEGERS: wb_fill_int_f32(p->x, n, -8, 8, seed); break;
    case DATA_SUM_UNIFORM: wb_fill_uniform_f32(p->x, n, -1.0f, 1.0f, seed); break;
    case DATA_MAX_PLANTED:
        wb_fill_uniform_f32(p->x, n, -1.0f, 1.0f, seed);
        p->x[wb_rng_next(&r) % n] = 4.0f;
        break;
    case DATA_MAX_NEGATIVE_TAIL:
        wb_fill_uniform_f32(p->x, n, -3.0f, -1.0f, seed);
        p->x[n - 1] = -0.5f;
        break;
    }
    if (p->dtype == WB_F16) {
        wb_floats_to_halves(p->x, p->x16, n);
        wb_halves_to_floats(p->x16, p->x, n); /* the reference sees what the GPU sees */
    }
    if (p->op == REDUCE_SUM) {
        ref_sum_result s = ref_sum_f32(p->x, n);
        p->ref = s.sum;
        /* Integers: exact. Reals: Higham's bound for a summation tree of depth
         * log2(n), with 2 to spare: (log2 n + 2) · 2^-24 · Σ|x|. */
        double depth = log2((double)n) + 2.0;
        p->tol.atol = d == DATA_SUM_INTEGERS ? 0.0 : depth * ldexp(1.0, -24) * s.abs_sum;
        p->tol.rtol = 0.0;
    } else {
        p->ref = ref_max_f32(p->x, n);
        p->tol.atol = p->tol.rtol = 0.0; /* max is exact */
    }
    if (p->dtype == WB_F16)
        WB_CUDA_CHECK(cudaMemcpy(p->d_x, p->x16, n * 2, cudaMemcpyHostToDevice));
    else
        WB_CUDA_CHECK(cudaMemcpy(p->d_x, p->x, n * 4, cudaMemcpyHostToDevice));
}

static void problem_init(problem *p, reduce_op op, wb_dtype dtype, long long n)
{
    memset(p, 0, sizeof *p);
    p->op = op;
    p->dtype = dtype;
    p->n = n;
    p->x = wb_host_alloc((size_t)n * 4, "x");
    p->x16 = wb_host_alloc((size_t)n * 2, "x (fp16)");
    p->d_x = wb_device_alloc((size_t)n * wb_dtype_bytes(dtype), "x");
    p->d_out = wb_device_alloc(sizeof(float), "result");
    for (int i = 0; i < reduce_variant_count; ++i) {
        size_t b = reduce_variants[i].workspace(op, dtype, n);
        if (b > p->ws_bytes) p->ws_bytes = b;
    }
    p->d_ws = wb_device_alloc(p->ws_bytes, "workspace");
}

static void problem_free(problem *p)
{
    free(p->x);
    free(p->x16);
    WB_CUDA_CHECK(cudaFree(p->d_x));
    WB_CUDA_CHECK(cudaFree(p->d_out));
    WB_CUDA_CHECK(cudaFree(p->d_ws));
}

typedef struct {
    const reduce_variant *v; /**< the variant */
    problem *p;              /**< its data */
} job;

static const char *launch_variant(void *ctx)
{
    job *j = (job *)ctx;
    problem *p = j->p;
    return j->v->launch(p->op, p->dtype, p->d_x, p->n, p->d_out, p->d_ws, p->ws_bytes);
}

/** Poison the result, run once, compare with the reference; *bits gets the result's bits. */
static const char *run_and_check_bits(job *j, wb_compare_result *res, uint32_t *bits)
{
    wb_poison(j->p->d_out, sizeof(float));
    const char *why = launch_variant(j);
    if (why) return why;
    float got;
    WB_CUDA_CHECK(cudaMemcpy(&got, j->p->d_out, sizeof got, cudaMemcpyDeviceToHost));
    memcpy(bits, &got, sizeof got);
    char label[96];
    snprintf(label, sizeof label, "%s n=%lld", j->v->id, j->p->n);
    *res = wb_compare_scalar(got, j->p->ref, j->p->tol, label, 1);
    return NULL;
}

/** run_and_check_bits as the common measuring step wants it. */
static const char *run_and_check(void *ctx, wb_compare_result *res)
{
    uint32_t bits;
    return run_and_check_bits((job *)ctx, res, &bits);
}

static const char *problem_name(reduce_op op, wb_dtype dtype)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "%s, %s input", op == REDUCE_SUM ? "sum" : "max", wb_dtype_name(dtype));
    return buf;
}

/** Default mode: one size; per problem every variant checked, timed, checked again. */
static void bench_problem(const wb_device *dev, const wb_common_opts *opt, problem *p, wb_report *rep)
{
    make_data(p, p->op == REDUCE_SUM ? DATA_SUM_UNIFORM : DATA_MAX_PLANTED,
              wb_seed_for((uint64_t)opt->seed, (uint64_t)p->n, 1));
    char size[64];
    snprintf(size, sizeof size, "n=%lld", p->n);
    for (int i = 0; i < reduce_variant_count; ++i) {
        if (opt->variant >= 0 && opt->variant != i) continue;
        job j = {&reduce_variants[i], p};
        wb_row row = {.problem = problem_name(p->op, p->dtype), .size = size, .variant = j.v->id,
                      .what = j.v->what, .is_peer = j.v->is_peer, .unit = "GB/s", .roof = dev->copy_gbps};
        wb_check_and_time(dev, opt, launch_variant, run_and_check, &j, &row);
        double bytes = (double)p->n * (double)wb_dtype_bytes(p->dtype); /* read once; one float written */
        row.throughput = wb_gbps(bytes, row.time.median_ms);
        row.bytes = bytes, row.flops = (double)p->n; /* one add (or max) per element */
        wb_report_add(rep, &row);
    }
}

/**
 * --check for one input set: every variant twice (a kernel must also work on a
 * second run), and each deterministic one DETERMINISM_RUNS times, all bits equal.
 */
static int check_problem(const wb_common_opts *opt, problem *p, dataset d, int *checks)
{
    make_data(p, d, wb_seed_for((uint64_t)opt->seed, (uint64_t)p->n, 10 + (uint64_t)d));
    printf("n=%-10lld %-16s %-20s", p->n, problem_name(p->op, p->dtype), dataset_names[d]);
    int failed = 0;
    for (int i = 0; i < reduce_variant_count; ++i) {
        if (opt->variant >= 0 && opt->variant != i) continue;
        job j = {&reduce_variants[i], p};
        int runs = j.v->deterministic ? DETERMINISM_RUNS : 2;
        uint32_t first_bits = 0, bits = 0;
        int ok = 1, same = 1;
        const char *why = NULL;
        for (int r = 0; r < runs && !why; ++r) {
            wb_compare_result res;
            why = run_and_check_bits(&j, &res, &bits);
            if (why) break;
            if (r == 0) first_bits = bits;
            ok = ok && res.ok;
            same = same && (bits == first_bits || !j.v->deterministic);
        }
        if (why) {
            wb_print_rejected(j.v->id, why);
            continue;
        }
        (*checks)++;
        if (!same) fprintf(stderr, "  %s n=%lld: results differ between runs of a deterministic variant\n", j.v->id, p->n);
        if (!ok || !same) failed++;
        printf(" %s:%s", j.v->id, ok && same ? "ok" : "FAIL");
    }
    printf("\n");
    return failed;
}

/** @brief Parse arguments, open the GPU (or exit 77), then --check or the timed table. */
int main(int argc, char **argv)
{
    long long n = DEFAULT_N;
    int op_choice = 0, dtype_choice = 0;
    const wb_option extra[] = {
        {"--n", "N", "elements (default 134217728 = 2^27)", WB_OPT_INT, &n, 1, 1, INT_MAX, NULL},
        {"--op", "OP", "sum, max or all (default all)", WB_OPT_CHOICE, &op_choice, 0, 0, 0, op_choices},
        {"--dtype", "T", "input type: fp32, fp16 or all (default all)", WB_OPT_CHOICE, &dtype_choice, 0, 0, 0,
         dtype_choices},
    };
    const wb_program prog = {"stage02_reduction",
                             "Stage 02: sum and max of an array (fp32 or fp16 input, fp32 accumulation).",
                             variant_ids, variant_help, NULL};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 3);

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    const reduce_op ops[] = {REDUCE_SUM, REDUCE_MAX};
    const wb_dtype dtypes[] = {WB_F32, WB_F16};
    int ok;
    if (opt.check) {
        static const long long sizes[] = {1, 2, 3, 31, 32, 33, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025,
                                          4097, 65537, 1000003, 16777217, DEFAULT_N + 5};
        int checks = 0, failed = 0;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
            if (sizes[s] > opt.check_max) continue;
            for (int o = 0; o < 2; ++o)
                for (int t = 0; t < 2; ++t) {
                    if ((op_choice && op_choice - 1 != o) || (dtype_choice && dtype_choice - 1 != t)) continue;
                    problem p;
                    problem_init(&p, ops[o], dtypes[t], sizes[s]);
                    for (int d = o == 0 ? DATA_SUM_INTEGERS : DATA_MAX_PLANTED;
                         d <= (o == 0 ? DATA_SUM_UNIFORM : DATA_MAX_NEGATIVE_TAIL); ++d)
                        failed += check_problem(&opt, &p, (dataset)d, &checks);
                    problem_free(&p);
                }
        }
        printf("stage02 --check: %d checks, %d failed (deterministic variants: %d runs each, bit-identical)\n",
               checks, failed, DETERMINISM_RUNS);
        ok = failed == 0 && checks > 0;
    } else {
        printf("stage02_reduction: n = %lld\n", n);
        wb_measure_copy_bandwidth(&dev);
        wb_device_print(&dev, stdout);
        printf("roof for this stage: the copy bandwidth; a reduction reads n elements (bytes read / time)\n");
        wb_report rep;
        wb_report_begin(&rep, "stage02", dev.name, stdout);
        for (int t = 0; t < 2; ++t)
            for (int o = 0; o < 2; ++o) {
                if ((op_choice && op_choice - 1 != o) || (dtype_choice && dtype_choice - 1 != t)) continue;
                problem p;
                problem_init(&p, ops[o], dtypes[t], n);
                bench_problem(&dev, &opt, &p, &rep);
                problem_free(&p);
            }
        ok = wb_report_finish(&rep, opt.csv);
    }
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
