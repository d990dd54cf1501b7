/**
 * @file stages/08_paged_kv_cache/block_manager.c
 * @brief The block manager (see block_manager.h): a free list, reference counts
 *        and block tables. Each operation checks everything first and only then
 *        changes state, so a failure leaves the manager exactly as it was.
 */
#include "block_manager.h"

#include "rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kv_status_string(kv_status s)
{
    switch (s) {
    case KV_OK: return "ok";
    case KV_ERR_NO_FREE_PAGES: return "pool exhausted: not enough free pages (nothing was changed)";
    case KV_ERR_UNKNOWN_SEQ: return "unknown sequence: no live sequence has this id";
    case KV_ERR_SEQ_EXISTS: return "sequence exists: this id is already live";
    case KV_ERR_SEQ_TOO_LONG: return "sequence too long: it would need more pages than its block table holds";
    case KV_ERR_BAD_ARGUMENT: return "bad argument: id out of range, negative count, or a sequence twice in one batch";
    case KV_ERR_OUT_OF_MEMORY: return "out of host memory";
    }
    return "unknown status";
}

kv_status kv_init(kv_block_manager *m, int num_pages, int block_size, int max_seqs, int max_pages_per_seq,
                  uint64_t seed)
{
    memset(m, 0, sizeof *m);
    if (num_pages < 1 || block_size < 1 || max_seqs < 1 || max_pages_per_seq < 1) return KV_ERR_BAD_ARGUMENT;
    if ((int64_t)num_pages * block_size > INT64_C(1) << 40) return KV_ERR_BAD_ARGUMENT;
    m->num_pages = num_pages, m->block_size = block_size;
    m->max_seqs = max_seqs, m->max_pages_per_seq = max_pages_per_seq;
    m->free_list = malloc((size_t)num_pages * sizeof(int));
    m->ref_count = calloc((size_t)num_pages, sizeof(int));
    m->seq_len = malloc((size_t)max_seqs * sizeof(int));
    m->block_tables = malloc((size_t)max_seqs * (size_t)max_pages_per_seq * sizeof(int));
    if (!m->free_list || !m->ref_count || !m->seq_len || !m->block_tables) {
        kv_destroy(m);
        return KV_ERR_OUT_OF_MEMORY;
    }
    /* a stack: pop from the end, so list it backwards to hand out 0, 1, 2, … first */
    for (int i = 0; i < num_pages; ++i) m->free_list[i] = num_pages - 1 - i;
    if (seed) { /* Fisher–Yates */
        wb_rng r;
        wb_rng_seed(&r, seed);
        for (int i = num_pages - 1; i > 0; --i) {
            int j = wb_rng_int(&r, 0, i);
            int t = m->free_list[i];
            m->free_list[i] = m->free_list[j], m->free_list[j] = t;
        }
    }
    m->n_free = num_pages;
    for (int s = 0; s < max_seqs; ++s) m->seq_len[s] = -1;
    return KV_OK;
}

void kv_destroy(kv_block_manager *m)
{
    free(m->free_list), free(m->ref_count), free(m->seq_len), free(m->block_tables);
    memset(m, 0, sizeof *m);
}

int kv_pages_for(const kv_block_manager *m, int n_tokens)
{
    return (int)(((int64_t)n_tokens + m->block_size - 1) / m->block_size);
}

static int *table_of(const kv_block_manager *m, int seq) { return m->block_tables + (size_t)seq * m->max_pages_per_seq; }

static int is_live(const kv_block_manager *m, int seq) { return seq >= 0 && seq < m->max_seqs && m->seq_len[seq] >= 0; }

kv_status kv_add_seq(kv_block_manager *m, int seq)
{
    if (seq < 0 || seq >= m->max_seqs) return KV_ERR_BAD_ARGUMENT;
    if (m->seq_len[seq] >= 0) return KV_ERR_SEQ_EXISTS;
    m->seq_len[seq] = 0;
    return KV_OK;
}

/** The page holding sequence seq's last token (seq not empty). */
static int last_page(const kv_block_manager *m, int seq) { return table_of(m, seq)[kv_pages_for(m, m->seq_len[seq]) - 1]; }

/** 1 when appending to seq must first copy its last page: the page is shared and not full. */
static int needs_copy_on_write(const kv_block_manager *m, int seq, int n_new)
{
    int len = m->seq_len[seq];
    if (n_new == 0 || len % m->block_size == 0) return 0; /* nothing to write, or new tokens start a new page */
    return m->ref_count[last_page(m, seq)] > 1;
}

/** qsort's order for the free stack's top: highest page id first, so pops come out lowest first. */
static int descending(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

static int pop_free_page(kv_block_manager *m)
{
    int p = m->free_list[--m->n_free];
    m->ref_count[p] = 1;
    return p;
}

kv_status kv_append(kv_block_manager *m, const int *seqs, const int *n_new, int n_seqs, int64_t *slots,
                    kv_page_copy *copies, int *n_copies)
{
    *n_copies = 0;
    if (n_seqs < 0) return KV_ERR_BAD_ARGUMENT;
    /* 1. check everything; count the pages the whole batch needs */
    long long pages_needed = 0;
    for (int i = 0; i < n_seqs; ++i) {
        int s = seqs[i];
        if (s < 0 || s >= m->max_seqs || n_new[i] < 0) return KV_ERR_BAD_ARGUMENT;
        if (m->seq_len[s] < 0) return KV_ERR_UNKNOWN_SEQ;
        for (int j = 0; j < i; ++j)
            if (seqs[j] == s) return KV_ERR_BAD_ARGUMENT;
        long long new_len = (long long)m->seq_len[s] + n_new[i];
        if (new_len > (long long)m->max_pages_per_seq * m->block_size) return KV_ERR_SEQ_TOO_LONG;
        pages_needed += kv_pages_for(m, (int)new_len) - kv_pages_for(m, m->seq_len[s]);
        if (needs_copy_on_write(m, s, n_new[i])) {
            /* the commit below copies in batch order and the page's count falls with each copy:
             * when every holder appends, the last one finds it private and copies nothing */
            int page = last_page(m, s), earlier = 0;
            for (int j = 0; j < i; ++j) earlier += needs_copy_on_write(m, seqs[j], n_new[j]) && last_page(m, seqs[j]) == page;
            pages_needed += earlier < m->ref_count[page] - 1;
        }
    }
    if (pages_needed > m->n_free) return KV_ERR_NO_FREE_PAGES;
    /* 2. commit: nothing below can fail. First, the pages this batch will pop (the top of the
     * stack) are put in address order, lowest on top: a free list that churn has scrambled would
     * scatter a prefill's writes over the pool, and DRAM writes a rising stream of addresses
     * faster than a scattered one (stage 08's page measures the difference). */
    qsort(m->free_list + m->n_free - pages_needed, (size_t)pages_needed, sizeof(int), descending);
    int64_t *out = slots;
    for (int i = 0; i < n_seqs; ++i) {
        int s = seqs[i], len = m->seq_len[s], new_len = len + n_new[i];
        int *table = table_of(m, s);
        if (needs_copy_on_write(m, s, n_new[i])) {
            int idx = kv_pages_for(m, len) - 1, shared = table[idx], mine = pop_free_page(m);
            m->ref_count[shared]--;
            table[idx] = mine;
            copies[(*n_copies)++] = (kv_page_copy){shared, mine, len % m->block_size};
        }
        for (int p = kv_pages_for(m, len); p < kv_pages_for(m, new_len); ++p) table[p] = pop_free_page(m);
        m->seq_len[s] = new_len;
        for (int t = len; t < new_len; ++t) *out++ = kv_slot(m, s, t);
    }
    return KV_OK;
}

kv_status kv_fork(kv_block_manager *m, int parent, int child)
{
    if (child < 0 || child >= m->max_seqs || parent < 0 || parent >= m->max_seqs) return KV_ERR_BAD_ARGUMENT;
    if (!is_live(m, parent)) return KV_ERR_UNKNOWN_SEQ;
    if (is_live(m, child)) return KV_ERR_SEQ_EXISTS;
    int n = kv_pages_for(m, m->seq_len[parent]);
    const int *src = table_of(m, parent);
    int *dst = table_of(m, child);
    for (int p = 0; p < n; ++p) {
        dst[p] = src[p];
        m->ref_count[src[p]]++;
    }
    m->seq_len[child] = m->seq_len[parent];
    return KV_OK;
}

kv_status kv_free_seq(kv_block_manager *m, int seq)
{
    if (seq < 0 || seq >= m->max_seqs) return KV_ERR_BAD_ARGUMENT;
    if (!is_live(m, seq)) return KV_ERR_UNKNOWN_SEQ;
    const int *table = table_of(m, seq);
    for (int p = kv_pages_for(m, m->seq_len[seq]) - 1; p >= 0; --p)
        if (--m->ref_count[table[p]] == 0) m->free_list[m->n_free++] = table[p];
    m->seq_len[seq] = -1;
    return KV_OK;
}

int kv_seq_len(const kv_block_manager *m, int seq) { return seq >= 0 && seq < m->max_seqs ? m->seq_len[seq] : -1; }

const int *kv_block_table(const kv_block_manager *m, int seq) { return table_of(m, seq); }

int64_t kv_slot(const kv_block_manager *m, int seq, int t)
{
    return (int64_t)table_of(m, seq)[t / m->block_size] * m->block_size + t % m->block_size;
}

int kv_check_invariants(const kv_block_manager *m, char *err, size_t err_len)
{
    int ok = 0;
    int *refs = calloc((size_t)m->num_pages, sizeof(int));
    int *on_free_list = calloc((size_t)m->num_pages, sizeof(int));
    if (!refs || !on_free_list) {
        snprintf(err, err_len, "out of host memory");
        goto done;
    }
    for (int s = 0; s < m->max_seqs; ++s) {
        if (m->seq_len[s] < 0) continue;
        int n = kv_pages_for(m, m->seq_len[s]);
        if (n > m->max_pages_per_seq) {
            snprintf(err, err_len, "sequence %d: %d tokens need more pages than its table holds", s, m->seq_len[s]);
            goto done;
        }
        const int *t = table_of(m, s);
        for (int p = 0; p < n; ++p) {
            if (t[p] < 0 || t[p] >= m->num_pages) {
                snprintf(err, err_len, "sequence %d: entry %d names page %d, outside the pool", s, p, t[p]);
                goto done;
            }
            for (int q = 0; q < p; ++q)
                if (t[q] == t[p]) {
                    snprintf(err, err_len, "sequence %d holds page %d twice", s, t[p]);
                    goto done;
                }
            refs[t[p]]++;
        }
    }
    for (int i = 0; i < m->n_free; ++i) {
        int p = m->free_list[i];
        if (p < 0 || p >= m->num_pages || on_free_list[p]++) {
            snprintf(err, err_len, "free list entry %d: page %d is out of range or listed twice", i, p);
            goto done;
        }
    }
    int in_use = 0;
    for (int p = 0; p < m->num_pages; ++p) {
        if (refs[p] != m->ref_count[p]) {
            snprintf(err, err_len, "page %d: reference count %d, but %d block-table entries name it", p,
                     m->ref_count[p], refs[p]);
            goto done;
        }
        if ((refs[p] == 0) != (on_free_list[p] == 1)) {
            snprintf(err, err_len, "page %d: %d references but %s the free list", p, refs[p],
                     on_free_list[p] ? "on" : "not on");
            goto done;
        }
        in_use += refs[p] > 0;
    }
    if (in_use + m->n_free != m->num_pages) {
        snprintf(err, err_len, "%d pages in use + %d free != %d in the pool", in_use, m->n_free, m->num_pages);
        goto done;
    }
    ok = 1;
done:
    free(refs), free(on_free_list);
    return ok;
}
