/**
 * @file stages/08_paged_kv_cache/kernels.h
 * @brief Stage 08 — the paged KV cache on the GPU: the pool layout, the append
 *        and gather launchers, and the table of variants.
 *
 * **The pool.** K and V each live in one pool of pages,
 *
 *     pool[page][head][offset][d]      page < num_pages, offset < block_size
 *
 * so the block_size × d tokens of one head in one page are contiguous (2 KB for
 * 16 tokens at d 64 in fp16). Attention (stage 09) reads one (sequence, head) at
 * a time, page after page: each page is then one contiguous, fully coalesced
 * read. A new token's slot is `page · block_size + offset` (see block_manager.h).
 *
 * A contiguous max-length cache is the special case of one page of max_len
 * tokens per sequence: the baseline rows run the same kernels on that layout.
 */
#ifndef STAGE08_KERNELS_H
#define STAGE08_KERNELS_H

#include <stdint.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Append: write a batch's new K and V rows into their slots.
 *
 * new_k, new_v are [n_tokens][H][d] (the layout a QKV projection produces, the
 * batch's new tokens one after another); slots[t] is token t's slot.
 */
typedef struct {
    wb_dtype dtype;        /**< storage of everything */
    int n_tokens;          /**< new tokens in the batch */
    int H;                 /**< heads */
    int d;                 /**< head dimension */
    int block_size;        /**< tokens per page */
    const void *new_k;     /**< [n_tokens][H][d], device */
    const void *new_v;     /**< [n_tokens][H][d], device */
    const int64_t *slots;  /**< [n_tokens], device */
    void *k_pool;          /**< [num_pages][H][block_size][d], device */
    void *v_pool;          /**< the same for V */
} kv_append_args;

/**
 * @brief Gather: copy B sequences out of the pool into contiguous
 *        [B][H][max_len][d] K and V, positions past a sequence's length zeroed.
 */
typedef struct {
    wb_dtype dtype;             /**< storage of everything */
    int B;                      /**< sequences */
    int H;                      /**< heads */
    int d;                      /**< head dimension */
    int block_size;             /**< tokens per page */
    int max_len;                /**< length of the output's token axis (>= every length) */
    int max_pages_per_seq;      /**< width of block_tables */
    const int *block_tables;    /**< [B][max_pages_per_seq] page ids, device */
    const int *lens;            /**< [B] tokens of each sequence, device */
    const void *k_pool;         /**< the K pool, device */
    const void *v_pool;         /**< the V pool, device */
    void *k_out;                /**< [B][H][max_len][d], device */
    void *v_out;                /**< the same for V */
} kv_gather_args;

/** @brief An append launcher; returns NULL when launched, or why it cannot take the problem. */
typedef const char *(*kv_append_fn)(const kv_append_args *a);
/** @brief A gather launcher; the same. */
typedef const char *(*kv_gather_fn)(const kv_gather_args *a);

/** @brief One variant: an append and a gather kernel of the same kind. */
typedef struct {
    const char *id;          /**< "v1", … */
    const char *what;        /**< one line for the table */
    kv_append_fn append;     /**< its append */
    kv_gather_fn gather;     /**< its gather */
} kv_variant;

/** @brief The exercise slot (exercise.cu), the variant `ex`: your append; its gather refuses (not the exercise). */
extern const kv_variant kv_exercise_variant;

/** @brief The variants in teaching order. */
extern const kv_variant kv_variants[];
/** @brief How many. */
extern const int kv_variant_count;

/**
 * @brief Copy `n_tokens` tokens of page src to page dst in both pools, every
 *        head: the block manager's copy-on-write (kv_page_copy).
 */
const char *kv_copy_page(wb_dtype dtype, void *k_pool, void *v_pool, int H, int d, int block_size, int src_page,
                         int dst_page, int n_tokens);

#ifdef __cplusplus
}
#endif

#endif /* STAGE08_KERNELS_H */
