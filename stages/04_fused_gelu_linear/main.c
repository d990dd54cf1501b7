/**
 * @file stages/04_fused_gelu_linear/main.c
 * @brief Stage 04 host program: Y = GELU(X·W + b) unfused, half fused and fused into
 *        stage 03's GEMM epilogue, fp32 and fp16, next to cuBLAS and cuBLASLt;
 *        checked against a float64 CPU reference, timed, and the time fusion saves
 *        set against the bytes it saves.
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
#include "gelu.h"
#include "kernels.h"
#include "measure.h"
#include "report.h"
#include "rng.h"
#include "timing.h" /* wb_measure_copy_bandwidth: the roof */

/** @brief Products larger than this many multiply-adds are checked on a sample of rows. */
#define FULL_CHECK_MAX_MACS (1LL << 27)
/** @brief Rows of Y the reference computes for a large product. */
#define SAMPLED_ROWS 64

static const char *const variant_ids[] = {"v1", "v2", "v3", "v4", "cublas", "cublaslt", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "cublas-h", "cublaslt-h", "ex", NULL};
/** One line per variant for --help: its idea, what it takes, the hardware it needs. */
static const char *const variant_help[] = {
    "unfused: GEMM, then a bias kernel and a GELU kernel (fp32, sm_75)",
    "GEMM, then one bias+GELU kernel (fp32, sm_75)",
    "bias+GELU in the GEMM's epilogue, on stage 03's v7 (fp32, sm_75)",
    "v3 + split-K where the tiles fill under 2 waves (fp32, sm_75)",
    "cuBLAS GEMM + stage 04's bias+GELU kernel: the fp32 peer",
    "cuBLASLt with its GELU_BIAS epilogue: the fp32 peer",
    "bias+GELU in the WMMA GEMM's epilogue, on stage 03's v8: the T4's tensor cores (fp16, sm_75)",
    "bias+GELU in the tensor-core GEMM's epilogue, on stage 03's v9 (fp16, sm_80)",
    "bias+GELU in the Hopper GEMM's epilogue, on stage 03's v10 (fp16, sm_90a)",
    "v7 on the persistent Hopper GEMM, stage 03's v11 (fp16, sm_90a)",
    "v8 on stage 03's v13 (epilogue in registers, tile stored by TMA, a half-empty last wave split along K), "
    "the tile's bias staged in shared memory (fp16, sm_90a)",
    "v9 + GELU on the hardware's tanh (fp16, sm_90a)",
    "v10 + the tile shape from the waves: stage 03's v14 (fp16, sm_90a)",
    "cuBLAS HGEMM + the bias+GELU kernel: the fp16 peer",
    "cuBLASLt GELU_BIAS, fp16: the fp16 peer",
    "your epilogue: bias+GELU on stage 03's v7, in exercise.cu (fp32, sm_75)"};
static const char *const gelu_choices[] = {"tanh", "erf", NULL};

/** One problem: X, W, b and Y on host and device, in one precision. */
typedef struct {
    linear_args a;      /**< the launch arguments (device pointers) */
    wb_dtype dtype;     /**< storage type of X, W, Y */
    float *X;           /**< host X as fp32 (for fp16: after rounding) */
    float *W;           /**< host W as fp32 */
    float *b;           /**< host bias */
    uint16_t *X16;      /**< host X, fp16 bits */
    uint16_t *W16;      /**< host W, fp16 bits */
    float *ref;         /**< reference Y (the checked rows) */
    float *got;         /**< GPU Y as fp32 */
    uint16_t *got16;    /**< GPU Y, fp16 bits */
    int *rows;          /**< rows checked */
    int n_rows;         /**< how many */
    float *d_b;         /**< device bias */
    wb_tolerance tol;   /**< the check's tolerance */
} problem;

static void problem_init(problem *p, wb_dtype dtype, int M, int N, int K, int with_bias, gelu_kind gelu, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->dtype = dtype;
    size_t x = (size_t)M * K, w = (size_t)K * N, y = (size_t)M * N, es = wb_dtype_bytes(dtype);
    p->X = wb_host_alloc(x * 4, "X");
    p->W = wb_host_alloc(w * 4, "W");
    p->b = wb_host_alloc((size_t)N * 4, "bias");
    p->X16 = wb_host_alloc(x * 2, "X (fp16)");
    p->W16 = wb_host_alloc(w * 2, "W (fp16)");
    p->ref = wb_host_alloc(y * 4, "reference Y");
    p->got = wb_host_alloc(y * 4, "Y");
    p->got16 = wb_host_alloc(y * 2, "Y (fp16)");
    /* GPT-2-like scales: activations ~ U(−1, 1), weights ~ U(−1, 1)/√K, so X·W is O(1)
     * and GELU works on both of its sides */
    wb_fill_uniform_f32(p->X, x, -1.0f, 1.0f, seed);
    float s = 1.0f / sqrtf((float)K);
    wb_fill_uniform_f32(p->W, w, -s, s, seed + 1);
    wb_fill_uniform_f32(p->b, (size_t)N, -0.5f, 0.5f, seed + 2);
    if (dtype == WB_F16) {
        wb_floats_to_halves(p->X, p->X16, x);
        wb_halves_to_floats(p->X16, p->X, x);
        wb_floats_to_halves(p->W, p->W16, w);
        wb_halves_to_floats(p->W16, p->W, w);
    }
    p->n_rows = wb_rows_to_check(M, (long long)M * N * K, FULL_CHECK_MAX_MACS, SAMPLED_ROWS, seed + 3, &p->rows);
    ref_linear_gelu_rows(p->X, p->W, with_bias ? p->b : NULL, gelu, p->ref, M, N, K, p->rows, p->n_rows);
    if (dtype == WB_F16)
        for (int i = 0; i < p->n_rows; ++i) {
            float *row = p->ref + (size_t)p->rows[i] * N;
            wb_floats_to_halves(row, p->got16, (size_t)N);
            wb_halves_to_floats(p->got16, row, (size_t)N);
        }
    /* as stage 03 (|X·W| is O(1) here), plus GELU's own rounding (tanhf, erff: a few ulp) */
    p->tol.atol = (dtype == WB_F16 ? 1e-3 : 1e-5) + 1e-7 * K;
    p->tol.rtol = dtype == WB_F16 ? 1.5 * ldexp(1.0, -10) : 1e-5;
    void *dX = wb_device_alloc(x * es, "X"), *dW = wb_device_alloc(w * es, "W"), *dY = wb_device_alloc(y * es, "Y");
    p->d_b = wb_device_alloc((size_t)N * 4, "bias");
    WB_CUDA_CHECK(cudaMemcpy(dX, dtype == WB_F16 ? (void *)p->X16 : (void *)p->X, x * es, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(dW, dtype == WB_F16 ? (void *)p->W16 : (void *)p->W, w * es, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(p->d_b, p->b, (size_t)N * 4, cudaMemcpyHostToDevice));
    linear_args a = {dX, dW, with_bias ? p->d_b : NULL, dY, M, N, K, gelu};
    p->a = a;
}

static void problem_free(problem *p)
{
    void *host[] = {p->X, p->W, p->b, p->X16, p->W16, p->ref, p->got, p->got16, p->rows};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; ++i) free(host[i]);
    void *dev[] = {(void *)p->a.X, (void *)p->a.W, p->a.Y, p->d_b};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) WB_CUDA_CHECK(cudaFree(dev[i]));
}

/** What one run needs. */
typedef struct {
    const linear_variant *v; /**< the variant */
    problem *p;              /**< its data */
} job;

static const char *launch_variant(void *ctx)
{
    job *j = (job *)ctx;
    return j->v->launch(&j->p->a);
}

/** v1's extra passes alone (bias kernel, GELU kernel), for the fusion lines of the report. */
static const char *unfused_epilogue(void *ctx)
{
    return linear_unfused_epilogue(&((problem *)ctx)->a);
}

/** One round trip of the intermediate (the bias kernel alone: one read and one write of Y). */
static const char *round_trip(void *ctx)
{
    return linear_round_trip(&((problem *)ctx)->a);
}

/** The job's variant (v3) with neither bias nor activation: stage 03's v7 GEMM as the fused variants run it. */
static const char *gemm_alone(void *ctx)
{
    const job *j = (const job *)ctx;
    linear_args a = j->p->a;
    a.bias = NULL, a.gelu = GELU_NONE;
    return j->v->launch(&a);
}

/** Poison Y, run once, compare the checked rows; every other element must be finite. */
static const char *run_and_check(void *ctx, wb_compare_result *res)
{
    job *j = (job *)ctx;
    problem *p = j->p;
    int M = p->a.M, N = p->a.N;
    size_t y = (size_t)M * N;
    wb_poison(p->a.Y, y * wb_dtype_bytes(p->dtype));
    const char *why = launch_variant(j);
    if (why) return why;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    if (p->dtype == WB_F16) {
        WB_CUDA_CHECK(cudaMemcpy(p->got16, p->a.Y, y * 2, cudaMemcpyDeviceToHost));
        wb_halves_to_floats(p->got16, p->got, y);
    } else {
        WB_CUDA_CHECK(cudaMemcpy(p->got, p->a.Y, y * 4, cudaMemcpyDeviceToHost));
    }
    char label[96];
    snprintf(label, sizeof label, "%s %dx%dx%d", j->v->id, M, N, p->a.K);
    *res = wb_compare_rows(p->got, p->ref, M, N, p->rows, p->n_rows, p->tol, label);
    return NULL;
}

static int runs_here(const wb_device *dev, const linear_variant *v)
{
    return wb_device_has_cc(dev, v->min_cc / 10, v->min_cc % 10);
}

/** Default mode: per shape and precision, every variant measured, then reported against the cuBLASLt peer. */
static int bench(const wb_device *dev, const wb_common_opts *opt, const int (*shapes)[3], int n_shapes, int with_bias,
                 gelu_kind gelu)
{
    wb_report rep;
    wb_report_begin(&rep, "stage04", dev->name, stdout);
    for (int s = 0; s < n_shapes; ++s) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        char size[64];
        snprintf(size, sizeof size, "%dx%dx%d", M, N, K);
        double flops = 2.0 * M * (double)N * K;
        for (int t = 0; t < 2; ++t) {
            wb_dtype dt = t ? WB_F16 : WB_F32;
            problem p;
            problem_init(&p, dt, M, N, K, with_bias, gelu, wb_seed_for((uint64_t)opt->seed, (uint64_t)s, (uint64_t)t));
            wb_row rows[16];
            const linear_variant *ran[16];
            double ms[16] = {0}, peer = 0.0;
            int n = 0;
            for (int i = 0; i < linear_variant_count; ++i) {
                const linear_variant *v = &linear_variants[i];
                if (v->dtype != dt || (opt->variant >= 0 && opt->variant != i && !v->is_peer)) continue;
                job j = {v, &p};
                ran[n] = v;
                wb_row row = {.problem = t ? "Y = GELU(X·W + b), fp16" : "Y = GELU(X·W + b), fp32", .size = size,
                              .variant = v->id, .what = v->what, .is_peer = v->is_peer, .unit = "TFLOP/s"};
                if (!runs_here(dev, v)) {
                    static char note[64];
                    snprintf(note, sizeof note, "skipped: needs sm_%d", v->min_cc);
                    row.status = WB_ROW_SKIPPED, row.note = note;
                } else {
                    wb_check_and_time(dev, opt, launch_variant, run_and_check, &j, &row);
                    row.throughput = wb_tflops(flops, row.time.median_ms);
                    row.flops = flops; /* and X, W, Y once, the bias once: the fewest bytes the layer moves */
                    row.bytes = ((double)M * K + (double)K * N + (double)M * N) * (double)wb_dtype_bytes(dt) + 4.0 * N;
                    if (row.status == WB_ROW_RAN) ms[n] = row.time.median_ms;
                    if (v->is_peer && row.status == WB_ROW_RAN && strncmp(v->id, "cublaslt", 8) == 0) peer = row.throughput;
                }
                rows[n++] = row;
            }
            for (int i = 0; i < n; ++i) { /* the roof: cuBLASLt with its fused epilogue, measured in this run */
                rows[i].peer = peer;
                wb_report_add(&rep, &rows[i]);
            }
            if (t == 0 && n >= 3 && strcmp(ran[0]->id, "v1") == 0 && strcmp(ran[2]->id, "v3") == 0 && ms[0] > 0 &&
                ms[2] > 0 && with_bias) {
                /* rows 0 and 2 are v1 and v3 (all fp32 variants ran: no --variant). v1 moves Y 5 times, v3 once. Time what fusion removes
                 * (one round trip of Y, and v1's two), and what the fused epilogue costs inside the GEMM. */
                wb_timing one, both, gemm;
                const char *why = wb_time_runs(dev, round_trip, &p, (int)opt->warmup, (int)opt->iters, &one);
                if (!why) why = wb_time_runs(dev, unfused_epilogue, &p, (int)opt->warmup, (int)opt->iters, &both);
                job v3 = {ran[2], &p};
                if (!why) why = wb_time_runs(dev, gemm_alone, &v3, (int)opt->warmup, (int)opt->iters, &gemm);
                double trip_mb = 2.0 * M * (double)N * 4.0 / 1e6;
                if (!why)
                    printf("  fusion (fp32): v1 − v3 = %.3f ms saved. One round trip of Y through memory (the bias "
                           "kernel alone, %.0f MB) takes %.3f ms; v1's two (bias and GELU kernels, %.0f MB) take %.3f ms.\n"
                           "  The GEMM alone takes %.3f ms: the fused epilogue costs %.3f ms inside v3.\n",
                           ms[0] - ms[2], trip_mb, one.median_ms, 2 * trip_mb, both.median_ms, gemm.median_ms,
                           ms[2] - gemm.median_ms);
            }
            problem_free(&p);
        }
    }
    return wb_report_finish(&rep, opt->csv);
}

/** --check: every variant, twice, on odd shapes and GPT-2's. */
static int check_sweep(const wb_device *dev, const wb_common_opts *opt, int with_bias, gelu_kind gelu)
{
    static const int shapes[][3] = {{1, 1, 1},       {3, 5, 7},        {17, 31, 29},     {64, 64, 64},
                                    {127, 129, 65},  {128, 256, 64},   {257, 264, 72},   {33, 3072, 768},
                                    {1000, 768, 3072}, {4097, 72, 40}, {4097, 1000, 520}, {8192, 3072, 768},
                                    {129, 136, 1100}, {333, 517, 2051}, /* these two: v4 splits K (2, 4 chunks) */
                                    {8192, 768, 3072}, {26879, 120, 200}}; /* v11's 192x128 tiles; the last 8 split */
    int checks = 0, failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        if ((long long)M * N * K > opt->check_max) continue;
        for (int t = 0; t < 2; ++t) {
            problem p;
            problem_init(&p, t ? WB_F16 : WB_F32, M, N, K, with_bias, gelu,
                         wb_seed_for((uint64_t)opt->seed, s, (uint64_t)t));
            printf("%5dx%-5dx%-5d %s %s", M, N, K, t ? "fp16" : "fp32", p.n_rows < M ? "(sampled rows)" : "              ");
            for (int i = 0; i < linear_variant_count; ++i) {
                const linear_variant *v = &linear_variants[i];
                if (v->dtype != p.dtype || (opt->variant >= 0 && opt->variant != i)) continue;
                if (!runs_here(dev, v)) {
                    printf(" %s:skipped(needs sm_%d)", v->id, v->min_cc);
                    continue;
                }
                job j = {v, &p};
                int r = wb_check_variant(v->id, run_and_check, &j, 2);
                checks += r >= 0;
                failed += r == 0;
            }
            printf("\n");
            problem_free(&p);
        }
    }
    printf("stage04 --check: %d checks, %d failed\n", checks, failed);
    return failed == 0 && checks > 0;
}

/** @brief Parse arguments, open the GPU (or exit 77), then --check or the timed tables. */
int main(int argc, char **argv)
{
    long long size[3] = {0, 0, 0};
    int gelu_choice = 0, no_bias = 0;
    const wb_option extra[] = {
        {"--size", "M N K", "Y (MxN) = GELU(X (MxK) · W (KxN) + b) (default: GPT-2's MLP, 8192x3072x768 and 8192x768x3072)",
         WB_OPT_INT, size, 3, 1, 65536, NULL},
        {"--gelu", "G", "tanh (GPT-2's gelu_new, the default) or erf (exact)", WB_OPT_CHOICE, &gelu_choice, 0, 0, 0,
         gelu_choices},
        {"--no-bias", NULL, "leave out the bias", WB_OPT_FLAG, &no_bias, 0, 0, 0, NULL},
    };
    const wb_program prog = {"stage04_fused_gelu_linear",
                             "Stage 04: Y = GELU(X·W + b), the bias and GELU fused into the GEMM's epilogue.", variant_ids, variant_help, NULL};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 3);
    if (size[0] * size[2] + size[2] * size[1] + size[0] * size[1] > (1LL << 31)) {
        wb_usage_error_exit(&prog, "X, W and Y together must hold at most 2^31 elements, got --size %lld %lld %lld",
                            size[0], size[1], size[2]);
    }

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    int ok;
    gelu_kind gelu = gelu_choice ? GELU_ERF : GELU_TANH;
    if (opt.check) {
        ok = check_sweep(&dev, &opt, !no_bias, gelu);
    } else {
        static const int gpt2[][3] = {{8192, 3072, 768}, {8192, 768, 3072}};
        int custom[1][3] = {{(int)size[0], (int)size[1], (int)size[2]}};
        printf("stage04_fused_gelu_linear: Y = GELU(X·W%s), GELU %s\n", no_bias ? "" : " + b", gelu_choices[gelu_choice]);
        wb_measure_copy_bandwidth(&dev);
        wb_device_print(&dev, stdout);
        printf("roof for this stage: cuBLASLt with its GELU_BIAS epilogue, measured in this run\n");
        ok = size[0] > 0 ? bench(&dev, &opt, (const int(*)[3])custom, 1, !no_bias, gelu)
                         : bench(&dev, &opt, gpt2, 2, !no_bias, gelu);
    }
    linear_release();
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
