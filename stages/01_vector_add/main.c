/**
 * @file stages/01_vector_add/main.c
 * @brief Stage 01 host program: make inputs, compute the CPU reference, run every
 *        variant, check it, time it, print the table (or, with --check, sweep sizes).
 */
#include <limits.h>
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
#include "report.h"
#include "rng.h"
#include "timing.h"
#include "vector_add.h"

/** @brief The default size. 2^26 elements: 768 MiB moved per fp32 add, 15x the H100's 50 MiB L2 (192x the
 *        T4's 4 MiB), so the timing measures DRAM, not the cache. */
#define DEFAULT_N (1LL << 26)

/* IEEE addition is correctly rounded on both sides, so results must match exactly. */
static const wb_tolerance exact = {0.0, 0.0};

static const char *const variant_ids[] = {"v1", "v2", "v3", "v4", "ex", NULL};
/** One line per variant for --help: its idea, what it takes, the hardware it needs. */
static const char *const variant_help[] = {
    "one element per thread: coalesced loads, the bandwidth roof (fp32, sm_75)",
    "grid-stride loop, the grid fills the GPU once (fp32, sm_75)",
    "float4: 16-byte loads and stores, a scalar tail (fp32, sm_75)",
    "fp16: 16-byte loads, 4 x __hadd2, a scalar tail (fp16, sm_75)",
    "your kernel: float4 loads and a tail, in exercise.cu (fp32, sm_75)"};

/** Inputs, reference and device buffers of one problem size, in both precisions. */
typedef struct {
    long long n;       /**< elements */
    float *a;          /**< host input a, fp32 */
    float *b;          /**< host input b, fp32 */
    float *ref;        /**< CPU reference, fp32 */
    float *got;        /**< GPU result copied back, fp32 */
    uint16_t *a16;     /**< host input a, fp16 bits (a rounded) */
    uint16_t *b16;     /**< host input b, fp16 bits */
    uint16_t *ref16;   /**< CPU reference, fp16 bits */
    uint16_t *got16;   /**< GPU result copied back, fp16 bits */
    float *got16_f;    /**< got16 widened, for the comparison */
    float *ref16_f;    /**< ref16 widened */
    void *d_a;         /**< device a, fp32 */
    void *d_b;         /**< device b, fp32 */
    void *d_c;         /**< device c, fp32 */
    void *d_a16;       /**< device a, fp16 */
    void *d_b16;       /**< device b, fp16 */
    void *d_c16;       /**< device c, fp16 */
} problem;

static void problem_init(problem *p, long long n, uint64_t seed)
{
    size_t un = (size_t)n;
    p->n = n;
    p->a = wb_host_alloc(un * 4, "a");
    p->b = wb_host_alloc(un * 4, "b");
    p->ref = wb_host_alloc(un * 4, "reference");
    p->got = wb_host_alloc(un * 4, "result");
    p->a16 = wb_host_alloc(un * 2, "a (fp16)");
    p->b16 = wb_host_alloc(un * 2, "b (fp16)");
    p->ref16 = wb_host_alloc(un * 2, "reference (fp16)");
    p->got16 = wb_host_alloc(un * 2, "result (fp16)");
    p->got16_f = wb_host_alloc(un * 4, "result (fp16 as fp32)");
    p->ref16_f = wb_host_alloc(un * 4, "reference (fp16 as fp32)");
    wb_fill_uniform_f32(p->a, un, -1.0f, 1.0f, wb_seed_for(seed, (uint64_t)n, 1));
    wb_fill_uniform_f32(p->b, un, -1.0f, 1.0f, wb_seed_for(seed, (uint64_t)n, 2));
    wb_floats_to_halves(p->a, p->a16, un);
    wb_floats_to_halves(p->b, p->b16, un);
    ref_vector_add_f32(p->a, p->b, p->ref, un);
    ref_vector_add_f16(p->a16, p->b16, p->ref16, un);
    wb_halves_to_floats(p->ref16, p->ref16_f, un);

    p->d_a = wb_device_alloc(un * 4, "a");
    p->d_b = wb_device_alloc(un * 4, "b");
    p->d_c = wb_device_alloc(un * 4, "c");
    p->d_a16 = wb_device_alloc(un * 2, "a (fp16)");
    p->d_b16 = wb_device_alloc(un * 2, "b (fp16)");
    p->d_c16 = wb_device_alloc(un * 2, "c (fp16)");
    WB_CUDA_CHECK(cudaMemcpy(p->d_a, p->a, un * 4, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(p->d_b, p->b, un * 4, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(p->d_a16, p->a16, un * 2, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(p->d_b16, p->b16, un * 2, cudaMemcpyHostToDevice));
}

static void problem_free(problem *p)
{
    void *host[] = {p->a, p->b, p->ref, p->got, p->a16, p->b16, p->ref16, p->got16, p->got16_f, p->ref16_f};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; ++i) free(host[i]);
    void *dev[] = {p->d_a, p->d_b, p->d_c, p->d_a16, p->d_b16, p->d_c16};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) WB_CUDA_CHECK(cudaFree(dev[i]));
}

/** What one run of a variant needs: the timer calls launch_variant with it. */
typedef struct {
    const vecadd_variant *v; /**< the variant */
    problem *p;              /**< its data */
} job;

static const char *launch_variant(void *ctx)
{
    job *j = (job *)ctx;
    if (j->v->dtype == WB_F16) return j->v->launch(j->p->d_a16, j->p->d_b16, j->p->d_c16, j->p->n);
    return j->v->launch(j->p->d_a, j->p->d_b, j->p->d_c, j->p->n);
}

/** Poison the output, run once, compare every element with the reference. */
static const char *run_and_check(void *ctx, wb_compare_result *res)
{
    job *j = (job *)ctx;
    problem *p = j->p;
    size_t un = (size_t)p->n;
    int half = j->v->dtype == WB_F16;
    wb_poison(half ? p->d_c16 : p->d_c, un * wb_dtype_bytes(j->v->dtype));
    const char *why = launch_variant(j);
    if (why) return why;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    char label[64];
    snprintf(label, sizeof label, "%s n=%lld", j->v->id, p->n);
    if (half) {
        WB_CUDA_CHECK(cudaMemcpy(p->got16, p->d_c16, un * 2, cudaMemcpyDeviceToHost));
        wb_halves_to_floats(p->got16, p->got16_f, un);
        *res = wb_compare_f32(p->got16_f, p->ref16_f, un, exact, label, 5);
    } else {
        WB_CUDA_CHECK(cudaMemcpy(p->got, p->d_c, un * 4, cudaMemcpyDeviceToHost));
        *res = wb_compare_f32(p->got, p->ref, un, exact, label, 5);
    }
    return NULL;
}

static int selected(const wb_common_opts *opt, int i) { return opt->variant < 0 || opt->variant == i; }

/** Default mode: one size, every variant checked, timed, checked again. */
static int bench(wb_device *dev, const wb_common_opts *opt, long long n)
{
    problem p;
    problem_init(&p, n, (uint64_t)opt->seed);
    printf("roof for this stage: the copy bandwidth; an add moves 3 arrays (12 bytes/element fp32, 6 fp16)\n");
    wb_report rep;
    wb_report_begin(&rep, "stage01", dev->name, stdout);
    char size[64];
    snprintf(size, sizeof size, "n=%lld", n);
    for (int i = 0; i < vecadd_variant_count; ++i) {
        if (!selected(opt, i)) continue;
        job j = {&vecadd_variants[i], &p};
        wb_row row = {.problem = "c = a + b", .size = size, .variant = j.v->id, .what = j.v->what,
                      .unit = "GB/s", .roof = dev->copy_gbps};
        wb_check_and_time(dev, opt, launch_variant, run_and_check, &j, &row);
        double bytes = 3.0 * (double)n * (double)wb_dtype_bytes(j.v->dtype); /* read a, b; write c */
        row.throughput = wb_gbps(bytes, row.time.median_ms);
        row.bytes = bytes, row.flops = (double)n; /* one add per element */
        wb_report_add(&rep, &row);
    }
    problem_free(&p);
    return wb_report_finish(&rep, opt->csv);
}

/** --check: every variant at sizes that hit every edge (tails of 4, 8 and 256, primes, large). */
static int check_sweep(const wb_common_opts *opt)
{
    static const long long sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 255, 256, 257, 1023, 1025,
                                      4099, 65537, 1000003, 16777217, DEFAULT_N + 3};
    int checks = 0, failed = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
        long long n = sizes[s];
        if (n > opt->check_max) continue;
        problem p;
        problem_init(&p, n, (uint64_t)opt->seed);
        printf("n=%-10lld", n);
        for (int i = 0; i < vecadd_variant_count; ++i) {
            if (!selected(opt, i)) continue;
            job j = {&vecadd_variants[i], &p};
            int r = wb_check_variant(j.v->id, run_and_check, &j, 2);
            checks += r >= 0;
            failed += r == 0;
        }
        printf("\n");
        problem_free(&p);
    }
    printf("stage01 --check: %d checks, %d failed\n", checks, failed);
    return failed == 0 && checks > 0;
}

/** @brief Parse arguments, open the GPU (or exit 77), then --check or the timed table. */
int main(int argc, char **argv)
{
    long long n = DEFAULT_N;
    const wb_option extra[] = {
        {"--n", "N", "elements (default 67108864 = 2^26)", WB_OPT_INT, &n, 1, 1, INT_MAX, NULL},
    };
    const wb_program prog = {"stage01_vector_add", "Stage 01: c = a + b in fp32 (v1-v3) and fp16 (v4).",
                             variant_ids, variant_help, NULL};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 1);

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    int ok;
    if (opt.check) {
        ok = check_sweep(&opt);
    } else {
        printf("stage01_vector_add: c = a + b, n = %lld\n", n);
        wb_measure_copy_bandwidth(&dev);
        wb_device_print(&dev, stdout);
        ok = bench(&dev, &opt, n);
    }
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
