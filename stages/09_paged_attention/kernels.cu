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
 * grouped-query group) and how lean its inner loop is. v6 and v7
 * (decode_workers.cu) keep v5's loop in kernels of their own that hand out the
 * work differently; what all of them share (the block's shape, v5's rows, one
 * warp's tile of the online softmax) is in decode_tile.cuh.
 */
#include "02_reduction/block_reduce.cuh" /* stage 02: block_allreduce */
#include "08_paged_kv_cache/kernels.h" /* stage 08's gather, for v1 */
#include "decode_tile.cuh"    /* the block's shape, PagedRowsFast, attend_tile, the host's shared rules */
#include "dependent_launch.cuh" /* stage 10 launches the decode kernel as a programmatic dependent */


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
 * partition (v1, v2, or a context that fits in one) the block writes O; with
 * several (v3, v4) it writes its partial m, l, o, and the last block of the
 * group's partitions to finish merges them (merge_partitions).
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
    int part = blockIdx.x, h0 = blockIdx.y * G, b = blockIdx.z;
    int len = lens[b], t_begin = part * partition_tokens;
    /* a context shorter than MIN_SPLIT_TOKENS is not split: its first block streams it all. The merge (a fence, a
     * count, the partials read again) took about 2 µs on the H200 in stage 10's step, the time one block streams
     * some 260 tokens of d 64: for shorter contexts splitting lost (at 311 tokens, batch 1: 7% of the step) */
    const bool whole = len < MIN_SPLIT_TOKENS || len <= partition_tokens;
    if (t_begin >= len || (whole && part > 0)) return; /* a shorter sequence: fewer partitions */
    int t_end = whole ? len : min(len, t_begin + partition_tokens);
    if (whole) part_o = NULL; /* the row's only partition: it writes O itself, nothing to merge */
    int kvh = h0 / (Hq / Hkv); /* grouped-query: Hq/Hkv query heads share a KV head (the G heads here all do) */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % CHUNKS, sub = lane / CHUNKS;

    /* one tile's K and V, tokens t0 … t0 + TILE − 1 of those before `end`: every lane's PASSES loads issued
     * together, zeros past the end (v5: the last token again, with no branch: its score is masked to -inf below,
     * so its weight is 0 and its V, real data, adds 0) */
    auto load_tile = [&](int t0, uint4 (&kr)[PASSES], uint4 (&vr)[PASSES], int end) {
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            int t = t0 + p * TOKENS_PER_PASS + sub;
            if constexpr (LEAN) {
                long long off = rows.row(b, kvh, min(t, end - 1)) * D + c * EP;
                kr[p] = *reinterpret_cast<const uint4 *>(k_pool + off);
                vr[p] = *reinterpret_cast<const uint4 *>(v_pool + off);
                continue;
            }
            kr[p] = vr[p] = make_uint4(0, 0, 0, 0);
            if (t < end) {
                long long off = rows.row(b, kvh, t) * D + c * EP;
                kr[p] = *reinterpret_cast<const uint4 *>(k_pool + off);
                vr[p] = *reinterpret_cast<const uint4 *>(v_pool + off);
            }
        }
    };
    uint4 kr[PASSES], vr[PASSES], k_next[PASSES], v_next[PASSES];
    constexpr int STEP = DECODE_WARPS * TILE; /* the warps take tiles in turn */
    /* Stage 10's decode step launches this kernel as a programmatic dependent of the kernel that writes q and
     * appends each row's newest token (len − 1) to the cache; every older token was there before it began. So the
     * warp's first tile, bar that token, is requested first, and streams in while the kernel ahead drains; after
     * the wait, q and the newest token. Launched normally, the wait does nothing. v5's kernel of one head a block,
     * the one stage 10 runs, requests its second tile too (`EARLY_TWO`: stage 10's 32-row step 4% faster; the
     * other kernels would spill) */
    constexpr bool EARLY_TWO = LEAN && G == 1;
    const int t_first = t_begin + warp * TILE, ready = min(t_end, len - 1); /* tokens before `ready`: already there */
    if (t_first < ready) load_tile(t_first, kr, vr, ready);
    if (EARLY_TWO && t_first + STEP < ready) load_tile(t_first + STEP, k_next, v_next, ready);
    wb_dependent_launch_sync();
    auto settle = [&](int t0, uint4 (&kt)[PASSES], uint4 (&vt)[PASSES]) { /* tile t0, with the newest token */
        if (t0 < t_end && t0 >= ready) {
            load_tile(t0, kt, vt, t_end); /* the tile starts at the newest token: nothing was loaded */
        } else if (t0 + TILE > ready && ready < t_end) { /* the newest token is in this tile: its passes again
                                                          * (a loop of its own: through load_tile, with a first
                                                          * token, the hot loop's code changed: stage 09's rows
                                                          * 3.5% slower on average, up to 7.9%; H200) */
#pragma unroll
            for (int p = 0; p < PASSES; ++p) {
                const int t = t0 + p * TOKENS_PER_PASS + sub;
                if (t >= ready && (LEAN || t < t_end)) {
                    long long off = rows.row(b, kvh, min(t, t_end - 1)) * D + c * EP;
                    kt[p] = *reinterpret_cast<const uint4 *>(k_pool + off);
                    vt[p] = *reinterpret_cast<const uint4 *>(v_pool + off);
                }
            }
        }
    };
    settle(t_first, kr, vr);
    if (EARLY_TWO) settle(t_first + STEP, k_next, v_next);
    float qv[G][EP], acc[G][EP], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        unpack16(*reinterpret_cast<const uint4 *>(q + ((long long)b * Hq + h0 + g) * D + c * EP), qv[g], T());
#pragma unroll
        for (int k = 0; k < EP; ++k) qv[g][k] *= scale_log2, acc[g][k] = 0.0f;
        m[g] = -INFINITY, l[g] = 0.0f;
    }
    /* v5 (LEAN): two tiles per trip, so "next becomes current" is a renaming of registers, not 4·PASSES moves */
#pragma unroll(LEAN ? 2 : 1)
    for (int t0 = t_begin + warp * TILE; t0 < t_end; t0 += STEP) {
        /* software pipeline: the next tile's loads are in flight while this one is computed */
        if (t0 + STEP < t_end && (!EARLY_TWO || t0 != t_first)) load_tile(t0 + STEP, k_next, v_next, t_end);
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

size_t decode_workspace_bytes(int B, int Hq, int Hkv, int d, int max_len)
{
    size_t contiguous = 2 * (size_t)B * Hkv * (size_t)max_len * d * sizeof(float); /* fp32 storage: the larger */
    size_t partials = (size_t)B * Hq * max_parts_for(max_len) * (d + 2) * sizeof(float);
    return contiguous > partials ? contiguous : partials;
}

/** @brief resident_blocks_of for v1–v5's kernel. */
template <typename T, int D, class Rows, int G, int PASSES>
static long long resident_blocks(void)
{
    static long long cache = 0;
    return resident_blocks_of((const void *)paged_decode_partition<T, D, Rows, G, PASSES>, &cache);
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

/** @brief v4 (and v5, with PagedRowsFast) for one storage type and head size: G query heads (a whole KV
 *         group, or a divisor of it) per block. */
template <typename T, int D, class Rows>
static const char *launch_grouped_typed(const decode_problem *p, Rows rows)
{
    int group = p->Hq / p->Hkv;
    /* G heads' q, o and scores live in registers: fewer loads in flight per lane (PASSES) as G grows keeps
     * the kernel within its registers, and each load now feeds G dot products. Groups of 8 take two blocks
     * of 4: at G = 8 the registers no longer fit (measured 3.5x slower than two blocks of 4). */
    if (group % 4 == 0) return launch_decode_typed<T, D, Rows, 4, V4_PASSES_G4>(p, rows, p->k_pool, p->v_pool, 2);
    if (group % 2 == 0) return launch_decode_typed<T, D, Rows, 2, 2 * V4_PASSES_G4>(p, rows, p->k_pool, p->v_pool, 2);
    return launch_decode_typed<T, D, Rows, 1, DECODE_PASSES>(p, rows, p->k_pool, p->v_pool, 2);
}

/** @brief v4 and v5: launch_grouped_typed for p's storage type and head size, with the given rows. */
template <class Rows>
static const char *launch_grouped(const decode_problem *p, Rows rows)
{
    if (p->dtype == WB_F32)
        return p->d == 64 ? launch_grouped_typed<float, 64, Rows>(p, rows)
                          : launch_grouped_typed<float, 128, Rows>(p, rows);
    return p->d == 64 ? launch_grouped_typed<__half, 64, Rows>(p, rows)
                      : launch_grouped_typed<__half, 128, Rows>(p, rows);
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
    {"ex", "your kernel (exercise.cu)", decode_exercise},
};
const int decode_variant_count = sizeof decode_variants / sizeof decode_variants[0];
