/**
 * @file stages/03_gemm/main.c
 * @brief Stage 03 host program: C = A·B in fp32 (v1–v7, cuBLAS SGEMM) and on
 *        tensor cores in fp16 (v8, v9, cuBLAS HGEMM), checked against a float64 CPU
 *        reference and timed; throughput as a fraction of cuBLAS.
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
#include "gemm.h"
#include "kernels.h"
#include "measure.h"
#include "report.h"
#include "rng.h"

/** @brief Products larger than this many multiply-adds are checked on a sample of rows. */
#define FULL_CHECK_MAX_MACS (1LL << 27)
/** @brief Rows of C the reference computes for a large product. */
#define SAMPLED_ROWS 64

static const char *const variant_ids[] = {"v1", "v2", "v3", "v4", "v5", "v6", "v7", "cublas", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "cublas-h", "ex", NULL};
/** One line per variant for --help: its idea, what it takes, the hardware it needs. */
static const char *const variant_help[] = {
    "naive, a thread per element of C, uncoalesced (fp32, sm_75)",
    "naive, coalesced: threadIdx.x along a row (fp32, sm_75)",
    "32x32 shared-memory tiles (fp32, sm_75)",
    "1-D register tile: 8 outputs per thread (fp32, sm_75)",
    "2-D register tile: 8x8 outputs per thread (fp32, sm_75)",
    "v5 + float4 loads, A transposed in shared memory (fp32, sm_75)",
    "warp tiles, double-buffered shared memory (fp32, sm_75)",
    "cuBLAS SGEMM, the fp32 peer (TF32 off)",
    "tensor cores: WMMA 16x16x16, fp32 accumulation (fp16, sm_75)",
    "mma.sync m16n8k16 + ldmatrix + a 3-stage cp.async pipeline (fp16, sm_80)",
    "Hopper: TMA + wgmma, warp-specialized (fp16, sm_90a)",
    "v10 persistent: a block per SM, its loads run ahead (fp16, sm_90a)",
    "v11 + the epilogue in registers, the tile stored by TMA (fp16, sm_90a)",
    "v12 + the last wave's tiles split along K (fp16, sm_90a)",
    "v13 + the tile shape from the waves: 128x256 or 192x128 (fp16, sm_90a)",
    "cuBLAS GemmEx fp16 in and out, fp32 accumulation: the fp16 peer",
    "your kernel: 32x32 shared-memory tiles, in exercise.cu (fp32, sm_75)"};

/** One problem: A, B and C on host and device, in one precision. */
typedef struct {
    wb_dtype dtype;     /**< WB_F32, or WB_F16 (fp16 in and out, fp32 accumulation) */
    int M;              /**< rows of A and C */
    int N;              /**< columns of B and C */
    int K;              /**< the shared dimension */
    float *A;           /**< host A as fp32 (for fp16: after rounding) */
    float *B;           /**< host B as fp32 */
    uint16_t *A16;      /**< host A, fp16 bits */
    uint16_t *B16;      /**< host B, fp16 bits */
    float *ref;         /**< reference C (only the checked rows are filled) */
    float *got;         /**< GPU C as fp32 */
    uint16_t *got16;    /**< GPU C, fp16 bits */
    int *rows;          /**< the rows checked */
    int n_rows;         /**< how many */
    void *d_A;          /**< device A */
    void *d_B;          /**< device B */
    void *d_C;          /**< device C */
    wb_tolerance tol;   /**< the check's tolerance */
} problem;

static void problem_init(problem *p, wb_dtype dtype, int M, int N, int K, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->dtype = dtype, p->M = M, p->N = N, p->K = K;
    size_t a = (size_t)M * K, b = (size_t)K * N, c = (size_t)M * N, es = wb_dtype_bytes(dtype);
    p->A = wb_host_alloc(a * 4, "A");
    p->B = wb_host_alloc(b * 4, "B");
    p->A16 = wb_host_alloc(a * 2, "A (fp16)");
    p->B16 = wb_host_alloc(b * 2, "B (fp16)");
    p->ref = wb_host_alloc(c * 4, "reference C");
    p->got = wb_host_alloc(c * 4, "C");
    p->got16 = wb_host_alloc(c * 2, "C (fp16)");
    wb_fill_uniform_f32(p->A, a, -1.0f, 1.0f, seed);
    wb_fill_uniform_f32(p->B, b, -1.0f, 1.0f, seed + 1);
    if (dtype == WB_F16) { /* the reference multiplies what the GPU multiplies */
        wb_floats_to_halves(p->A, p->A16, a);
        wb_halves_to_floats(p->A16, p->A, a);
        wb_floats_to_halves(p->B, p->B16, b);
        wb_halves_to_floats(p->B16, p->B, b);
    }
    /* every row for small products; the first, the last and random rows for large ones */
    p->n_rows = wb_rows_to_check(M, (long long)M * N * K, FULL_CHECK_MAX_MACS, SAMPLED_ROWS, seed + 2, &p->rows);
    ref_gemm_rows(p->A, p->B, p->ref, M, N, K, p->rows, p->n_rows);
    if (dtype == WB_F16) /* an fp16 C can only be the reference rounded to fp16 */
        for (int i = 0; i < p->n_rows; ++i) {
            float *row = p->ref + (size_t)p->rows[i] * N;
            wb_floats_to_halves(row, p->got16, (size_t)N);
            wb_halves_to_floats(p->got16, row, (size_t)N);
        }
    /* fp32: rounding of a K-term dot product in another order (~1e-7 per term);
     * fp16: one fp16 step (2^-10 relative) from rounding the output, plus that */
    p->tol.atol = (dtype == WB_F16 ? 1e-4 : 0.0) + 1e-7 * K;
    p->tol.rtol = dtype == WB_F16 ? 1.5 * ldexp(1.0, -10) : 1e-6;
    p->d_A = wb_device_alloc(a * es, "A");
    p->d_B = wb_device_alloc(b * es, "B");
    p->d_C = wb_device_alloc(c * es, "C");
    WB_CUDA_CHECK(cudaMemcpy(p->d_A, dtype == WB_F16 ? (void *)p->A16 : (void *)p->A, a * es, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(p->d_B, dtype == WB_F16 ? (void *)p->B16 : (void *)p->B, b * es, cudaMemcpyHostToDevice));
}

static void problem_free(problem *p)
{
    void *host[] = {p->A, p->B, p->A16, p->B16, p->ref, p->got, p->got16, p->rows};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; ++i) free(host[i]);
    void *dev[] = {p->d_A, p->d_B, p->d_C};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) WB_CUDA_CHECK(cudaFree(dev[i]));
}

/** What one run needs. */
typedef struct {
    const gemm_variant *v; /**< the variant */
    problem *p;            /**< its data */
} job;

static const char *launch_variant(void *ctx)
{
    job *j = (job *)ctx;
    return j->v->launch(j->p->d_A, j->p->d_B, j->p->d_C, j->p->M, j->p->N, j->p->K);
}

/** Poison C, run once, compare the checked rows, and make sure no element anywhere is NaN. */
static const char *run_and_check(void *ctx, wb_compare_result *res)
{
    job *j = (job *)ctx;
    problem *p = j->p;
    size_t c = (size_t)p->M * p->N;
    wb_poison(p->d_C, c * wb_dtype_bytes(p->dtype));
    const char *why = launch_variant(j);
    if (why) return why;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    if (p->dtype == WB_F16) {
        WB_CUDA_CHECK(cudaMemcpy(p->got16, p->d_C, c * 2, cudaMemcpyDeviceToHost));
        wb_halves_to_floats(p->got16, p->got, c);
    } else {
        WB_CUDA_CHECK(cudaMemcpy(p->got, p->d_C, c * 4, cudaMemcpyDeviceToHost));
    }
    char label[96];
    snprintf(label, sizeof label, "%s %dx%dx%d", j->v->id, p->M, p->N, p->K);
    *res = wb_compare_rows(p->got, p->ref, p->M, p->N, p->rows, p->n_rows, p->tol, label);
    return NULL;
}

static int runs_here(const wb_device *dev, const gemm_variant *v)
{
    return wb_device_has_cc(dev, v->min_cc / 10, v->min_cc % 10);
}

/** Default mode: every variant of each precision measured on M×N×K, then reported with its peer as the roof. */
static void bench(const wb_device *dev, const wb_common_opts *opt, int M, int N, int K, wb_report *rep)
{
    char size[64];
    snprintf(size, sizeof size, "%dx%dx%d", M, N, K);
    double flops = 2.0 * M * (double)N * K;
    const wb_dtype dtypes[] = {WB_F32, WB_F16};
    for (int t = 0; t < 2; ++t) {
        problem p;
        problem_init(&p, dtypes[t], M, N, K, wb_seed_for((uint64_t)opt->seed, (uint64_t)M * 7 + N, (uint64_t)K));
        wb_row rows[16];
        int n = 0;
        double peer = 0.0;
        for (int i = 0; i < gemm_variant_count; ++i) {
            const gemm_variant *v = &gemm_variants[i];
            if (v->dtype != dtypes[t] || (opt->variant >= 0 && opt->variant != i && !v->is_peer)) continue;
            job j = {v, &p};
            wb_row row = {.problem = t ? "C = A·B, fp16 in and out, fp32 accumulate" : "C = A·B, fp32",
                          .size = size, .variant = v->id, .what = v->what, .is_peer = v->is_peer,
                          .unit = "TFLOP/s"};
            if (!runs_here(dev, v)) {
                static char note[64];
                snprintf(note, sizeof note, "skipped: needs sm_%d", v->min_cc);
                row.status = WB_ROW_SKIPPED, row.note = note;
            } else {
                wb_check_and_time(dev, opt, launch_variant, run_and_check, &j, &row);
                row.throughput = wb_tflops(flops, row.time.median_ms);
                row.flops = flops; /* and each of A, B, C once: the fewest bytes a GEMM moves */
                row.bytes = ((double)M * K + (double)K * N + (double)M * N) * (double)wb_dtype_bytes(dtypes[t]);
                if (v->is_peer && row.status == WB_ROW_RAN) peer = row.throughput;
            }
            rows[n++] = row;
        }
        for (int i = 0; i < n; ++i) { /* the roof of a compute-bound stage is the peer, measured in this run */
            rows[i].peer = peer;
            wb_report_add(rep, &rows[i]);
        }
        problem_free(&p);
    }
}

/** --check: every variant, twice, on shapes around every tile size, primes, tall and skinny. */
static int check_sweep(const wb_device *dev, const wb_common_opts *opt)
{
    static const int shapes[][3] = {{1, 1, 1},       {2, 3, 4},        {7, 13, 5},     {17, 31, 29},
                                    {33, 65, 17},    {64, 64, 64},     {127, 129, 65}, {128, 128, 128},
                                    {129, 257, 31},  {257, 255, 253},  {1000, 999, 998}, {4097, 67, 33},
                                    {31, 4097, 129}, {1, 8, 8},        {129, 264, 72}, {333, 520, 1032},
                                    {4097, 264, 136}, {4097, 1000, 520}, {8192, 3072, 768},
                                    {26879, 120, 200}}; /* v14: 140 tiles of 192x128 on 132 SMs, the last 8 split */
    int checks = 0, failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        if ((long long)M * N * K > opt->check_max) continue;
        for (int t = 0; t < 2; ++t) {
            problem p;
            problem_init(&p, t ? WB_F16 : WB_F32, M, N, K, wb_seed_for((uint64_t)opt->seed, s, (uint64_t)t));
            printf("%5dx%-5dx%-5d %s %s", M, N, K, t ? "fp16" : "fp32", p.n_rows < M ? "(sampled rows)" : "              ");
            for (int i = 0; i < gemm_variant_count; ++i) {
                const gemm_variant *v = &gemm_variants[i];
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
    printf("stage03 --check: %d checks, %d failed\n", checks, failed);
    return failed == 0 && checks > 0;
}

/** @brief Parse arguments, open the GPU (or exit 77), then --check or the timed tables. */
int main(int argc, char **argv)
{
    long long size[3] = {0, 0, 0}; /* not given: the two default shapes below */
    const wb_option extra[] = {
        {"--size", "M N K", "C (MxN) = A (MxK) · B (KxN), row-major (default: 4096 4096 4096, then 8192 768 3072)",
         WB_OPT_INT, size, 3, 1, 65536, NULL},
    };
    const wb_program prog = {"stage03_gemm", "Stage 03: matrix multiplication C = A·B (row-major), fp32 and fp16.",
                             variant_ids, variant_help, NULL};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 1);
    if (size[0] * size[2] + size[2] * size[1] + size[0] * size[1] > (1LL << 31)) {
        wb_usage_error_exit(&prog, "A, B and C together must hold at most 2^31 elements, got --size %lld %lld %lld",
                            size[0], size[1], size[2]);
    }

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    int ok;
    if (opt.check) {
        ok = check_sweep(&dev, &opt);
    } else {
        /* The default shapes: the square 4096³, and GPT-2's MLP down-projection at 8192 tokens (8192×768×3072): few
         * tiles of C (192 of 128×256 for 132 SMs) and a deep K, where the last wave and the tile shape decide */
        static const int default_shapes[][3] = {{4096, 4096, 4096}, {8192, 768, 3072}};
        const int given = size[0] > 0, n_shapes = given ? 1 : 2;
        wb_report rep;
        wb_report_begin(&rep, "stage03", dev.name, stdout);
        wb_device_print(&dev, stdout);
        printf("roof for this stage: the cuBLAS peer of each precision, measured in this run\n");
        for (int s = 0; s < n_shapes; ++s) {
            int M = given ? (int)size[0] : default_shapes[s][0], N = given ? (int)size[1] : default_shapes[s][1],
                K = given ? (int)size[2] : default_shapes[s][2];
            printf("\nstage03_gemm: C = A·B, M=%d N=%d K=%d (row-major)\n", M, N, K);
            bench(&dev, &opt, M, N, K, &rep);
        }
        ok = wb_report_finish(&rep, opt.csv);
    }
    gemm_release();
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
