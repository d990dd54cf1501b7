/**
 * @file stages/10_gpt2_e2e/weight_ring.cuh
 * @brief v4, v5: a block's weights, the LM head's included, brought into a
 *        ring in its shared memory by the copy engine (sm_90), evict-first in
 *        L2, its requests paced.
 *
 * v3's trace shows where a phase's time goes: not into the weights, which
 * are in flight before the barrier, but into the loads that come after them.
 * The barrier's polls, the phase's input rows and attention's K and V are
 * loads of the same SM, queued behind its 48 KB of weight requests; with the
 * weights requested after the barrier instead (the H100, batch 1), reading
 * the input rows went from 1.0 to 2.2 µs and the step from 365 to 441 µs.
 *
 * On sm_90 a block can hand its weights to the copy engine (TMA): one thread
 * asks for a contiguous run of bytes (`cp.async.bulk`), the engine writes it
 * into shared memory and counts the bytes on an mbarrier, and no load of the
 * block's threads waits behind it. A block's share of a linear *is* one
 * contiguous run (its rows of Wᵀ), so each linear is one or two copies. The
 * copies go into a ring that fills the rest of the block's shared memory
 * (about 200 KB): one thread, the producer, requests linears in order as long
 * as they fit, and gives a linear's bytes back as soon as its dot products
 * are done. So the copy engine streams several phases ahead, while the
 * phases' chain of latencies runs behind it on loads that no longer queue.
 *
 * The copies carry an L2 policy, evict-first: a step reads each weight once,
 * 247 MB in fp16, through an L2 of 50-60 MB that by default keeps what was
 * touched last, the end of the LM head. What the next step reads first and
 * again is the K/V cache: L2 replaces the weights first, and the K/V stay.
 */
#ifndef STAGE10_WEIGHT_RING_CUH
/** @brief Include guard. */
#define STAGE10_WEIGHT_RING_CUH

#include "03_gemm/hopper_ptx.cuh" /* mbarriers and the copy engine's bulk copy (sm_90) */
#include "decode_step.cuh"

/** @brief Linears a block's ring may hold at once (requested, landing or being read): one mbarrier each. */
#define RING_LINEARS 8
/**
 * @brief The producer, the thread that requests and gives back: lane 0 of the
 *        last warp. Not thread 0, which arrives at and polls the grid barrier.
 *        Its requests take a while (a proxy fence, an mbarrier, one or two
 *        bulk copies), and the block waits for its slowest warp at the
 *        __syncthreads after the dot products. At 1 or 2 rows warp 1 has as
 *        many units as any (3 of QKV's 17–18), warp 7 the fewest (2; none of
 *        proj's and fc-proj's 6), so there the requests overlap the other
 *        warps' dot products. It requests as a linear phase's rows are ready,
 *        not at the barrier: requested right after the arrival, each phase's
 *        burst of copies (4.7 MB for fc from all blocks at once, 1.6 µs of
 *        DRAM) met the barrier's polls in L2, and the barriers after QKV, fc
 *        and fc-proj took 1.5–2.1 µs instead of 0.6–1.0 (the H100, batch 1:
 *        326 µs a step against 298).
 */
#define RING_PRODUCER (STEP_THREADS - 32)

/** @brief WeightRing::request's default end: past every linear of the step (and the LM head's pieces). */
#define RING_ALL_LINEARS (1 << 30)

/** @brief One of the step's linears as a block's ring sees it: where its share starts, how long it is. */
struct RingPlan {
    const uint4 *src; /**< the block's share of the linear: a contiguous run of 16-byte chunks */
    unsigned n;       /**< its chunks */
};

static_assert(sizeof(RingPlan) == 16, "step_ring_offset counts 16 bytes a linear");

/**
 * @brief A block's ring of weights in shared memory. Linear j (the step's
 *        linears in order, four per block of the model, then v4's pieces of
 *        the LM head) starts at chunk start[j % RING_LINEARS] and may wrap
 *        past the end; its bytes have landed when mbarrier j % RING_LINEARS
 *        completes its phase j / RING_LINEARS. head, tail, next and freed are
 *        kept by the producer: it alone requests and gives back.
 */
struct WeightRing {
    uint4 *buf;              /**< the ring: `chunks` 16-byte chunks of shared memory */
    unsigned chunks;         /**< its capacity */
    uint64_t *bars;          /**< [RING_LINEARS] mbarriers, one per linear in the ring */
    unsigned *start;         /**< [RING_LINEARS] the chunk where each linear begins */
    const RingPlan *plan;    /**< [linears] the block's share of each linear, worked out once as the step begins */
    int linears;             /**< the entries of the plan */
    unsigned long long head; /**< chunks requested since the step began */
    unsigned long long tail; /**< chunks given back */
    int next;                /**< the next linear to request */
    int freed;               /**< linears given back */
    int producer;            /**< the thread that requests and gives back */

    /** @brief Whether this thread is the producer. */
    __device__ __forceinline__ bool is_producer() const { return (int)threadIdx.x == producer; }

    /** @brief The producer, once: make the mbarriers (one arrival each: the producer's, with the bytes it expects). */
    __device__ void init()
    {
#if __CUDA_ARCH__ >= 900
        for (int b = 0; b < RING_LINEARS; ++b) mbar_init(bars + b, 1);
        mbar_fence_init();
#endif
    }
    /** @brief The producer: request the next linears, in order, while they fit (and an mbarrier is free), up to
     *         linear `end` − 1 (v4's pacing in fp16; by default all of them). */
    __device__ void request(int end = RING_ALL_LINEARS)
    {
#if __CUDA_ARCH__ >= 900
        fence_shared_for_tma(); /* the reads of what was given back, before the copies overwrite it */
        const uint64_t policy = l2_policy_evict_first();
        for (; next < linears && next < end && next - freed < RING_LINEARS; ++next) {
            const unsigned n = plan[next].n, at = (unsigned)(head % chunks), first = n < chunks - at ? n : chunks - at;
            if (head + n - tail > chunks) return; /* not yet: a linear's bytes come back first */
            uint64_t *bar = bars + next % RING_LINEARS;
            start[next % RING_LINEARS] = at;
            mbar_arrive_expect_bytes(bar, n * 16);
            if (first) bulk_load_with_policy(buf + at, plan[next].src, first * 16, bar, policy);
            if (n > first) /* the part past the end */
                bulk_load_with_policy(buf, plan[next].src + first, (n - first) * 16, bar, policy);
            head += n;
        }
#else
        __trap(); /* the launcher takes the ring only on sm_90 */
#endif
    }
    /** @brief Every thread: wait until linear j's bytes have landed. */
    __device__ __forceinline__ void wait(int j) const
    {
#if __CUDA_ARCH__ >= 900
        mbar_wait(bars + j % RING_LINEARS, (j / RING_LINEARS) & 1);
#endif
    }
    /** @brief The producer, after a __syncthreads that follows every read of it: give back the oldest linear. */
    __device__ __forceinline__ void give_back() { tail += plan[freed++].n; }
    /** @brief Chunk q of the ring counted from `from` (q < 2·chunks: at most one wrap). */
    __device__ __forceinline__ uint4 at(unsigned from, unsigned q) const
    {
        unsigned i = from + q;
        return buf[i >= chunks ? i - chunks : i];
    }
};

/**
 * @brief The dot products of a linear phase with the weights from the ring:
 *        v3's units and slices, each weight chunk read from shared memory
 *        instead of a register slot. The warps' finished dot products go to
 *        `partial` for finish_phase, as in run_phase.
 */
template <typename T, int ROWS>
static __device__ __forceinline__ void run_phase_ring(const LinearShare &p, const WeightRing &ring, int j,
                                                      const T *rows, int K, float *partial)
{
    const int lane = threadIdx.x % 32;
    const unsigned from = ring.start[j % RING_LINEARS];
    for (int u = threadIdx.x / 32; u < p.units; u += STEP_WARPS) {
        const int o = u >> p.log2S, s = u & (p.S - 1);
        const unsigned first = (unsigned)(o * p.chunks);
        float acc[ROWS];
#pragma unroll
        for (int m = 0; m < ROWS; ++m) acc[m] = 0.0f;
#pragma unroll 4
        for (int c = s * 32 + lane; c < p.chunks; c += 32 << p.log2S)
            multiply_chunk<T, ROWS>(ring.at(from, first + c), rows, K, c, acc);
        const float mine = reduce_rows_to_lanes<ROWS>(acc);
        if (lane < ROWS) partial[u * ROWS + lane] = mine;
    }
}

/* ------------------------------------------------------------------------ */
/* The LM head through the ring                                             */
/* ------------------------------------------------------------------------ */
/*
 * The LM head is an eighth of the step: streamed through registers from the
 * moment its barrier opens (v3), its 77 MB of wte would wait for their phase
 * while the layers' weights stream through the ring phases ahead and leave
 * DRAM idle most of the time. So v4 cuts each block's share of the head (about 380 outputs, 585 KB) into
 * pieces (96 KB at 1 row, 48 KB from 2) and puts them in the ring's plan
 * after the last layer's linears: the producer requests them as soon as the
 * last layers give back their bytes, and the first pieces have landed before
 * the head begins. The head reads one piece at a time and gives it back at
 * once.
 */

/**
 * @brief Outputs of the LM head per piece in the ring, for `elem`-byte
 *        weights at `rows` rows: 96 KB of weights at 1 row (64 outputs in
 *        fp16 at C = 768), 48 KB from 2 rows (32 in fp16: 4 tiles of 8 for
 *        the tensor cores, and at 8 rows the ring holds three of them beside
 *        48 KB of rows). At 1 row fewer, larger copies stream faster: on the
 *        H200 (v5) the head took 23.8-24.3 µs against 26.1 with 48 KB
 *        pieces, the step 188.4-189.8 against 191.6-192.4.
 */
static __host__ __device__ __forceinline__ constexpr int head_piece_outputs(size_t elem, int rows)
{
    return (int)((rows == 1 ? 128 : 64) / elem);
}

/** @brief The pieces of a block's share of the LM head of `outs` outputs of `elem` bytes each, at `rows` rows. */
static __host__ __device__ __forceinline__ int head_pieces(int outs, size_t elem, int rows)
{
    return (outs + head_piece_outputs(elem, rows) - 1) / head_piece_outputs(elem, rows);
}

/** @brief The ring's plan: 4L linears, then the pieces of one block's share of the LM head (V over blocks). */
static __host__ __device__ __forceinline__ int ring_plan_entries(int L, int V, int blocks, size_t elem, int rows)
{
    return 4 * L + head_pieces((V + blocks - 1) / blocks, elem, rows);
}

/** @brief The most 16-byte chunks the ring must hold at once for a step of `a` in `dtype` over `blocks` blocks: one
 *         block's share of one linear, or room for two of the LM head's pieces. */
static unsigned ring_largest_share(wb_dtype dtype, const decode_step_args *a, int blocks)
{
    const size_t elem = wb_dtype_bytes(dtype);
    const int C = a->C, vec = (int)(16 / elem), shapes[4][2] = {{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}}; /* (N, K) */
    const int piece = head_piece_outputs(elem, decode_rows_for(a->M));
    unsigned most = (unsigned)(2 * piece) * (unsigned)(C / vec);
    for (int i = 0; i < 4; ++i) {
        unsigned chunks = (unsigned)((shapes[i][0] + blocks - 1) / blocks) * (unsigned)(shapes[i][1] / vec);
        most = chunks > most ? chunks : most;
    }
    return most;
}

/** @brief The block's share of the step's linear j (four per block of the model) as the ring copies it. */
template <typename T>
static __device__ __forceinline__ RingPlan plan_linear(const decode_step_args &a, const decode_layer_weights *layers,
                                                       int j)
{
    LinearPhase d = describe_phase(a, layers, phase_of_linear(j));
    LinearShare share = share_of<T>(d.w, d.N, d.K, true);
    return {share.w, (unsigned)(share.outs * share.chunks)};
}

/** @brief The pieces of the block's share of the LM head into the plan after the 4L linears, by the block's
 *         threads in turn; how many. */
template <typename T, int ROWS>
static __device__ int plan_head_pieces(const decode_step_args &a, const decode_layer_weights *layers, RingPlan *plan)
{
    LinearPhase d = describe_phase(a, layers, 5 * a.L);
    LinearShare head = share_of<T>(d.w, d.N, d.K, false);
    constexpr int PIECE_OUTPUTS = head_piece_outputs(sizeof(T), ROWS);
    const int pieces = head_pieces(head.outs, sizeof(T), ROWS);
    for (int q = threadIdx.x; q < pieces; q += STEP_THREADS) {
        const int outs = min(PIECE_OUTPUTS, head.outs - q * PIECE_OUTPUTS);
        plan[4 * a.L + q] = {head.w + (long long)q * PIECE_OUTPUTS * head.chunks, (unsigned)(outs * head.chunks)};
    }
    return pieces;
}

/** @brief v4 (fp16): the linears asked for as the step starts (the first QKV's). */
#define PACED_FIRST_LINEARS 1
/** @brief v4 (fp16): the most linears, the current one included, asked for at a linear's rows: one block of the
 *         model (QKV, proj, fc and fc-proj). */
#define PACED_AHEAD_LINEARS 4

/**
 * @brief v4, v5 (fp16): where the producer's requests stop at linear j's
 *        rows, a phase of kind `kind`. Asking for whatever fits, as the step
 *        starts that is 8 linears, nearly two blocks of the model: 26 MB
 *        from all blocks at once, 9 µs of DRAM, and the first phase's own
 *        loads (the embedding's row, LayerNorm's parameters) queue behind
 *        it, so that its rows took 13 µs where the later QKVs' take 1.1
 *        (H100, batch 1). So the first QKV alone is asked for as the step
 *        starts (PACED_FIRST_LINEARS), then at a linear's rows at most
 *        PACED_AHEAD_LINEARS linears, itself included. At proj's rows, where
 *        the copies would land during proj's short phase and the barrier
 *        after it, nothing past proj: fc's rows ask instead. The end is never
 *        below j + 1, so linear j is always asked for before the block waits
 *        for it. (In fp32 the ring holds less than a layer, and the same
 *        rules lost: it asks for what fits.)
 */
static __device__ __forceinline__ int paced_request_end(int j, int kind)
{
    return kind == PHASE_PROJ ? j + 1 : j + PACED_AHEAD_LINEARS;
}

/** @brief One piece of the LM head on FFMA (1 or 2 rows, and fp32): warp w (of `warps`) takes outputs w, w + warps,
 *         …, each a whole K per warp, as run_phase_ring's units; lane m keeps row m's logit. */
template <typename T, int ROWS>
static __device__ __forceinline__ void head_piece_ffma(const LinearShare &p, const WeightRing &ring, unsigned from,
                                                       int o0, int outs, int w, int warps, const T *rows, int K,
                                                       unsigned long long &best, const decode_step_args &a)
{
    const int lane = threadIdx.x % 32;
    for (int o = w; o < outs; o += warps) {
        float acc[ROWS];
#pragma unroll
        for (int m = 0; m < ROWS; ++m) acc[m] = 0.0f;
#pragma unroll 4
        for (int c = lane; c < p.chunks; c += 32)
            multiply_chunk<T, ROWS>(ring.at(from, (unsigned)(o * p.chunks + c)), rows, K, c, acc);
        const float mine = reduce_rows_to_lanes<ROWS>(acc);
        if (lane < a.M) keep_logit<T>(mine, lane, p.n0 + o0 + o, best, a);
    }
}

/**
 * @brief The LM head through the ring on FFMA: the block's pieces (ring
 *        entries first, first + 1, …) one at a time, the 8 warps taking a
 *        piece's outputs in turn; each piece given back as soon as it is
 *        read, and the next requested, so that two more are in flight while
 *        one is read.
 */
template <typename T, int ROWS>
static __device__ void run_head_ring_ffma(const LinearShare &p, WeightRing &ring, int first, const T *rows, int K,
                                          unsigned long long &best, const decode_step_args &a)
{
    constexpr int PIECE_OUTPUTS = head_piece_outputs(sizeof(T), ROWS);
    const int pieces = head_pieces(p.outs, sizeof(T), ROWS), warp = threadIdx.x / 32;
    for (int q = 0; q < pieces; ++q) {
        ring.wait(first + q);
        const unsigned from = ring.start[(first + q) % RING_LINEARS];
        const int o0 = q * PIECE_OUTPUTS, outs = min(PIECE_OUTPUTS, p.outs - o0);
        head_piece_ffma<T, ROWS>(p, ring, from, o0, outs, warp, STEP_WARPS, rows, K, best, a);
        __syncthreads(); /* every warp has read the piece */
        if (ring.is_producer()) { /* lane 0 of warp 7, which keeps no logits */
            ring.give_back();
            ring.request();
        }
    }
}

#endif /* STAGE10_WEIGHT_RING_CUH */
