/**
 * @file stages/08_paged_kv_cache/main.c
 * @brief Stage 08 host program: the block manager hands out pages, the GPU
 *        appends new tokens into them and gathers them back; every variant is
 *        checked against a host model of the pool and timed against a
 *        contiguous max-length cache.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
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

static const char *const variant_ids[] = {"v1", "v2", "contig", "ex", NULL};
/** One line per variant for --help: its idea, what it takes, the hardware it needs. */
static const char *const variant_help[] = {
    "append and gather, one thread per element (sm_75)",
    "append and gather, 16 bytes per thread (uint4; sm_75)",
    "a contiguous max-length cache, the same copies: the peer",
    "your kernel: the append, a thread per element, in exercise.cu (sm_75)"};
static const char *const dtype_choices[] = {"all", "fp32", "fp16", NULL};
/** Index of the baseline in variant_ids: v2's kernels on a contiguous max-length cache. */
#define BASELINE (kv_variant_count)
/** Index of the exercise slot in variant_ids (exercise.cu), after the baseline. */
#define EXERCISE (kv_variant_count + 1)

/** The kernels of variant index v: a teaching variant's, v2's for the baseline, the exercise slot's. */
static const kv_variant *variant_at(int v)
{
    return v == EXERCISE ? &kv_exercise_variant : &kv_variants[v == BASELINE ? kv_variant_count - 1 : v];
}

/**
 * One scenario: B sequences that hold old_len[b] tokens, then a batch that
 * appends n_new[b] to each (and, with `fork`, to a child forked from sequence 0
 * before the batch: the copy-on-write path). The same tokens also live in a
 * contiguous [B][H][max_len][d] cache, the baseline.
 */
typedef struct {
    wb_dtype dtype;          /**< storage of K and V */
    int B;                   /**< sequences (before the fork) */
    int H;                   /**< heads */
    int d;                   /**< head dimension */
    int bs;                  /**< tokens per page */
    int fork;                /**< 1: a child of sequence 0 joins the batch (copy-on-write) */
    int n_seqs;              /**< B, plus the forked child */
    int *old_len;            /**< tokens each sequence holds before the batch */
    int *n_new;              /**< new tokens of each in the batch */
    int *len;                /**< after the batch */
    int max_len;             /**< longest sequence after the batch */
    int n_tokens;            /**< new tokens in the batch */
    kv_block_manager m;      /**< the block manager (stage 08's host side) */
    int64_t *slots;          /**< the batch's slot mapping (paged) */
    int64_t *contig_slots;   /**< the same tokens in the contiguous cache: b·max_len + position */
    kv_page_copy *copies;    /**< copy-on-write copies of the batch */
    int n_copies;            /**< how many */
    size_t es;               /**< bytes per element */
    size_t pool_elems;       /**< elements of one pool */
    size_t contig_elems;     /**< elements of one contiguous cache */
    size_t new_elems;        /**< elements of the new K (or V) rows */
    size_t out_elems;        /**< elements of the gather's K (or V) output */
    void *h_pool_before;     /**< the pool's contents before the batch (random), K then V */
    void *h_contig_before;   /**< the contiguous cache's, K then V */
    void *h_new;             /**< the new rows, K then V */
    void *h_expect;          /**< scratch: the expected bytes */
    void *h_got;             /**< scratch: the GPU's bytes */
    void *k_pool;            /**< device K pool */
    void *v_pool;            /**< device V pool */
    void *k_contig;          /**< device contiguous K cache */
    void *v_contig;          /**< device contiguous V cache */
    void *new_k;             /**< device new K rows */
    void *new_v;             /**< device new V rows */
    void *k_out;             /**< device gather output, K */
    void *v_out;             /**< device gather output, V */
    int64_t *d_slots;        /**< device slot mapping */
    int64_t *d_contig_slots; /**< device slot mapping of the contiguous cache */
    int *d_tables;           /**< device block tables */
    int *d_contig_tables;    /**< device "block tables" of the contiguous cache: sequence b is page b */
    int *d_lens;             /**< device lengths */
    int *h_tables;           /**< [n_seqs][max_pages] of the batch's sequences */
    int max_pages;           /**< width of h_tables */
} scenario;

static void fill_random_bytes(void *p, size_t n_elems, wb_dtype dtype, uint64_t seed)
{
    if (dtype == WB_F16)
        wb_fill_uniform_f16(p, n_elems, -1.0f, 1.0f, seed);
    else
        wb_fill_uniform_f32(p, n_elems, -1.0f, 1.0f, seed);
}

static void scenario_init(scenario *s, wb_dtype dtype, int B, int H, int d, int bs, const int *old_len,
                          const int *n_new, int fork, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->dtype = dtype, s->B = B, s->H = H, s->d = d, s->bs = bs, s->fork = fork;
    s->n_seqs = B + (fork ? 1 : 0);
    s->old_len = wb_host_alloc((size_t)s->n_seqs * sizeof(int), "lengths");
    s->n_new = wb_host_alloc((size_t)s->n_seqs * sizeof(int), "new tokens");
    s->len = wb_host_alloc((size_t)s->n_seqs * sizeof(int), "lengths");
    for (int b = 0; b < B; ++b) s->old_len[b] = old_len[b], s->n_new[b] = n_new[b];
    if (fork) s->old_len[B] = old_len[0], s->n_new[B] = n_new[0] > 0 ? n_new[0] : 1;
    long long pages = 0;
    for (int b = 0; b < s->n_seqs; ++b) {
        s->len[b] = s->old_len[b] + s->n_new[b];
        s->max_len = s->len[b] > s->max_len ? s->len[b] : s->max_len;
        s->n_tokens += s->n_new[b];
        pages += (s->len[b] + bs - 1) / bs + 1;
    }
    if (s->max_len == 0) s->max_len = 1;
    s->max_pages = (s->max_len + bs - 1) / bs;
    /* the manager after churn: a free list in random order (shuffled), and as many pages again
     * held by a resident sequence (id n_seqs) at random places, as other requests hold them in a
     * busy server. Then the batch's sequences: prefill, fork, the batch. */
    int resident_pages = (int)pages, resident = s->n_seqs;
    int table_width = s->max_pages > resident_pages ? s->max_pages : resident_pages;
    kv_status st = kv_init(&s->m, (int)pages + resident_pages + 4, bs, s->n_seqs + 1, table_width, seed | 1);
    int resident_len = resident_pages * bs;
    size_t scratch_slots = (size_t)(resident_len > s->max_len ? resident_len : s->max_len) + 1;
    int64_t *scratch = wb_host_alloc(scratch_slots * sizeof(int64_t), "slots");
    kv_page_copy none[1];
    int n_none;
    if (st == KV_OK) st = kv_add_seq(&s->m, resident);
    if (st == KV_OK) st = kv_append(&s->m, &resident, &resident_len, 1, scratch, none, &n_none);
    for (int b = 0; b < B && st == KV_OK; ++b) {
        st = kv_add_seq(&s->m, b);
        if (st == KV_OK) st = kv_append(&s->m, &b, &s->old_len[b], 1, scratch, none, &n_none);
    }
    if (fork && st == KV_OK) st = kv_fork(&s->m, 0, B);
    int *ids = wb_host_alloc((size_t)s->n_seqs * sizeof(int), "ids");
    for (int b = 0; b < s->n_seqs; ++b) ids[b] = b;
    s->slots = wb_host_alloc((size_t)s->n_tokens * sizeof(int64_t) + 8, "slots");
    s->copies = wb_host_alloc((size_t)s->n_seqs * sizeof(kv_page_copy), "copies");
    if (st == KV_OK) st = kv_append(&s->m, ids, s->n_new, s->n_seqs, s->slots, s->copies, &s->n_copies);
    if (st != KV_OK) {
        fprintf(stderr, "stage08: block manager: %s\n", kv_status_string(st));
        exit(1);
    }
    free(ids), free(scratch);
    s->contig_slots = wb_host_alloc((size_t)s->n_tokens * sizeof(int64_t) + 8, "contiguous slots");
    for (int b = 0, k = 0; b < s->n_seqs; ++b)
        for (int t = s->old_len[b]; t < s->len[b]; ++t) s->contig_slots[k++] = (int64_t)b * s->max_len + t;
    s->h_tables = wb_host_alloc((size_t)s->n_seqs * s->max_pages * sizeof(int), "block tables");
    for (int b = 0; b < s->n_seqs; ++b)
        for (int p = 0; p < s->max_pages; ++p)
            s->h_tables[b * s->max_pages + p] = p < kv_pages_for(&s->m, s->len[b]) ? kv_block_table(&s->m, b)[p] : 0;

    /* buffers: pools K then V, the contiguous cache, the new rows, the gathered output */
    s->es = wb_dtype_bytes(dtype);
    s->pool_elems = (size_t)s->m.num_pages * H * bs * d;
    s->contig_elems = (size_t)s->n_seqs * H * s->max_len * d;
    s->new_elems = (size_t)s->n_tokens * H * d;
    s->out_elems = s->contig_elems;
    size_t big = s->pool_elems > s->contig_elems ? s->pool_elems : s->contig_elems;
    s->h_pool_before = wb_host_alloc(2 * s->pool_elems * s->es, "pool");
    s->h_contig_before = wb_host_alloc(2 * s->contig_elems * s->es, "contiguous cache");
    s->h_new = wb_host_alloc(2 * s->new_elems * s->es + 16, "new rows");
    s->h_expect = wb_host_alloc(2 * big * s->es, "expected");
    s->h_got = wb_host_alloc(2 * big * s->es, "result");
    fill_random_bytes(s->h_pool_before, 2 * s->pool_elems, dtype, seed + 1);
    fill_random_bytes(s->h_new, 2 * s->new_elems, dtype, seed + 2);
    /* the contiguous cache holds the same old tokens as the pool */
    fill_random_bytes(s->h_contig_before, 2 * s->contig_elems, dtype, seed + 3);
    for (int kv = 0; kv < 2; ++kv)
        for (int b = 0; b < s->n_seqs; ++b)
            for (int h = 0; h < H; ++h)
                for (int t = 0; t < s->old_len[b]; ++t) {
                    /* the fork child's old tokens are the parent's, in the pages they share */
                    int64_t slot = kv_slot(&s->m, b, t);
                    const kv_page_copy *c = NULL;
                    for (int i = 0; i < s->n_copies; ++i)
                        if (s->copies[i].dst_page == slot / bs) c = &s->copies[i];
                    if (c) slot = (int64_t)c->src_page * bs + slot % bs; /* before the copy, they are in the shared page */
                    size_t src = (size_t)kv * s->pool_elems + (((size_t)(slot / bs) * H + h) * bs + slot % bs) * d;
                    size_t dst = (size_t)kv * s->contig_elems + (((size_t)b * H + h) * s->max_len + t) * d;
                    memcpy((char *)s->h_contig_before + dst * s->es, (char *)s->h_pool_before + src * s->es, d * s->es);
                }

    s->k_pool = wb_device_alloc(s->pool_elems * s->es, "K pool");
    s->v_pool = wb_device_alloc(s->pool_elems * s->es, "V pool");
    s->k_contig = wb_device_alloc(s->contig_elems * s->es, "K contiguous");
    s->v_contig = wb_device_alloc(s->contig_elems * s->es, "V contiguous");
    s->new_k = wb_device_alloc(s->new_elems * s->es + 16, "new K");
    s->new_v = wb_device_alloc(s->new_elems * s->es + 16, "new V");
    s->k_out = wb_device_alloc(s->out_elems * s->es, "K out");
    s->v_out = wb_device_alloc(s->out_elems * s->es, "V out");
    s->d_slots = wb_device_alloc((size_t)s->n_tokens * 8 + 8, "slots");
    s->d_contig_slots = wb_device_alloc((size_t)s->n_tokens * 8 + 8, "contiguous slots");
    s->d_tables = wb_device_alloc((size_t)s->n_seqs * s->max_pages * 4, "block tables");
    s->d_contig_tables = wb_device_alloc((size_t)s->n_seqs * 4, "contiguous tables");
    s->d_lens = wb_device_alloc((size_t)s->n_seqs * 4, "lengths");
    int *contig_tables = wb_host_alloc((size_t)s->n_seqs * 4, "contiguous tables");
    for (int b = 0; b < s->n_seqs; ++b) contig_tables[b] = b; /* sequence b is "page" b of max_len tokens */
    WB_CUDA_CHECK(cudaMemcpy(s->new_k, s->h_new, s->new_elems * s->es, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(s->new_v, (char *)s->h_new + s->new_elems * s->es, s->new_elems * s->es,
                             cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(s->d_slots, s->slots, (size_t)s->n_tokens * 8, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(s->d_contig_slots, s->contig_slots, (size_t)s->n_tokens * 8, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(s->d_tables, s->h_tables, (size_t)s->n_seqs * s->max_pages * 4, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(s->d_contig_tables, contig_tables, (size_t)s->n_seqs * 4, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(s->d_lens, s->len, (size_t)s->n_seqs * 4, cudaMemcpyHostToDevice));
    free(contig_tables);
}

static void scenario_free(scenario *s)
{
    void *host[] = {s->old_len, s->n_new, s->len, s->slots, s->contig_slots, s->copies, s->h_pool_before,
                    s->h_contig_before, s->h_new, s->h_expect, s->h_got, s->h_tables};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; ++i) free(host[i]);
    void *dev[] = {s->k_pool, s->v_pool, s->k_contig, s->v_contig, s->new_k, s->new_v, s->k_out, s->v_out,
                   s->d_slots, s->d_contig_slots, s->d_tables, s->d_contig_tables, s->d_lens};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) WB_CUDA_CHECK(cudaFree(dev[i]));
    kv_destroy(&s->m);
}

/** The two operations of the stage. */
typedef enum { OP_APPEND, OP_GATHER } op_kind;

/** What one run needs. */
typedef struct {
    scenario *s;  /**< the data */
    op_kind op;   /**< append or gather */
    int variant;  /**< index into kv_variants, or BASELINE, or EXERCISE */
} job;

/** The append arguments of a job: the paged pool, or (baseline) the contiguous cache as pages of max_len. */
static kv_append_args append_args(const job *j)
{
    const scenario *s = j->s;
    int base = j->variant == BASELINE;
    kv_append_args a = {s->dtype, s->n_tokens, s->H, s->d, base ? s->max_len : s->bs, s->new_k, s->new_v,
                        base ? s->d_contig_slots : s->d_slots, base ? s->k_contig : s->k_pool,
                        base ? s->v_contig : s->v_pool};
    return a;
}

static kv_gather_args gather_args(const job *j)
{
    const scenario *s = j->s;
    int base = j->variant == BASELINE;
    kv_gather_args a = {s->dtype, s->n_seqs, s->H, s->d, base ? s->max_len : s->bs, s->max_len,
                        base ? 1 : s->max_pages, base ? s->d_contig_tables : s->d_tables, s->d_lens,
                        base ? s->k_contig : s->k_pool, base ? s->v_contig : s->v_pool, s->k_out, s->v_out};
    return a;
}

static const char *launch_job(void *ctx)
{
    job *j = (job *)ctx;
    const kv_variant *v = variant_at(j->variant);
    if (j->op == OP_APPEND) {
        kv_append_args a = append_args(j);
        if (j->variant != BASELINE) /* copy-on-write first: the shared pages' filled parts into the private copies */
            for (int i = 0; i < j->s->n_copies; ++i) {
                const kv_page_copy *c = &j->s->copies[i];
                const char *why = kv_copy_page(a.dtype, a.k_pool, a.v_pool, a.H, a.d, a.block_size, c->src_page,
                                               c->dst_page, c->n_tokens);
                if (why) return why;
            }
        return v->append(&a);
    }
    kv_gather_args g = gather_args(j);
    return v->gather(&g);
}

/**
 * Data movement must be bit-exact: compare n elements of es bytes with memcmp,
 * and only on a mismatch walk them to count the bad ones and print the first few.
 */
static wb_compare_result compare_exact(const void *got, const void *expect, size_t n, size_t es, wb_dtype dtype,
                                       const char *label)
{
    wb_compare_result r = {.n = n, .ok = 1};
    if (memcmp(got, expect, n * es) == 0) return r;
    for (size_t i = 0; i < n; ++i) {
        const char *g = (const char *)got + i * es, *e = (const char *)expect + i * es;
        if (memcmp(g, e, es) == 0) continue;
        float gf, ef;
        if (dtype == WB_F16)
            wb_halves_to_floats((const uint16_t *)g, &gf, 1), wb_halves_to_floats((const uint16_t *)e, &ef, 1);
        else
            memcpy(&gf, g, 4), memcpy(&ef, e, 4);
        if (r.n_bad < 5) fprintf(stderr, "  %s: element %zu is %g, expected %g\n", label, i, gf, ef);
        if (r.n_bad == 0) r.worst_index = i, r.worst_got = gf, r.worst_ref = ef;
        r.n_bad++;
    }
    r.ok = 0, r.worst_frac = INFINITY;
    return r;
}

/**
 * One checked run. Append: the pool starts as h_pool_before (random: an
 * element the kernel must not touch keeps its value, a stray write shows), the
 * expected pool is that with the copies done and the new rows in their slots.
 * Gather: the pool holds the tokens, the output is poisoned, and the expected
 * output is the host's own walk through the block tables, zeros past each
 * length. Both compare every element exactly (data movement must be bit-exact).
 */
static const char *check_job(void *ctx, wb_compare_result *res)
{
    job *j = (job *)ctx;
    scenario *s = j->s;
    int base = j->variant == BASELINE;
    size_t es = s->es, n_store = base ? s->contig_elems : s->pool_elems;
    const char *before = base ? s->h_contig_before : s->h_pool_before;
    void *dk = base ? s->k_contig : s->k_pool, *dv = base ? s->v_contig : s->v_pool;
    int H = s->H, d = s->d, bs = base ? s->max_len : s->bs;
    WB_CUDA_CHECK(cudaMemcpy(dk, before, n_store * es, cudaMemcpyHostToDevice));
    WB_CUDA_CHECK(cudaMemcpy(dv, before + n_store * es, n_store * es, cudaMemcpyHostToDevice));
    char *expect = s->h_expect;
    size_t n_cmp;
    if (j->op == OP_APPEND) {
        memcpy(expect, before, 2 * n_store * es);
        if (!base)
            for (int i = 0; i < s->n_copies; ++i)
                for (int kv = 0; kv < 2; ++kv)
                    for (int h = 0; h < H; ++h) {
                        const kv_page_copy *c = &s->copies[i];
                        size_t src = kv * n_store + ((size_t)c->src_page * H + h) * bs * d;
                        size_t dst = kv * n_store + ((size_t)c->dst_page * H + h) * bs * d;
                        memcpy(expect + dst * es, expect + src * es, (size_t)c->n_tokens * d * es);
                    }
        const int64_t *slots = base ? s->contig_slots : s->slots;
        for (int kv = 0; kv < 2; ++kv)
            for (int t = 0; t < s->n_tokens; ++t)
                for (int h = 0; h < H; ++h) {
                    size_t dst = kv * n_store + (((size_t)(slots[t] / bs) * H + h) * bs + slots[t] % bs) * d;
                    size_t src = kv * s->new_elems + ((size_t)t * H + h) * d;
                    memcpy(expect + dst * es, (char *)s->h_new + src * es, d * es);
                }
        n_cmp = 2 * n_store;
    } else {
        wb_poison(s->k_out, s->out_elems * es);
        wb_poison(s->v_out, s->out_elems * es);
        memset(expect, 0, 2 * s->out_elems * es);
        for (int kv = 0; kv < 2; ++kv)
            for (int b = 0; b < s->n_seqs; ++b)
                for (int h = 0; h < H; ++h)
                    for (int t = 0; t < s->len[b] && t < s->old_len[b]; ++t) {
                        /* the gather reads the store as it is: old tokens only (the batch was not appended here) */
                        int64_t slot = base ? (int64_t)b * s->max_len + t : kv_slot(&s->m, b, t);
                        size_t src = kv * n_store + (((size_t)(slot / bs) * H + h) * bs + slot % bs) * d;
                        size_t dst = kv * s->out_elems + (((size_t)b * H + h) * s->max_len + t) * d;
                        memcpy(expect + dst * es, before + src * es, d * es);
                    }
        n_cmp = 2 * s->out_elems;
    }
    const char *why = launch_job(j);
    if (why) return why;
    WB_CUDA_CHECK(cudaDeviceSynchronize());
    void *gk = j->op == OP_APPEND ? dk : s->k_out, *gv = j->op == OP_APPEND ? dv : s->v_out;
    size_t half = n_cmp / 2;
    WB_CUDA_CHECK(cudaMemcpy(s->h_got, gk, half * es, cudaMemcpyDeviceToHost));
    WB_CUDA_CHECK(cudaMemcpy((char *)s->h_got + half * es, gv, half * es, cudaMemcpyDeviceToHost));
    *res = compare_exact(s->h_got, expect, n_cmp, es, s->dtype, j->op == OP_APPEND ? "append (K then V)" : "gather (K then V)");
    return NULL;
}

/**
 * The gather's expected output above assumes the pool holds only the old
 * tokens; so the gather scenarios append nothing: they are built with n_new = 0
 * and their lengths as old_len.
 */
static double job_bytes(const job *j)
{
    const scenario *s = j->s;
    if (j->op == OP_APPEND) return 2.0 * 2.0 * (double)s->new_elems * s->es + 8.0 * s->n_tokens;
    double read = 0;
    for (int b = 0; b < s->n_seqs; ++b) read += 2.0 * s->len[b] * (double)s->H * s->d * s->es;
    return read + 2.0 * (double)s->out_elems * s->es + 4.0 * s->n_seqs * (1 + s->max_pages);
}

static const char *variant_name(int v) { return v == BASELINE ? "contig" : variant_at(v)->id; }

static void bench_scenario(const wb_device *dev, const wb_common_opts *opt, scenario *s, op_kind op,
                           const char *label, wb_report *rep)
{
    char problem[96], size[96];
    snprintf(problem, sizeof problem, "%s %s, %s", op == OP_APPEND ? "append" : "gather", wb_dtype_name(s->dtype), label);
    snprintf(size, sizeof size, "%d seqs H%d d%d block %d", s->n_seqs, s->H, s->d, s->bs);
    for (int v = 0; v <= EXERCISE; ++v) {
        if (opt->variant >= 0 && opt->variant != v) continue;
        job j = {s, op, v};
        wb_row row = {.problem = problem, .size = size, .variant = variant_name(v), .unit = "GB/s",
                      .roof = dev->copy_gbps, .is_peer = v == BASELINE,
                      .what = v == BASELINE ? "baseline: v2 on a contiguous max-length cache" : variant_at(v)->what};
        wb_check_and_time(dev, opt, launch_job, check_job, &j, &row);
        row.throughput = wb_gbps(job_bytes(&j), row.time.median_ms);
        row.bytes = job_bytes(&j); /* and no arithmetic: a copy */
        wb_report_add(rep, &row);
    }
}

static int check_scenario(const wb_common_opts *opt, scenario *s, op_kind op, int *checks)
{
    printf("%-6s %-4s B%-3d H%-2d d%-3d block %-3d max_len %-5d%s", op == OP_APPEND ? "append" : "gather",
           wb_dtype_name(s->dtype), s->n_seqs, s->H, s->d, s->bs, s->max_len, s->n_copies ? " (copy-on-write)" : "");
    int failed = 0;
    for (int v = 0; v <= EXERCISE; ++v) {
        if (opt->variant >= 0 && opt->variant != v) continue;
        job j = {s, op, v};
        int r = wb_check_variant(variant_name(v), check_job, &j, 2);
        *checks += r >= 0;
        failed += r == 0;
    }
    printf("\n");
    return failed;
}

/**
 * --memory: what paging saves, host arithmetic only. 256 sequences of
 * log-uniform lengths in [16, 4096] (seeded), GPT-2 124M's KV bytes per token
 * (2 · 12 layers · 768 · 2 bytes fp16 = 36 KiB), against a contiguous cache
 * reserving 4096 tokens per sequence.
 */
static void print_memory_table(uint64_t seed)
{
    enum { SEQS = 256, MAX_LEN = 4096 };
    const double bytes_per_token = 2.0 * 12 * 768 * 2;
    wb_rng r;
    wb_rng_seed(&r, seed);
    int lens[SEQS];
    long long tokens = 0;
    for (int i = 0; i < SEQS; ++i) tokens += lens[i] = wb_rng_log_uniform(&r, 16, MAX_LEN);
    double contig = (double)SEQS * MAX_LEN * bytes_per_token;
    printf("%d sequences, log-uniform lengths in [16, %d] (seed %llu): %lld tokens, mean %.0f\n", SEQS, MAX_LEN,
           (unsigned long long)seed, tokens, (double)tokens / SEQS);
    printf("KV cache of GPT-2 124M (36 KiB per token, fp16):\n");
    printf("  contiguous, %d tokens reserved per sequence: %.2f GB (%.1f%% of it used)\n", MAX_LEN, contig / 1e9,
           100.0 * tokens * bytes_per_token / contig);
    printf("%12s | %8s | %10s | %22s | %14s\n", "block size", "pages", "paged GB", "waste (last pages)", "vs contiguous");
    static const int sizes[] = {1, 8, 16, 32, 64, 128, 256};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
        long long pages = 0;
        for (int i = 0; i < SEQS; ++i) pages += (lens[i] + sizes[k] - 1) / sizes[k];
        double held = (double)pages * sizes[k];
        printf("%12d | %8lld | %10.3f | %10.0f tokens %5.2f%% | %13.1f%%\n", sizes[k], pages,
               held * bytes_per_token / 1e9, held - (double)tokens, 100.0 * (held - tokens) / held,
               100.0 * held * bytes_per_token / contig);
    }
}

/** @brief Parse arguments, open the GPU (or exit 77), then --check or the timed tables. */
int main(int argc, char **argv)
{
    long long shape[4] = {0, 0, 0, 0}, block_size = 16;
    int dtype_choice = 0, memory = 0;
    const wb_option extra[] = {
        {"--shape", "B H N d", "B sequences of N tokens, H heads of d (default B32 H12 N2048 d64: append a prefill of "
         "32x2048 tokens, fp16 also 128 sequences 1 token each, gather 32 of mixed lengths up to 4096)", WB_OPT_INT,
         shape, 4, 1, 1 << 20, NULL},
        {"--block-size", "S", "tokens per page (default 16)", WB_OPT_INT, &block_size, 1, 1, 4096, NULL},
        {"--dtype", "T", "fp32, fp16 or all (default all)", WB_OPT_CHOICE, &dtype_choice, 0, 0, 0, dtype_choices},
        {"--memory", NULL, "print the memory paging saves for a mix of lengths (no GPU needed)", WB_OPT_FLAG, &memory,
         0, 0, 0, NULL},
    };
    const wb_program prog = {"stage08_paged_kv_cache",
                             "Stage 08: the paged KV cache: block manager, append and gather kernels, against a "
                             "contiguous max-length cache.",
                             variant_ids, variant_help, NULL};
    wb_common_opts opt;
    wb_parse_args_or_exit(argc, argv, &prog, &opt, extra, 4);
    if (shape[0] > 0 && shape[0] * shape[1] * shape[2] * shape[3] > (1LL << 29)) {
        wb_usage_error_exit(&prog, "--shape needs B*H*N*d <= 2^29; got %lld %lld %lld %lld", shape[0], shape[1],
                            shape[2], shape[3]);
    }
    if (memory) {
        print_memory_table((uint64_t)opt.seed);
        return 0;
    }

    wb_device dev;
    wb_device_open_or_skip(&dev, prog.name);
    const wb_dtype dtypes[] = {WB_F32, WB_F16};
    int ok;
    if (opt.check) {
        /* B, H, d, block size, the longest length: partial last pages, block size 1, odd d, one sequence */
        static const int cases[][5] = {{1, 1, 64, 16, 1},  {3, 2, 64, 16, 17},   {5, 3, 8, 1, 9},     {4, 2, 40, 16, 100},
                                       {7, 1, 3, 4, 33},   {2, 12, 128, 32, 1000}, {16, 4, 64, 16, 700}, {1, 2, 64, 256, 4097},
                                       {9, 2, 64, 16, 16385}};
        int checks = 0, failed = 0;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
            const int *k = cases[c];
            if ((long long)k[0] * k[1] * k[2] * k[4] > opt.check_max) continue;
            for (int t = 0; t < 2; ++t) {
                if (dtype_choice && dtype_choice - 1 != t) continue;
                uint64_t seed = wb_seed_for((uint64_t)opt.seed, c, (uint64_t)t);
                wb_rng r;
                wb_rng_seed(&r, seed);
                int *old_len = malloc(sizeof(int) * k[0]), *n_new = malloc(sizeof(int) * k[0]);
                /* append: old lengths 0 … max (the first one never a multiple of the block: copy-on-write), 1–40 new */
                for (int b = 0; b < k[0]; ++b) {
                    old_len[b] = b == 0 ? k[4] / 2 | 1 : wb_rng_int(&r, 0, k[4] / 2);
                    n_new[b] = wb_rng_int(&r, b == 0, 40);
                }
                scenario s;
                scenario_init(&s, dtypes[t], k[0], k[1], k[2], k[3], old_len, n_new, k[3] > 1, seed);
                failed += check_scenario(&opt, &s, OP_APPEND, &checks);
                scenario_free(&s);
                /* gather: lengths 1 … max, one of them exactly the max */
                for (int b = 0; b < k[0]; ++b) old_len[b] = b == k[0] - 1 ? k[4] : wb_rng_log_uniform(&r, 1, k[4]), n_new[b] = 0;
                scenario_init(&s, dtypes[t], k[0], k[1], k[2], k[3], old_len, n_new, 0, seed + 7);
                failed += check_scenario(&opt, &s, OP_GATHER, &checks);
                scenario_free(&s);
                free(old_len), free(n_new);
            }
        }
        printf("stage08 --check: %d checks, %d failed\n", checks, failed);
        ok = failed == 0 && checks > 0;
    } else {
        int B = shape[0] ? (int)shape[0] : 32, H = shape[0] ? (int)shape[1] : 12, N = shape[0] ? (int)shape[2] : 2048;
        int d = shape[0] ? (int)shape[3] : 64, bs = (int)block_size;
        printf("stage08_paged_kv_cache: append and gather through pages of %d tokens\n", bs);
        wb_measure_copy_bandwidth(&dev);
        wb_device_print(&dev, stdout);
        printf("roof: the copy bandwidth; append is charged reading and writing the new K and V rows (and the slots),\n"
               "gather reading the tokens through the tables and writing the padded contiguous output\n");
        wb_report rep;
        wb_report_begin(&rep, "stage08", dev.name, stdout);
        for (int t = 1; t >= 0; --t) {
            if (dtype_choice && dtype_choice - 1 != t) continue;
            int *old_len = calloc((size_t)(B > 256 ? B : 256), sizeof(int));
            int *n_new = calloc((size_t)(B > 256 ? B : 256), sizeof(int));
            char label[64];
            scenario s;
            /* prefill: B sequences of N new tokens each */
            for (int b = 0; b < B; ++b) old_len[b] = 0, n_new[b] = N;
            snprintf(label, sizeof label, "prefill %dx%d tokens", B, N);
            scenario_init(&s, dtypes[t], B, H, d, bs, old_len, n_new, 0, 11);
            bench_scenario(&dev, &opt, &s, OP_APPEND, label, &rep);
            scenario_free(&s);
            if (dtypes[t] == WB_F16 && !shape[0]) { /* decode: 128 sequences, one token each: small and latency-bound */
                wb_rng r;
                wb_rng_seed(&r, 12);
                for (int b = 0; b < 128; ++b) old_len[b] = wb_rng_log_uniform(&r, 16, 2047), n_new[b] = 1;
                scenario_init(&s, dtypes[t], 128, H, d, bs, old_len, n_new, 0, 13);
                bench_scenario(&dev, &opt, &s, OP_APPEND, "decode 128x1 token", &rep);
                scenario_free(&s);
            }
            /* gather: B sequences of mixed lengths up to 2N, the longest exactly 2N */
            wb_rng r;
            wb_rng_seed(&r, 14);
            for (int b = 0; b < B; ++b) old_len[b] = b == 0 ? 2 * N : wb_rng_log_uniform(&r, 16, 2 * N), n_new[b] = 0;
            snprintf(label, sizeof label, "%d mixed lengths <= %d", B, 2 * N);
            scenario_init(&s, dtypes[t], B, H, d, bs, old_len, n_new, 0, 15);
            bench_scenario(&dev, &opt, &s, OP_GATHER, label, &rep);
            scenario_free(&s);
            free(old_len), free(n_new);
        }
        ok = wb_report_finish(&rep, opt.csv);
    }
    wb_device_close(&dev);
    return wb_exit_status(ok);
}
