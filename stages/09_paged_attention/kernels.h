/**
 * @file stages/09_paged_attention/kernels.h
 * @brief Stage 09 — decode attention straight through stage 08's block tables:
 *        the problem, the launchers and the table of variants.
 *
 * One decode step: each of B sequences has one new query token (Hq heads of d)
 * and a context of lens[b] tokens whose K and V sit in stage 08's page pools,
 * [num_pages][Hkv][block_size][d] in fp16 (or fp32, for stage 10's fp32 model). Query head h reads KV head
 * h / (Hq / Hkv): grouped-query attention when Hkv < Hq, multi-head when equal.
 *
 *     o[b][h] = Σ_t softmax_t(scale · q[b][h]·k[b][t]) · v[b][t]     (fp32 accumulation, fp16 out)
 */
#ifndef STAGE09_KERNELS_H
#define STAGE09_KERNELS_H

#include <stddef.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief v3's smallest partition of the context, in tokens (split-K / flash-decoding). */
#define MIN_PARTITION_TOKENS 256
/** @brief v3-v5 split only a context of at least this many tokens: a shorter one's block streams it whole in less
 *         than the merge of two partitions costs (kernels.cu, paged_decode_partition). */
#define MIN_SPLIT_TOKENS (2 * MIN_PARTITION_TOKENS)

/** @brief One decode-attention problem. */
typedef struct {
    int B;                    /**< sequences */
    int Hq;                   /**< query heads */
    int Hkv;                  /**< KV heads (Hq % Hkv == 0) */
    int d;                    /**< head dimension */
    int block_size;           /**< tokens per page */
    int max_pages_per_seq;    /**< width of block_tables */
    int max_len;              /**< longest context (>= every lens[b]) */
    long long total_len;      /**< Σ lens[b] (host side: v3 sizes its partitions by it) */
    float scale;              /**< multiplies q·k (1/√d) */
    wb_dtype dtype;           /**< storage of q, the pools and o: fp16 (the stage's tables), or fp32 (stage 10's fp32 model) */
    const void *q;            /**< [B][Hq][d], device */
    const void *k_pool;       /**< [num_pages][Hkv][block_size][d], device */
    const void *v_pool;       /**< the same for V */
    const int *block_tables;  /**< [B][max_pages_per_seq], device */
    const int *lens;          /**< [B] context lengths (>= 1), device */
    void *o;                  /**< [B][Hq][d], device */
    void *workspace;          /**< v1: contiguous K, V; v3: the partitions' partial results */
    size_t workspace_bytes;   /**< its size */
    int *counters;            /**< v3: [B][Hq] ints, zero before the first launch; each launch leaves them zero */
    const int *host_lens;     /**< [B] the same lengths on the host, or NULL: v4 and v5 size their partitions from them, v6 and v7 their grid (they need them) */
    int dependent_launch;     /**< 1: v2–v7 launch as a programmatic dependent of the kernel before (sm_90; stage 10) */
    int *tile_counters;       /**< v6, v7: [B][Hq] ints, each row's tiles claimed so far; zero before the first launch, and each launch leaves them zero */
} decode_problem;

/** @brief Workspace bytes the variants need (the largest of v1's and v3's). */
size_t decode_workspace_bytes(int B, int Hq, int Hkv, int d, int max_len);

/** @brief The partition v3 uses for this problem, in tokens (d 64 or 128). */
int decode_partition_tokens(const decode_problem *p);

/** @brief A launcher: NULL when launched, or why it cannot take the problem. */
typedef const char *(*decode_launch_fn)(const decode_problem *p);

/** @brief One variant. */
typedef struct {
    const char *id;           /**< "v1", … */
    const char *what;         /**< one line for the table */
    decode_launch_fn launch;  /**< its launcher */
    int fp16_weights;         /**< 1: the softmax weights P are rounded to fp16 for P·V (tensor cores, v7) */
} decode_variant;

/** @brief The exercise slot (exercise.cu), the variant `ex`: your decode attention, a warp per row, fp16. */
const char *decode_exercise(const decode_problem *p);

/** @brief The variants in teaching order, then the exercise slot. */
extern const decode_variant decode_variants[];
/** @brief How many. */
extern const int decode_variant_count;

#ifdef __cplusplus
}
#endif

#endif /* STAGE09_KERNELS_H */
