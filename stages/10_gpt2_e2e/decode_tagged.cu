/**
 * @file stages/10_gpt2_e2e/decode_tagged.cu
 * @brief v5: v4's step at 1 row (fp16, sm_90) with attention and proj in
 *        one phase, by head (proj_heads.cuh), and no grid barriers: every
 *        phase's outputs carry the step's tag, and each phase polls the words
 *        it reads. With the tuning that only this step needs, each where
 *        it acts: the LayerNorms folded into the weights, the rows' loads
 *        before the weights', attention's addresses in shifts.
 *
 * A grid barrier costs each phase about 1 µs (0.99 µs alone on the H100, the
 * fastest of eight designs measured), and only then do the blocks fetch the
 * rows the phase before wrote: a trip to L2 more. But a phase waits for the
 * phase before only because it reads its outputs. So v5 stores each output
 * as one 32-bit word, its fp16 bits in the low half and the step's tag in
 * the high half (NCCL's "LL" protocol, in halves of 32 bits), and the reader
 * polls the words it needs until every one carries this step's tag: the
 * data is its own flag. A 32-bit store is single-copy atomic, so a word is
 * never half new; no fence orders it, since no other write has to be seen
 * with it. A scratch chain of 192 all-to-all phases on 132 blocks took
 * 1.33-1.39 µs a phase polled against 1.67-1.72 with a barrier and a row
 * read (H100).
 *
 * Each buffer is written once a step (x before each layer, each layer's
 * q/k/v and hidden layer: DECODE_TAGGED_WORDS), so a word never changes
 * between two reads of one step; the next step writes it again with the
 * next tag, a kernel later. Tags run 1 … 65 535 and the buffers start at
 * zero, so a word no step wrote never passes.
 *
 * proj's sums are added by 12 heads with atomics, so no tag can mark them
 * done: each sum counts its parts in its low bits (add_counted), and fc's
 * rows wait until the count says H. They come in two halves chosen by the
 * step's parity, and each step zeroes the other half for the next.
 */
#include "proj_heads.cuh"
#include "step_launch.cuh"

#include <stdlib.h>

#include "engine.h" /* v5's set-up, at the end */

/** @brief The step's tag from the steps so far: 1 … 65 535, never 0. */
static __device__ __forceinline__ unsigned step_tag(unsigned epoch) { return epoch % 65535u + 1u; }

/** @brief Output value v, rounded to fp16, with the step's tag, in one relaxed (gpu-scope) 32-bit store. */
static __device__ __forceinline__ void store_tagged(unsigned *p, float v, unsigned tag)
{
    const unsigned word = (unsigned)__half_as_ushort(__float2half_rn(v)) | tag << 16;
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(word) : "memory");
}

/** @brief 4 words from L2 (a relaxed gpu-scope load: never a stale L1 line, and never hoisted out of a poll). */
static __device__ __forceinline__ uint4 load_relaxed4(const unsigned *p)
{
    uint4 v;
    asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/** @brief Whether all 4 words carry `tag`. */
static __device__ __forceinline__ bool all_tagged(uint4 v, unsigned tag)
{
    return (v.x >> 16 == tag) & (v.y >> 16 == tag) & (v.z >> 16 == tag) & (v.w >> 16 == tag);
}

/** @brief 8 tagged words at p, polled until they all carry `tag`, as 16 bytes of fp16. */
static __device__ __forceinline__ uint4 poll_tagged8(const unsigned *p, unsigned tag)
{
    uint4 lo, hi;
    do {
        lo = load_relaxed4(p), hi = load_relaxed4(p + 4);
    } while (!(all_tagged(lo, tag) && all_tagged(hi, tag)));
    return make_uint4((lo.x & 0xffffu) | lo.y << 16, (lo.z & 0xffffu) | lo.w << 16, (hi.x & 0xffffu) | hi.y << 16,
                      (hi.z & 0xffffu) | hi.w << 16);
}

/** @brief A phase's input row of K fp16 values (K a multiple of 8), polled from its tagged words into shared memory;
 *         then __syncthreads. Where stage_step_rows waits at the barrier, then loads. */
static __device__ void stage_tagged_rows(const unsigned *src, void *rows, int K, unsigned tag)
{
    for (int c = threadIdx.x; c < K / 8; c += STEP_THREADS) reinterpret_cast<uint4 *>(rows)[c] = poll_tagged8(src + 8 * c, tag);
    __syncthreads();
}

/** @brief The tagged buffers of layer l (decode_step_args.tagged): x before it (l = L: the LM head's), its q/k/v, its
 *         hidden layer. */
static __device__ __forceinline__ unsigned *tagged_x(const decode_step_args &a, int l) { return a.tagged + (long long)l * a.C; }
static __device__ __forceinline__ unsigned *tagged_qkv(const decode_step_args &a, int l)
{
    return a.tagged + (long long)(a.L + 1) * a.C + (long long)l * 3 * a.C;
}
static __device__ __forceinline__ unsigned *tagged_hidden(const decode_step_args &a, int l)
{
    return a.tagged + (long long)(a.L + 1) * a.C + (long long)a.L * 3 * a.C + (long long)l * 4 * a.C;
}

/**
 * @brief The counted part: proj_heads.cuh's fixed point, and each sum also counts its
 *        parts in its low bits: a part goes in as part·2^32·2^8 + 1, and
 *        fc's rows wait until the low 4 bits say H. The sum shifted right by
 *        8 is the fixed-point sum, bit for bit. A part out of range adds 1 + 16 instead, no
 *        value: bits 4-7 flag the row (at most 12 flags, 192, stay under the
 *        value's bits). The range is 2^18 (DECODE_PROJ_TAGGED_PART_MOST), so
 *        that H parts stay under 2^62.
 */
static __device__ __forceinline__ void add_counted(long long *acc, int n, float part)
{
    const bool in_range = fabsf(part) < DECODE_PROJ_TAGGED_PART_MOST; /* false for NaN too */
    const unsigned long long fixed = (unsigned long long)(in_range ? __float2ll_rn(part * DECODE_PROJ_FIXED_ONE) : 0);
    atomicAdd(reinterpret_cast<unsigned long long *>(acc + n), (fixed << 8) + (in_range ? 1 : 17));
}

/** @brief 2 of proj's counted sums, a relaxed gpu-scope load. */
static __device__ __forceinline__ longlong2 load_relaxed2(const long long *p)
{
    longlong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.s64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
    return v;
}

/**
 * @brief fc's rows after proj, with no barrier before them: a thread's 4
 *        columns of x (layer l's tagged words) and of proj's counted sums,
 *        loads issued together and polled until x carries the step's tag and
 *        every sum has its H parts; then x + bias + sum·2^-32. A part out of
 *        range makes the thread's 4 columns NaN, and with them fc's
 *        statistics and so all of its outputs: a sum that wrapped is never
 *        added.
 */
static __device__ void stage_proj_sum_rows_tagged(const decode_step_args &a, const float *proj_b, const long long *acc,
                                                  const unsigned *x, unsigned tag, __half *rows, int n0, int n1)
{
    const int C = a.C;
    const long long H = a.H;
    for (int c = threadIdx.x * 4; c < C; c += STEP_THREADS * 4) {
        /* the bias first: asked for after the poll, its trip to L2 came after the last part had landed */
        const float4 b = __ldg(reinterpret_cast<const float4 *>(proj_b + c));
        longlong2 s01, s23;
        uint4 xw;
        do {
            s01 = load_relaxed2(acc + c), s23 = load_relaxed2(acc + c + 2), xw = load_relaxed4(x + c);
        } while (!(all_tagged(xw, tag) && (s01.x & 15) == H && (s01.y & 15) == H && (s23.x & 15) == H &&
                   (s23.y & 15) == H));
        const long long sum[4] = {s01.x, s01.y, s23.x, s23.y};
        const unsigned xs[4] = {xw.x, xw.y, xw.z, xw.w};
        const float bias[4] = {b.x, b.y, b.z, b.w};
        bool flagged = false;
#pragma unroll
        for (int k = 0; k < 4; ++k) flagged |= (sum[k] >> 4 & 15) != 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float s = bias[k] + (float)(sum[k] >> 8) / DECODE_PROJ_FIXED_ONE; /* arithmetic shift: the sum */
            const float v = flagged ? __int_as_float(0x7fffffff) : __half2float(__ushort_as_half((unsigned short)xs[k])) + s;
            store(rows, c + k, v);
            if (c + k >= n0 && c + k < n1) store((__half *)a.att, c + k, v);
        }
    }
    __syncthreads();
}

/** @brief log2 of n, a power of 2 (the block size: the launcher checks). */
static __device__ __forceinline__ int log2_of_power_of_2(int n) { return 31 - __clz(n); }

/**
 * @brief Where token t's row of head h starts in a page pool, with the block
 *        size bs a power of 2: a shift and a mask where v3, v4 divide by bs.
 *        Written as v3, v4 write it, each of a warp's 8 passes divided t by bs (an
 *        integer division by a run-time value: I2F, MUFU.RCP, F2I and a dozen
 *        integer instructions, a dependent chain), then read the page from
 *        the table and only then issued its two loads, and `if (t < len)` put
 *        each pass in a branch of its own, so the passes could not overlap.
 *        Here t is clamped to the last token instead (a token past the
 *        context reads the last one's row; its score is −∞, so it weighs 0)
 *        and shifted: no branch, and the 8 passes' arithmetic interleaves.
 */
static __device__ __forceinline__ long long kv_row_offset(const int *table, int t, int H, int h, int bs)
{
    return (((long long)table[t >> log2_of_power_of_2(bs)] * H + h) * bs + (t & (bs - 1))) * DECODE_STEP_HEAD_DIM;
}

/**
 * @brief Head h's attention into `out` (stage 09's tiles, one block a head) with the
 *        query and the new token's K and V from QKV's tagged words (the
 *        pools' copies may not have landed yet) and the K/V addresses in
 *        shifts.
 */
static __device__ void attention_head_tagged(const decode_step_args &a, const StepInputs &in, const __half *k_pool,
                                             const __half *v_pool, int layer, int h, __half *out, unsigned tag)
{
    using W = AttentionWarp<__half>;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % W::CHUNKS, sub = lane / W::CHUNKS;
    const int len = in.lens[0], H = a.H, bs = a.block_size;
    const unsigned *qkv = tagged_qkv(a, layer) + h * W::D + c * W::EP;
    const uint4 q16 = poll_tagged8(qkv, tag), k_new = poll_tagged8(qkv + a.C, tag), v_new = poll_tagged8(qkv + 2 * a.C, tag);
    W w;
    w.start(q16);
    for (int t0 = warp * W::TILE; t0 < len; t0 += STEP_WARPS * W::TILE) {
        uint4 kr[STEP_ATT_PASSES], vr[STEP_ATT_PASSES];
#pragma unroll
        for (int p = 0; p < STEP_ATT_PASSES; ++p) {
            const int t = t0 + p * W::TPP + sub;
            const long long off = kv_row_offset(in.tables, min(t, len - 1), H, h, bs) + c * W::EP;
            kr[p] = load_fresh(k_pool + off), vr[p] = load_fresh(v_pool + off);
            if (t >= len - 1) kr[p] = k_new, vr[p] = v_new; /* the new token's (past it: −∞) */
        }
        w.tile(kr, vr, t0, len);
    }
    w.finish([&](int k, float o, float, float L) { store(out, k, o / L); });
}

/**
 * @brief The warp that works out the statistics of a folded LayerNorm: the
 *        last but one. QKV's 17-18 outputs a block leave it 2 dot products
 *        where warps 0 and 1 have 3, and it is not the producer's (the last
 *        warp, which requests in the same phases).
 */
#define STATS_WARP (STEP_WARPS - 2)

/**
 * @brief The statistics of a staged row (x as it is, the LayerNorm folded
 *        into the linear after it), by one warp, into stats[0] = (mean, 1/σ).
 *
 *        A LayerNorm before a linear is y_n = Σ_k ((x_k − mean)·rstd·g_k +
 *        b_k)·W_nk + bias_n, which is
 *
 *            y_n = rstd·(Σ_k x_k·W'_nk − mean·Σ_k W'_nk) + bias'_n,
 *
 *        W'_nk = g_k·W_nk and bias'_n = bias_n + Σ_k b_k·W_nk, both worked
 *        out once on the host (model.c: gpt2_fold_layernorm). The dot
 *        products then take the row as the phase before left it, and the
 *        statistics are needed only in the epilogue: v4's rows are
 *        normalised (their loads, two butterflies, the gain and shift) before
 *        any dot product could start; v5's are staged as they are, and one
 *        warp works out mean and rstd while the others multiply. The column
 *        sums Σ_k W'_nk are of the rounded W', so that x·W' − mean·ΣW' is
 *        (x − mean)·W' in exact arithmetic; the two terms cancel as far as
 *        the mean is from zero, and fp32 keeps 13 bits more than fp16's
 *        rounding of the row: it shows only for a mean thousands of times σ.
 */
static __device__ __forceinline__ void row_statistics(const __half *row, int K, float2 *stats)
{
    const RowSums r = warp_row_sums(row, K);
    if (threadIdx.x % 32 == 0) stats[0] = r.mean_rstd(K);
}

/** @brief A lane's 16-byte chunks of one output at K = 768 in fp16 (96 chunks over 32 lanes). */
#define LOADS_FIRST_LANE_CHUNKS 3

/**
 * @brief run_phase_ring for the phases whose outputs each take
 *        LOADS_FIRST_LANE_CHUNKS chunks a lane (QKV's and fc's, K = 768),
 *        with two changes. run_phase_ring's loop over a unit's chunks has a
 *        run-time trip count, so the compiler keeps each round apart: it
 *        loads a chunk of weights and a chunk of the row, waits for both,
 *        converts 16 halves and multiplies, then goes round again; and it
 *        converts the row's chunks again for every unit. Here the lane's row
 *        chunks are converted once, before the warp's first unit, into 24
 *        floats that stay in registers; and a unit's three weight chunks are
 *        loaded before any is used (a loop the compiler unrolls), so their
 *        shared-memory latencies overlap. Alone, from shared memory, warp 0's
 *        three units of QKV took 1 305 cycles against 2 198 (the H100). The
 *        conversion, and the statistics' warp's sums (from the same
 *        registers), come before the wait for the weights.
 */
static __device__ __forceinline__ void run_phase_ring_loads_first(const LinearShare &p, const WeightRing &ring, int j,
                                                                  const __half *rows, float *partial, float2 *ln_stats)
{
    constexpr int VEC = Vec16<__half>::N, LC = LOADS_FIRST_LANE_CHUNKS;
    const int lane = threadIdx.x % 32;
    float x[LC][VEC]; /* the lane's chunks c = lane + 32·i of the row, converted once */
#pragma unroll
    for (int i = 0; i < LC; ++i) unpack16(reinterpret_cast<const uint4 *>(rows)[lane + 32 * i], x[i], __half());
    if (ln_stats && threadIdx.x / 32 == STATS_WARP) { /* warp_row_sums's sums in its order, from these registers */
        RowSums r = {__shfl_sync(0xffffffffu, x[0][0], 0), 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < LC; ++i) r.add(x[i]);
        r.warp_reduce();
        if (lane == 0) ln_stats[0] = r.mean_rstd(32 * LC * VEC);
    }
    ring.wait(j); /* the row's conversion and the statistics above ran while the weights were landing */
    const unsigned from = ring.start[j % RING_LINEARS]; /* set by the producer's request: read after the wait */
    for (int u = threadIdx.x / 32; u < p.units; u += STEP_WARPS) {
        const unsigned first = (unsigned)(u * p.chunks) + lane;
        uint4 w16[LC]; /* every load of the unit issued before the first multiply */
#pragma unroll
        for (int i = 0; i < LC; ++i) w16[i] = ring.at(from, first + 32 * i);
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < LC; ++i) {
            float w[VEC];
            unpack16(w16[i], w, __half());
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc = fmaf(w[v], x[i][v], acc);
        }
        acc = warp_allreduce<SumOp>(acc);
        if (lane == 0) partial[u] = acc;
    }
}

/**
 * @brief v5's epilogue of a linear phase (finish_phase at 1 row): the bias,
 *        with a folded LayerNorm's statistics applied (`ln_stats`:
 *        rstd·(x·w' − mean·Σw') + bias'), then the output to its tagged words
 *        `tagged_y`; QKV's k and v also to the page pools (their slot's page
 *        and offset in shifts).
 */
static __device__ __forceinline__ void finish_phase_tagged(decode_epilogue epi, const LinearShare &p,
                                                           const float *partial, const Prefetched &pre,
                                                           const float *bias, int N, const decode_step_args &a,
                                                           const StepInputs &in, void *k_pool, void *v_pool,
                                                           const float2 *ln_stats, unsigned *tagged_y, unsigned tag)
{
    __syncthreads(); /* every warp's partial sums are in */
    for (int o = threadIdx.x; o < p.outs; o += STEP_THREADS) {
        const int n = p.n0 + o;
        float s = 0.0f;
        for (int sl = 0; sl < p.S; ++sl) s += partial[o * p.S + sl];
        const bool mine = o == (int)threadIdx.x; /* the first pass: what prefetch_epilogue fetched */
        if (ln_stats)
            s = fmaf(ln_stats[0].y, s - ln_stats[0].x * (mine ? pre.colsum : __ldg(bias + N + n)),
                     mine ? pre.bias : __ldg(bias + n));
        else
            s += mine ? pre.bias : bias ? __ldg(bias + n) : 0.0f;
        if (epi != DECODE_QKV_APPEND) { /* resid: fc's rows left it (at most one output a thread) */
            store_tagged(tagged_y + n, epi == DECODE_GELU ? gelu_tanh(s) : pre.resid + s, tag);
        } else { /* q, k and v for this step's attention; k and v also to the pools, for the steps after */
            const int C = a.C, part = n / C, c = n - part * C, d = DECODE_STEP_HEAD_DIM;
            store_tagged(tagged_y + n, s, tag);
            if (part > 0) {
                const long long slot = in.slots[0], page = slot >> log2_of_power_of_2(a.block_size),
                                offset = slot & (a.block_size - 1);
                store((__half *)(part == 1 ? k_pool : v_pool), ((page * a.H + c / d) * a.block_size + offset) * d + c % d, s);
            }
        }
    }
}

/** @brief v5's trace marks: v3, v4's GridBarrier without the counter (a phase ends at a __syncthreads). */
struct TaggedTrace : StepTrace {
    /** @brief End the phase without arriving: the next phase's rows wait for their own words. */
    __device__ __forceinline__ void leave()
    {
        __syncthreads(); /* the block's shared memory is free for the next phase */
        mark(1);
    }
    /** @brief Start the next phase at once. */
    __device__ __forceinline__ void enter()
    {
        ++phase;
        mark(0);
    }
};

/**
 * @brief v5: attention and proj in one phase, no grid barrier. Each phase's outputs go to
 *        their tagged words (finish_phase_tagged) and the next phase polls
 *        the words it reads (stage_tagged_rows, stage_proj_sum_rows_tagged,
 *        attention_head_tagged). QKV's and fc's LayerNorm are folded into
 *        their weights (the engine uploads them folded: row_statistics), and
 *        their dot products load first (run_phase_ring_loads_first).
 */
__global__ void __launch_bounds__(STEP_THREADS, 1) decode_step_tagged(decode_step_args a)
{
    using T = __half;
    constexpr int ROWS = 1;
    extern __shared__ __align__(16) unsigned char smem[];
    const int C = a.C, M = a.M, L = a.L, P = 5 * L + 1;
    decode_layer_weights *layers = reinterpret_cast<decode_layer_weights *>(smem); /* [L] */
    T *rows = reinterpret_cast<T *>(layers + L);                                   /* [4C] */
    float *partial = reinterpret_cast<float *>(rows + 4 * C);                     /* [units] */
    int *tables = reinterpret_cast<int *>(partial + step_max_units(C, gridDim.x, false)); /* [max_pages] */
    __shared__ uint64_t ring_bars[RING_LINEARS];
    __shared__ unsigned ring_start[RING_LINEARS];
    const int plan_entries = ring_plan_entries(L, a.V, gridDim.x, sizeof(T), ROWS);
    RingPlan *plan = reinterpret_cast<RingPlan *>(smem + step_plan_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x, false));
    WeightRing ring = {reinterpret_cast<uint4 *>(smem + step_ring_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x,
                                                                         false, plan_entries)),
                       a.ring_chunks, ring_bars, ring_start, plan, 4 * L, 0, 0, 0, 0, RING_PRODUCER};
    __shared__ StepInputs in;
    __shared__ unsigned long long block_best[ROWS];
    __shared__ float2 ln_stats[ROWS]; /* the row's (mean, 1/σ), for the epilogue (row_statistics) */
    TaggedTrace trace = {{a.trace, 0, P}};
    trace.mark(0);
    Prefetched pre;
    unsigned long long best = 0;
    /* the keys are zeroed by the launcher, or by the step before (below): nothing here would order a zero before the
     * LM head's atomics */
    load_step_inputs<ROWS>(a, layers, tables, in, block_best, false);
    /* the step's tag, and which half of tagged_acc its proj sums use (read before this block writes anything; block 0
     * adds 1 as the step ends, after every block's outputs have reached it) */
    const unsigned epoch = __ldcg(a.epoch), tag = step_tag(epoch);
    long long *const counted_acc = a.tagged_acc + (long long)(epoch & 1) * L * C;
    __syncthreads();
    /* no barrier: the step zeroes the other half of its sums, for the next step (the step before used it) */
    long long *const next_acc = a.tagged_acc + (long long)((epoch + 1) & 1) * L * C;
    for (long long k = (long long)blockIdx.x * STEP_THREADS + threadIdx.x; k < (long long)L * C;
         k += (long long)gridDim.x * STEP_THREADS)
        next_acc[k] = 0;
    plan_ring_by_head(a, layers, ring, plan);
    __syncthreads();
    if (ring.is_producer()) {
        ring.init();
        ring.request(PACED_FIRST_LINEARS);
    }
    __syncthreads(); /* the mbarriers are initialised before any thread waits on one */

    for (int i = 0; i < P; ++i) {
        if (i < 5 * L && i % 5 == PHASE_PROJ) { /* done in the attention phase */
            ++trace.phase;
            continue;
        }
        const bool attention = i < 5 * L && i % 5 == PHASE_ATTENTION;
        const bool from_ring = !attention && i < 5 * L;
        LinearPhase d;
        LinearShare share;
        bool one_pass = false; /* the LM head's LayerNorm, in one pass */
        bool folded = false;   /* QKV's or fc's LayerNorm, folded into the weights */
        if (!attention) {
            d = describe_phase(a, layers, i);
            if (i % 5 == PHASE_FCPROJ) d.resid = a.att; /* x + proj, as fc's rows left it */
            share = share_of<T>(d.w, d.N, d.K, d.epilogue != DECODE_LOGITS_ARGMAX);
            folded = d.ln_w && i < 5 * L;
            one_pass = !folded && d.ln_w != NULL;
            prefetch_epilogue<T, ROWS>(share, pre, d.bias, (const T *)d.resid, d.N, M,
                                       folded ? d.bias + d.N : NULL); /* the folded weights' sums */
            if (one_pass) prefetch_ln_chunks<T>(pre, d.ln_w, d.ln_b, d.K);
        }
        if (i > 0) trace.enter(); /* the rows wait for their own words */
        if (attention) { /* the block's head's attention into rows, times its slice of proj */
            const decode_layer_weights &W = layers[i / 5];
            const int j = 4 * (i / 5) + 1;
            int head; /* -1: a block past G·H, with no head */
            const LinearShare proj = proj_head_share(a, W.proj_heads, &head);
            if (head >= 0) attention_head_tagged(a, in, (const T *)W.k_pool, (const T *)W.v_pool, i / 5, head, rows, tag);
            __syncthreads(); /* the head's outputs are in rows */
            trace.mark(2);
            ring.wait(j);
            long long *acc = counted_acc + (long long)(i / 5) * C;
            if (head >= 0) proj_head_dots(proj, ring, j, rows, [&](int n, float part) { add_counted(acc, n, part); });
            trace.mark(3);
            __syncthreads(); /* every read of proj's weights is done: they go back */
            if (ring.is_producer()) ring.give_back();
        } else {
            if (i % 5 == PHASE_FC) { /* x + proj's bias + the heads' sums (the LayerNorm is folded) */
                const LinearShare fcproj = share_of<T>(layers[i / 5].fcproj_wt, C, 4 * C, true);
                stage_proj_sum_rows_tagged(a, layers[i / 5].proj_b, counted_acc + (long long)(i / 5) * C,
                                           tagged_x(a, i / 5), tag, rows, fcproj.n0, fcproj.n0 + fcproj.outs);
            } else if (one_pass) { /* the LM head's row, then its LayerNorm in place */
                stage_tagged_rows(tagged_x(a, L), rows, d.K, tag);
                stage_layernorm_rows<T, ROWS, true>(rows, rows, M, d.K, pre, a);
            } else if (d.src) { /* QKV's x, fc-proj's hidden layer */
                stage_tagged_rows(i % 5 == PHASE_QKV ? tagged_x(a, i / 5) : tagged_hidden(a, i / 5), rows, d.K, tag);
            } else { /* the first QKV's row: the embedding (block 0 also writes it to x's tagged words) */
                for (int e = threadIdx.x; e < C; e += STEP_THREADS) {
                    const float v = load((const T *)a.wte, (long long)step_token(a, 0) * C + e) +
                                    load((const T *)a.wpe, (long long)__ldg(a.positions) * C + e);
                    store(rows, e, v);
                    if (blockIdx.x == 0) store_tagged(tagged_x(a, 0) + e, v, tag);
                }
                __syncthreads();
            }
            trace.mark(2);
            const bool head = d.epilogue == DECODE_LOGITS_ARGMAX;
            if (from_ring) {
                if (ring.is_producer()) ring.request(paced_request_end(d.linear, i % 5));
                /* QKV's and fc's (K = 768), their statistics included, wait for their weights themselves */
                if (share.S == 1 && share.chunks == 32 * LOADS_FIRST_LANE_CHUNKS) {
                    run_phase_ring_loads_first(share, ring, d.linear, rows, partial, folded ? ln_stats : NULL);
                } else {
                    if (folded && threadIdx.x / 32 == STATS_WARP) row_statistics(rows, d.K, ln_stats);
                    ring.wait(d.linear);
                    run_phase_ring<T, ROWS>(share, ring, d.linear, rows, d.K, partial);
                }
            } else {
                if (ring.is_producer()) ring.request();
                run_head_ring_ffma<T, ROWS>(share, ring, 4 * L, rows, d.K, best, a);
            }
            trace.mark(3);
            if (!head)
                finish_phase_tagged(d.epilogue, share, partial, pre, d.bias, d.N, a, in, d.k_pool, d.v_pool,
                                    folded ? ln_stats : NULL,
                                    i % 5 == PHASE_QKV ? tagged_qkv(a, i / 5)
                                    : i % 5 == PHASE_FC ? tagged_hidden(a, i / 5)
                                                        : tagged_x(a, i / 5 + 1),
                                    tag);
        }
        if (i + 1 < P) trace.leave();
        if (from_ring && ring.is_producer()) ring.give_back();
    }
    argmax_to_step<ROWS>(a, block_best, threadIdx.x % 32, best);
    /* the next step's tag, and the keys the next queued step raises (this step read its tokens there) zeroed. Block 0
     * gets here only after every block's last fc-proj outputs have reached it, so every block has read this step's
     * epoch and tokens (the first things it did) */
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) atomicAdd(a.epoch, 1u);
        if (threadIdx.x < M && a.prev_best) a.prev_best[threadIdx.x] = 0;
    }
    trace.mark(1);
}

/** @brief The launch state of v5's kernel. */
static StepLaunch &tagged_launch()
{
    static StepLaunch s;
    step_static_smem(decode_step_tagged, s);
    return s;
}

/** @brief Why v5's kernel cannot take these arguments (proj_heads.cuh's contract, a block size that is a power of 2, its
 *         buffers), or NULL. */
static const char *tagged_step_refused(wb_dtype dtype, const decode_step_args *a, int cc, int sms)
{
    if (const char *why = merged_step_refused(dtype, a, cc, sms)) return why;
    if (a->block_size & (a->block_size - 1)) return "decode step with tagged rows: needs a block size that is a power of 2";
    if (!a->tagged || !a->tagged_acc || !a->epoch) return "decode step with tagged rows: needs tagged, tagged_acc, epoch";
    return NULL;
}

size_t gpt2_step_tagged_smem(wb_dtype dtype, const decode_step_args *a)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (tagged_step_refused(dtype, a, cc, sms)) return 0;
    return merged_ring_offset(a, sms) + (size_t)ring_largest_share(dtype, a, sms) * 16 +
           tagged_launch().static_smem;
}

const char *gpt2_step_tagged(wb_dtype dtype, const decode_step_args *a)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (const char *why = tagged_step_refused(dtype, a, cc, sms)) return why;
    decode_step_args args = *a;
    args.barrier = NULL; /* none: v5 meets no barrier */
    /* no zero of the keys inside the step, which meets no barrier: nothing would order it before the LM head's atomics
     * (engine_generate's queued v5 steps zero them for the step after) */
    if (!a->best_zeroed) WB_CUDA_CHECK(cudaMemsetAsync(a->best, 0, (size_t)a->M * sizeof *a->best, cudaStreamPerThread));
    return launch_ring_step(decode_step_tagged, tagged_launch(), args, merged_ring_offset(a, sms),
                            ring_largest_share(dtype, a, sms), false, "launch of decode_step_tagged");
}

/* ------------------------------------------------------------------ v5's set-up (host) */

/** @brief v5's own state: its layer table and what it points to beyond the engine's, and its buffers. */
struct TaggedState {
    decode_layer_weights *layers; /**< [L] on the device: QKV's and fc's weights and biases folded (the engine's),
                                       proj's by head */
    void **owned;                 /**< [L] proj by head, to free */
    unsigned *tagged;             /**< the tagged rows (decode_step_args.tagged), zeroed once: tag 0 is no step's */
    long long *tagged_acc;        /**< proj's counted sums, zeroed once */
    unsigned *epoch;              /**< the steps' counter */
};

extern "C" const char *gpt2_tagged_setup(gpt2_engine *e, const gpt2_model *m)
{
    (void)m; /* QKV's and fc's folded weights are the engine's (v2's batch path reads them too) */
    const int L = e->cfg.n_layer, C = e->cfg.C, H = e->cfg.n_head, d = C / H;
    TaggedState *s = (TaggedState *)calloc(1, sizeof *s);
    decode_layer_weights *t = (decode_layer_weights *)malloc((size_t)L * sizeof *t);
    if (s) s->owned = (void **)calloc((size_t)L, sizeof(void *));
    if (!s || !t || !s->owned) return free(t), free(s ? s->owned : NULL), free(s), "out of host memory";
    e->one_row_state = s;
    WB_CUDA_CHECK(cudaMemcpy(t, e->d_layers, (size_t)L * sizeof *t, cudaMemcpyDeviceToHost)); /* the engine's table */
    for (int l = 0; l < L; ++l) {
        /* proj_wt ([C][C], each output's C inputs) by head, [H][C][64]: head h's 64 inputs of every output, one 2-D
         * copy a head */
        s->owned[l] = wb_device_alloc((size_t)C * C * sizeof(__half), "proj weight by head");
        for (int h = 0; h < H; ++h)
            WB_CUDA_CHECK(cudaMemcpy2D((char *)s->owned[l] + (size_t)h * C * d * sizeof(__half),
                                       (size_t)d * sizeof(__half),
                                       (const char *)e->proj_wt[l] + (size_t)h * d * sizeof(__half),
                                       (size_t)C * sizeof(__half), (size_t)d * sizeof(__half), (size_t)C,
                                       cudaMemcpyDeviceToDevice));
        t[l].qkv_wt = e->qkv_wt_folded[l], t[l].qkv_b = e->qkv_b_folded[l];
        t[l].fc_wt = e->fc_wt_folded[l], t[l].fc_b = e->fc_b_folded[l];
        t[l].proj_heads = s->owned[l];
    }
    s->layers = (decode_layer_weights *)wb_device_alloc((size_t)L * sizeof *t, "v5's layer table");
    WB_CUDA_CHECK(cudaMemcpy(s->layers, t, (size_t)L * sizeof *t, cudaMemcpyHostToDevice));
    free(t);
    s->tagged = (unsigned *)wb_device_alloc_zeroed((size_t)DECODE_TAGGED_WORDS(L, C) * sizeof(unsigned), "tagged rows");
    s->tagged_acc = (long long *)wb_device_alloc_zeroed((size_t)DECODE_TAGGED_ACC(L, C) * sizeof(long long), "proj's counted sums");
    s->epoch = (unsigned *)wb_device_alloc_zeroed(sizeof(unsigned), "steps' counter");
    return NULL;
}

extern "C" void gpt2_tagged_args(const gpt2_engine *e, decode_step_args *a)
{
    const TaggedState *s = (const TaggedState *)e->one_row_state;
    a->layers = s->layers, a->tagged = s->tagged, a->tagged_acc = s->tagged_acc, a->epoch = s->epoch;
}

extern "C" void gpt2_tagged_free(gpt2_engine *e)
{
    TaggedState *s = (TaggedState *)e->one_row_state;
    for (int i = 0; s->owned && i < e->cfg.n_layer; ++i) WB_CUDA_CHECK(cudaFree(s->owned[i]));
    void *d[] = {s->layers, s->tagged, s->tagged_acc, s->epoch};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i) WB_CUDA_CHECK(cudaFree(d[i]));
    free(s->owned), free(s);
    e->one_row_state = NULL;
}
