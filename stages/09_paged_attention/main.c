/**
 * @file stages/09_paged_attention/main.c
 * @brief Stage 09 host program: one decode step of attention for a batch of
 *        sequences of different lengths, K and V read through stage 08's block
 *        tables; every variant checked against the CPU reference and timed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "attention.h"
#include "block_manager.h"
#include "compare.h"
#include "cuda_check.h"
#include "device.h"
#include "fp16.h"
#include "kernels.h"
#include "measure.h"
#include "report.h"
#include "rng.h"
#include "timing.h" /* wb_measure_copy_bandwidth: the roof */

static const char *const variant_ids[] = {"v1", "v2", "v3", "v4", "v5", "v6", "v7", "ex", NULL};
/** One line per variant for --help: its idea, what it takes, the hardware it needs. */
static const char *const variant_help[] = {
    "gather to contiguous (stage 08), then attention (d 64 or 128, sm_75)",
    "a block per (sequence, head) straight through the pages: PagedAttention v1 (sm_75)",
    "split into partitions, the last block merges: flash-decoding (sm_75)",
    "v3 + one block per KV head's query group (grouped-query; sm_75)",
    "v4 + a lean inner loop: no division, no copies (sm_75)",
    "v5 + tiles shared by a row's blocks, no empty blocks (sm_75)",
    "v6 with the dot products on tensor cores, mma.sync (fp16, sm_75)",
    "your kernel: a warp per (sequence, head) through the pages, in exercise.cu (fp16, sm_75)"};
static const char *const l2_choices[] = {"rotate", "flush", NULL};

/** O is fp16: the GPU and the reference each round once to fp16 (at most one ulp apart: 2^-10 relative). */
static const wb_tolerance o_tol = {1e-5, 2e-3};
/** fp32 storage (stage 10's fp32 model): fp32 sums over up to 16384 tokens and ex2.approx. */
static const wb_tolerance o_tol_f32 = {1e-6, 1e-4};
/** v7 rounds each weight p to fp16 before P·V (tensor cores): each p·v moves by at most 2^-11·p·|v|, and the
 *  sum l is of the unrounded p, so O moves by at most 2^-11·max|v| = 2^-11 (V is in [-1, 1]); 1e-3 is twice
 *  that, stage 06's fp16 tolerance. */
static const wb_tolerance o_tol_fp16_weights = {1e-3, 2e-3};

/** Most copies of a step's device data the timing rotates through. */
#define MAX_SETS 8

/** One decode step: the manager's pages, the pools, q, the reference. */
typedef struct {
    decode_problem a;      /**< what the launchers take (device pointers) */
    decode_problem sets[MAX_SETS]; /**< a and its copies in other buffers, for timing (see rotate_inputs) */
    int n_sets;            /**< how many of sets are used (1: only a) */
    int next_set;          /**< the set the next timed run uses */
    int *lens;             /**< host lengths */
    kv_block_manager m;    /**< stage 08's block manager: where each token is */
    size_t pool_elems;     /**< elements of one pool */
    uint16_t *k_pool;      /**< host K pool, fp16 */
    uint16_t *v_pool;      /**< host V pool, fp16 */
    uint16_t *q;           /**< host q, fp16 */
    float *ref;            /**< reference o, [B][Hq][d] */
    float *got;            /**< the GPU's o as fp32 */
    uint16_t *got16;       /**< the GPU's o, fp16 */
    double kv_bytes;       /**< K and V bytes the step must read: Σ len · Hkv · d · 2 · 2 */
} step;

static void step_init(step *s, wb_dtype dtype, int B, int Hq, int Hkv, int d, int bs, const int *lens, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    size_t es = wb_dtype_bytes(dtype);
    s->lens = wb_host_alloc((size_t)B * sizeof(int), "lengths");
    int max_len = 1;
    long long pages = 0;
    for (int b = 0; b < B; ++b) {
        s->lens[b] = lens[b];
        max_len = lens[b] > max_len ? lens[b] : max_len;
        pages += (lens[b] + bs - 1) / bs;
        s->kv_bytes += 2.0 * (double)es * lens[b] * (double)Hkv * d;
    }
    int max_pages = (max_len + bs - 1) / bs;
    /* pages at random places in a pool with some free pages left over, as in a running server */
    kv_status st = kv_init(&s->m, (int)(pages + pages / 8 + 1), bs, B, max_pages, seed | 1);
    int64_t *slots = wb_host_alloc((size_t)max_len * sizeof(int64_t), "slots");
    kv_page_copy none[1];
    int n_none;
    for (int b = 0; b < B && st == KV_OK; ++b) {
        st = kv_add_seq(&s->m, b);
        if (st == KV_OK) st = kv_append(&s->m, &b, &s->lens[b], 1, slots, none, &n_none);
    }
    if (st != KV_OK) {
        fprintf(stderr, "stage09: block manager: %s\n", kv_status_string(st));
        exit(1);
    }
    free(slots);
    int *tables = wb_host_alloc((size_t)B * max_pages * sizeof(int), "block tables");
    for (int b = 0; b < B; ++b)
        for (int p = 0; p < max_pages; ++p)
            tables[b * max_pages + p] = p < kv_pages_for(&s->m, lens[b]) ? kv_block_table(&s->m, b)[p] : 0;

    s->pool_elems = (size_t)s->m.num_pages * Hkv * bs * d;
    size_t q_elems = (size_t)B * Hq * d;
    s->k_pool = wb_host_alloc(s->pool_elems * 2, "K pool");
    s->v_pool = wb_host_alloc(s->pool_elems * 2, "V pool");
    s->q = wb_host_alloc(q_elems * 2, "q");
    s->ref = wb_host_alloc(q_elems * 4, "reference");
    s->got = wb_host_alloc(q_elems * 4, "result");
    s->got16 = wb_host_alloc(q_elems * 2, "result (fp16)");
    /* every slot of the pools random, used or not: a kernel that reads a wrong page gets wrong numbers */
    wb_fill_uniform_f16(s->k_pool, s->pool_elems, -2.0f, 2.0f, seed + 1);
    wb_fill_uniform_f16(s->v_pool, s->pool_elems, -1.0f, 1.0f, seed + 2);
    wb_fill_uniform_f16(s->q, q_elems, -2.0f, 2.0f, seed + 3);

    decode_problem *a = &s->a;
    a->B = B, a->Hq = Hq, a->Hkv = Hkv, a->d = d, a->block_size = bs, a->max_pages_per_seq = max_pages;
    a->dtype = dtype;
    a->max_len = max_len, a->scale = 1.0f / sqrtf((float)d);
    for (int b = 0; b < B; ++b) a->total_len += lens[b];
    a->host_lens = s->lens; /* v4 sizes its partitions from the lengths themselves */
    a->q = wb_device_alloc(q_elems * es, "q");
    a->k_pool = wb_device_alloc(s->pool_elems * es, "K pool");
    a->v_pool = wb_device_alloc(s->pool_elems * es, "V pool");
    a->block_tables = wb_device_alloc((size_t)B * max_pages * sizeof(int), "block tables");
    a->lens = wb_device_alloc((size_t)B * sizeof(int), "lengths");
    a->o = wb_device_alloc(q_elems * es, "o");
    a->workspace_bytes = decode_workspace_bytes(B, Hq, Hkv, d, max_len);
    a->workspace = wb_device_alloc(a->workspace_bytes, "workspace");
    a->counters = wb_device_alloc_zeroed((size_t)B * Hq * sizeof(int), "v3 counters"); /* v3 leaves them zero after
                                                                                          * each launch */
    a->tile_counters = wb_device_alloc_zeroed((size_t)B * Hq * sizeof(int), "v6 tile counters"); /* and so does v6 */
    /* fp32 storage holds the same (fp16-representable) values, so both share one reference */
    uint16_t *src[3] = {s->q, s->k_pool, s->v_pool};
    const void *dst[3] = {a->q, a->k_pool, a->v_pool};
    size_t count[3] = {q_elems, s->pool_elems, s->pool_elems};
    for (int i = 0; i < 3; ++i) {
        if (dtype == WB_F32) {
            float *wide = wb_host_alloc(count[i] * 4, "fp32 copy");
            wb_halves_to_floats(src[i], wide, count[i]);
            WB_CUDA_CHECK(cudaMemcpy((void *)dst[i], wide, count[i] * 4, cudaMemcpyHostToDevice));
            free(wide);
        } else {
            WB_CUDA_CHECK(cudaMemcpy((void *)dst[i], src[i], count[i] * 2, cudaMemcpyHostToDevice));
        }
    }
    WB_CUDA_CHECK(cudaMemcpy((void *)a->block_tables, tables, (size_t)B * max_pages * sizeof(int), cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy((void *)a->lens, lens, (size_t)B * sizeof(int), cudaMemcpyHostToDevice));
    free(tables);

    /* the reference: each query row against its sequence's tokens, read through the block table on the host */
    float *qf = wb_host_alloc((size_t)d * 4, "q row");
    float *kc = wb_host_alloc((size_t)max_len * d * 4, "K rows"), *vc = wb_host_alloc((size_t)max_len * d * 4, "V rows");
    int group = Hq / (Hkv > 0 ? Hkv : 1);
    for (int b = 0; b < B; ++b)
        for (int kvh = 0; kvh < Hkv; ++kvh) {
            for (int t = 0; t < lens[b]; ++t) {
                int64_t slot = kv_slot(&s->m, b, t);
                size_t row = (((size_t)(slot / bs) * Hkv + kvh) * bs + slot % bs) * d;
                wb_halves_to_floats(s->k_pool + row, kc + (size_t)t * d, (size_t)d);
                wb_halves_to_floats(s->v_pool + row, vc + (size_t)t * d, (size_t)d);
            }
            for (int h = kvh * group; h < (kvh + 1) * group && h < Hq; ++h) {
                size_t qrow = ((size_t)b * Hq + h) * d;
                wb_halves_to_floats(s->q + qrow, qf, (size_t)d);
                ref_attention_row(qf, kc, vc, (size_t)lens[b], (size_t)d, (size_t)d, a->scale, s->ref + qrow, NULL);
            }
        }
    if (dtype == WB_F16) { /* an fp16 output can only be the reference rounded */
        wb_floats_to_halves(s->ref, s->got16, q_elems);
        wb_halves_to_floats(s->got16, s->ref, q_elems);
    }
    free(qf), free(kc), free(vc);
}

/**
 * Timing with inputs rotated instead of an L2 flush. A decode step reads each
 * byte once and writes almost nothing, so a flush that writes (a memset of twice
 * the L2, the timer's first flush) charged it for writing back the flush's own
 * dirty lines — up to 50 MB on an H100, half as much again as a 100 MB step
 * reads. The timer's flush now only reads; DESIGN.md's other method is kept here
 * as the default: copies of all inputs in separate buffers, together more than
 * twice the L2, taken in turn, so no run finds its data in the L2 and no run
 * pays for another's writes. The page shows both.
 */
static void rotate_inputs(step *s, const wb_device *dev)
{
    size_t es = wb_dtype_bytes(s->a.dtype);
    size_t set_bytes = 2 * s->pool_elems * es + s->a.workspace_bytes, free_b, total_b;
    int want = 1 + (int)((2 * dev->l2_bytes + set_bytes - 1) / set_bytes);
    want = want > MAX_SETS ? MAX_SETS : want;
    WB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if ((size_t)(want - 1) * set_bytes > free_b / 2) want = 1;
    s->sets[0] = s->a;
    s->n_sets = want;
    size_t q_bytes = (size_t)s->a.B * s->a.Hq * s->a.d * es, pool_bytes = s->pool_elems * es;
    size_t table_bytes = (size_t)s->a.B * s->a.max_pages_per_seq * sizeof(int), lens_bytes = (size_t)s->a.B * sizeof(int);
    for (int i = 1; i < want; ++i) {
        decode_problem *c = &s->sets[i];
        *c = s->a;
        void *q = wb_device_alloc(q_bytes, "q copy"), *k = wb_device_alloc(pool_bytes, "K pool copy");
        void *v = wb_device_alloc(pool_bytes, "V pool copy"), *t = wb_device_alloc(table_bytes, "table copy");
        void *l = wb_device_alloc(lens_bytes, "lengths copy");
        WB_CUDA_CHECK(cudaMemcpy(q, s->a.q, q_bytes, cudaMemcpyDeviceToDevice));
        WB_CUDA_CHECK(cudaMemcpy(k, s->a.k_pool, pool_bytes, cudaMemcpyDeviceToDevice));
        WB_CUDA_CHECK(cudaMemcpy(v, s->a.v_pool, pool_bytes, cudaMemcpyDeviceToDevice));
        WB_CUDA_CHECK(cudaMemcpy(t, s->a.block_tables, table_bytes, cudaMemcpyDeviceToDevice));
        WB_CUDA_CHECK(cudaMemcpy(l, s->a.lens, lens_bytes, cudaMemcpyDeviceToDevice));
        c->q = q, c->k_pool = k, c->v_pool = v, c->block_tables = t, c->lens = l;
        c->o = wb_device_alloc(q_bytes, "o copy");
        c->workspace = wb_device_alloc(c->workspace_bytes, "workspace copy");
    }
}

static void step_free(step *s)
{
    for (int i = 1; i < s->n_sets; ++i) {
        decode_problem *c = &s->sets[i];
        void *dev[] = {(void *)c->q, (void *)c->k_pool, (void *)c->v_pool, (void *)c->block_tables, (void *)c->lens,
                       c->o, c->workspace};
        for (size_t k = 0; k < sizeof dev / sizeof dev[0]; ++k) WB_CUDA_CHECK(cudaFree(dev[k]));
    }
    void *host[] = {s->lens, s->k_pool, s->v_pool, s->q, s->ref, s->got, s->got16};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; ++i) free(host[i]);
    decode_problem *a = &s->a;
    void *dev[] = {(void *)a->q, (void *)a->k_pool, (void *)a->v_pool, (void *)a->block_tables, (void *)a->lens, a->o,
                   a->workspace, a->counters, a->tile_counters};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) WB_CUDA_CHECK(cudaFree(dev[i]));
    kv_destroy(&s->m);
}

/** What one run needs. */
typedef struct {
    int index;  /**< into decode_variants */
    step *s;    /**< the data */
} job;

static const char *launch_job(void *ctx)
{
    job *j = (job *)ctx;
    return decode_variants[j->index].launch(&j->s->a);
}

/** A timed run: the next set of inputs in turn (see rotate_inputs). */
static const char *launch_rotating(void *ctx)
{
    job *j = (job *)ctx;
    step *s = j->s;
    const decode_problem *a = s->n_sets > 1 ? &s->sets[s->next_set] : &s->a;
    s->next_set = (s->next_set + 1) % (s->n_sets > 1 ? s->n_sets : 1);
    return decode_variants[j->index].launch(a);
}

/** Poison o (and the workspace), run once, compare every output with the reference. */
static const char *check_job(void *ctx, wb_compare_result *res)
{
    job *j = (job *)ctx;
    step *s = j->s;
    size_t n = (size_t)s->a.B * s->a.Hq * s->a.d;
    wb_poison(s->a.o, n * wb_dtype_bytes(s->a.dtype));
    wb_poison(s->a.workspace, s->a.workspace_bytes);
    const char *why = launch_job(j);
    if (why) return why;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    if (s->a.dtype == WB_F16) {
        WB_CUDA_CHECK(cudaMemcpy(s->got16, s->a.o, n * 2, cudaMemcpyDeviceToHost));
        wb_halves_to_floats(s->got16, s->got, n);
    } else {
        WB_CUDA_CHECK(cudaMemcpy(s->got, s->a.o, n * 4, cudaMemcpyDeviceToHost));
    }
    char label[96];
    snprintf(label, sizeof label, "%s %s B%d Hq%d Hkv%d d%d", decode_variants[j->index].id, wb_dtype_name(s->a.dtype),
             s->a.B, s->a.Hq, s->a.Hkv, s->a.d);
    wb_tolerance tol = s->a.dtype == WB_F32 ? o_tol_f32 : decode_variants[j->index].fp16_weights ? o_tol_fp16_weights : o_tol;
    *res = wb_compare_f32(s->got, s->ref, n, tol, label, 5);
    return NULL;
}

static void bench_step(const wb_device *dev, const wb_common_opts *opt, step *s, const char *label, int flush,
                       wb_report *rep)
{
    char problem[96], size[96];
    wb_device timing_dev = *dev;
    if (!flush) {
        rotate_inputs(s, dev);
        if (s->n_sets > 1) timing_dev.l2_flush = NULL; /* rotation instead of the flush */
    }
    snprintf(problem, sizeof problem, "decode d%d, %s%s", s->a.d, label,
             timing_dev.l2_flush ? "" : ", inputs rotated");
    snprintf(size, sizeof size, "B%d Hq%d Hkv%d block %d", s->a.B, s->a.Hq, s->a.Hkv, s->a.block_size);
    if (s->a.d == 64 || s->a.d == 128)
        printf("(v3 splits the contexts into partitions of %d tokens)\n", decode_partition_tokens(&s->a));
    for (int i = 0; i < decode_variant_count; ++i) {
        if (opt->variant >= 0 && opt->variant != i) continue;
        job j = {i, s};
        wb_row row = {.problem = problem, .size = size, .variant = decode_variants[i].id,
                      .what = decode_variants[i].what, .unit = "GB/s", .roof = dev->copy_gbps};
        wb_check_and_time(&timing_dev, opt, launch_rotating, check_job, &j, &row);
        row.throughput = wb_gbps(s->kv_bytes, row.time.median_ms);
        /* each context token: q·k and p·v, 2d FLOPs each, for every query head */
        row.bytes = s->kv_bytes, row.flops = 4.0 * s->a.Hq * (double)s->a.d * (double)s->a.total_len;
        wb_report_add(rep, &row);
    }
}

static int check_step(const wb_common_opts *opt, step *s, int *checks)
{
    int lo = s->lens[0], hi = s->lens[0];
    for (int b = 1; b < s->a.B; ++b) lo = s->lens[b] < lo ? s->lens[b] : lo, hi = s->lens[b] > hi ? s->lens[b] : hi;
    printf("%s B%-2d Hq%-2d Hkv%-2d d%-3d block %-2d lengths %5d..%-5d", wb_dtype_name(s->a.dtype), s->a.B, s->a.Hq,
           s->a.Hkv, s->a.d, s->a.block_size, lo, hi);
    int failed = 0;
    for (int i = 0; i < decode_variant_count; ++i) {
        if (opt->variant >= 0 && opt->variant != i) continue;
        job j = {i, s};
        int r = wb_check_variant(decode_variants[i].id, check_job, &j, 2);
        *checks += r >= 0;
        failed += r == 0;
    }
    printf("\n");
    return failed;
}

/** @brief Parse arguments, open the GPU (or exit 77), then --check or the timed tables. */
int main(int argc, char **argv)
{
    long long shape[4] = {0, 0, 0, 0}, kv_heads = 0, block_size = 16;
    int l2_choice = 0;
    const wb_option extra[] = {
        {"--shape", "B Hq N d", "B sequences of N context tokens, Hq query heads of d (default: the benchmark set, "
         "B8 Hq12 d64 and d128 at N 4096, B1 Hq12 d64 and d128 at 32768, B8 Hq12 d64 of 16-16384 tokens, "
         "B8 Hq32 Hkv8 d128 at 4096; B32 of the first and the grouped-query, B96 of the mixed)",
         WB_OPT_INT, shape, 4, 1, 1 << 20, NULL},
        {"--kv-heads", "H", "KV heads, a divisor of Hq (default Hq: multi-head; fewer: grouped-query)", WB_OPT_INT,
         &kv_heads, 1, 1, 1 << 16, NULL},
        {"--block-size", "S", "tokens per page (default 16)", WB_OPT_INT, &block_size, 1, 1, 4096, NULL},
        {"--l2", "HOW", "between timed runs: rotate the inputs (default) or flush the L2 (the timer's read-only sweep)", WB_OPT_CHOICE,
         &l2_choice, 0, 0, 0, l2_choices},
    };
    const wb_program prog = {"stage09_paged_attention",
                             "Stage 09: decode attention through the paged KV cache's block tables; split-K "
                             "(flash-decoding).",
                             variant_ids, variant_help, NULL};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 4);
    long long hkv = kv_heads ? kv_heads : shape[1];
    if (shape[0] > 0 && (shape[1] % hkv || shape[0] > 65535 || shape[0] * hkv * shape[2] * shape[3] > (1LL << 31))) {
        wb_usage_error_exit(&prog, "--shape needs Hq a multiple of --kv-heads, B <= 65535 and B*Hkv*N*d <= 2^31; "
                            "got %lld %lld %lld %lld with %lld KV heads", shape[0], shape[1], shape[2], shape[3], hkv);
    }
    if (kv_heads && !shape[0]) {
        wb_usage_error_exit(&prog, "--kv-heads goes with --shape");
    }

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    int ok;
    if (opt.check) {
        /* B, Hq, Hkv, d, block size, then the lengths: explicit, or (first 0) random in [1, second] */
        static const int cases[][12] = {
            {1, 1, 1, 64, 16, 1},                     /* one token */
            {3, 2, 2, 64, 16, 17, 1, 33},             /* partial last pages */
            {4, 4, 2, 128, 16, 100, 513, 1024, 7},    /* grouped-query, 2 per KV head; a partition and a bit */
            {2, 8, 2, 64, 8, 5, 5000},                /* 1000x apart, 4 query heads per KV head */
            {5, 12, 12, 128, 32, 0, 2000},            /* random lengths */
            {1, 2, 1, 64, 16, 16384},                 /* the longest */
            {2, 3, 3, 128, 16, 16384, 16},            /* 1000x apart, long */
            {9, 2, 2, 64, 1, 0, 300},                 /* pages of one token */
            {16, 4, 1, 64, 16, 0, 64},                /* 16 short sequences, 4 query heads per KV head */
            {3, 6, 3, 128, 48, 0, 3000},              /* a block size that is not a power of two */
            {2, 16, 2, 64, 16, 0, 3000},              /* 8 query heads per KV head: v4's widest group */
            {2, 24, 3, 128, 16, 700, 1500},           /* 8 per KV head, d 128, three KV heads */
            {3, 12, 4, 64, 16, 0, 2500},              /* 3 per KV head: v4 falls back to one head per block */
            {2, 2, 2, 80, 16, 10, 20},                /* d 80: rejected by every variant */
        };
        int checks = 0, failed = 0;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
            const int *k = cases[c];
            int lens[16], max_len = 0;
            wb_rng r;
            wb_rng_seed(&r, wb_seed_for((uint64_t)opt.seed, c, 0));
            for (int b = 0; b < k[0]; ++b) {
                lens[b] = k[5] == 0 ? wb_rng_log_uniform(&r, 1, k[6]) : k[5 + b];
                max_len = lens[b] > max_len ? lens[b] : max_len;
            }
            if ((long long)k[0] * k[2] * max_len * k[3] > opt.check_max) continue;
            for (int t = 0; t < 2; ++t) { /* fp16, the stage's subject; fp32, which stage 10's fp32 model uses */
                step s;
                step_init(&s, t ? WB_F32 : WB_F16, k[0], k[1], k[2], k[3], k[4], lens, wb_seed_for((uint64_t)opt.seed, c, 1));
                failed += check_step(&opt, &s, &checks);
                step_free(&s);
            }
        }
        printf("stage09 --check: %d checks, %d failed\n", checks, failed);
        ok = failed == 0 && checks > 0;
    } else {
        printf("stage09_paged_attention: one decode step, K and V read through the block tables\n");
        wb_measure_copy_bandwidth(&dev);
        wb_device_print(&dev, stdout);
        printf("roof: the copy bandwidth; each variant is charged the K and V bytes of the contexts, read once\n");
        wb_report rep;
        wb_report_begin(&rep, "stage09", dev.name, stdout);
        /* B, Hq, Hkv, d, context (0: mixed lengths 16..16384). The first six are decode steps of their real size
         * (86-200 MB, where the step's fixed start is 10-25% of its time); the last three are the same kinds of
         * step at 400-617 MB (B32, and B96 for the mixed lengths, whose mean is short), where it is a few
         * percent: what the kernels do once the start is paid for. */
        static const int sets[][5] = {{8, 12, 12, 64, 4096},  {8, 12, 12, 128, 4096}, {1, 12, 12, 64, 32768},
                                      {1, 12, 12, 128, 32768}, {8, 12, 12, 64, 0},      {8, 32, 8, 128, 4096},
                                      {32, 12, 12, 64, 4096}, {32, 32, 8, 128, 4096}, {96, 12, 12, 64, 0}};
        int custom[1][5] = {{(int)shape[0], (int)shape[1], (int)hkv, (int)shape[3], (int)shape[2]}};
        const int(*use)[5] = shape[0] ? (const int(*)[5])custom : sets;
        int n_sets = shape[0] ? 1 : (int)(sizeof sets / sizeof sets[0]);
        for (int i = 0; i < n_sets; ++i) {
            const int *k = use[i];
            int *lens = wb_host_alloc((size_t)k[0] * sizeof(int), "lengths");
            wb_rng r;
            wb_rng_seed(&r, 21);
            for (int b = 0; b < k[0]; ++b) lens[b] = k[4] ? k[4] : (b == 0 ? 16 : b == 1 ? 16384 : wb_rng_log_uniform(&r, 16, 16384));
            char label[64];
            if (k[4])
                snprintf(label, sizeof label, "context %d%s", k[4], k[1] != k[2] ? " (grouped-query)" : "");
            else
                snprintf(label, sizeof label, "mixed contexts 16..16384");
            step s;
            step_init(&s, WB_F16, k[0], k[1], k[2], k[3], (int)block_size, lens, 31 + (uint64_t)i);
            bench_step(&dev, &opt, &s, label, l2_choice == 1, &rep);
            step_free(&s);
            free(lens);
        }
        ok = wb_report_finish(&rep, opt.csv);
    }
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
