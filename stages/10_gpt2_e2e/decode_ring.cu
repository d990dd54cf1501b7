/**
 * @file stages/10_gpt2_e2e/decode_ring.cu
 * @brief v4: v3's step with every weight, the LM head's included, brought by
 *        the copy engine into a ring in each block's shared memory, phases
 *        ahead, evict-first in L2 (sm_90; weight_ring.cuh says why and how);
 *        and the batched step's own tuning: the dot products on tensor cores
 *        from 4 rows, attention split over the idle blocks at 1-4 rows, the
 *        first layers' K/V kept in L2 at 5-8.
 */
#include <type_traits>

#include "03_gemm/mma_ptx.cuh" /* mma_16x8x16_top: the dot products on tensor cores */
#include "step_launch.cuh"
#include "weight_ring.cuh"

/* ------------------------------------------------------------------------ */
/* The dot products on tensor cores, at 4-8 rows (fp16)                      */
/* ------------------------------------------------------------------------ */
/*
 * At batch 8 the FFMA step is bound by instructions, not bytes (Nsight
 * Compute on the H100: 154.6 M warp instructions a step, 0.29 issued per
 * cycle per scheduler): a 16-byte chunk of 8 fp16 weights times 8 rows is 8
 * shared loads of the rows, their conversions and 64 FFMA. One
 * mma.sync.m16n8k16 does 16 × 8 × 16 multiply-adds.
 *
 * The tile. A (16 × 16) is the staged rows, the sequences as its rows 0–7;
 * rows 8–15 would be zero and are not computed (mma_16x8x16_top, as stage
 * 09's v6 does for its query heads). B (16 × 8, "col": each column's k
 * contiguous) is 8 outputs' weights, which is how W ([N][K]) lies in the
 * ring: no transposition. A block's share of a linear (6 to 24 outputs at
 * C = 768) is 1 to 3 such tiles, and the 8 warps split K between them: warp
 * w takes the 64-wide segments w, w + 8, … and leaves its part of every
 * (output, row) in shared memory for finish_phase, which adds the 8 parts as
 * it adds slices.
 *
 * The banks. Lane (g, t) of a fragment reads row g: sequence g of the rows,
 * output g of the tile. Both are rows of 1.5 or 6 KB, a multiple of 128
 * bytes, so the same k of the 8 rows lies on the same 4 banks. Each lane
 * reads 16 contiguous bytes, k 8t … 8t + 7 of one 32-wide half of the
 * segment, and the odd rows read the second half first: each 16-byte load
 * then covers all 32 banks, 4 rows on each. The order of k inside a dot
 * product is free as long as both operands use the same one, so lane t's 16
 * bytes are mma's k {2t, 2t + 1} and {2t + 8, 2t + 9} of two consecutive mma.
 *
 * At 1 or 2 rows a tile would use 1 or 2 of its 8 rows, and FFMA measured
 * faster (the H100: the LM head 33 µs against 43), so those rows stay on it.
 */

/** @brief The fewest rows that take tensor cores. */
#define MMA_MIN_ROWS 4
/** @brief Output tiles (8 outputs each, mma's n) a warp accumulates at once: 32 outputs, 16 registers per lane. */
#define MMA_TILES 4
/** @brief 16-byte chunks in one 64-wide segment of K (fp16): two halves of 4 lanes × 16 bytes. */
#define MMA_SEGMENT_CHUNKS 8

/** @brief Whether the step of T storage and ROWS rows runs its dot products on tensor cores. */
template <typename T, int ROWS>
static __host__ __device__ constexpr bool tensor_cores_at() { return std::is_same<T, __half>::value && ROWS >= MMA_MIN_ROWS; }

/** @brief The segment's two halves for this lane, read in the order that spreads the 8 rows over the banks (odd rows:
 *         the second half first), handed back in k order. chunk(half) loads this lane's 16 bytes of that half. */
template <typename Chunk>
static __device__ __forceinline__ void load_halves(uint4 (&half)[2], bool odd, Chunk chunk)
{
    uint4 first = chunk(odd ? 1 : 0), second = chunk(odd ? 0 : 1);
    half[0] = odd ? second : first;
    half[1] = odd ? first : second;
}

/** @brief The rows' fragment (A) of segment `seg` for this lane: sequence g's halves (zero past the ROWS staged rows). */
template <int ROWS>
static __device__ __forceinline__ void load_rows_segment(uint4 (&x)[2], const __half *rows, int K, int seg)
{
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const __half *chunk = rows + (long long)g * K + (seg * MMA_SEGMENT_CHUNKS + t) * 8; /* the first half's chunk */
    load_halves(x, g & 1, [&](int h) {
        return g < ROWS ? *reinterpret_cast<const uint4 *>(chunk + h * 32) : make_uint4(0, 0, 0, 0);
    });
}

/** @brief The four mma of one segment: the rows' halves x (A) against the outputs' halves w (B), half h added to
 *         acc[h] (row g, outputs 2t and 2t + 1): two chains of dependent mma, not one, for the latency. */
static __device__ __forceinline__ void mma_segment(float (&acc)[2][2], const uint4 (&x)[2], const uint4 (&w)[2])
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        mma_16x8x16_top(acc[h], x[h].x, x[h].y, w[h].x, w[h].y);
        mma_16x8x16_top(acc[h], x[h].z, x[h].w, w[h].z, w[h].w);
    }
}

/** @brief A linear phase on tensor cores: the block's outputs in tiles of 8, K split over the warps in 64-wide
 *         segments, each warp's part of every (output, row) to `partial` as slice `warp` (the share says
 *         S = STEP_WARPS), for finish_phase. */
template <int ROWS>
static __device__ __forceinline__ void run_phase_ring_mma(const LinearShare &p, const WeightRing &ring, int j,
                                                          const __half *rows, int K, float *partial)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const bool odd = g & 1;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const unsigned from = ring.start[j % RING_LINEARS];
    const int segments = p.chunks / MMA_SEGMENT_CHUNKS; /* K is C or 4C, and C = 64·H: whole segments */
    for (int tile0 = 0; tile0 * 8 < p.outs; tile0 += MMA_TILES) {
        float acc[MMA_TILES][2][2] = {}; /* [tile][half][output 2t + e] */
#pragma unroll 2
        for (int seg = warp; seg < segments; seg += STEP_WARPS) {
            const int c = seg * MMA_SEGMENT_CHUNKS + t; /* this lane's chunk of the first half; the second is c + 4 */
            uint4 x[2];
            load_rows_segment<ROWS>(x, rows, K, seg);
#pragma unroll
            for (int i = 0; i < MMA_TILES; ++i) {
                const int o = (tile0 + i) * 8 + g; /* the tile's output g */
                if ((tile0 + i) * 8 >= p.outs) break;
                uint4 w[2];
                load_halves(w, odd, [&](int h) {
                    return o < p.outs ? ring.at(from, (unsigned)(o * p.chunks + c + 4 * h)) : zero;
                });
                mma_segment(acc[i], x, w);
            }
        }
#pragma unroll
        for (int i = 0; i < MMA_TILES; ++i) /* lane (g, t) holds row g's outputs 2t and 2t + 1 of each tile */
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int o = (tile0 + i) * 8 + 2 * t + e;
                if (g < ROWS && o < p.outs) partial[(o * STEP_WARPS + warp) * ROWS + g] = acc[i][0][e] + acc[i][1][e];
            }
    }
}

/** @brief An LM head tile's logits: lane (g, t) holds row g's outputs 2t and 2t + 1 of the tile (acc[half][e], the
 *         two halves' parts), local outputs tile_o + 2t + e of `outs`, vocabulary n0 + those. */
static __device__ __forceinline__ void keep_tile_logits(const float (&acc)[2][2], int tile_o, int outs, int n0,
                                                        unsigned long long &best, const decode_step_args &a)
{
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int o = tile_o + 2 * t + e;
        if (g < a.M && o < outs) keep_logit<__half>(acc[0][e] + acc[1][e], g, n0 + o, best, a);
    }
}

/** @brief An LM head tile (8 outputs from `tile` of a piece of `outs`) over K's 64-wide segments seg0 … seg1 − 1,
 *         added to acc, with the weights from the ring. */
template <int ROWS>
static __device__ __forceinline__ void head_tile_mma(float (&acc)[2][2], const LinearShare &p, const WeightRing &ring,
                                                     unsigned from, int outs, int tile, int seg0, int seg1,
                                                     const __half *rows, int K)
{
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const bool odd = g & 1;
    const int o = tile + g; /* this lane's output of the tile (B's column g) */
#pragma unroll 4
    for (int seg = seg0; seg < seg1; ++seg) {
        uint4 x[2], wt[2];
        load_rows_segment<ROWS>(x, rows, K, seg);
        load_halves(wt, odd, [&](int h) {
            return o < outs ? ring.at(from, (unsigned)(o * p.chunks + seg * MMA_SEGMENT_CHUNKS + t + 4 * h))
                            : make_uint4(0, 0, 0, 0);
        });
        mma_segment(acc, x, wt);
    }
}

/**
 * @brief The LM head through the ring on tensor cores: the pieces one at a
 *        time, every warp on each. A piece's 4 tiles go to 8 warps by
 *        splitting K: warp w runs tile w % 4 over the first or second half
 *        of K's segments, warps 4-7 leave their sums in shared memory (two
 *        buffers, so that the next piece's cannot overwrite what warps 0-3
 *        have not read), and warps 0-3 add them and keep the logits. At 8
 *        rows the rows of 4C take 48 KB of shared memory and the ring keeps
 *        three 48 KB pieces: read one at a time, the other two are in flight.
 */
template <int ROWS>
static __device__ void run_head_ring_mma(const LinearShare &p, WeightRing &ring, int first, const __half *rows, int K,
                                         unsigned long long &best, const decode_step_args &a)
{
    constexpr int PIECE_OUTPUTS = head_piece_outputs(sizeof(__half), ROWS);
    static_assert(PIECE_OUTPUTS == 32, "a piece is 4 tiles of 8 outputs");
    const int pieces = head_pieces(p.outs, sizeof(__half), ROWS), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int q = 0; q < pieces; ++q) {
        ring.wait(first + q);
        const unsigned from = ring.start[(first + q) % RING_LINEARS];
        const int o0 = q * PIECE_OUTPUTS, outs = min(PIECE_OUTPUTS, p.outs - o0);
        __shared__ float second_half[2][4][32][4]; /* [piece % 2][tile][lane][acc] */
        const int tile = 8 * (warp % 4), half = warp / 4, segments = p.chunks / MMA_SEGMENT_CHUNKS;
        float acc[2][2] = {};
        if (tile < outs)
            head_tile_mma<ROWS>(acc, p, ring, from, outs, tile, half * segments / 2, (half + 1) * segments / 2, rows, K);
        float *sums = second_half[q % 2][warp % 4][lane];
        if (half) sums[0] = acc[0][0], sums[1] = acc[0][1], sums[2] = acc[1][0], sums[3] = acc[1][1];
        __syncthreads(); /* every warp has read the piece, and warps 4-7 have left their sums */
        if (!half && tile < outs) {
            acc[0][0] += sums[0], acc[0][1] += sums[1], acc[1][0] += sums[2], acc[1][1] += sums[3];
            keep_tile_logits(acc, tile, outs, p.n0 + o0, best, a);
        }
        if (ring.is_producer()) { /* lane 0 of warp 7, which keeps no logits */
            ring.give_back();
            ring.request();
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Attention split over the idle blocks (1-4 rows), the first K/V kept (5-8) */
/* ------------------------------------------------------------------------ */

/**
 * @brief At 5-8 rows, the K and V of layers from this one on are read
 *        evict-first in L2, so that the first layers' stay there for the
 *        next step. Eight sequences' K and V (38-75 MB in fp16 at context
 *        130-256) do not all fit in L2 beside the weights; read in the same
 *        order every step, each layer's pushed out the ones the next step
 *        reads first. Measured on the H100 at batch 8: keeping the first 2,
 *        3 or 4 layers' gave the same, 6 a little less and 8 nothing. At 1
 *        row every layer's fit.
 */
#define KV_KEPT_LAYERS 2

/** @brief Whether the ROWS-row step splits attention over the idle blocks: at 1 to ATT_SPLIT_MAX_ROWS rows. */
template <int ROWS>
static __host__ __device__ constexpr bool split_at_rows() { return ROWS <= ATT_SPLIT_MAX_ROWS; }

/**
 * @brief How many blocks share each (sequence, head) pair's attention this
 *        step: one per pass of a block's warps over the longest context
 *        (STEP_WARPS warps × a tile of STEP_ATT_PASSES loads a lane: 128
 *        tokens in fp32, 256 in fp16), as many as the blocks with no pair
 *        allow, at most ATT_MAX_SPLITS. One block reads a pair's context in
 *        passes, each an L2 round trip after the one before; at batch 1
 *        attention keeps 12 of the 132 blocks busy, and in fp32 every context
 *        past 128 tokens takes a second pass. Split, each block reads one
 *        pass's tokens and keeps its part unnormalised (its running max and
 *        sum beside it), and proj's rows merge the parts
 *        (stage_attention_rows), as flash-decoding does.
 */
template <typename T, int ROWS>
static __device__ __forceinline__ int attention_splits(const decode_step_args &a, const StepInputs &in)
{
    if constexpr (!split_at_rows<ROWS>()) {
        return 1;
    } else {
        constexpr int PASS_TOKENS = STEP_WARPS * attention_warp_tokens<T>();
        int longest = 1;
        for (int m = 0; m < a.M; ++m) longest = max(longest, in.lens[m]);
        const int wanted = (longest + PASS_TOKENS - 1) / PASS_TOKENS, room = (int)gridDim.x / (a.M * a.H);
        return max(1, min(min(wanted, room), ATT_MAX_SPLITS));
    }
}

/**
 * @brief Where split s of row m keeps head h's part: its 64 unnormalised
 *        outputs, then its running max and sum (and 2 floats of padding, so
 *        that the next head's outputs start on 16 bytes). The (max, sum) sit
 *        in the head's own lines: each of those is read by one warp of every
 *        block, as each line of the outputs is (kept apart, the (max, sum)
 *        of all the heads filled one or two lines that six warps of every
 *        block read: proj's rows took 1.04-1.07 µs at batch 1 on the H100,
 *        against 0.89-0.98).
 */
static __device__ __forceinline__ float *att_part(const decode_step_args &a, int m, int s, int h)
{
    return a.att_parts + (((long long)m * ATT_MAX_SPLITS + s) * a.H + h) * ATT_PART_FLOATS;
}

/**
 * @brief proj's rows from the attention's S splits. Each thread merges 4
 *        columns of a row: it loads the S parts and their (max, sum)
 *        together (one L2 round trip, as stage_step_rows), rescales each part
 *        to the largest max, adds, and divides by the sum, then rounds to T
 *        as the attention phase stores its output.
 */
template <typename T, int ROWS>
static __device__ void stage_attention_rows(const decode_step_args &a, T *rows, int S)
{
    constexpr int D = DECODE_STEP_HEAD_DIM;
    const int C = a.C;
    for (int i = threadIdx.x; i < ROWS * C / 4; i += STEP_THREADS) {
        const int m = i * 4 / C, c = i * 4 - m * C;
        float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (m < a.M) {
            float4 part[ATT_MAX_SPLITS];
            float2 max_sum[ATT_MAX_SPLITS];
#pragma unroll
            for (int s = 0; s < ATT_MAX_SPLITS; ++s) /* unrolled, so that the S loads are in flight together */
                if (s < S) {
                    const float *p = att_part(a, m, s, c / D);
                    part[s] = __ldcg(reinterpret_cast<const float4 *>(p + c % D));
                    max_sum[s] = __ldcg(reinterpret_cast<const float2 *>(p + D));
                }
            float most = -INFINITY, sum = 0.0f;
#pragma unroll
            for (int s = 0; s < ATT_MAX_SPLITS; ++s)
                if (s < S) most = fmaxf(most, max_sum[s].x);
#pragma unroll
            for (int s = 0; s < ATT_MAX_SPLITS; ++s)
                if (s < S) { /* a split with no tokens has max −∞ and adds nothing */
                    const float f = rescale_to_max(max_sum[s].x, most);
                    sum += f * max_sum[s].y;
                    o[0] += f * part[s].x, o[1] += f * part[s].y, o[2] += f * part[s].z, o[3] += f * part[s].w;
                }
#pragma unroll
            for (int k = 0; k < 4; ++k) o[k] /= sum;
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) store(rows, (long long)m * C + c + k, o[k]);
    }
    __syncthreads();
}


/**
 * @brief v4's attention phase: v3's, with each pair's context in `splits`
 *        parts at 1-4 rows, each part its own item (a block's part leaves
 *        its unnormalised output and (max, sum) in att_parts for proj's rows
 *        to merge); and at 5-8 rows the K and V of the layers past
 *        KV_KEPT_LAYERS read evict-first.
 */
template <typename T, int ROWS>
static __device__ void attention_phase_split(const decode_step_args &a, const StepInputs &in, const T *k_pool,
                                             const T *v_pool, int layer, int splits)
{
    using W = AttentionWarp<T>;
    constexpr bool SPLIT = split_at_rows<ROWS>();
    const bool kv_evict_first = ROWS > ATT_SPLIT_MAX_ROWS && layer >= KV_KEPT_LAYERS;
#if __CUDA_ARCH__ >= 800
    const uint64_t kv_policy = kv_evict_first ? l2_policy_evict_first() : 0;
#else
    const uint64_t kv_policy = 0;
#endif
    const int warp = threadIdx.x / 32, c = threadIdx.x % 32 % W::CHUNKS;
    const int H = a.H, C = a.C, S = SPLIT ? splits : 1;
    for (int item = blockIdx.x; item < a.M * H * S; item += gridDim.x) {
        /* item = split·pairs + pair; split s reads tokens [s·len/S, (s+1)·len/S) */
        const int pair = SPLIT ? item % (a.M * H) : item, split = SPLIT ? item / (a.M * H) : 0;
        int m = pair / H, h = pair - m * H, len = in.lens[m], first = 0;
        if (SPLIT && S > 1) first = (int)((long long)split * len / S), len = (int)((long long)(split + 1) * len / S);
        const int *table = in.tables + m * a.max_pages;
        W w;
        w.start(load_fresh((const T *)a.q + (long long)m * C + h * W::D + c * W::EP));
        for (int t0 = first + warp * W::TILE; t0 < len; t0 += STEP_WARPS * W::TILE) {
            uint4 kr[STEP_ATT_PASSES], vr[STEP_ATT_PASSES];
            load_kv_tile(kr, vr, k_pool, v_pool, table, t0, len, H, h, a.block_size, kv_evict_first, kv_policy);
            w.tile(kr, vr, t0, len);
        }
        w.finish([&](int k, float o, float M, float L) {
            if (SPLIT && S > 1) { /* the part unnormalised, for proj's rows to merge */
                float *part = att_part(a, m, split, h);
                part[k] = o;
                if (k == 0) part[W::D] = M, part[W::D + 1] = L;
            } else {
                store((T *)a.att, (long long)m * C + h * W::D + k, o / L);
            }
        });
    }
}

/**
 * @brief fp32: whether this block's producer also requests as attention
 *        starts. In fp32 the ring holds less than a layer (215 KB of weights
 *        a block), so the next linear fits only once QKV's bytes are back,
 *        and all 132 blocks then requested it at proj's rows: 9.4 MB at once,
 *        3.2 µs of DRAM, and the barrier after proj waited 2.6-2.8 µs for it
 *        (fp16: 0.6). At attention's start most blocks have no (sequence,
 *        head) pair. Half of them (every other block) requesting there split
 *        the burst in two (H100: the step 334-336 µs against 344-348); all of
 *        them, a third or two thirds measured no better. In fp16 the ring
 *        holds two layers, and the same requests lost.
 */
template <typename T>
static __device__ __forceinline__ bool fp32_requests_at_attention(int attention_blocks)
{
    return sizeof(T) == 4 && (int)blockIdx.x >= attention_blocks && blockIdx.x % 2 == 0;
}

/* ------------------------------------------------------------------------ */
/* The kernel                                                                */
/* ------------------------------------------------------------------------ */

/**
 * @brief v4: v3's kernel, but the weights come from the block's WeightRing
 *        in shared memory: its producer (RING_PRODUCER) requests the step's
 *        linears in order as the ring has room, then the LM head's pieces
 *        (read one at a time), and gives each back once its dot products are
 *        done; in fp16 its requests are paced (paced_request_end). A phase
 *        waits for its linear's mbarrier instead of for loads it issued
 *        itself. At 4-8 rows in fp16 the dot products run on tensor cores;
 *        at 1-4 rows attention is split over the idle blocks; at 5-8 the
 *        first layers' K/V stay in L2.
 */
template <typename T, int ROWS>
__global__ void __launch_bounds__(STEP_THREADS, 1) decode_step_ring(decode_step_args a)
{
    constexpr bool TC = tensor_cores_at<T, ROWS>();
    constexpr bool PACED = sizeof(T) == 2;
    extern __shared__ __align__(16) unsigned char smem[];
    const int C = a.C, M = a.M, L = a.L, P = 5 * L + 1;
    decode_layer_weights *layers = reinterpret_cast<decode_layer_weights *>(smem); /* [L] */
    T *rows = reinterpret_cast<T *>(layers + L);                                   /* [ROWS][4C] */
    float *partial = reinterpret_cast<float *>(rows + (long long)ROWS * 4 * C);   /* [units][ROWS] */
    int *tables = reinterpret_cast<int *>(partial + step_max_units(C, gridDim.x, TC) * ROWS); /* [M][max_pages] */
    __shared__ uint64_t ring_bars[RING_LINEARS];
    __shared__ unsigned ring_start[RING_LINEARS];
    const int plan_entries = ring_plan_entries(L, a.V, gridDim.x, sizeof(T), ROWS);
    RingPlan *plan = reinterpret_cast<RingPlan *>(smem + step_plan_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x, TC));
    WeightRing ring = {reinterpret_cast<uint4 *>(smem + step_ring_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x, TC,
                                                                         plan_entries)),
                       a.ring_chunks, ring_bars, ring_start, plan, 4 * L, 0, 0, 0, 0, RING_PRODUCER};
    __shared__ StepInputs in;
    __shared__ unsigned long long block_best[ROWS];
    GridBarrier barrier = {{a.trace, 0, P}, a.barrier, 0};
    barrier.mark(0);
    Prefetched pre;
    unsigned long long best = 0;
    load_step_inputs<ROWS>(a, layers, tables, in, block_best, true);
    __syncthreads();
    const int att_splits = attention_splits<T, ROWS>(a, in);
    for (int j = threadIdx.x; j < 4 * L; j += STEP_THREADS) plan[j] = plan_linear<T>(a, layers, j);
    ring.linears += plan_head_pieces<T, ROWS>(a, layers, plan);
    __syncthreads();
    if (ring.is_producer()) {
        ring.init();
        ring.request(PACED ? PACED_FIRST_LINEARS : RING_ALL_LINEARS);
    }
    __syncthreads(); /* the mbarriers are initialised before any thread waits on one */

    for (int i = 0; i < P; ++i) {
        const bool attention = i < 5 * L && i % 5 == PHASE_ATTENTION;
        const bool from_ring = !attention && i < 5 * L; /* a linear of the layers (else the LM head's pieces) */
        LinearPhase d;
        LinearShare share;
        if (!attention) { /* before the barrier: everything that does not depend on the phase before */
            d = describe_phase(a, layers, i);
            share = share_of<T>(d.w, d.N, d.K, d.epilogue != DECODE_LOGITS_ARGMAX, TC && from_ring);
            prefetch_epilogue<T, ROWS>(share, pre, d.bias, (const T *)d.resid, d.N, M);
            if (d.ln_w) prefetch_ln_chunks<T>(pre, d.ln_w, d.ln_b, d.K);
        }
        if (i > 0) barrier.wait();
        if (attention) {
            const decode_layer_weights &W = layers[i / 5];
            if (fp32_requests_at_attention<T>(M * a.H * att_splits) && ring.is_producer()) ring.request();
            attention_phase_split<T, ROWS>(a, in, (const T *)W.k_pool, (const T *)W.v_pool, i / 5, att_splits);
        } else {
            if (d.ln_w)
                stage_layernorm_rows<T, ROWS>((const T *)d.src, rows, M, d.K, pre, a);
            else if (i % 5 == PHASE_PROJ && att_splits > 1)
                stage_attention_rows<T, ROWS>(a, rows, att_splits); /* the parts merged */
            else
                stage_step_rows<T, ROWS>((const T *)d.src, rows, M, d.K);
            barrier.mark(2);
            const bool head = d.epilogue == DECODE_LOGITS_ARGMAX;
            if (from_ring) {
                if (ring.is_producer()) ring.request(PACED ? paced_request_end(d.linear, i % 5) : RING_ALL_LINEARS);
                ring.wait(d.linear);
                if constexpr (TC)
                    run_phase_ring_mma<ROWS>(share, ring, d.linear, rows, d.K, partial);
                else
                    run_phase_ring<T, ROWS>(share, ring, d.linear, rows, d.K, partial);
            } else { /* the LM head, its pieces after the 4L linears */
                if (ring.is_producer()) ring.request();
                if constexpr (TC)
                    run_head_ring_mma<ROWS>(share, ring, 4 * L, rows, d.K, best, a);
                else
                    run_head_ring_ffma<T, ROWS>(share, ring, 4 * L, rows, d.K, best, a);
            }
            barrier.mark(3);
            if (!head)
                finish_phase<T, ROWS>(d.epilogue, share, partial, pre, d.bias, (T *)d.y, d.N, a, in, d.k_pool, d.v_pool);
        }
        if (i + 1 < P) barrier.arrive();
        if (from_ring && ring.is_producer()) ring.give_back(); /* read (finish_phase's __syncthreads): its bytes go back */
    }
    /* the LM head's argmax: lane m holds row m's best key (on tensor cores, lanes 4m … 4m + 3) */
    argmax_to_step<ROWS>(a, block_best, TC ? threadIdx.x % 32 / 4 : threadIdx.x % 32, best);
    barrier.mark(1);
}

/** @brief decode_step_ring<T, ROWS> as a type, for with_step_kernel. */
template <typename T, int ROWS>
struct RingKernel {
    /** @brief The instantiation. */
    static step_kernel_fn kernel() { return decode_step_ring<T, ROWS>; }
};

/** @brief The shared memory before the ring (the rows, the plan of the linears and the LM head's pieces). */
static size_t ring_offset(wb_dtype dtype, const decode_step_args *a, int sms)
{
    const int rows = decode_rows_for(a->M);
    const bool tc = dtype == WB_F16 && rows >= MMA_MIN_ROWS;
    return step_ring_offset(wb_dtype_bytes(dtype), rows, a->C, a->L, a->max_pages, sms, tc,
                            ring_plan_entries(a->L, a->V, sms, wb_dtype_bytes(dtype), rows));
}

size_t gpt2_step_ring_smem(wb_dtype dtype, const decode_step_args *a)
{
    int sms;
    wb_current_gpu(NULL, &sms);
    if (step_args_refused(a) || !a->att_parts) return 0;
    const size_t static_smem =
        with_step_kernel<RingKernel>(dtype, a->M, [](step_kernel_fn, StepLaunch &s) { return s.static_smem; });
    return ring_offset(dtype, a, sms) + (size_t)ring_largest_share(dtype, a, sms) * 16 +
           static_smem;
}

const char *gpt2_step_ring(wb_dtype dtype, const decode_step_args *a)
{
    if (const char *why = step_args_refused(a)) return why;
    if (!a->att_parts) return "persistent decode step (v4): needs att_parts (decode_att_parts_floats(H) floats)";
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (cc < 90) return "persistent decode step with the weight ring: needs sm_90 (the copy engine)";
    const bool tc = dtype == WB_F16 && decode_rows_for(a->M) >= MMA_MIN_ROWS;
    return with_step_kernel<RingKernel>(dtype, a->M, [&](step_kernel_fn kernel, StepLaunch &s) {
        return launch_ring_step(kernel, s, *a, ring_offset(dtype, a, sms),
                                ring_largest_share(dtype, a, sms), tc,
                                "launch of decode_step_ring");
    });
}
