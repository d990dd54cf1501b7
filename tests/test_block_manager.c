/**
 * @file tests/test_block_manager.c
 * @brief CPU tests of stage 08's block manager: known cases, every error, and
 *        thousands of random append / fork / free operations checked against a
 *        simple model of what each sequence must read back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block_manager.h"
#include "rng.h"
#include "test_util.h"

static void expect_invariants(const kv_block_manager *m)
{
    char err[256];
    int ok = kv_check_invariants(m, err, sizeof err);
    if (!ok) fprintf(stderr, "invariant broken: %s\n", err);
    EXPECT(ok);
}

static void test_basic(void)
{
    kv_block_manager m;
    EXPECT(kv_init(&m, 10, 4, 4, 8, 0) == KV_OK);
    EXPECT(kv_add_seq(&m, 0) == KV_OK);
    int seq = 0, n = 6, n_copies = -1;
    int64_t slots[16];
    kv_page_copy copies[4];
    /* pages are handed out 0, 1, … when not shuffled: tokens 0–5 in slots 0–5 */
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_OK && n_copies == 0);
    for (int t = 0; t < 6; ++t) EXPECT(slots[t] == t);
    EXPECT(kv_seq_len(&m, 0) == 6 && m.n_free == 8);
    /* fork: the child shares both pages */
    EXPECT(kv_fork(&m, 0, 1) == KV_OK);
    EXPECT(m.ref_count[0] == 2 && m.ref_count[1] == 2 && m.n_free == 8 && kv_seq_len(&m, 1) == 6);
    expect_invariants(&m);
    /* the child writes into its half-full shared last page: copy-on-write to page 2 */
    seq = 1, n = 1;
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_OK && n_copies == 1);
    EXPECT(copies[0].src_page == 1 && copies[0].dst_page == 2 && copies[0].n_tokens == 2);
    EXPECT(slots[0] == 2 * 4 + 2);
    EXPECT(m.ref_count[1] == 1 && m.ref_count[2] == 1 && kv_block_table(&m, 1)[0] == 0);
    /* the parent's last page is now its own: no copy */
    seq = 0;
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_OK && n_copies == 0 && slots[0] == 6);
    expect_invariants(&m);
    /* a full shared page is never copied: new tokens start a new page */
    EXPECT(kv_add_seq(&m, 2) == KV_OK);
    seq = 2, n = 4;
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_OK);
    EXPECT(kv_fork(&m, 2, 3) == KV_OK);
    seq = 3, n = 1;
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_OK && n_copies == 0);
    /* freeing returns only the pages nobody else holds */
    int free_before = m.n_free;
    EXPECT(kv_free_seq(&m, 3) == KV_OK && m.n_free == free_before + 1);
    EXPECT(kv_free_seq(&m, 2) == KV_OK && m.n_free == free_before + 2);
    EXPECT(kv_free_seq(&m, 0) == KV_OK && kv_free_seq(&m, 1) == KV_OK && m.n_free == 10);
    expect_invariants(&m);
    kv_destroy(&m);

    /* a batch: slots come out sequence by sequence; a shuffled pool places pages anywhere */
    EXPECT(kv_init(&m, 64, 16, 8, 8, 7) == KV_OK);
    int seqs[3] = {5, 2, 7}, counts[3] = {17, 0, 40};
    for (int i = 0; i < 3; ++i) EXPECT(kv_add_seq(&m, seqs[i]) == KV_OK);
    int64_t many[64];
    EXPECT(kv_append(&m, seqs, counts, 3, many, copies, &n_copies) == KV_OK);
    for (int t = 0; t < 17; ++t) EXPECT(many[t] == kv_slot(&m, 5, t));
    for (int t = 0; t < 40; ++t) EXPECT(many[17 + t] == kv_slot(&m, 7, t));
    EXPECT(m.n_free == 64 - 2 - 3);
    int in_order = 1;
    for (int p = 0; p < 2; ++p) in_order &= kv_block_table(&m, 5)[p] == p;
    EXPECT(!in_order); /* with seed 7 the first pages are not 0 and 1 */
    /* but a batch gets its pages in address order: sequence 5's two, then sequence 7's three, rising */
    int prev = -1, rising = 1;
    for (int i = 0; i < 3; i += 2)
        for (int p = 0; p < kv_pages_for(&m, counts[i]); ++p) {
            rising &= kv_block_table(&m, seqs[i])[p] > prev;
            prev = kv_block_table(&m, seqs[i])[p];
        }
    EXPECT(rising);
    expect_invariants(&m);
    kv_destroy(&m);
}

/** Snapshot of everything a failed call must leave alone. */
typedef struct {
    int n_free;
    int *free_list, *ref_count, *seq_len, *tables;
} snapshot;

static void take(snapshot *s, const kv_block_manager *m)
{
    size_t tables = (size_t)m->max_seqs * m->max_pages_per_seq;
    s->n_free = m->n_free;
    s->free_list = malloc((size_t)m->num_pages * sizeof(int));
    s->ref_count = malloc((size_t)m->num_pages * sizeof(int));
    s->seq_len = malloc((size_t)m->max_seqs * sizeof(int));
    s->tables = malloc(tables * sizeof(int));
    memcpy(s->free_list, m->free_list, (size_t)m->num_pages * sizeof(int));
    memcpy(s->ref_count, m->ref_count, (size_t)m->num_pages * sizeof(int));
    memcpy(s->seq_len, m->seq_len, (size_t)m->max_seqs * sizeof(int));
    memcpy(s->tables, m->block_tables, tables * sizeof(int));
}

static int unchanged(snapshot *s, const kv_block_manager *m)
{
    size_t tables = (size_t)m->max_seqs * m->max_pages_per_seq;
    int same = s->n_free == m->n_free && !memcmp(s->free_list, m->free_list, (size_t)m->n_free * sizeof(int)) &&
               !memcmp(s->ref_count, m->ref_count, (size_t)m->num_pages * sizeof(int)) &&
               !memcmp(s->seq_len, m->seq_len, (size_t)m->max_seqs * sizeof(int)) &&
               !memcmp(s->tables, m->block_tables, tables * sizeof(int));
    free(s->free_list), free(s->ref_count), free(s->seq_len), free(s->tables);
    return same;
}

static void test_errors(void)
{
    kv_block_manager m;
    EXPECT(kv_init(&m, 0, 4, 4, 4, 0) == KV_ERR_BAD_ARGUMENT);
    EXPECT(kv_init(&m, 4, 0, 4, 4, 0) == KV_ERR_BAD_ARGUMENT);
    EXPECT(kv_init(&m, 3, 4, 4, 2, 0) == KV_OK);
    int64_t slots[16];
    kv_page_copy copies[4];
    int n_copies, seq = 0, n = 1;
    snapshot s;
    take(&s, &m);
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_ERR_UNKNOWN_SEQ);
    EXPECT(kv_free_seq(&m, 0) == KV_ERR_UNKNOWN_SEQ);
    EXPECT(kv_fork(&m, 0, 1) == KV_ERR_UNKNOWN_SEQ);
    EXPECT(kv_add_seq(&m, 4) == KV_ERR_BAD_ARGUMENT && kv_add_seq(&m, -1) == KV_ERR_BAD_ARGUMENT);
    EXPECT(kv_free_seq(&m, 99) == KV_ERR_BAD_ARGUMENT);
    EXPECT(unchanged(&s, &m));
    EXPECT(kv_add_seq(&m, 0) == KV_OK && kv_add_seq(&m, 0) == KV_ERR_SEQ_EXISTS);
    EXPECT(kv_add_seq(&m, 1) == KV_OK);
    take(&s, &m);
    n = 9; /* 2 pages of 4 is the most a table holds */
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_ERR_SEQ_TOO_LONG);
    n = -1;
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_ERR_BAD_ARGUMENT);
    int dup[2] = {0, 0}, ones[2] = {1, 1};
    EXPECT(kv_append(&m, dup, ones, 2, slots, copies, &n_copies) == KV_ERR_BAD_ARGUMENT);
    EXPECT(kv_fork(&m, 0, 1) == KV_ERR_SEQ_EXISTS);
    EXPECT(unchanged(&s, &m));
    /* exhaustion: 3 pages; seq 0 takes 2, then a batch needing 2 more fails whole */
    n = 8;
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_OK && m.n_free == 1);
    int batch[1] = {1}, need[1] = {5};
    take(&s, &m);
    EXPECT(kv_append(&m, batch, need, 1, slots, copies, &n_copies) == KV_ERR_NO_FREE_PAGES);
    EXPECT(unchanged(&s, &m));
    expect_invariants(&m);
    /* copy-on-write counts too: fork a half-full page with no page left */
    EXPECT(kv_free_seq(&m, 0) == KV_OK && m.n_free == 3);
    n = 2, seq = 1;
    EXPECT(kv_append(&m, &seq, &n, 1, slots, copies, &n_copies) == KV_OK);
    EXPECT(kv_fork(&m, 1, 2) == KV_OK && kv_fork(&m, 1, 3) == KV_OK && kv_fork(&m, 1, 0) == KV_OK);
    int four[4] = {0, 1, 2, 3}, one_each[4] = {1, 1, 1, 1};
    take(&s, &m); /* 4 sequences share one half-full page; 3 of them need a copy, only 2 pages are free */
    EXPECT(kv_append(&m, four, one_each, 4, slots, copies, &n_copies) == KV_ERR_NO_FREE_PAGES);
    EXPECT(unchanged(&s, &m));
    EXPECT(kv_append(&m, four, one_each, 2, slots, copies, &n_copies) == KV_OK && n_copies == 2);
    /* now 2 sequences share it and 2 hold private copies; both sharers append: the first copies,
     * the second finds the page its own and copies nothing — one page is enough */
    EXPECT(kv_free_seq(&m, 0) == KV_OK && m.n_free == 1);
    int sharers[2] = {2, 3};
    EXPECT(kv_append(&m, sharers, one_each, 2, slots, copies, &n_copies) == KV_OK && n_copies == 1);
    expect_invariants(&m);
    EXPECT(kv_status_string(KV_ERR_NO_FREE_PAGES)[0] != '\0');
    kv_destroy(&m);
}

/**
 * Thousands of random operations on a small pool (so that exhaustion happens),
 * with a model: every token written gets a unique value in a host "pool" of
 * slots; page copies are carried out as the manager asks. After every operation
 * the invariants hold, and every live sequence reads back exactly its tokens
 * through its block table — no page lost, shared wrongly or overwritten.
 */
static void test_random(void)
{
    enum { PAGES = 48, BS = 4, SEQS = 12, MAX_PAGES = 10, OPS = 20000 };
    kv_block_manager m;
    EXPECT(kv_init(&m, PAGES, BS, SEQS, MAX_PAGES, 99) == KV_OK);
    static int pool[PAGES * BS], model[SEQS][MAX_PAGES * BS], model_len[SEQS];
    for (int i = 0; i < PAGES * BS; ++i) pool[i] = -1;
    for (int s = 0; s < SEQS; ++s) model_len[s] = -1;
    wb_rng r;
    wb_rng_seed(&r, 2024);
    int next_value = 0, n_ok = 0, n_exhausted = 0, n_cow = 0, n_forks = 0, failures_before = wb_test_failures;
    for (int op = 0; op < OPS && wb_test_failures == failures_before; ++op) {
        int kind = wb_rng_int(&r, 0, 9), a = wb_rng_int(&r, 0, SEQS - 1), b = wb_rng_int(&r, 0, SEQS - 1);
        snapshot s;
        take(&s, &m);
        kv_status st;
        if (kind == 0) { /* add */
            st = kv_add_seq(&m, a);
            EXPECT(st == (model_len[a] < 0 ? KV_OK : KV_ERR_SEQ_EXISTS));
            if (st == KV_OK) model_len[a] = 0;
        } else if (kind == 1) { /* free */
            st = kv_free_seq(&m, a);
            EXPECT(st == (model_len[a] >= 0 ? KV_OK : KV_ERR_UNKNOWN_SEQ));
            if (st == KV_OK) model_len[a] = -1;
        } else if (kind == 2) { /* fork */
            st = kv_fork(&m, a, b);
            EXPECT(st == (model_len[a] < 0 ? KV_ERR_UNKNOWN_SEQ : model_len[b] >= 0 ? KV_ERR_SEQ_EXISTS : KV_OK));
            if (st == KV_OK) {
                model_len[b] = model_len[a];
                memcpy(model[b], model[a], sizeof model[a]);
                n_forks++;
            }
        } else { /* append a batch of 1–4 distinct sequences */
            int seqs[4], n_new[4], n_seqs = 0, total = 0, expect_st = KV_OK;
            int want = wb_rng_int(&r, 1, 4);
            long long pages_needed = 0;
            for (int i = 0; i < want; ++i) {
                int cand = wb_rng_int(&r, 0, SEQS - 1), dup = 0;
                for (int j = 0; j < n_seqs; ++j) dup |= seqs[j] == cand;
                if (dup) continue;
                seqs[n_seqs] = cand, n_new[n_seqs] = wb_rng_int(&r, 0, 9);
                if (model_len[cand] < 0 && expect_st == KV_OK) expect_st = KV_ERR_UNKNOWN_SEQ;
                if (model_len[cand] >= 0) {
                    int len = model_len[cand], new_len = len + n_new[n_seqs];
                    if (new_len > MAX_PAGES * BS && expect_st == KV_OK) expect_st = KV_ERR_SEQ_TOO_LONG;
                    pages_needed += (new_len + BS - 1) / BS - (len + BS - 1) / BS;
                    if (n_new[n_seqs] > 0 && len % BS) { /* shared last page? count holders independently */
                        int last = kv_block_table(&m, cand)[len / BS], holders = 0;
                        for (int t = 0; t < SEQS; ++t)
                            for (int p = 0; model_len[t] >= 0 && p < (model_len[t] + BS - 1) / BS; ++p)
                                holders += kv_block_table(&m, t)[p] == last;
                        /* batch members before it that copied away from the same page */
                        for (int j = 0; j < n_seqs; ++j)
                            if (model_len[seqs[j]] > 0 && model_len[seqs[j]] % BS && n_new[j] > 0 &&
                                kv_block_table(&m, seqs[j])[model_len[seqs[j]] / BS] == last && holders > 1)
                                holders--;
                        pages_needed += holders > 1;
                    }
                }
                total += n_new[n_seqs++];
            }
            if (expect_st == KV_OK && pages_needed > m.n_free) expect_st = KV_ERR_NO_FREE_PAGES;
            int64_t slots[64];
            kv_page_copy copies[4];
            int n_copies = 0;
            st = kv_append(&m, seqs, n_new, n_seqs, slots, copies, &n_copies);
            EXPECT((int)st == expect_st);
            n_exhausted += st == KV_ERR_NO_FREE_PAGES;
            if (st == KV_OK) {
                for (int c = 0; c < n_copies; ++c) /* what the GPU would do: copy the filled part */
                    for (int t = 0; t < copies[c].n_tokens; ++t)
                        pool[copies[c].dst_page * BS + t] = pool[copies[c].src_page * BS + t];
                n_cow += n_copies;
                int k = 0;
                for (int i = 0; i < n_seqs; ++i)
                    for (int t = 0; t < n_new[i]; ++t) {
                        int v = next_value++;
                        pool[slots[k++]] = v;
                        model[seqs[i]][model_len[seqs[i]]++] = v;
                    }
                EXPECT(k == total);
            }
        }
        if (st != KV_OK)
            EXPECT(unchanged(&s, &m));
        else
            unchanged(&s, &m); /* frees the snapshot */
        n_ok += st == KV_OK;
        expect_invariants(&m);
        for (int q = 0; q < SEQS; ++q) {
            EXPECT(kv_seq_len(&m, q) == model_len[q]);
            for (int t = 0; t < model_len[q]; ++t) EXPECT(pool[kv_slot(&m, q, t)] == model[q][t]);
        }
    }
    /* the run must have exercised what it claims to */
    printf("random: %d operations succeeded, %d pool exhaustions, %d forks, %d copy-on-write copies\n", n_ok,
           n_exhausted, n_forks, n_cow);
    EXPECT(n_exhausted > 100 && n_cow > 100 && n_forks > 100);
    kv_destroy(&m);
}

int main(int argc, char **argv)
{
    const wb_test_group groups[] = {{"basic", test_basic}, {"errors", test_errors}, {"random", test_random}};
    return wb_test_main(argc, argv, groups, sizeof groups / sizeof groups[0]);
}
