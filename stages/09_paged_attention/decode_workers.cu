/**
 * @file stages/09_paged_attention/decode_workers.cu
 * @brief Stage 09's v6 and v7: v5's loop in kernels of their own that hand
 *        out the work as workers — a grid of real workers only, each row's
 *        tiles shared by its workers through a counter, one merge for all the
 *        block's rows — then (v7) the dot products on tensor cores.
 */
#include "03_gemm/mma_ptx.cuh"         /* stage 03: mma_16x8x16_top (v7) */
#include "06_flash_attention/fa_rows.cuh" /* stage 06: pack_half2 (v7) */
#include "decode_tile.cuh"            /* the block's shape, PagedRowsFast, attend_tile, the host's shared rules */
#include "dependent_launch.cuh"       /* stage 10 launches the decode kernel as a programmatic dependent */


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
 *
 * When one worker per row already overfills the GPU (B96 mixed lengths: 1152 rows), no
 * size fits, and the search would end at one worker per sequence, the longest a block
 * of 16384 tokens alone at the end of the step. Then workers run in waves like v4's
 * partitions and take v4's size.
 */
static int worker_tokens_from_lengths(const decode_problem *p, long long slots, int groups, int max_parts)
{
    if ((long long)p->B * groups > slots) return partition_tokens_from_lengths(p, slots, groups);
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

/** @brief v6 for one storage type, head size and group of G query heads (with PASSES loads in flight). */
template <typename T, int D, int G, int PASSES>
static const char *launch_shared_tiles_typed(const decode_problem *p, PagedRowsFast rows)
{
    static long long slots = 0;
    WorkerKernel<T> kernel = paged_decode_shared_tiles<T, D, G, PASSES>;
    const char *why = launch_workers<T>(p, rows, G, kernel, resident_blocks_of((const void *)kernel, &slots));
    if (!why) WB_CHECK_LAUNCH("paged_decode_shared_tiles");
    return why;
}

/** @brief v6 for p's head size: v5's query heads per block and loads in flight (kernels.cu's launch_grouped_typed). */
template <typename T, int D>
static const char *launch_shared_tiles_d(const decode_problem *p, PagedRowsFast rows)
{
    int group = p->Hq / p->Hkv;
    if (group % 4 == 0) return launch_shared_tiles_typed<T, D, 4, V4_PASSES_G4>(p, rows);
    if (group % 2 == 0) return launch_shared_tiles_typed<T, D, 2, 2 * V4_PASSES_G4>(p, rows);
    return launch_shared_tiles_typed<T, D, 1, DECODE_PASSES>(p, rows);
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
const char *launch_paged_shared_tiles(const decode_problem *p)
{
    PagedRowsFast rows;
    if (const char *why = worker_contract(p, &rows)) return why;
    if (p->dtype == WB_F32)
        return p->d == 64 ? launch_shared_tiles_d<float, 64>(p, rows) : launch_shared_tiles_d<float, 128>(p, rows);
    return p->d == 64 ? launch_shared_tiles_d<__half, 64>(p, rows) : launch_shared_tiles_d<__half, 128>(p, rows);
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
const char *launch_paged_tensor_cores(const decode_problem *p)
{
    PagedRowsFast rows;
    if (const char *why = worker_contract(p, &rows)) return why;
    if (p->dtype != WB_F16) return "needs fp16 storage (tensor cores multiply fp16)";
    return p->d == 64 ? launch_tensor_cores_d<64>(p, rows) : launch_tensor_cores_d<128>(p, rows);
}
