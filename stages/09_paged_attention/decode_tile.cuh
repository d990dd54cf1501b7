/**
 * @file stages/09_paged_attention/decode_tile.cuh
 * @brief What stage 09's two kernel files share: the block's shape, v5's rows
 *        through the block table, one warp's tile of the online softmax (the
 *        loop body of v1–v6), and the host's rules for the split variants.
 *
 * kernels.cu teaches v1–v5, one partition kernel whose rows, grid and inner
 * loop change; decode_workers.cu teaches v6 and v7, kernels of their own that
 * hand out the work as workers. Both include this file.
 */
#ifndef STAGE09_DECODE_TILE_CUH
/** @brief Include guard. */
#define STAGE09_DECODE_TILE_CUH

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "device.h" /* wb_current_gpu */
#include "dtype_device.cuh"
#include "fast_math.cuh" /* exp2_approx (v5, v6) and LOG2E: the kernels work in base 2, as stage 06's */
#include "kernels.h"


#ifndef DECODE_WARPS
/** @brief Warps per block. */
#define DECODE_WARPS 4
#endif
#ifndef DECODE_PASSES
/** @brief 16-byte loads of K (and of V) each lane has in flight per step. */
#define DECODE_PASSES 8
#endif

#ifndef DECODE_MIN_BLOCKS_PER_SM
/** @brief v1–v3's blocks per SM that the compiler must leave registers for: 3 (at most 168 registers a
 *         thread). At 172 registers only 2 blocks fit an SM, v3 cuts the contexts into 1.5x longer
 *         partitions, and measured 25% slower at B8 H12 d64 context 4096 on the H100. */
#define DECODE_MIN_BLOCKS_PER_SM 3
#endif
#ifndef V4_PASSES_G4
/** @brief v4's loads of K (and of V) in flight per lane per tile with 4 query heads per block (8 with 2):
 *         each load feeds G dot products, so fewer in flight keep the G rows' registers in budget. */
#define V4_PASSES_G4 2
#endif
#ifndef V4_MIN_BLOCKS_PER_SM
/** @brief v4's blocks per SM that the compiler must leave registers for (__launch_bounds__): 4 caps a
 *         thread at 128 registers; at the compiler's own choice (168) only 3 blocks fit and the
 *         grouped-query step ran at 60% of the roof instead of 66% (H100, B8 Hq32 Hkv8 d128). */
#define V4_MIN_BLOCKS_PER_SM 4
#endif

/** @brief Most partitions one row may have (the merge keeps their weights in shared memory). */
#define MAX_PARTITIONS 1024

/**
 * @brief v5's rows through the block table: PagedRows without the division.
 *
 * `t / block_size` with a block size known only at run time compiles to about 25
 * instructions (the GPU has no integer divider: IABS, I2F, MUFU.RCP, F2I, fix-ups),
 * and PagedRows pays it for every token a lane loads. Here the host precomputes
 * magic = ⌈2^32 / block_size⌉ and the quotient is the high half of t · magic
 * (`__umulhi`, 1 instruction): t·magic / 2^32 = t / block_size + t·e / (block_size·2^32)
 * with 0 ≤ e < block_size, and that second term stays under 1 / block_size, so the
 * floor is exact, for every t < 2^20 and block_size < 2^12 (powers of two: e = 0).
 * A block size of 1 has no 32-bit magic: magic 0 and one_mask all ones give t.
 * The row (page · Hkv + h) · block_size + t mod block_size stays in 32 bits.
 * v5's other two changes to the loop come with these rows (LEAN, in the kernel).
 */
struct PagedRowsFast {
    static constexpr bool LEAN = true; /**< v5's inner loop goes with these rows (paged_decode_partition) */
    const int *tables;   /**< [B][max_pages] */
    int max_pages;       /**< table width */
    unsigned block_size; /**< tokens per page, at most 4096 */
    unsigned Hkv;        /**< KV heads */
    unsigned magic;      /**< ⌈2^32 / block_size⌉, or 0 for a block size of 1 */
    unsigned one_mask;   /**< 0xffffffff for a block size of 1, else 0 */
    /** @brief The row of token t, KV head h, of sequence b in the pool. */
    __device__ __forceinline__ unsigned long long row(int b, int h, int t) const
    {
        unsigned page_index = __umulhi((unsigned)t, magic) + ((unsigned)t & one_mask); /* t / block_size */
        unsigned page = (unsigned)tables[b * max_pages + page_index];
        return (page * Hkv + (unsigned)h) * block_size + ((unsigned)t - page_index * block_size);
    }
};

/**
 * @brief One tile of a warp's online softmax, for G query rows (the loop body of v1–v6):
 *        the scores of its PASSES K loads (each chunk dotted with G rows of q, summed over
 *        the row's lanes), the tile's max, O and l rescaled when the max grew, then the
 *        PASSES V loads weighted into O. Tokens at or past t_end score −∞ (weight 0).
 *        LEAN (v5, v6): one MUFU per exponential, and no rescale when the max did not grow.
 */
template <typename T, int D, int G, int PASSES, bool LEAN>
static __device__ __forceinline__ void attend_tile(const uint4 (&kr)[PASSES], const uint4 (&vr)[PASSES], int t0,
                                                   int t_end, int sub, const float (&qv)[G][Vec16<T>::N],
                                                   float (&acc)[G][Vec16<T>::N], float (&m)[G], float (&l)[G])
{
    constexpr int EP = Vec16<T>::N, CHUNKS = D / EP, TOKENS_PER_PASS = 32 / CHUNKS;
    float s[G][PASSES], tile_max[G];
#pragma unroll
    for (int g = 0; g < G; ++g) tile_max[g] = -INFINITY;
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        float kf[EP];
        unpack16(kr[p], kf, T());
        bool valid = t0 + p * TOKENS_PER_PASS + sub < t_end;
#pragma unroll
        for (int g = 0; g < G; ++g) { /* one K chunk, G dot products */
            float x = 0.0f;
#pragma unroll
            for (int k = 0; k < EP; ++k) x += qv[g][k] * kf[k];
#pragma unroll
            for (int off = 1; off < CHUNKS; off *= 2) x += __shfl_xor_sync(0xffffffffu, x, off); /* the row's lanes */
            s[g][p] = valid ? x : -INFINITY;
            tile_max[g] = fmaxf(tile_max[g], s[g][p]);
        }
    }
    float base[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int off = CHUNKS; off < 32; off *= 2)
            tile_max[g] = fmaxf(tile_max[g], __shfl_xor_sync(0xffffffffu, tile_max[g], off));
        float m_new = fmaxf(m[g], tile_max[g]);
        base[g] = m_new == -INFINITY ? 0.0f : m_new;
        /* v5 (LEAN): rescale only when the max grew (after the first tiles it rarely does: the test is
         * the same for the whole warp, which reduced tile_max over all its lanes, so it branches) */
        if (!LEAN || m_new > m[g]) {
            float alpha = LEAN ? exp2_approx(m[g] - base[g]) : exp2f(m[g] - base[g]);
            l[g] *= alpha;
#pragma unroll
            for (int k = 0; k < EP; ++k) acc[g][k] *= alpha;
        }
        m[g] = m_new;
    }
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        float vf[EP];
        unpack16(vr[p], vf, T());
#pragma unroll
        for (int g = 0; g < G; ++g) { /* one V chunk, G rows of O */
            float pr = LEAN ? exp2_approx(s[g][p] - base[g]) : exp2f(s[g][p] - base[g]); /* v5: one MUFU */
            l[g] += pr; /* this lane's tokens only; summed over the token lanes at the end */
#pragma unroll
            for (int k = 0; k < EP; ++k) acc[g][k] += pr * vf[k];
        }
    }
}

/** @brief The end of a warp's loop: its l and O added over the lanes that hold the same chunk (other
 *         tokens), then its m, l and O for the G rows written to shared memory for the block's merge. */
template <typename T, int D, int G>
static __device__ __forceinline__ void warp_result_to_shared(float (&acc)[G][Vec16<T>::N], const float (&m)[G],
                                                             float (&l)[G], float (&warp_m)[G][DECODE_WARPS],
                                                             float (&warp_l)[G][DECODE_WARPS],
                                                             float (&warp_o)[G][DECODE_WARPS][D])
{
    constexpr int EP = Vec16<T>::N, CHUNKS = D / EP;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % CHUNKS, sub = lane / CHUNKS;
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int off = CHUNKS; off < 32; off *= 2) {
            l[g] += __shfl_xor_sync(0xffffffffu, l[g], off);
#pragma unroll
            for (int k = 0; k < EP; ++k) acc[g][k] += __shfl_xor_sync(0xffffffffu, acc[g][k], off);
        }
        if (lane == 0) warp_m[g][warp] = m[g], warp_l[g][warp] = l[g];
        if (sub == 0)
#pragma unroll
            for (int k = 0; k < EP; ++k) warp_o[g][warp][c * EP + k] = acc[g][k];
    }
}

static inline int max_parts_for(int max_len) { return (max_len + MIN_PARTITION_TOKENS - 1) / MIN_PARTITION_TOKENS; }

/** @brief Where the split variants (v3–v7) keep each row's partial m, l and O in the workspace: [B·Hq][max_parts]
 *         each, O D wide (fits: max_parts <= max_parts_for(max_len), decode_workspace_bytes). */
static inline void partials_at(const decode_problem *p, int max_parts, float **m, float **l, float **o)
{
    *m = (float *)p->workspace;
    *l = *m + (size_t)p->B * p->Hq * max_parts;
    *o = *l + (size_t)p->B * p->Hq * max_parts;
}

/** @brief The contract every variant shares. */
static inline const char *decode_contract(const decode_problem *p)
{
    if (p->d != 64 && p->d != 128) return "needs d = 64 or 128";
    if (p->dtype != WB_F16 && p->dtype != WB_F32) return "needs fp16 or fp32 storage";
    if (p->Hkv < 1 || p->Hq % p->Hkv) return "needs Hq to be a multiple of Hkv";
    if ((long long)p->B > 65535 || p->Hq > 65535) return "needs B <= 65535 and Hq <= 65535";
    if (((uintptr_t)p->q | (uintptr_t)p->k_pool | (uintptr_t)p->v_pool | (uintptr_t)p->o) % 16)
        return "needs 16-byte aligned q, pools and o";
    if (!p->workspace || p->workspace_bytes < decode_workspace_bytes(p->B, p->Hq, p->Hkv, p->d, p->max_len))
        return "needs a workspace of decode_workspace_bytes()";
    if (p->total_len < 1 || p->max_len < 1) return "needs every context length >= 1";
    return NULL;
}

/** @brief The contract of the variants that split contexts into partitions (v3–v5): decode_contract's, and
 *         the counters and the partition weights the merge needs. */
static inline const char *split_contract(const decode_problem *p)
{
    if (const char *why = decode_contract(p)) return why;
    if (!p->counters) return "needs counters (B*Hq ints, zero)";
    if (max_parts_for(p->max_len) > MAX_PARTITIONS) return "needs contexts of at most 262144 tokens";
    return NULL;
}

/**
 * @brief Blocks of `kernel` that fit the GPU at once (occupancy × SMs), asked once per
 *        kernel (*cache keeps the answer): the partition rules below run on every decode
 *        step's launch.
 */
static inline long long resident_blocks_of(const void *kernel, long long *cache)
{
    if (!*cache) {
        int sms = 0, per_sm = 0;
        wb_current_gpu(NULL, &sms);
        WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, DECODE_WARPS * 32, 0));
        *cache = (long long)sms * (per_sm > 0 ? per_sm : 1);
    }
    return *cache;
}

/**
 * @brief v4's partition size, from the context lengths themselves (when the
 *        host has them): the multiple of 128 tokens whose grid finishes first.
 *
 * A grid of n blocks on `slots` places runs in ⌈n / slots⌉ waves, each as long
 * as its longest block, P tokens, plus a block's fixed cost: its start (the
 * length, then the block table, then K: three dependent loads) and its share
 * of the merge. n = groups · Σ_b ⌈len_b / P⌉: every short sequence takes a
 * whole block, which v3's total-tokens rule does not count. At mixed lengths
 * 16..16384 that rule's partitions make a few blocks more than one wave holds;
 * this one takes longer partitions and a single wave instead.
 *
 * The fixed cost is counted as 512 tokens' worth (about 12 µs of one block's
 * streaming on the H200). At 128, the B96 mixed step (1152 sequence-heads,
 * several waves whatever P) took 512-token partitions, 5424 blocks, and
 * measured 80.7% of the roof; at 512 it takes 1024 and measures over 90% (the
 * stage's page has the figure). Every other benchmark step keeps its partition.
 */
static inline int partition_tokens_from_lengths(const decode_problem *p, long long slots, int groups)
{
    const int overhead = 512, round = 128;
    int best = p->max_len;
    double best_time = -1;
    for (int P = MIN_PARTITION_TOKENS; P < p->max_len + round; P += round) {
        long long blocks = 0;
        for (int b = 0; b < p->B; ++b) blocks += (p->host_lens[b] + P - 1) / P;
        blocks *= groups;
        double time = (double)((blocks + slots - 1) / slots) * (P + overhead);
        if (best_time < 0 || time < best_time) best_time = time, best = P;
    }
    return best < p->max_len ? best : p->max_len;
}

/** @brief v5's and v6's rows (PagedRowsFast) for p: the block size's magic number; NULL, or why not. */
static inline const char *paged_rows_fast(const decode_problem *p, PagedRowsFast *rows)
{
    if (p->block_size < 1 || p->block_size > 4096) return "needs a block size of 1 to 4096 tokens";
    unsigned bs = (unsigned)p->block_size;
    *rows = {p->block_tables, p->max_pages_per_seq, bs, (unsigned)p->Hkv,
             bs == 1 ? 0u : (unsigned)((0x100000000ull + bs - 1) / bs), bs == 1 ? 0xffffffffu : 0u};
    return NULL;
}

/** @brief v6 (decode_workers.cu): workers sharing each row's tiles. */
const char *launch_paged_shared_tiles(const decode_problem *p);
/** @brief v7 (decode_workers.cu): v6 with the dot products on tensor cores. */
const char *launch_paged_tensor_cores(const decode_problem *p);

#endif /* STAGE09_DECODE_TILE_CUH */
