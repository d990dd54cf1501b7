/**
 * @file stages/08_paged_kv_cache/block_manager.h
 * @brief The paged KV cache's host side: a pool of fixed-size pages, a block
 *        table per sequence, pages handed out as sequences grow and returned when
 *        they end, and copy-on-write sharing between forked sequences.
 *
 * This is vLLM's design in a few hundred lines of C. A *page* (vLLM: block)
 * holds the K and V of `block_size` consecutive tokens of one sequence, for every
 * head. Sequence s's token t lives in page `table[s][t / block_size]` at offset
 * `t % block_size`; its *slot* is `page · block_size + offset`, the index the GPU
 * kernels write to and read from.
 *
 * Every operation either succeeds completely or changes nothing and returns an
 * error code: pool exhaustion, an unknown sequence, a sequence that would outgrow
 * its block table, bad arguments. No error ever frees, moves or overwrites a page
 * another sequence uses.
 */
#ifndef STAGE08_BLOCK_MANAGER_H
#define STAGE08_BLOCK_MANAGER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief What an operation returns. */
typedef enum {
    KV_OK = 0,              /**< done */
    KV_ERR_NO_FREE_PAGES,   /**< the pool has too few free pages; nothing changed */
    KV_ERR_UNKNOWN_SEQ,     /**< no live sequence has that id */
    KV_ERR_SEQ_EXISTS,      /**< the id is already a live sequence */
    KV_ERR_SEQ_TOO_LONG,    /**< the sequence would need more pages than its block table holds */
    KV_ERR_BAD_ARGUMENT,    /**< an id out of range, a negative count, a duplicate in a batch */
    KV_ERR_OUT_OF_MEMORY    /**< host allocation failed (kv_init only) */
} kv_status;

/** @brief A one-line description of a status ("pool exhausted: ..."). */
const char *kv_status_string(kv_status s);

/** @brief A page copy the caller must do on the GPU before writing (copy-on-write). */
typedef struct {
    int src_page; /**< the shared page */
    int dst_page; /**< the sequence's new private page */
    int n_tokens; /**< tokens of src to copy (the filled part) */
} kv_page_copy;

/** @brief The block manager. Fields are read-only to callers; use the functions. */
typedef struct {
    int num_pages;          /**< pages in the pool */
    int block_size;         /**< tokens per page */
    int max_seqs;           /**< sequence ids are 0 … max_seqs − 1 */
    int max_pages_per_seq;  /**< width of a block table: a sequence holds at most this many pages */
    int n_free;             /**< pages on the free list */
    int *free_list;         /**< stack of free page ids; [0, n_free) are free */
    int *ref_count;         /**< per page: how many block tables hold it (0 = free) */
    int *seq_len;           /**< per sequence id: tokens, or −1 when the id is not live */
    int *block_tables;      /**< [max_seqs][max_pages_per_seq] page ids; only the first pages_of(len) of a row are meaningful */
} kv_block_manager;

/**
 * @brief Set up an empty manager: every page free, no sequence live.
 * @param m                 the manager
 * @param num_pages         pages in the pool
 * @param block_size        tokens per page
 * @param max_seqs          sequence ids are 0 … max_seqs − 1
 * @param max_pages_per_seq the most pages one sequence may hold
 * @param seed 0: pages are handed out in order 0, 1, 2, …; otherwise the free
 *             list is shuffled with this seed (random page placement, as a
 *             long-running server ends up with; the checks use it)
 */
kv_status kv_init(kv_block_manager *m, int num_pages, int block_size, int max_seqs, int max_pages_per_seq,
                  uint64_t seed);
/** @brief Free the manager's memory. */
void kv_destroy(kv_block_manager *m);

/** @brief Pages a sequence of `n_tokens` tokens holds: ceil(n_tokens / block_size). */
int kv_pages_for(const kv_block_manager *m, int n_tokens);

/** @brief Start an empty sequence `seq`. */
kv_status kv_add_seq(kv_block_manager *m, int seq);

/**
 * @brief Grow sequences by new tokens, all or nothing: the slot mapping of one
 *        batch. Pages are taken from the pool as a sequence crosses into a new
 *        one; the batch gets them in address order (the lowest free pages first
 *        of those it takes), so that its writes form one rising stream. Where a sequence's last page is shared (after kv_fork) and not
 *        full, the sequence first gets a private copy of it (copy-on-write):
 *        the copy is returned in `copies` and must be done before the new
 *        tokens are written.
 * @param m        the manager
 * @param seqs     the sequences, each at most once
 * @param n_new    new tokens of each (>= 0)
 * @param n_seqs   how many sequences
 * @param slots    receives Σ n_new slots: the new tokens of seqs[0], then of seqs[1], …
 * @param copies   receives up to n_seqs page copies
 * @param n_copies receives how many
 */
kv_status kv_append(kv_block_manager *m, const int *seqs, const int *n_new, int n_seqs, int64_t *slots,
                    kv_page_copy *copies, int *n_copies);

/**
 * @brief Start `child` as a copy of `parent` sharing all of its pages (each
 *        page's reference count goes up by one; nothing is copied now). Beam
 *        search and parallel sampling fork a prompt this way.
 */
kv_status kv_fork(kv_block_manager *m, int parent, int child);

/** @brief End sequence `seq`: every page it holds loses a reference; pages left with none are free again. */
kv_status kv_free_seq(kv_block_manager *m, int seq);

/** @brief Tokens in sequence `seq`, or −1 when it is not live. */
int kv_seq_len(const kv_block_manager *m, int seq);

/** @brief Sequence `seq`'s block table (its first kv_pages_for(len) entries are its pages). */
const int *kv_block_table(const kv_block_manager *m, int seq);

/** @brief The slot of token `t` of sequence `seq` (no checks: t < its length). */
int64_t kv_slot(const kv_block_manager *m, int seq, int t);

/**
 * @brief Check every invariant: each page's reference count equals the number
 *        of live block-table entries naming it; free pages (count 0) are on the
 *        free list exactly once, and no page in use is; n_free + pages in use =
 *        num_pages; no sequence holds the same page twice.
 * @return 1 when all hold, else 0 with a one-line reason in err
 */
int kv_check_invariants(const kv_block_manager *m, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* STAGE08_BLOCK_MANAGER_H */
