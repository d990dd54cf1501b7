/**
 * @file stages/09_paged_attention/kernels.cu
 * @brief Stage 09 kernels: decode attention through the page table, from
 *        "gather, then attend" to flash-decoding.
 *
 * Decode attention is memory-bound: each context token's K and V rows (2·d·2
 * bytes) are read once and used for 2·d multiply-adds per query head. The roof
 * is the copy bandwidth; the question is how to keep enough loads in flight
 * when there are only B·Hq query rows to spread over the GPU.
 *
 * One kernel does the attention in v1–v5; what changes is where the rows come
 * from (pages or a contiguous copy), how many blocks share one sequence (one,
 * or one per partition), how many query heads share one block (one, or a
 * grouped-query group) and how lean its inner loop is. v6 keeps v5's loop in a
 * kernel of its own that hands out the work differently: no empty blocks, the
 * row's tiles shared by its blocks through a counter, one merge for all rows.
 */
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "02_reduction/block_reduce.cuh" /* stage 02: block_allreduce */
#include "03_gemm/mma_ptx.cuh"         /* stage 03: mma_16x8x16_top (v7) */
#include "06_flash_attention/fa_rows.cuh" /* stage 06: pack_half2 (v7) */
#include "08_paged_kv_cache/kernels.h" /* stage 08's gather, for v1 */
#include "cuda_check.h"
#include "dependent_launch.cuh" /* stage 10 launches the decode kernel as a programmatic dependent */
#include "device.h"           /* wb_current_gpu */
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

/** @brief Rows of K and V through the block table: token t of sequence b is in page table[b][t / bs]. */
struct PagedRows {
    static constexpr bool LEAN = false; /**< v1–v4's inner loop */
    const int *tables;  /**< [B][max_pages] */
    int max_pages;      /**< table width */
    int block_size;     /**< tokens per page */
    int Hkv;            /**< KV heads */
    /** @brief The row (element offset / d) of token t, KV head h, of sequence b in the pool. */
    __device__ __forceinline__ long long row(int b, int h, int t) const
    {
        long long page = tables[(long long)b * max_pages + t / block_size];
        return (page * Hkv + h) * block_size + t % block_size;
    }
};

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

/** @brief Rows of a contiguous [B][Hkv][max_len][d] cache (v1, after stage 08's gather). */
struct ContiguousRows {
    static constexpr bool LEAN = false; /**< v1's inner loop */
    int max_len;  /**< token axis length */
    int Hkv;      /**< KV heads */
    /** @brief The row of token t, KV head h, of sequence b. */
    __device__ __forceinline__ long long row(int b, int h, int t) const
    {
        return ((long long)b * Hkv + h) * max_len + t;
    }
};

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
 * @brief v3's merge of a query row's partitions. Partition p saw max m_p, sum
 *        l_p and unnormalised output o_p; with M = max m_p,
 *        O = Σ 2^(m_p − M)·o_p / Σ 2^(m_p − M)·l_p — stage 05's merge of two
 *        online-softmax states, over all partitions at once. The partials were
 *        written by other blocks: read through L2 (__ldcg), not a stale L1.
 */
template <typename T, int D>
static __device__ void merge_partitions(const float *m, const float *l, const float *po, T *o, int n_parts)
{
    __shared__ float weight[MAX_PARTITIONS];
    float mx = -INFINITY; /* M = max m_p: each thread a strided share, then stage 02's block reduction */
    for (int p = threadIdx.x; p < n_parts; p += blockDim.x) weight[p] = __ldcg(m + p), mx = fmaxf(mx, weight[p]);
    float M = block_allreduce<MaxOp>(mx);
    float base = M == -INFINITY ? 0.0f : M, ls = 0.0f;
    for (int p = threadIdx.x; p < n_parts; p += blockDim.x) { /* the weights 2^(m_p − M), and L */
        weight[p] = exp2f(weight[p] - base);
        ls += weight[p] * __ldcg(l + p);
    }
    float L = block_allreduce<SumOp>(ls); /* its barriers also order the weights before the loop below */
    for (int e = threadIdx.x; e < D; e += blockDim.x) { /* O: the partitions' loads are independent, in flight together */
        float sum = 0.0f;
        for (int p = 0; p < n_parts; ++p) sum += weight[p] * __ldcg(po + (long long)p * D + e);
        store(o, e, sum / L);
    }
}

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

/**
 * @brief Attention of G query rows that share a KV head (sequence b =
 *        blockIdx.z, query heads blockIdx.y·G … blockIdx.y·G + G − 1) over the
 *        context tokens of partition blockIdx.x. v1–v3 take G = 1: one query
 *        head per block; v4 takes the whole group (G = 4 or 2 query heads of one KV group).
 *
 * A row of d fp16 is D/8 chunks of 16 bytes; lane l reads chunk l % (D/8) of
 * token l / (D/8) of each step, so a warp covers 32/(D/8) tokens per load (4 at
 * d 64, 2 at d 128) and every token row is read whole by consecutive lanes: 128
 * or 256 contiguous bytes. (fp32 storage, for stage 10's fp32 model: D/4
 * chunks, half as many tokens per load.) Each lane issues PASSES such loads of K and of
 * V before using any of them: 16 loads of 16 bytes in flight per lane is what
 * keeps the memory system busy with only a few blocks per SM.
 *
 * Each K and V chunk a lane loads is used by all G query rows of the block
 * before it is dropped: with G = 4 one load serves 4 dot products, where v3
 * loads it 4 times, in 4 blocks.
 *
 * Warps take tiles of tokens in turn and keep their own online softmax (m, l,
 * o) per query row; at the end the block merges its warps' results. With one
 * partition the block writes O; with several (v3, v4) it writes its partial m,
 * l, o, and the last block of the group's partitions to finish merges them
 * (merge_partitions).
 */
template <typename T, int D, class Rows, int G = 1, int PASSES = DECODE_PASSES>
__global__ void __launch_bounds__(DECODE_WARPS * 32, G > 1 ? V4_MIN_BLOCKS_PER_SM : DECODE_MIN_BLOCKS_PER_SM)
    paged_decode_partition(const T *q, const T *k_pool, const T *v_pool, Rows rows, const int *lens, T *o,
                           float *part_m, float *part_l, float *part_o, int *counters, int Hq, int Hkv,
                           int partition_tokens, int max_parts, float scale_log2)
{
    constexpr int EP = Vec16<T>::N, CHUNKS = D / EP, TOKENS_PER_PASS = 32 / CHUNKS;
    constexpr int TILE = PASSES * TOKENS_PER_PASS;
    constexpr bool LEAN = Rows::LEAN; /* v5's inner loop (PagedRowsFast) */
    __shared__ float warp_m[G][DECODE_WARPS], warp_l[G][DECODE_WARPS], warp_o[G][DECODE_WARPS][D];
    /* launched as a programmatic dependent (stage 10's decode step): nothing is read before the kernel
     * ahead, which wrote q and the new token's K and V, has finished. Launched normally, it does nothing. */
    wb_dependent_launch_sync();
    int part = blockIdx.x, h0 = blockIdx.y * G, b = blockIdx.z;
    int len = lens[b], t_begin = part * partition_tokens;
    if (t_begin >= len) return; /* a shorter sequence: fewer partitions */
    int t_end = min(len, t_begin + partition_tokens);
    int kvh = h0 / (Hq / Hkv); /* grouped-query: Hq/Hkv query heads share a KV head (the G heads here all do) */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % CHUNKS, sub = lane / CHUNKS;

    float qv[G][EP], acc[G][EP], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        unpack16(*reinterpret_cast<const uint4 *>(q + ((long long)b * Hq + h0 + g) * D + c * EP), qv[g], T());
#pragma unroll
        for (int k = 0; k < EP; ++k) qv[g][k] *= scale_log2, acc[g][k] = 0.0f;
        m[g] = -INFINITY, l[g] = 0.0f;
    }
    /* one tile's K and V: every lane's PASSES loads issued together, zeros past the end (v5: the last token
     * again, with no branch: its score is masked to -inf below, so its weight is 0 and its V, real data, adds 0) */
    auto load_tile = [&](int t0, uint4 (&kr)[PASSES], uint4 (&vr)[PASSES]) {
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            int t = t0 + p * TOKENS_PER_PASS + sub;
            if constexpr (LEAN) {
                long long off = rows.row(b, kvh, min(t, t_end - 1)) * D + c * EP;
                kr[p] = *reinterpret_cast<const uint4 *>(k_pool + off);
                vr[p] = *reinterpret_cast<const uint4 *>(v_pool + off);
                continue;
            }
            kr[p] = vr[p] = make_uint4(0, 0, 0, 0);
            if (t < t_end) {
                long long off = rows.row(b, kvh, t) * D + c * EP;
                kr[p] = *reinterpret_cast<const uint4 *>(k_pool + off);
                vr[p] = *reinterpret_cast<const uint4 *>(v_pool + off);
            }
        }
    };
    uint4 kr[PASSES], vr[PASSES], k_next[PASSES], v_next[PASSES];
    constexpr int STEP = DECODE_WARPS * TILE; /* the warps take tiles in turn */
    if (t_begin + warp * TILE < t_end) load_tile(t_begin + warp * TILE, kr, vr);
    /* v5 (LEAN): two tiles per trip, so "next becomes current" is a renaming of registers, not 4·PASSES moves */
#pragma unroll(LEAN ? 2 : 1)
    for (int t0 = t_begin + warp * TILE; t0 < t_end; t0 += STEP) {
        /* software pipeline: the next tile's loads are in flight while this one is computed */
        if (t0 + STEP < t_end) load_tile(t0 + STEP, k_next, v_next);
        attend_tile<T, D, G, PASSES, LEAN>(kr, vr, t0, t_end, sub, qv, acc, m, l);
#pragma unroll
        for (int p = 0; p < PASSES; ++p) kr[p] = k_next[p], vr[p] = v_next[p];
    }
    warp_result_to_shared<T, D, G>(acc, m, l, warp_m, warp_l, warp_o); /* add over the token lanes */
    __syncthreads();
    /* merge the warps: rescale each to the block's max, add */
    float M[G], L[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        M[g] = -INFINITY;
#pragma unroll
        for (int w = 0; w < DECODE_WARPS; ++w) M[g] = fmaxf(M[g], warp_m[g][w]);
        float base = M[g] == -INFINITY ? 0.0f : M[g];
        L[g] = 0.0f;
#pragma unroll
        for (int w = 0; w < DECODE_WARPS; ++w) L[g] += exp2f(warp_m[g][w] - base) * warp_l[g][w];
    }
    long long row0 = (long long)b * Hq + h0; /* the block's first query row; its G rows follow */
    for (int ge = threadIdx.x; ge < G * D; ge += blockDim.x) {
        int g = ge / D, e = ge % D;
        float Mg = -INFINITY, Lg = 0.0f;
#pragma unroll
        for (int j = 0; j < G; ++j) /* M[g], L[g] without dynamic indexing of a register array */
            if (j == g) Mg = M[j], Lg = L[j];
        float base = Mg == -INFINITY ? 0.0f : Mg, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < DECODE_WARPS; ++w) sum += exp2f(warp_m[g][w] - base) * warp_o[g][w][e];
        if (part_o)
            part_o[((row0 + g) * max_parts + part) * D + e] = sum;
        else
            store(o, (row0 + g) * D + e, sum / Lg);
    }
    if (!part_o) return;
    if (threadIdx.x < G) {
        int g = threadIdx.x;
        float Mg = -INFINITY, Lg = 0.0f;
#pragma unroll
        for (int j = 0; j < G; ++j)
            if (j == g) Mg = M[j], Lg = L[j];
        part_m[(row0 + g) * max_parts + part] = Mg, part_l[(row0 + g) * max_parts + part] = Lg;
    }

    /* v3, v4: the last of the group's partition blocks to finish merges them all (no second kernel). Each
     * block makes its partials visible to the whole GPU, then counts itself in; the block that brings the
     * count to n_parts knows every other partial is written, merges, and sets the count back to 0. */
    __shared__ int is_last;
    __threadfence();
    __syncthreads();
    int n_parts = (len + partition_tokens - 1) / partition_tokens;
    if (threadIdx.x == 0) {
        is_last = atomicAdd(&counters[row0], 1) == n_parts - 1;
        if (is_last) counters[row0] = 0;
    }
    __syncthreads();
    if (!is_last) return;
    for (int g = 0; g < G; ++g) {
        if (g) __syncthreads(); /* the previous row's merge has finished reading its weights */
        merge_partitions<T, D>(part_m + (row0 + g) * max_parts, part_l + (row0 + g) * max_parts,
                               part_o + (row0 + g) * max_parts * D, o + (row0 + g) * D, n_parts);
    }
}


/**
 * @brief v6's workers: which sequence the block serves and which of its workers it is.
 *
 * v6 launches no empty blocks: its grid has exactly Σ_b n_b blocks per head group, where
 * sequence b gets n_b = ⌈len_b / worker_tokens⌉ of them. Block u finds its sequence by a
 * running sum of the n_b over the lengths, 32 sequences per step (one lane each, a warp
 * scan, a ballot for the first sum past u). Every warp does it for itself: no barrier.
 */
struct Worker {
    int b;      /**< the sequence (-1: past the work, when the grid was sized from other lengths) */
    int index;  /**< this block's worker number in its sequence */
    int count;  /**< the sequence's workers (n_b): partials the merge adds */
    int len;    /**< the sequence's context length */
};

/** @brief v6's workers for a sequence of len tokens: ⌈len / worker_tokens⌉, at most max_parts. The host sizes
 *         the grid with it, and each block finds its sequence with it (find_worker). */
static __host__ __device__ int workers_for_length(int len, int worker_tokens, int max_parts)
{
    int n = (len + worker_tokens - 1) / worker_tokens;
    return n < max_parts ? n : max_parts;
}

/** @brief Block u's sequence and its worker number there (see Worker). */
static __device__ Worker find_worker(const int *lens, int B, int worker_tokens, int max_parts, int u)
{
    int lane = threadIdx.x % 32;
    for (int base = 0; base < B; base += 32) {
        int b = base + lane, len = b < B ? lens[b] : 0;
        int n = workers_for_length(len, worker_tokens, max_parts), sum = n;
#pragma unroll
        for (int off = 1; off < 32; off *= 2) { /* inclusive scan of the lanes' worker counts */
            int x = __shfl_up_sync(0xffffffffu, sum, off);
            if (lane >= off) sum += x;
        }
        int total = __shfl_sync(0xffffffffu, sum, 31);
        if (u < total) {
            int first = __ffs(__ballot_sync(0xffffffffu, sum > u)) - 1; /* the first sequence whose sum passes u */
            Worker w;
            w.b = base + first;
            w.count = __shfl_sync(0xffffffffu, n, first);
            w.index = u - (__shfl_sync(0xffffffffu, sum, first) - w.count);
            w.len = __shfl_sync(0xffffffffu, len, first);
            return w;
        }
        u -= total;
    }
    return Worker{-1, 0, 0, 0};
}

/**
 * @brief The block's result for its G rows (v6, v7): its warps' m, l and O merged (each
 *        rescaled to the block's max, added), then written as O when the block is the row's
 *        only worker (`alone`), else as the row's partial number `part` (its m, l, O).
 *        Threads tid, tid + nthreads, … take the G·D outputs.
 */
template <typename T, int D, int G, int WARPS>
static __device__ __forceinline__ void block_result(const float (&warp_m)[G][WARPS], const float (&warp_l)[G][WARPS],
                                                    const float (&warp_o)[G][WARPS][D], bool alone, long long row0,
                                                    int part, int max_parts, T *o, float *part_m, float *part_l,
                                                    float *part_o, int tid, int nthreads)
{
    for (int ge = tid; ge < G * D; ge += nthreads) {
        int g = ge / D, e = ge % D;
        float M = -INFINITY, L = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) M = fmaxf(M, warp_m[g][w]);
        float base = M == -INFINITY ? 0.0f : M;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            float scale = exp2_approx(warp_m[g][w] - base);
            L += scale * warp_l[g][w], sum += scale * warp_o[g][w][e];
        }
        if (alone) {
            store(o, (row0 + g) * D + e, sum / L);
            continue;
        }
        long long slot = (row0 + g) * max_parts + part;
        part_o[slot * D + e] = sum;
        if (e == 0) part_m[slot] = M, part_l[slot] = L;
    }
}

/**
 * @brief The last worker's merge of a row's `count` partials (v6, v7), for its G rows at
 *        once: each output adds the partitions in one online pass (every load of m, l and o
 *        is independent of the others, so they are all in flight together). The partials
 *        were written by other blocks: read through L2 (__ldcg), not a stale L1.
 */
template <typename T, int D, int G>
static __device__ __forceinline__ void merge_row_partials(const float *part_m, const float *part_l,
                                                          const float *part_o, long long row0, int max_parts, int count,
                                                          T *o, int tid, int nthreads)
{
    for (int ge = tid; ge < G * D; ge += nthreads) {
        int g = ge / D, e = ge % D;
        long long slot0 = (row0 + g) * max_parts;
        float M = -INFINITY, L = 0.0f, sum = 0.0f;
#pragma unroll 4
        for (int w = 0; w < count; ++w) { /* online: the loads of every partition are independent */
            float mw = __ldcg(part_m + slot0 + w), lw = __ldcg(part_l + slot0 + w);
            float ow = __ldcg(part_o + (slot0 + w) * D + e);
            float M_new = fmaxf(M, mw), base = M_new == -INFINITY ? 0.0f : M_new;
            float a = exp2_approx(M - base), x = exp2_approx(mw - base);
            L = L * a + lw * x, sum = sum * a + ow * x, M = M_new;
        }
        store(o, (row0 + g) * D + e, sum / L);
    }
}

/**
 * @brief The end of a v6 or v7 worker, once its warps' m, l and O are in shared memory:
 *        the block's result (block_result), and the row's merge by its last worker to finish
 *        (v3's counter). That worker also rewinds the row's tile counter, which every worker
 *        has stopped asking by then (each warp's last claim came before its block counted in).
 */
template <typename T, int D, int G>
static __device__ __forceinline__ void finish_worker(const float (&warp_m)[G][DECODE_WARPS],
                                                     const float (&warp_l)[G][DECODE_WARPS],
                                                     const float (&warp_o)[G][DECODE_WARPS][D], const Worker &wk,
                                                     long long row0, int max_parts, T *o, float *part_m, float *part_l,
                                                     float *part_o, int *counters, int *tile_counters)
{
    __syncthreads();
    bool alone = wk.count == 1; /* one worker: it writes O itself */
    block_result<T, D, G, DECODE_WARPS>(warp_m, warp_l, warp_o, alone, row0, wk.index, max_parts, o, part_m, part_l,
                                        part_o, threadIdx.x, blockDim.x);
    __shared__ int is_last;
    if (!alone) __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        is_last = alone || atomicAdd(&counters[row0], 1) == wk.count - 1;
        if (is_last) counters[row0] = 0, tile_counters[row0] = 0;
    }
    __syncthreads();
    if (!is_last || alone) return;
    merge_row_partials<T, D, G>(part_m, part_l, part_o, row0, max_parts, wk.count, o, threadIdx.x, blockDim.x);
}

/**
 * @brief v6 — v5's loop, with the fixed costs the step trace showed taken out:
 *        the row's tiles shared by its workers, no empty blocks, one merge for all G rows.
 *
 * - **Shared tiles.** v5 gives each block a fixed partition and each warp every 4th tile of
 *   it; blocks on busier SMs finish later, and the step waits for the slowest (on the H100,
 *   B8 Hq32 Hkv8 d128 context 4096: blocks' loops ended between 50.7 and 58.1 µs). Here each
 *   warp's first tile is fixed (tile w·DECODE_WARPS + warp of worker w), and every later one
 *   comes from the row's tile counter (`atomicAdd`, one per tile and warp, asked for one
 *   tile ahead so its answer is back before it is needed): a fast warp takes more tiles, and
 *   every worker of the row runs out of tiles within a tile of the others. The online
 *   softmax does not care which tokens a worker saw, or in what order.
 * - **No empty blocks.** v5's grid is max_parts wide for every sequence; at mixed lengths
 *   two thirds of its blocks found their partition past their sequence's end and returned,
 *   but each took a slot first, and the real blocks behind them started up to 11 µs late.
 *   v6's grid has only real workers (find_worker).
 * - **One merge for the G rows.** v5's last block merged its G rows one after another,
 *   three trips to L2 each (the max, the sums, the outputs); v6's threads take the G·D
 *   outputs together, and each adds the partitions in one pass (an online merge: every
 *   load of m, l and o is independent of the others, so they are all in flight at once).
 */
template <typename T, int D, int G, int PASSES>
__global__ void __launch_bounds__(DECODE_WARPS * 32, G > 1 ? V4_MIN_BLOCKS_PER_SM : DECODE_MIN_BLOCKS_PER_SM)
    paged_decode_shared_tiles(const T *q, const T *k_pool, const T *v_pool, PagedRowsFast rows, const int *lens,
                              int B, T *o, float *part_m, float *part_l, float *part_o, int *counters,
                              int *tile_counters, int Hq, int Hkv, int worker_tokens, int max_parts, float scale_log2)
{
    constexpr int EP = Vec16<T>::N, CHUNKS = D / EP, TOKENS_PER_PASS = 32 / CHUNKS;
    constexpr int TILE = PASSES * TOKENS_PER_PASS;
    __shared__ float warp_m[G][DECODE_WARPS], warp_l[G][DECODE_WARPS], warp_o[G][DECODE_WARPS][D];
    wb_dependent_launch_sync();
    Worker wk = find_worker(lens, B, worker_tokens, max_parts, blockIdx.x);
    if (wk.b < 0) return;
    int b = wk.b, h0 = blockIdx.y * G, len = wk.len;
    long long row0 = (long long)b * Hq + h0; /* the block's first query row; its G rows follow */
    int kvh = h0 / (Hq / Hkv);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % CHUNKS, sub = lane / CHUNKS;
    int n_tiles = (len + TILE - 1) / TILE, first_shared = wk.count * DECODE_WARPS;

    float qv[G][EP], acc[G][EP], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        unpack16(*reinterpret_cast<const uint4 *>(q + (row0 + g) * D + c * EP), qv[g], T());
#pragma unroll
        for (int k = 0; k < EP; ++k) qv[g][k] *= scale_log2, acc[g][k] = 0.0f;
        m[g] = -INFINITY, l[g] = 0.0f;
    }
    auto load_tile = [&](int tile, uint4 (&kr)[PASSES], uint4 (&vr)[PASSES]) {
#pragma unroll
        for (int p = 0; p < PASSES; ++p) { /* past the end: the last token again, masked below (v5) */
            long long off = rows.row(b, kvh, min(tile * TILE + p * TOKENS_PER_PASS + sub, len - 1)) * D + c * EP;
            kr[p] = *reinterpret_cast<const uint4 *>(k_pool + off);
            vr[p] = *reinterpret_cast<const uint4 *>(v_pool + off);
        }
    };
    /* the row's next unclaimed tile: lane 0 asks, the warp reads the answer one tile later */
    auto claim = [&]() { return lane == 0 ? first_shared + atomicAdd(&tile_counters[row0], 1) : 0; };
    uint4 kr[PASSES], vr[PASSES], k_next[PASSES], v_next[PASSES];
    int cur = wk.index * DECODE_WARPS + warp; /* the warp's own first tile: no counter to wait for */
    int asked = claim();
    if (cur < n_tiles) load_tile(cur, kr, vr);
#pragma unroll 2
    while (cur < n_tiles) {
        int nxt = __shfl_sync(0xffffffffu, asked, 0);
        if (nxt < n_tiles) {
            load_tile(nxt, k_next, v_next);
            asked = claim();
        }
        attend_tile<T, D, G, PASSES, true>(kr, vr, cur * TILE, len, sub, qv, acc, m, l); /* v5's tile */
#pragma unroll
        for (int p = 0; p < PASSES; ++p) kr[p] = k_next[p], vr[p] = v_next[p];
        cur = nxt;
    }
    warp_result_to_shared<T, D, G>(acc, m, l, warp_m, warp_l, warp_o); /* then merged as in v5 */
    finish_worker<T, D, G>(warp_m, warp_l, warp_o, wk, row0, max_parts, o, part_m, part_l, part_o, counters,
                           tile_counters);
}

/** @brief v7's blocks per SM that the compiler must leave registers for (__launch_bounds__): at d 64, 3 (168
 *         registers a thread); at d 128 the kernel holds 180 with no spills, so 2. Held to 168 (3 blocks, a few
 *         registers spilled), d 128 ran 2-4 points slower on the H100 (grouped-query 70.7% of the roof, not 73-75%). */
#define V7_MIN_BLOCKS_PER_SM(D) ((D) == 64 ? 3 : 2)

/** @brief Word i (0–3, known at compile time once unrolled) of a 16-byte load: two fp16. */
static __device__ __forceinline__ unsigned word_of(const uint4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/**
 * @brief v7 — v6's workers with the dot products on tensor cores: S = q·Kᵀ and O += P·V as
 *        `mma.sync` 16×8×16 tiles, the G query heads of a KV head as the tile's rows.
 *
 * v6 at B8 Hq32 Hkv8 d128 issues 218 instructions per KB of K and V (Nsight Compute: issue
 * slots busy 56% of cycles, against 27% for multi-head): each lane's K chunk is dotted with
 * G rows of q in fp32 FMAs, every dot product summed over 16 lanes by shuffles, every score
 * exponentiated and every V chunk weighted G times. A tensor core does a 16×8×16 product in
 * one instruction; here:
 *
 * - **S = q·Kᵀ**, one m16n8k16 per 8 tokens and 16 of d: A is q (row r = query head r < G,
 *   rows G–15 zero; only rows 0–7 are computed, mma_16x8x16_top), B is Kᵀ, whose fragment
 *   is two pairs of d of one token per lane (b0, b1): lane l loads token l/4's row, 16 bytes
 *   at a time, d chunks l%4, l%4 + 4, … The dot product does not care in what order d is
 *   summed, so q's fragment is loaded in the same order and no shuffle is needed.
 * - **O += P·V**, one m16n8k16 per 16 tokens and 8 of d: A is P, and a thread holds its row's
 *   scores in exactly A's places (S's accumulator layout is P's operand layout, as in stage 06's
 *   FA2); B is V, whose fragment wants two *tokens* of one d per register. V is stored token by
 *   token, so each lane loads 16 bytes of d of 4 tokens and pairs them up with `__byte_perm`
 *   (one PRMT per register). Which token is which column of S is free too: the 8 tokens of an S
 *   tile are chosen so that lane l's scores are the tokens 4·(l%4) … 4·(l%4) + 3 whose V it loads.
 * - **The softmax** per tile: a thread has 4 scores per 16 tokens of its head (row l/4), the
 *   row max is 2 shuffles over the lane's quad, one exponential per score.
 *
 * Per 16 tokens at d 128 (8 KB of K and V) a warp issues 16 loads, 32 mma and 32 PRMT around
 * its softmax: 51 instructions per KB measured, where v6 issues 218. fp16 storage only (tensor
 * cores); sm_75 runs each m16n8k16 as two m16n8k8.
 */
template <int D, int G>
__global__ void __launch_bounds__(DECODE_WARPS * 32, V7_MIN_BLOCKS_PER_SM(D))
    paged_decode_tensor_cores(const __half *q, const __half *k_pool, const __half *v_pool, PagedRowsFast rows,
                              const int *lens, int B, __half *o, float *part_m, float *part_l, float *part_o,
                              int *counters, int *tile_counters, int Hq, int Hkv, int worker_tokens, int max_parts,
                              float scale_log2)
{
    static_assert(G == 1 || G == 2 || G == 4 || G == 8, "a group is rows 0-7 of the tile");
    constexpr int BLOCKS = D == 64 ? 2 : 1; /* 16-token blocks per warp tile: 8 KB of K and V either way */
    constexpr int TILE = 16 * BLOCKS;       /* tokens per warp tile */
    constexpr int SLABS = D / 16;           /* k steps of S = q·Kᵀ */
    constexpr int K_CHUNKS = D / 32;        /* 16-byte chunks of a K row per lane (4 lanes share a row) */
    constexpr int V_CHUNKS = D / 64;        /* 16-byte chunks of a V row per lane (8 lanes share a row) */
    constexpr int O_TILES = D / 8;          /* 8-wide column tiles of O */
    __shared__ float warp_m[G][DECODE_WARPS], warp_l[G][DECODE_WARPS], warp_o[G][DECODE_WARPS][D];
    wb_dependent_launch_sync();
    Worker wk = find_worker(lens, B, worker_tokens, max_parts, blockIdx.x);
    if (wk.b < 0) return;
    int b = wk.b, h0 = blockIdx.y * G, len = wk.len;
    long long row0 = (long long)b * Hq + h0;
    int kvh = h0 / (Hq / Hkv);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = lane / 4, c = lane % 4; /* the fragment row (query head r; K: column r of S) and the lane in its quad */
    int n_tiles = (len + TILE - 1) / TILE, first_shared = wk.count * DECODE_WARPS;

    /* q as A: chunk i·4 + c of head r's row, i < K_CHUNKS; slab j takes words 2(j%2), 2(j%2)+1 of chunk j/2 */
    __shared__ uint4 q_frag[K_CHUNKS][32]; /* shared by the warps (and 16 registers fewer at d 128) */
    if (warp == 0)
#pragma unroll
        for (int i = 0; i < K_CHUNKS; ++i)
            q_frag[i][lane] = r < G ? *reinterpret_cast<const uint4 *>(q + (row0 + r) * D + (i * 4 + c) * 8)
                                    : make_uint4(0, 0, 0, 0);
    __syncthreads();
    float acc[O_TILES][2], m = -INFINITY, l = 0.0f; /* row r's O (which columns: at the end), max and sum */
#pragma unroll
    for (int t = 0; t < O_TILES; ++t) acc[t][0] = acc[t][1] = 0.0f;

    /* The rows of a tile's tokens, through the block table (clamped to the last token: masked below):
     * K: S's column r of block k, half h (h = 0, 1: S's two 8-token tiles) is token 4(r/2) + 2h + r%2;
     * V: tokens 4c … 4c + 3 of block k, the ones whose scores this lane holds. */
    unsigned k_row[BLOCKS][2], v_row[BLOCKS][4];
    auto find_rows = [&](int tile) {
#pragma unroll
        for (int k = 0; k < BLOCKS; ++k) {
            int t0 = tile * TILE + k * 16;
#pragma unroll
            for (int h = 0; h < 2; ++h)
                k_row[k][h] = (unsigned)rows.row(b, kvh, min(t0 + 4 * (r / 2) + 2 * h + r % 2, len - 1));
#pragma unroll
            for (int e = 0; e < 4; ++e) v_row[k][e] = (unsigned)rows.row(b, kvh, min(t0 + 4 * c + e, len - 1));
        }
    };
    uint4 kr[BLOCKS][2][K_CHUNKS], vr[BLOCKS][4][V_CHUNKS];
    auto load_tile = [&]() {
#pragma unroll
        for (int k = 0; k < BLOCKS; ++k) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int i = 0; i < K_CHUNKS; ++i) /* 4 lanes read 64 contiguous bytes of a row */
                    kr[k][h][i] = *reinterpret_cast<const uint4 *>(k_pool + (size_t)k_row[k][h] * D + (i * 4 + c) * 8);
#pragma unroll
            for (int e = 0; e < 4; ++e)
#pragma unroll
                for (int i = 0; i < V_CHUNKS; ++i) /* 8 lanes read 128 contiguous bytes of a row */
                    vr[k][e][i] = *reinterpret_cast<const uint4 *>(v_pool + (size_t)v_row[k][e] * D + (r + 8 * i) * 8);
        }
    };
    auto claim = [&]() { return lane == 0 ? first_shared + atomicAdd(&tile_counters[row0], 1) : 0; };

    int cur = wk.index * DECODE_WARPS + warp, asked = claim(); /* v6's order: own first tile, then the counter */
    if (cur < n_tiles) find_rows(cur);
    while (cur < n_tiles) {
        load_tile(); /* 8 KB in flight for the warp; many warps per SM keep the memory busy meanwhile */
        int nxt = __shfl_sync(0xffffffffu, asked, 0);
        if (nxt < n_tiles) { /* the next tile's table entries, found while this tile's K and V arrive */
            asked = claim();
            find_rows(nxt);
        }
        /* S: this lane's 4 scores of each 16-token block: tokens 4c … 4c + 3, head r (log2 units) */
        float s[BLOCKS][4], tile_max = -INFINITY;
#pragma unroll
        for (int k = 0; k < BLOCKS; ++k)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float st[2] = {0.0f, 0.0f};
#pragma unroll
                for (int j = 0; j < SLABS; ++j) {
                    uint4 qc = q_frag[j / 2][lane];
                    mma_16x8x16_top(st, word_of(qc, 2 * (j % 2)), word_of(qc, 2 * (j % 2) + 1),
                                    word_of(kr[k][h][j / 2], 2 * (j % 2)), word_of(kr[k][h][j / 2], 2 * (j % 2) + 1));
                }
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    bool valid = cur * TILE + k * 16 + 4 * c + 2 * h + e < len;
                    s[k][2 * h + e] = valid ? st[e] * scale_log2 : -INFINITY;
                    tile_max = fmaxf(tile_max, s[k][2 * h + e]);
                }
            }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1)); /* over the row's quad */
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
        float m_new = fmaxf(m, tile_max), base = m_new == -INFINITY ? 0.0f : m_new;
        if (__any_sync(0xffffffffu, m_new > m)) { /* v5's rule: rescale only when some row's max grew */
            float alpha = exp2_approx(m - base);
            l *= alpha;
#pragma unroll
            for (int t = 0; t < O_TILES; ++t) acc[t][0] *= alpha, acc[t][1] *= alpha;
        }
        m = m_new;
#pragma unroll
        for (int k = 0; k < BLOCKS; ++k) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) p[e] = exp2_approx(s[k][e] - base), l += p[e];
            unsigned pa0 = pack_half2(p[0], p[1]), pa2 = pack_half2(p[2], p[3]); /* A: tokens 4c, 4c+1 | 4c+2, 4c+3 */
#pragma unroll
            for (int t = 0; t < O_TILES; ++t) { /* V as B: tokens paired per register, column r of O tile t */
                int i = t / 8, w = (t % 8) / 2;
                unsigned sel = t % 2 ? 0x7632u : 0x5410u; /* the high or the low fp16 of both words */
                unsigned b0 = __byte_perm(word_of(vr[k][0][i], w), word_of(vr[k][1][i], w), sel);
                unsigned b1 = __byte_perm(word_of(vr[k][2][i], w), word_of(vr[k][3][i], w), sel);
                mma_16x8x16_top(acc[t], pa0, pa2, b0, b1);
            }
        }
        cur = nxt;
    }
    /* the row's l over its quad, then rows r < G to shared memory for v6's block merge. O tile t's
     * columns 2c, 2c+1 are d = 8·(2c + e + 8·(t/8)) + t%8 (the chunk lane 2c + e loaded, its fp16 t%8). */
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (r < G) {
        if (c == 0) warp_m[r][warp] = m, warp_l[r][warp] = l;
#pragma unroll
        for (int t = 0; t < O_TILES; ++t)
#pragma unroll
            for (int e = 0; e < 2; ++e) warp_o[r][warp][8 * (2 * c + e + 8 * (t / 8)) + t % 8] = acc[t][e];
    }
    finish_worker<__half, D, G>(warp_m, warp_l, warp_o, wk, row0, max_parts, o, part_m, part_l, part_o, counters,
                                tile_counters);
}

static int max_parts_for(int max_len) { return (max_len + MIN_PARTITION_TOKENS - 1) / MIN_PARTITION_TOKENS; }

size_t decode_workspace_bytes(int B, int Hq, int Hkv, int d, int max_len)
{
    size_t contiguous = 2 * (size_t)B * Hkv * (size_t)max_len * d * sizeof(float); /* fp32 storage: the larger */
    size_t partials = (size_t)B * Hq * max_parts_for(max_len) * (d + 2) * sizeof(float);
    return contiguous > partials ? contiguous : partials;
}

/** @brief Where the split variants (v3–v7) keep each row's partial m, l and O in the workspace: [B·Hq][max_parts]
 *         each, O D wide (fits: max_parts <= max_parts_for(max_len), decode_workspace_bytes). */
static void partials_at(const decode_problem *p, int max_parts, float **m, float **l, float **o)
{
    *m = (float *)p->workspace;
    *l = *m + (size_t)p->B * p->Hq * max_parts;
    *o = *l + (size_t)p->B * p->Hq * max_parts;
}

/** @brief The contract every variant shares. */
static const char *decode_contract(const decode_problem *p)
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

/**
 * @brief Blocks of `kernel` that fit the GPU at once (occupancy × SMs), asked once per
 *        kernel (*cache keeps the answer): the partition rules below run on every decode
 *        step's launch.
 */
static long long resident_blocks_of(const void *kernel, long long *cache)
{
    if (!*cache) {
        int sms = 0, per_sm = 0;
        wb_current_gpu(NULL, &sms);
        WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, DECODE_WARPS * 32, 0));
        *cache = (long long)sms * (per_sm > 0 ? per_sm : 1);
    }
    return *cache;
}

/** @brief resident_blocks_of for v1–v5's kernel (or v6's, SHARED_TILES). */
template <typename T, int D, class Rows, int G, int PASSES, bool SHARED_TILES = false>
static long long resident_blocks(void)
{
    static long long cache = 0;
    return resident_blocks_of(SHARED_TILES ? (const void *)paged_decode_shared_tiles<T, D, G, PASSES>
                                           : (const void *)paged_decode_partition<T, D, Rows, G, PASSES>,
                              &cache);
}

/**
 * @brief v3's partition size: enough partitions that the grid fills the GPU in
 *        one wave (`slots` blocks at once), but never below
 *        MIN_PARTITION_TOKENS. Counted over all tokens of the batch, so one long
 *        sequence among short ones gets many partitions and the short ones one.
 *        On the H100 this picks 1024-token partitions at B8 H12 context 4096 and
 *        at B1 context 32768; fixed 512-token partitions (twice the blocks: a
 *        second, partial wave) measured 4–12% slower there.
 */
static int partition_tokens_from_total(const decode_problem *p, long long slots, int groups)
{
    long long want = (p->total_len * groups + slots - 1) / slots; /* blocks: partitions x head groups */
    const long long round = 128; /* a multiple of every tile of DECODE_WARPS warps */
    want = (want + round - 1) / round * round;
    return (int)(want < MIN_PARTITION_TOKENS ? MIN_PARTITION_TOKENS : want > p->max_len ? p->max_len : want);
}

/**
 * @brief v4's partition size, from the context lengths themselves (when the
 *        host has them): the multiple of 128 tokens whose grid finishes first.
 *
 * A grid of n blocks on `slots` places runs in ⌈n / slots⌉ waves, each as long
 * as its longest block, P tokens (plus a block's fixed cost, about 128 tokens'
 * worth). n = groups · Σ_b ⌈len_b / P⌉: every short sequence takes a whole
 * block, which v3's total-tokens rule does not count. At mixed lengths
 * 16..16384 that rule's partitions make a few blocks more than one wave holds;
 * this one takes longer partitions and a single wave instead.
 */
static int partition_tokens_from_lengths(const decode_problem *p, long long slots, int groups)
{
    const int overhead = 128, round = 128;
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

/** @brief The partition kernel for one storage type, head size, kind of rows and query heads per block. */
template <typename T, int D, class Rows, int G = 1, int PASSES = DECODE_PASSES>
/* split: 0, one partition per row (v1, v2); 1, partitions sized by the total tokens (v3); 2, sized from the
 * lengths themselves (v4, where the host has them). */
static const char *launch_decode_typed(const decode_problem *p, Rows rows, const void *k, const void *v, int split)
{
    int partition = p->max_len;
    if (split) {
        long long slots = resident_blocks<T, D, Rows, G, PASSES>();
        partition = split == 2 && p->host_lens ? partition_tokens_from_lengths(p, slots, p->Hq / G)
                                               : partition_tokens_from_total(p, slots, p->Hq / G);
    }
    int max_parts = (p->max_len + partition - 1) / partition;
    float *part_m = NULL, *part_l = NULL, *part_o = NULL;
    if (split) partials_at(p, max_parts, &part_m, &part_l, &part_o);
    wb_launch_config launch; /* stage 10's decode step launches it as a dependent; the stage's own runs plainly */
    cudaLaunchConfig_t *cfg = wb_launch_config_init(&launch, dim3(max_parts, p->Hq / G, p->B), dim3(DECODE_WARPS * 32),
                                                    0, p->dependent_launch);
    WB_CUDA_CHECK(cudaLaunchKernelEx(cfg, paged_decode_partition<T, D, Rows, G, PASSES>, (const T *)p->q,
                                     (const T *)k, (const T *)v, rows, p->lens, (T *)p->o, part_m, part_l, part_o,
                                     p->counters, p->Hq, p->Hkv, partition, max_parts, p->scale * LOG2E));
    WB_CHECK_LAUNCH("paged_decode_partition");
    return NULL;
}

template <class Rows>
static const char *launch_decode(const decode_problem *p, Rows rows, const void *k, const void *v, int split)
{
    if (p->dtype == WB_F32)
        return p->d == 64 ? launch_decode_typed<float, 64>(p, rows, k, v, split)
                          : launch_decode_typed<float, 128>(p, rows, k, v, split);
    return p->d == 64 ? launch_decode_typed<__half, 64>(p, rows, k, v, split)
                      : launch_decode_typed<__half, 128>(p, rows, k, v, split);
}

/**
 * @brief v1 — the baseline: stage 08's gather copies every sequence's K and V
 *        out of the pages into a contiguous [B][Hkv][max_len][d] cache, then the
 *        attention reads that. Every byte of context is read twice and written
 *        once more than needed (plus the padding up to max_len).
 */
static const char *launch_gather_then_attend(const decode_problem *p)
{
    if (const char *why = decode_contract(p)) return why;
    size_t es = p->dtype == WB_F32 ? 4 : 2;
    char *k = (char *)p->workspace, *v = k + (size_t)p->B * p->Hkv * p->max_len * p->d * es;
    kv_gather_args g = {p->dtype, p->B, p->Hkv, p->d, p->block_size, p->max_len, p->max_pages_per_seq,
                        p->block_tables, p->lens, p->k_pool, p->v_pool, k, v};
    if (const char *why = kv_variants[1].gather(&g)) return why; /* stage 08's v2 (16-byte) gather */
    ContiguousRows rows = {p->max_len, p->Hkv};
    return launch_decode(p, rows, k, v, 0);
}

/**
 * @brief v2 — PagedAttention v1: one block per (sequence, query head), its warps
 *        walking the context through the block table, online softmax, no copy.
 *        The table lookup is one 4-byte load per token (cached), against 2·d·2
 *        bytes of K and V.
 */
static const char *launch_paged(const decode_problem *p)
{
    if (const char *why = decode_contract(p)) return why;
    PagedRows rows = {p->block_tables, p->max_pages_per_seq, p->block_size, p->Hkv};
    return launch_decode(p, rows, p->k_pool, p->v_pool, 0);
}

/** @brief The contract of the variants that split contexts into partitions (v3–v5): decode_contract's, and
 *         the counters and the partition weights the merge needs. */
static const char *split_contract(const decode_problem *p)
{
    if (const char *why = decode_contract(p)) return why;
    if (!p->counters) return "needs counters (B*Hq ints, zero)";
    if (max_parts_for(p->max_len) > MAX_PARTITIONS) return "needs contexts of at most 262144 tokens";
    return NULL;
}

/**
 * @brief v3 — PagedAttention v2 / flash-decoding: the context is cut into
 *        partitions (sized by partition_tokens_from_total to fill the GPU once), each
 *        handled by its own block; the last block of a row to finish merges the
 *        row's partitions by their max and sum (an atomic counter per row). At batch 1 with 32768 tokens v2 has Hq = 12 blocks for 132
 *        SMs; v3 has 32 times more.
 */
static const char *launch_paged_split(const decode_problem *p)
{
    if (const char *why = split_contract(p)) return why;
    PagedRows rows = {p->block_tables, p->max_pages_per_seq, p->block_size, p->Hkv};
    return launch_decode(p, rows, p->k_pool, p->v_pool, 1);
}

template <typename T, int D, int G, int PASSES>
static const char *launch_shared_tiles_typed(const decode_problem *p, PagedRowsFast rows);

/** @brief v4's kernel G query heads at a time, with PASSES loads in flight (or v6's, SHARED_TILES). */
template <typename T, int D, class Rows, int G, int PASSES, bool SHARED_TILES>
static const char *launch_group_of(const decode_problem *p, Rows rows)
{
    if constexpr (SHARED_TILES) return launch_shared_tiles_typed<T, D, G, PASSES>(p, rows);
    else return launch_decode_typed<T, D, Rows, G, PASSES>(p, rows, p->k_pool, p->v_pool, 2);
}

/** @brief v4 (and v5, with PagedRowsFast; v6, SHARED_TILES) for one storage type and head size: G query heads
 *         (a whole KV group, or a divisor of it) per block. */
template <typename T, int D, class Rows, bool SHARED_TILES>
static const char *launch_grouped_typed(const decode_problem *p, Rows rows)
{
    int group = p->Hq / p->Hkv;
    /* G heads' q, o and scores live in registers: fewer loads in flight per lane (PASSES) as G grows keeps
     * the kernel within its registers, and each load now feeds G dot products. Groups of 8 take two blocks
     * of 4: at G = 8 the registers no longer fit (measured 3.5x slower than two blocks of 4). */
    if (group % 4 == 0) return launch_group_of<T, D, Rows, 4, V4_PASSES_G4, SHARED_TILES>(p, rows);
    if (group % 2 == 0) return launch_group_of<T, D, Rows, 2, 2 * V4_PASSES_G4, SHARED_TILES>(p, rows);
    return launch_group_of<T, D, Rows, 1, DECODE_PASSES, SHARED_TILES>(p, rows);
}

/** @brief v4, v5 and v6: launch_grouped_typed for p's storage type and head size, with the given rows. */
template <class Rows, bool SHARED_TILES = false>
static const char *launch_grouped(const decode_problem *p, Rows rows)
{
    if (p->dtype == WB_F32)
        return p->d == 64 ? launch_grouped_typed<float, 64, Rows, SHARED_TILES>(p, rows)
                          : launch_grouped_typed<float, 128, Rows, SHARED_TILES>(p, rows);
    return p->d == 64 ? launch_grouped_typed<__half, 64, Rows, SHARED_TILES>(p, rows)
                      : launch_grouped_typed<__half, 128, Rows, SHARED_TILES>(p, rows);
}

/** @brief v5's and v6's rows (PagedRowsFast) for p: the block size's magic number; NULL, or why not. */
static const char *paged_rows_fast(const decode_problem *p, PagedRowsFast *rows)
{
    if (p->block_size < 1 || p->block_size > 4096) return "needs a block size of 1 to 4096 tokens";
    unsigned bs = (unsigned)p->block_size;
    *rows = {p->block_tables, p->max_pages_per_seq, bs, (unsigned)p->Hkv,
             bs == 1 ? 0u : (unsigned)((0x100000000ull + bs - 1) / bs), bs == 1 ? 0xffffffffu : 0u};
    return NULL;
}

/**
 * @brief v4 — grouped-query aware flash-decoding: one block serves 4 (or 2)
 *        query heads of a KV head, so each K/V byte is read from memory once
 *        per 4 query heads instead of once per query head. v3 with Hq/Hkv = 4 reads
 *        the context 4 times (the L2 catches some repeats, not most: 134 MB of
 *        K/V at B8 Hkv8 d128 context 4096 against a 50 MB L2); v4 reads it once
 *        and does 4 dot products per load. Multi-head attention (a group of 1)
 *        runs v3's kernel. Its partitions are sized from the context lengths
 *        themselves when the host has them (partition_tokens_from_lengths).
 */
static const char *launch_paged_grouped(const decode_problem *p)
{
    if (const char *why = split_contract(p)) return why;
    PagedRows rows = {p->block_tables, p->max_pages_per_seq, p->block_size, p->Hkv};
    return launch_grouped(p, rows);
}

/**
 * @brief v5 — v4 with a leaner inner loop, for the instructions it issues: Nsight
 *        Compute on v4 (B8 Hq32 Hkv8 d128, context 4096) shows the SMs issuing on
 *        69% of cycles and warps waiting more on one another ("not selected", fixed
 *        latencies) than on memory. v5 removes, per tile of a warp: the division by
 *        the page size (PagedRowsFast), the registers copied from "next" to
 *        "current" (two tiles per trip of the loop), exp2f's denormal scaling, the
 *        rescaling of O when the running max did not change, and the bounds
 *        branches around the loads.
 */
static const char *launch_paged_lean(const decode_problem *p)
{
    if (const char *why = split_contract(p)) return why;
    PagedRowsFast rows;
    if (const char *why = paged_rows_fast(p, &rows)) return why;
    return launch_grouped(p, rows);
}

/** @brief v6's workers of all sequences (one head group): the width of its grid. */
static long long workers_for(const decode_problem *p, int worker_tokens, int max_parts)
{
    long long n = 0;
    for (int b = 0; b < p->B; ++b) n += workers_for_length(p->host_lens[b], worker_tokens, max_parts);
    return n;
}

/**
 * @brief v6's tokens per worker: the fewest (a multiple of 128, at least MIN_PARTITION_TOKENS)
 *        whose workers, over all sequences and head groups, fit the GPU at once. Fewer
 *        tokens per worker only add workers that cannot run yet; since a row's workers share
 *        its tiles, none of them needs to be the same size as another.
 */
static int worker_tokens_from_lengths(const decode_problem *p, long long slots, int groups, int max_parts)
{
    int wt = MIN_PARTITION_TOKENS;
    while (wt < p->max_len && workers_for(p, wt, max_parts) * groups > slots) wt += 128;
    return wt;
}

/** @brief The kernels that run as v6's workers (v6's and v7's): one signature. */
template <typename T>
using WorkerKernel = void (*)(const T *, const T *, const T *, PagedRowsFast, const int *, int, T *, float *, float *,
                              float *, int *, int *, int, int, int, int, float);

/** @brief v6's (or v7's) launch for groups of G query heads: the grid is exactly the workers (no empty blocks).
 *         The caller checks the launch (WB_CHECK_LAUNCH names its kernel). */
template <typename T>
static const char *launch_workers(const decode_problem *p, PagedRowsFast rows, int G, WorkerKernel<T> kernel,
                                  long long slots)
{
    int groups = p->Hq / G, max_parts = max_parts_for(p->max_len);
    int worker_tokens = worker_tokens_from_lengths(p, slots, groups, max_parts);
    long long workers = workers_for(p, worker_tokens, max_parts);
    if (workers > 0x7fffffffLL) return "needs fewer than 2^31 workers per head group";
    float *part_m, *part_l, *part_o;
    partials_at(p, max_parts, &part_m, &part_l, &part_o);
    wb_launch_config launch;
    cudaLaunchConfig_t *cfg = wb_launch_config_init(&launch, dim3((unsigned)workers, groups), dim3(DECODE_WARPS * 32),
                                                    0, p->dependent_launch);
    WB_CUDA_CHECK(cudaLaunchKernelEx(cfg, kernel, (const T *)p->q, (const T *)p->k_pool, (const T *)p->v_pool, rows,
                                     p->lens, p->B, (T *)p->o, part_m, part_l, part_o, p->counters, p->tile_counters,
                                     p->Hq, p->Hkv, worker_tokens, max_parts, p->scale * LOG2E));
    return NULL;
}

/** @brief v6 for one storage type, head size and group. */
template <typename T, int D, int G, int PASSES>
static const char *launch_shared_tiles_typed(const decode_problem *p, PagedRowsFast rows)
{
    const char *why = launch_workers<T>(p, rows, G, paged_decode_shared_tiles<T, D, G, PASSES>,
                                        resident_blocks<T, D, PagedRowsFast, G, PASSES, true>());
    if (!why) WB_CHECK_LAUNCH("paged_decode_shared_tiles");
    return why;
}

/** @brief The contract of v6's and v7's workers: split_contract's, the lengths on the host (to size the grid)
 *         and the tile counters; fills in v5's rows (PagedRowsFast). NULL, or why not. */
static const char *worker_contract(const decode_problem *p, PagedRowsFast *rows)
{
    if (const char *why = split_contract(p)) return why;
    if (!p->host_lens) return "needs the context lengths on the host (host_lens), to size its grid";
    if (!p->tile_counters) return "needs tile counters (B*Hq ints, zero)";
    return paged_rows_fast(p, rows);
}

/**
 * @brief v6 — v5's loop with the step's fixed costs cut: each row's tiles shared by its
 *        workers through a counter, a grid of real workers only, and the last worker's
 *        merge of all G rows at once (paged_decode_shared_tiles). It needs the lengths on
 *        the host, to size its grid.
 */
static const char *launch_paged_shared_tiles(const decode_problem *p)
{
    PagedRowsFast rows;
    if (const char *why = worker_contract(p, &rows)) return why;
    return launch_grouped<PagedRowsFast, true>(p, rows); /* v5's heads per block */
}

/** @brief v7 for one head size and group of G query heads (fp16). */
template <int D, int G>
static const char *launch_tensor_cores_typed(const decode_problem *p, PagedRowsFast rows)
{
    static long long slots = 0;
    WorkerKernel<__half> kernel = paged_decode_tensor_cores<D, G>;
    const char *why = launch_workers<__half>(p, rows, G, kernel, resident_blocks_of((const void *)kernel, &slots));
    if (!why) WB_CHECK_LAUNCH("paged_decode_tensor_cores");
    return why;
}

/** @brief v7 for p's head size: the widest group of at most 8 query heads that divides the KV group. */
template <int D>
static const char *launch_tensor_cores_d(const decode_problem *p, PagedRowsFast rows)
{
    int group = p->Hq / p->Hkv;
    if (group % 8 == 0) return launch_tensor_cores_typed<D, 8>(p, rows);
    if (group % 4 == 0) return launch_tensor_cores_typed<D, 4>(p, rows);
    if (group % 2 == 0) return launch_tensor_cores_typed<D, 2>(p, rows);
    return launch_tensor_cores_typed<D, 1>(p, rows);
}

/**
 * @brief v7 — v6 with the dot products on tensor cores (paged_decode_tensor_cores): the
 *        query heads of a KV head (up to 8) are the rows of mma.sync tiles, K and V come
 *        straight from memory into the fragments. fp16 storage only.
 */
static const char *launch_paged_tensor_cores(const decode_problem *p)
{
    PagedRowsFast rows;
    if (const char *why = worker_contract(p, &rows)) return why;
    if (p->dtype != WB_F16) return "needs fp16 storage (tensor cores multiply fp16)";
    return p->d == 64 ? launch_tensor_cores_d<64>(p, rows) : launch_tensor_cores_d<128>(p, rows);
}

int decode_partition_tokens(const decode_problem *p)
{
    if (p->dtype == WB_F32)
        return partition_tokens_from_total(p, p->d == 64 ? resident_blocks<float, 64, PagedRows, 1, DECODE_PASSES>()
                                                         : resident_blocks<float, 128, PagedRows, 1, DECODE_PASSES>(), p->Hq);
    return partition_tokens_from_total(p, p->d == 64 ? resident_blocks<__half, 64, PagedRows, 1, DECODE_PASSES>()
                                                     : resident_blocks<__half, 128, PagedRows, 1, DECODE_PASSES>(), p->Hq);
}

/* The table the host program walks, in teaching order. */
const decode_variant decode_variants[] = {
    {"v1", "gather to contiguous (stage 08), then attention", launch_gather_then_attend},
    {"v2", "block per (seq, head) through the pages (PagedAttn v1)", launch_paged},
    {"v3", "split into partitions, last block merges (flash-decoding)", launch_paged_split},
    {"v4", "v3 + one block per KV head's query group (GQA)", launch_paged_grouped},
    {"v5", "v4 + a lean inner loop: no division, no copies", launch_paged_lean},
    {"v6", "v5 + tiles shared by a row's blocks, no empty blocks", launch_paged_shared_tiles},
    {"v7", "v6 with the dot products on tensor cores (mma.sync)", launch_paged_tensor_cores, 1},
};
const int decode_variant_count = sizeof decode_variants / sizeof decode_variants[0];
