/**
 * @file stages/07_rope/main.c
 * @brief Stage 07 host program: RoPE on Q and K ([B, H, N, d]), both conventions,
 *        fp32 and fp16, checked against a float64 reference up to position 32768,
 *        timed; and the angle-accuracy study.
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
#include "report.h"
#include "rng.h"
#include "rope.h"
#include "timing.h" /* wb_measure_copy_bandwidth: the roof */

static const char *const variant_ids[] = {"v1", "v2", "v3", "ex", NULL};
/** One line per variant for --help: its idea, what it takes, the hardware it needs. */
static const char *const variant_help[] = {
    "a cos/sin table, a thread per pair, Q then K (even d, sm_75)",
    "the angles in the kernel (range-reduced), a thread per pair (even d, sm_75)",
    "Q and K in one launch, 16-byte loads, angles shared by Q and K (16-byte aligned; sm_75)",
    "your kernel: sin and cos in the kernel, a thread per pair, in exercise.cu (fp32, sm_75)"};
static const char *const style_choices[] = {"all", "rotate-half", "interleaved", NULL};
static const char *const dtype_choices[] = {"all", "fp32", "fp16", NULL};
static const char *const style_names[] = {"rotate-half", "interleaved"};

/** Tolerances (see the page): fp32 allows a few 1e-7 of angle and sine error per term. */
static const wb_tolerance tol_f32 = {4e-6, 1e-6}, tol_f16 = {1e-4, 1e-3};

/** One problem: Q and K, their references, the tables, device buffers. */
typedef struct {
    rope_args a;          /**< the launch arguments (device pointers) */
    double base;          /**< θ_i = pos · base^(−2i/d) */
    size_t n;             /**< elements per tensor */
    float *q;             /**< host queries as fp32 (for fp16: after rounding) */
    float *k;             /**< host keys as fp32 */
    uint16_t *q16;        /**< host queries, fp16 bits */
    uint16_t *k16;        /**< host keys, fp16 bits */
    float *ref_q;         /**< reference rotated queries */
    float *ref_k;         /**< reference rotated keys */
    float *got;           /**< a result copied back, as fp32 */
    uint16_t *got16;      /**< a result copied back, fp16 bits */
    void *d_q;            /**< device queries */
    void *d_k;            /**< device keys */
    void *d_qo;           /**< device rotated queries */
    void *d_ko;           /**< device rotated keys */
    float *d_table;       /**< device cos/sin table */
    float *d_freq;        /**< device (hi, lo) inverse frequencies */
} problem;

static void problem_init(problem *p, wb_dtype dtype, rope_style style, int B, int H, int N, int d, long long start,
                         double base)
{
    memset(p, 0, sizeof *p);
    p->n = (size_t)B * H * N * d;
    size_t es = wb_dtype_bytes(dtype), n = p->n;
    p->base = base;
    p->q = wb_host_alloc(n * 4, "q");
    p->k = wb_host_alloc(n * 4, "k");
    p->q16 = wb_host_alloc(n * 2, "q (fp16)");
    p->k16 = wb_host_alloc(n * 2, "k (fp16)");
    p->ref_q = wb_host_alloc(n * 4, "reference q");
    p->ref_k = wb_host_alloc(n * 4, "reference k");
    p->got = wb_host_alloc(n * 4, "result");
    p->got16 = wb_host_alloc(n * 2, "result (fp16)");
    p->d_q = wb_device_alloc(n * es, "q");
    p->d_k = wb_device_alloc(n * es, "k");
    p->d_qo = wb_device_alloc(n * es, "q out");
    p->d_ko = wb_device_alloc(n * es, "k out");

    /* the table of v1 and the split frequencies of v2/v3, from float64 */
    int half = d / 2;
    long long positions = start + N;
    float *table = wb_host_alloc((size_t)positions * half * 2 * 4, "cos/sin table");
    float *freq = wb_host_alloc((size_t)half * 2 * 4, "frequencies");
    for (int i = 0; i < half; ++i) {
        double w = pow(base, -2.0 * i / d);
        freq[2 * i] = (float)w;
        freq[2 * i + 1] = (float)(w - (double)freq[2 * i]);
    }
    for (long long pos = 0; pos < positions; ++pos)
        for (int i = 0; i < half; ++i) {
            double theta = ref_rope_angle(pos, i, d, base);
            table[(pos * half + i) * 2] = (float)cos(theta);
            table[(pos * half + i) * 2 + 1] = (float)sin(theta);
        }
    p->d_table = wb_device_alloc((size_t)positions * half * 2 * 4, "cos/sin table");
    p->d_freq = wb_device_alloc((size_t)half * 2 * 4, "frequencies");
    WB_CUDA_CHECK(cudaMemcpy(p->d_table, table, (size_t)positions * half * 2 * 4, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(p->d_freq, freq, (size_t)half * 2 * 4, cudaMemcpyHostToDevice));
    free(table);
    free(freq);

    rope_args a = {dtype, style, p->d_q, p->d_k, p->d_qo, p->d_ko, B, H, N, d, start, p->d_table, p->d_freq};
    p->a = a;
}

static void problem_free(problem *p)
{
    void *host[] = {p->q, p->k, p->q16, p->k16, p->ref_q, p->ref_k, p->got, p->got16};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; ++i) free(host[i]);
    void *dev[] = {p->d_q, p->d_k, p->d_qo, p->d_ko, p->d_table, p->d_freq};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) WB_CUDA_CHECK(cudaFree(dev[i]));
}

/* Inputs uniform in [−1, 1); the reference in float64 from the values the GPU sees. */
static void make_data(problem *p, uint64_t seed)
{
    const rope_args *a = &p->a;
    int half16 = a->dtype == WB_F16;
    float *in[2] = {p->q, p->k}, *ref[2] = {p->ref_q, p->ref_k};
    uint16_t *in16[2] = {p->q16, p->k16};
    void *dev[2] = {p->d_q, p->d_k};
    for (int t = 0; t < 2; ++t) {
        wb_fill_uniform_f32(in[t], p->n, -1.0f, 1.0f, seed + (uint64_t)t);
        if (half16) {
            wb_floats_to_halves(in[t], in16[t], p->n);
            wb_halves_to_floats(in16[t], in[t], p->n);
        }
        ref_rope(in[t], ref[t], a->B, a->H, a->N, a->d, a->start_pos, p->base, a->style);
        if (half16) { /* an fp16 output can only be the reference rounded to fp16 */
            wb_floats_to_halves(ref[t], p->got16, p->n);
            wb_halves_to_floats(p->got16, ref[t], p->n);
        }
        WB_CUDA_CHECK(cudaMemcpy(dev[t], half16 ? (void *)in16[t] : (void *)in[t], p->n * wb_dtype_bytes(a->dtype),
                                 cudaMemcpyHostToDevice));
    }
}

/** What one run needs. */
typedef struct {
    const rope_variant *v; /**< the variant */
    problem *p;            /**< its data */
    int in_place;          /**< check in place: q_out = q, k_out = k */
} job;

static const char *launch_variant(void *ctx)
{
    job *j = (job *)ctx;
    return j->v->launch(&j->p->a);
}

static wb_compare_result compare_tensor(problem *p, const void *d_out, const float *ref, const char *label)
{
    if (p->a.dtype == WB_F16) {
        WB_CUDA_CHECK(cudaMemcpy(p->got16, d_out, p->n * 2, cudaMemcpyDeviceToHost));
        wb_halves_to_floats(p->got16, p->got, p->n);
        return wb_compare_f32(p->got, ref, p->n, tol_f16, label, 5);
    }
    WB_CUDA_CHECK(cudaMemcpy(p->got, d_out, p->n * 4, cudaMemcpyDeviceToHost));
    return wb_compare_f32(p->got, ref, p->n, tol_f32, label, 5);
}

/** Poison the outputs (or, in place, start from a copy of the inputs), run once, compare Q and K. */
static const char *run_and_check(void *ctx, wb_compare_result *res)
{
    job *j = (job *)ctx;
    problem *p = j->p;
    size_t bytes = p->n * wb_dtype_bytes(p->a.dtype);
    rope_args a = p->a;
    if (j->in_place) {
        WB_CUDA_CHECK(cudaMemcpy(p->d_qo, p->d_q, bytes, cudaMemcpyDeviceToDevice));
        WB_CUDA_CHECK(cudaMemcpy(p->d_ko, p->d_k, bytes, cudaMemcpyDeviceToDevice));
        a.q = a.q_out, a.k = a.k_out;
    } else {
        wb_poison(p->d_qo, bytes);
        wb_poison(p->d_ko, bytes);
    }
    const char *why = j->v->launch(&a);
    if (why) return why;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    char label[96];
    snprintf(label, sizeof label, "%s%s Q", j->v->id, j->in_place ? " in place" : "");
    wb_compare_result rq = compare_tensor(p, p->d_qo, p->ref_q, label);
    label[strlen(label) - 1] = 'K';
    wb_compare_result rk = compare_tensor(p, p->d_ko, p->ref_k, label);
    *res = rq.worst_frac >= rk.worst_frac ? rq : rk;
    res->ok = rq.ok && rk.ok;
    res->n_bad = rq.n_bad + rk.n_bad;
    res->max_abs_err = fmax(rq.max_abs_err, rk.max_abs_err);
    return NULL;
}

/** --check's run: out of place (outputs poisoned), then in place; both must match. */
static const char *check_both_ways(void *ctx, wb_compare_result *res)
{
    job *j = (job *)ctx;
    wb_compare_result in_place;
    j->in_place = 0;
    const char *why = run_and_check(j, res);
    j->in_place = 1;
    if (!why) why = run_and_check(j, &in_place);
    j->in_place = 0;
    if (!why) res->ok = res->ok && in_place.ok;
    return why;
}

/** Bytes every variant must move: Q and K read and written (+ the table rows used, once, for v1). */
static double min_bytes(const problem *p, const rope_variant *v)
{
    double bytes = 4.0 * (double)p->n * (double)wb_dtype_bytes(p->a.dtype);
    if (v->reads_table) bytes += (double)p->a.N * (p->a.d / 2) * 8.0;
    return bytes;
}

static const char *problem_name(const problem *p)
{
    static char buf[64];
    snprintf(buf, sizeof buf, "RoPE %s, %s", style_names[p->a.style], wb_dtype_name(p->a.dtype));
    return buf;
}

/** The angle study: max error of sin θ and cos θ, three ways, at growing positions. */
static void angle_study(double base)
{
    enum { D = 128, HALF = D / 2 };
    static const long long positions[] = {1, 100, 1000, 4096, 16384, 32767, 131071, 1048575};
    const int n_pos = (int)(sizeof positions / sizeof positions[0]);
    float freq[2 * HALF];
    for (int i = 0; i < HALF; ++i) {
        double w = pow(base, -2.0 * i / D);
        freq[2 * i] = (float)w, freq[2 * i + 1] = (float)(w - (double)freq[2 * i]);
    }
    long long *d_pos = wb_device_alloc(sizeof positions, "positions");
    float *d_freq = wb_device_alloc(sizeof freq, "frequencies");
    size_t out_n = (size_t)n_pos * HALF * ANGLE_METHODS * 2;
    float *d_out = wb_device_alloc(out_n * 4, "angle study");
    float *out = wb_host_alloc(out_n * 4, "angle study");
    WB_CUDA_CHECK(cudaMemcpy(d_pos, positions, sizeof positions, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(d_freq, freq, sizeof freq, cudaMemcpyHostToDevice));
    rope_angle_study(d_pos, n_pos, D, d_freq, d_out);
    WB_CUDA_CHECK(cudaMemcpy(out, d_out, out_n * 4, cudaMemcpyDeviceToHost));
    printf("\nangle accuracy: max |error| of sin θ and cos θ over the %d pairs of d = %d (base %g), vs float64\n", HALF,
           D, base);
    printf("%10s | %18s | %20s | %26s\n", "position", "fp32 θ, sincosf", "fp32 θ, __sincosf", "reduced θ, __sincosf (v2,v3)");
    for (int p = 0; p < n_pos; ++p) {
        double worst[ANGLE_METHODS] = {0};
        for (int i = 0; i < HALF; ++i) {
            double theta = ref_rope_angle(positions[p], i, D, base), s = sin(theta), c = cos(theta);
            const float *o = out + ((size_t)p * HALF + i) * ANGLE_METHODS * 2;
            for (int m = 0; m < ANGLE_METHODS; ++m)
                worst[m] = fmax(worst[m], fmax(fabs(o[2 * m] - s), fabs(o[2 * m + 1] - c)));
        }
        printf("%10lld | %18.2e | %20.2e | %26.2e\n", positions[p], worst[0], worst[1], worst[2]);
    }
    WB_CUDA_CHECK(cudaFree(d_pos));
    WB_CUDA_CHECK(cudaFree(d_freq));
    WB_CUDA_CHECK(cudaFree(d_out));
    free(out);
}

/** @brief Parse arguments, open the GPU (or exit 77), then --check or the timed tables. */
int main(int argc, char **argv)
{
    long long shape[4] = {16, 12, 4096, 64}, start = 0, base_arg = 10000;
    int style_choice = 0, dtype_choice = 0;
    const wb_option extra[] = {
        {"--shape", "B H N d", "Q and K shape (default 16 12 4096 64)", WB_OPT_INT, shape, 4, 1, 1 << 20, NULL},
        {"--start", "P", "position of the first token (default 0)", WB_OPT_INT, &start, 1, 0, (1 << 24) - 1, NULL},
        {"--base", "BASE", "θ_i = pos · BASE^(−2i/d) (default 10000)", WB_OPT_INT, &base_arg, 1, 2, 100000000, NULL},
        {"--style", "S", "rotate-half, interleaved or all (default all)", WB_OPT_CHOICE, &style_choice, 0, 0, 0,
         style_choices},
        {"--dtype", "T", "fp32, fp16 or all (default all)", WB_OPT_CHOICE, &dtype_choice, 0, 0, 0, dtype_choices},
    };
    const wb_program prog = {"stage07_rope", "Stage 07: rotary position embeddings on Q and K ([B, H, N, d]).",
                             variant_ids, variant_help, NULL};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 5);
    if (shape[3] % 2 || shape[0] * shape[1] * shape[2] * shape[3] > (1LL << 30) || start + shape[2] > (1 << 24)) {
        wb_usage_error_exit(&prog, "--shape needs an even d, B·H·N·d <= 2^30 and start + N <= 2^24; got %lld %lld %lld %lld, "
                            "start %lld", shape[0], shape[1], shape[2], shape[3], start);
    }

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    const wb_dtype dtypes[] = {WB_F32, WB_F16};
    int ok;
    if (opt.check) {
        /* B, H, N, d, start, base: positions up to 32768, odd and tiny d, decode steps (N = 1) */
        static const long long shapes[][6] = {
            {1, 1, 1, 2, 0, 10000},        {1, 1, 1, 64, 32767, 10000},  {2, 3, 17, 64, 0, 10000},
            {1, 2, 33, 128, 100, 10000},   {2, 2, 5, 6, 7, 10000},       {1, 1, 3, 10, 32760, 10000},
            {3, 2, 1000, 64, 31000, 10000}, {4, 12, 257, 64, 0, 10000},  {1, 4, 4096, 128, 28672, 10000},
            {2, 1, 1, 128, 5000, 10000},   {1, 3, 31, 16, 0, 10000},     {1, 2, 64, 128, 32704, 500000}};
        int checks = 0, failed = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
            const long long *sh = shapes[s];
            if (sh[0] * sh[1] * sh[2] * sh[3] > opt.check_max) continue;
            for (int st = 0; st < 2; ++st)
                for (int t = 0; t < 2; ++t) {
                    if ((style_choice && style_choice - 1 != st) || (dtype_choice && dtype_choice - 1 != t)) continue;
                    problem p;
                    problem_init(&p, dtypes[t], (rope_style)st, (int)sh[0], (int)sh[1], (int)sh[2], (int)sh[3], sh[4],
                                 (double)sh[5]);
                    make_data(&p, wb_seed_for((uint64_t)opt.seed, s, (uint64_t)(2 * st + t)));
                    printf("B%lld H%lld N%-5lld d%-4lld start %-6lld base %-7lld %-22s", sh[0], sh[1], sh[2], sh[3],
                           sh[4], sh[5], problem_name(&p));
                    for (int i = 0; i < rope_variant_count; ++i) {
                        if (opt.variant >= 0 && opt.variant != i) continue;
                        job j = {&rope_variants[i], &p, 0};
                        int r = wb_check_variant(rope_variants[i].id, check_both_ways, &j, 1);
                        checks += r >= 0;
                        failed += r == 0;
                    }
                    printf("\n");
                    problem_free(&p);
                }
        }
        printf("stage07 --check: %d checks, %d failed\n", checks, failed);
        ok = failed == 0 && checks > 0;
    } else {
        printf("stage07_rope: RoPE on Q and K, B=%lld H=%lld N=%lld d=%lld, positions %lld..%lld, base %lld\n", shape[0],
               shape[1], shape[2], shape[3], start, start + shape[2] - 1, base_arg);
        wb_measure_copy_bandwidth(&dev);
        wb_device_print(&dev, stdout);
        printf("roof for this stage: the copy bandwidth; Q and K are read and written once (+ v1's table rows)\n");
        wb_report rep;
        wb_report_begin(&rep, "stage07", dev.name, stdout);
        char size[96];
        snprintf(size, sizeof size, "B%lld H%lld N%lld d%lld", shape[0], shape[1], shape[2], shape[3]);
        for (int t = 1; t >= 0; --t) /* fp16 first: the shape is fp16 */
            for (int st = 0; st < 2; ++st) {
                if ((style_choice && style_choice - 1 != st) || (dtype_choice && dtype_choice - 1 != t)) continue;
                problem p;
                problem_init(&p, dtypes[t], (rope_style)st, (int)shape[0], (int)shape[1], (int)shape[2], (int)shape[3],
                             start, (double)base_arg);
                make_data(&p, wb_seed_for((uint64_t)opt.seed, 7, (uint64_t)(2 * st + t)));
                for (int i = 0; i < rope_variant_count; ++i) {
                    if (opt.variant >= 0 && opt.variant != i) continue;
                    job j = {&rope_variants[i], &p, 0};
                    wb_row row = {.problem = problem_name(&p), .size = size, .variant = rope_variants[i].id,
                                  .what = rope_variants[i].what, .unit = "GB/s", .roof = dev.copy_gbps};
                    wb_check_and_time(&dev, &opt, launch_variant, run_and_check, &j, &row);
                    row.throughput = wb_gbps(min_bytes(&p, &rope_variants[i]), row.time.median_ms);
                    /* a pair's rotation: 4 multiplies and 2 adds, 3 per element of Q and K (p.n each) */
                    row.bytes = min_bytes(&p, &rope_variants[i]), row.flops = 2.0 * 3.0 * (double)p.n;
                    wb_report_add(&rep, &row);
                }
                problem_free(&p);
            }
        angle_study((double)base_arg);
        ok = wb_report_finish(&rep, opt.csv);
    }
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
