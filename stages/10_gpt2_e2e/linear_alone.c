/**
 * @file stages/10_gpt2_e2e/linear_alone.c
 * @brief The decode linear alone (see linear_alone.h): the one kernel a decode
 *        step runs most, measured where nothing else hides it.
 */
#include "linear_alone.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "compare.h"
#include "cuda_check.h"
#include "fp16.h"
#include "gelu.h"
#include "gpt2.h" /* GPT2_LN_EPS */
#include "kernels.h"
#include "layernorm.h"
#include "measure.h"
#include "model.h" /* gpt2_fold_layernorm */
#include "rng.h"
#include "stage10.h" /* EXERCISE_VARIANT */

/** One problem: y = GELU([LayerNorm](x)·W + b), M rows, K inputs, N outputs, for one of the two kernels. */
typedef struct {
    wb_dtype dtype;     /**< storage of x, W and y */
    int M;              /**< rows */
    int N;              /**< outputs per row */
    int K;              /**< inputs per row */
    int fused;          /**< 0: v1's small-M linear (W as [K][N]); 1: v2's decode linear (W as [N][K]); 2: the exercise slot's (the same) */
    int with_ln;        /**< v2 only: LayerNorm of x first (its prologue; on the batch path folded into W) */
    int batch;          /**< v2 only: its batch path (3-64 rows, fp16, sm_80: the batch linear) */
    int residual;       /**< v2's batch path only: y += x·W + b (proj's epilogue) instead of y = GELU(x·W + b) */
    void *dres;         /**< with residual: device y as it was, copied to y before each run */
    float *ref;         /**< host: the reference (fp32; rounded to fp16 for fp16 storage) */
    float *got;         /**< host: the GPU's result as fp32 */
    uint16_t *got16;    /**< host: the GPU's fp16 result */
    void *dx;           /**< device x [M][K] */
    void *dw;           /**< device W, [K][N] or [N][K] */
    void *dw_kn;        /**< v2's batch path: W as [K][N] too, for the skinny linear past 768 inputs; or NULL */
    void *dy;           /**< device y [M][N] */
    float *db;          /**< device bias [N] */
    float *dgain;       /**< device LayerNorm gain [K] */
    float *dshift;      /**< device LayerNorm shift [K] */
    float *ws;          /**< device: the small-M linear's workspace */
    size_t ws_floats;   /**< its size */
    wb_tolerance tol;   /**< the check's tolerance */
} linear_alone;

/** Round n floats in place to what `dtype` stores (fp16: the nearest half), so the reference sees what the GPU holds. */
static void round_to_storage(float *x, size_t n, wb_dtype dtype)
{
    if (dtype != WB_F16) return;
    uint16_t *h = wb_host_alloc(n * 2, "rounding");
    wb_floats_to_halves(x, h, n);
    wb_halves_to_floats(h, x, n);
    free(h);
}

static void problem_init(linear_alone *p, wb_dtype dtype, int M, int N, int K, int fused, int with_ln, int batch,
                         int residual, uint64_t seed)
{
    size_t x = (size_t)M * K, w = (size_t)K * N, y = (size_t)M * N;
    *p = (linear_alone){.dtype = dtype, .M = M, .N = N, .K = K, .fused = fused, .with_ln = with_ln, .batch = batch,
                        .residual = residual};
    float *hx = wb_host_alloc(x * 4, "x"), *hw = wb_host_alloc(w * 4, "W"), *hb = wb_host_alloc((size_t)N * 4, "b");
    float *hg = wb_host_alloc((size_t)K * 4, "gain"), *hs = wb_host_alloc((size_t)K * 4, "shift");
    /* GPT-2-like scales, as stage 04: x ~ U(−1, 1), W ~ U(−1, 1)/√K; LayerNorm around gain 1 */
    wb_fill_uniform_f32(hx, x, -1.0f, 1.0f, seed);
    wb_fill_uniform_f32(hw, w, -1.0f / sqrtf((float)K), 1.0f / sqrtf((float)K), seed + 1);
    wb_fill_uniform_f32(hb, (size_t)N, -0.5f, 0.5f, seed + 2);
    wb_fill_uniform_f32(hg, (size_t)K, 0.5f, 1.5f, seed + 3);
    wb_fill_uniform_f32(hs, (size_t)K, -0.2f, 0.2f, seed + 4);
    round_to_storage(hx, x, dtype);
    round_to_storage(hw, w, dtype);
    /* the batch path folds the LayerNorm into W and the bias ([2][N]: then each output's weights' sum); the
     * reference takes the folded weights too, and the rows normalised without gain and shift, unrounded (the
     * kernel never stores them): what it checks is the kernel's statistics and epilogue */
    const int fold = batch && with_ln;
    float *hb2 = fold ? wb_host_alloc((size_t)2 * N * 4, "folded bias and sums") : NULL;
    if (fold) {
        float *folded = wb_host_alloc(w * 4, "folded W");
        if (gpt2_fold_layernorm(hw, hb, hg, hs, K, N, wb_round_to_half, folded, hb2)) abort();
        free(hw), hw = folded;
        for (int k = 0; k < K; ++k) hg[k] = 1.0f, hs[k] = 0.0f;
    }
    p->dx = wb_device_upload(hx, x, dtype, "x");
    p->dw = fused ? wb_device_upload_transposed(hw, (size_t)K, (size_t)N, dtype, "W transposed") /* v2: [N][K] */
                  : wb_device_upload(hw, w, dtype, "W");
    p->db = wb_device_upload(fold ? hb2 : hb, (size_t)(fold ? 2 : 1) * N, WB_F32, "b");
    p->dgain = wb_device_upload(hg, (size_t)K, WB_F32, "gain");
    p->dshift = wb_device_upload(hs, (size_t)K, WB_F32, "shift");
    p->dy = wb_device_alloc(y * wb_dtype_bytes(dtype), "y");
    p->ws_floats = gpt2_small_m_workspace_floats(N, K);
    if (batch) { /* the skinny linear's W and partial sums */
        p->dw_kn = wb_device_upload(hw, w, dtype, "W");
        size_t skinny = gpt2_skinny_workspace_floats(N, K);
        p->ws_floats = skinny > p->ws_floats ? skinny : p->ws_floats;
    }
    p->ws = wb_device_alloc(p->ws_floats * 4, "workspace");
    /* the reference: LayerNorm in fp32, rounded to the storage type as the GPU's prologue stores it (as
     * v1's LayerNorm kernel does), the product in float64 */
    float *xn = hx;
    if (with_ln) {
        xn = wb_host_alloc(x * 4, "LayerNorm(x)");
        ref_layernorm(hx, hg, hs, GPT2_LN_EPS, xn, NULL, NULL, (size_t)M, (size_t)K);
        if (!fold) round_to_storage(xn, x, dtype);
    }
    p->ref = wb_host_alloc(y * 4, "reference");
    p->got = wb_host_alloc(y * 4, "y");
    p->got16 = wb_host_alloc(y * 2, "y (fp16)");
    ref_linear_gelu_rows(xn, hw, fold ? hb2 : hb, residual ? GELU_NONE : GELU_TANH, p->ref, M, N, K, NULL, 0);
    if (residual) { /* y as it was, in the storage type: the reference adds it */
        float *hr = wb_host_alloc(y * 4, "residual");
        wb_fill_uniform_f32(hr, y, -2.0f, 2.0f, seed + 5);
        round_to_storage(hr, y, dtype);
        for (size_t i = 0; i < y; ++i) p->ref[i] += hr[i];
        p->dres = wb_device_upload(hr, y, dtype, "residual");
        free(hr);
    }
    if (dtype == WB_F16) { /* the GPU rounds y to fp16: so does the reference */
        wb_floats_to_halves(p->ref, p->got16, y);
        wb_halves_to_floats(p->got16, p->ref, y);
    }
    /* stage 04's tolerance for a K-long fp32-accumulated product with GELU, and LayerNorm's rsqrtf */
    p->tol.atol = (dtype == WB_F16 ? 1e-3 : 1e-5) + 1e-7 * K;
    p->tol.rtol = dtype == WB_F16 ? 1.5 * ldexp(1.0, -10) : 2e-5;
    if (xn != hx) free(xn);
    free(hx), free(hw), free(hb), free(hb2), free(hg), free(hs);
}

static void problem_free(linear_alone *p)
{
    void *d[] = {p->dx, p->dw, p->dw_kn, p->dy, p->db, p->dgain, p->dshift, p->ws, p->dres};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i) WB_CUDA_CHECK(cudaFree(d[i]));
    free(p->ref), free(p->got), free(p->got16);
}

/** One run, as timed. */
static const char *run(void *ctx)
{
    linear_alone *p = ctx;
    if (!p->fused)
        return gpt2_linear_small_m(p->dtype, p->dx, p->dw, p->db, p->dy, p->M, p->N, p->K, 1, p->ws, p->ws_floats);
    const int fold = p->batch && p->with_ln; /* the batch path: the LayerNorm folded into W */
    decode_linear_args a = {.epilogue = p->residual ? DECODE_RESIDUAL : DECODE_GELU, .x = p->dx,
                            .ln_w = p->with_ln && !fold ? p->dgain : NULL, .ln_b = p->with_ln ? p->dshift : NULL,
                            .w_t = p->dw, .bias = p->db, .y = p->dy, .M = p->M, .N = p->N, .K = p->K,
                            .ln_folded = fold};
    decode_batch_args skinny = {.w = p->dw_kn, .partials = p->ws, .partials_floats = p->ws_floats}; /* past K 768 */
    if (p->fused == 2) return gpt2_decode_linear_exercise(p->dtype, &a);
    return gpt2_decode_linear(p->dtype, &a, p->batch ? &skinny : NULL);
}

/** One checked run: y poisoned, run, compared with the reference. */
static const char *run_and_check(void *ctx, wb_compare_result *res)
{
    linear_alone *p = ctx;
    size_t y = (size_t)p->M * p->N;
    if (p->residual) /* y is an input too: as it was */
        WB_CUDA_CHECK(cudaMemcpy(p->dy, p->dres, y * wb_dtype_bytes(p->dtype), cudaMemcpyDeviceToDevice));
    else
        wb_poison(p->dy, y * wb_dtype_bytes(p->dtype));
    const char *why = run(p);
    if (why) return why;
    if (p->dtype == WB_F16) {
        WB_CUDA_CHECK(cudaMemcpy(p->got16, p->dy, y * 2, cudaMemcpyDeviceToHost));
        wb_halves_to_floats(p->got16, p->got, y);
    } else {
        WB_CUDA_CHECK(cudaMemcpy(p->got, p->dy, y * 4, cudaMemcpyDeviceToHost));
    }
    *res = wb_compare_f32(p->got, p->ref, y, p->tol, "y", 3);
    return NULL;
}

/** The decode linears, as stage 10's variants number them: v1's small-M linear, v2's fused decode linear, and the
 *  exercise slot's (index 2 here, EXERCISE_VARIANT on the command line). */
static const char *const ids[] = {"v1", "v2", "ex"};

/**
 * One case of the check, twice (a second run must work too), with the fused
 * kernel's shared memory capped at smem_cap bytes (0: the GPU's own limit), on
 * its batch path with `batch` (and there with the residual epilogue with `residual`).
 * Returns 1 when it fails; a refusal is a failure: these shapes are in the contract.
 */
static int check_case(int v, wb_dtype dtype, int M, int N, int K, int ln, int batch, int residual, size_t smem_cap,
                      uint64_t seed)
{
    linear_alone p;
    problem_init(&p, dtype, M, N, K, v, ln, batch, residual, seed);
    char what[96];
    snprintf(what, sizeof what, "linear alone, %s, M %d, K %d, N %d%s%s", wb_dtype_name(dtype), M, K, N,
             ln ? (batch ? ", LayerNorm folded" : ", LayerNorm first") : residual ? ", residual" : "",
             batch ? ", batch path" : smem_cap ? ", 64 KB a block" : "");
    printf("  %-58s", what);
    gpt2_decode_linear_smem_cap(smem_cap);
    int ok = wb_check_variant(ids[v], run_and_check, &p, 2);
    gpt2_decode_linear_smem_cap(0);
    printf("\n");
    problem_free(&p);
    if (v == 2 && ok < 0) return -1; /* the exercise slot refused (not written yet, or fp16): not a check */
    return ok != 1;
}

/** @brief Whether --dtype's choice (0 all, 1 fp32, 2 fp16) takes `dtype`. */
static int chosen(int choice, wb_dtype dtype) { return choice == 0 || (choice == 1) == (dtype == WB_F32); }

int check_linears_alone(int variant, int dtype_choice, int *checks)
{
    /* odd N; K a multiple of 8 but not of a round of v2's loads (1024 fp32, 2048 fp16 values), nor of 256 */
    static const int shapes[][2] = {{776, 2309}, {3080, 771}}; /* K, N */
    static const int rows[] = {1, 2, 3, 5, 8}; /* v2 instantiates 1, 2, 4 and 8 rows: 3 and 5 pad with zeros */
    static const int batch_rows[] = {3, 17, 33, 64};
    int failed = 0, cc;
    wb_current_gpu(&cc, NULL);
    for (int v = 0; v < 2; ++v)
        for (int f = 0; f < 2; ++f) {
            const wb_dtype dtype = f ? WB_F16 : WB_F32;
            if ((variant >= 0 && variant != v) || !chosen(dtype_choice, dtype)) continue;
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
                for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r)
                    for (int ln = 0; ln <= v; ++ln, ++*checks)
                        failed +=
                            check_case(v, dtype, rows[r], shapes[s][1], shapes[s][0], ln, 0, 0, 0, 1000 + 10 * s + r);
            if (v == 1 && !f) /* the T4's path: 8 fp32 rows of K 3080 (98 KB) exceed its 64 KB a block: in groups */
                failed += check_case(v, dtype, 8, 771, 3080, 1, 0, 0, 64 * 1024, 1100), ++*checks;
            if (v == 1 && f && cc >= 80) /* its batch path: the batch linear in 1, 2 and 4 tiles of 16 rows, K 760 (not
                                            * a multiple of 16), with and without a folded LayerNorm (K 128 too), with
                                            * the residual epilogue; past 768 inputs the skinny linear and its second
                                            * pass (N a multiple of 8 there: its rows are copied 16 bytes at a time) */
                for (size_t r = 0; r < sizeof batch_rows / sizeof batch_rows[0]; ++r, *checks += 5) {
                    failed += check_case(v, dtype, batch_rows[r], 771, 760, 0, 1, 0, 0, 1200 + r);
                    failed += check_case(v, dtype, batch_rows[r], 771, 760, 1, 1, 0, 0, 1250 + r);
                    failed += check_case(v, dtype, batch_rows[r], 136, 128, 1, 1, 0, 0, 1270 + r);
                    failed += check_case(v, dtype, batch_rows[r], 771, 760, 0, 1, 1, 0, 1280 + r);
                    failed += check_case(v, dtype, batch_rows[r], 776, 1032, 0, 1, 0, 0, 1300 + r);
                }
        }
    /* the exercise slot (exercise.cu): v2's shapes and rows, LayerNorm first, fp32 */
    if ((variant < 0 || variant == EXERCISE_VARIANT) && chosen(dtype_choice, WB_F32))
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
                int f = check_case(2, WB_F32, rows[r], shapes[s][1], shapes[s][0], 1, 0, 0, 0, 1000 + 10 * s + r);
                if (f < 0) return failed; /* not written yet: said once */
                failed += f, ++*checks;
            }
    return failed;
}

void bench_linears_alone(const wb_device *dev, const wb_common_opts *opt, int dtype_choice, wb_report *rep)
{
    static const struct {
        int K, N;
        const char *layer;
    } shapes[] = {{768, 2304, "QKV"}, {3072, 768, "fc-proj"}, {768, 50257, "LM head"}};
    static const char *const what[] = {"small-M linear: a thread per column, split K, 2 passes",
                                       "v2's decode linear: a warp per 2 outputs, W transposed",
                                       "your kernel (exercise.cu)"};
    char problem[96], size[64];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int f = 0; f < 2; ++f) {
            const wb_dtype dtype = f ? WB_F16 : WB_F32;
            if (!chosen(dtype_choice, dtype)) continue;
            snprintf(problem, sizeof problem, "decode linear alone (%s), M 1, %s", shapes[s].layer, wb_dtype_name(dtype));
            snprintf(size, sizeof size, "K%d x N%d", shapes[s].K, shapes[s].N);
            for (int v = 0; v < 3; ++v) {
                if (opt->variant >= 0 && opt->variant != (v == 2 ? EXERCISE_VARIANT : v)) continue;
                linear_alone p;
                problem_init(&p, dtype, 1, shapes[s].N, shapes[s].K, v, 0, 0, 0, 77 + s);
                wb_row row = {.problem = problem, .size = size, .variant = ids[v], .what = what[v], .unit = "GB/s",
                              .roof = dev->copy_gbps};
                wb_check_and_time(dev, opt, run, run_and_check, &p, &row);
                /* the weights, once; x and y are a few KB */
                double bytes = ((double)p.K * p.N + p.K + p.N) * (double)wb_dtype_bytes(dtype);
                row.throughput = wb_gbps(bytes, row.time.median_ms);
                row.bytes = bytes, row.flops = 2.0 * p.M * (double)p.N * p.K;
                wb_report_add(rep, &row);
                problem_free(&p);
            }
        }
}
