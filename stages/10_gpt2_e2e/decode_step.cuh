/**
 * @file stages/10_gpt2_e2e/decode_step.cuh
 * @brief What every persistent decode step (v3-v5) is made of: the step's
 *        phases, a block's share of a linear layer, the grid barrier, the
 *        input rows and their LayerNorm, the dot products from registers,
 *        the epilogues and attention. Each variant's file includes it and
 *        writes its own kernel from these pieces.
 *
 * A step is a list of 5·L + 1 phases: for each block of the model QKV (with
 * the LayerNorm before it and the K/V append after it), attention, proj, fc
 * (LayerNorm, GELU) and fc-proj (each linear with its residual add), then
 * the LM head (the final LayerNorm, the logits and their argmax). One block
 * per SM walks the list; a block's share of a linear is a run of its outputs
 * (share_of), and the blocks meet between phases at a grid barrier.
 */
#ifndef STAGE10_DECODE_STEP_CUH
/** @brief Include guard. */
#define STAGE10_DECODE_STEP_CUH

#include <cuda_fp16.h>
#include <math.h>

#include "02_reduction/block_reduce.cuh"      /* warp_allreduce: stage 02's butterfly */
#include "04_fused_gelu_linear/bias_gelu.cuh" /* gelu_tanh */
#include "argmax_key.h"
#include "dtype_device.cuh"
#include "fast_math.cuh" /* LOG2E: attention's exponentials in base 2 */
#include "gpt2.h"        /* GPT2_LN_EPS */
#include "gpu_clock.cuh" /* wb_global_ns: the step's trace */
#include "fresh_load.cuh" /* load_cg, load_fresh: what the step writes, read through L2 */
#include "kernels.h"

/** @brief Warps per block of the persistent step: one block per SM. 8 warps may use 255 registers each; with 16
 *         (128 registers) the step's state spilled to local memory, and every phase began by waiting for it. */
#define STEP_WARPS 8
/** @brief Threads per block. */
#define STEP_THREADS (STEP_WARPS * 32)
/** @brief 16-byte weight loads each lane keeps in flight (v3): 6 KB per warp, 48 KB per SM. */
#define STEP_SLOTS 12
/** @brief The widest row a warp normalises in registers, in one pass (stage_layernorm_rows): C = 768, GPT-2 small's
 *         width. The persistent steps take models up to it. */
#define ROWS_ONE_PASS_MAX_K 768
/** @brief A lane's values of such a row (k = (lane + 32·i)·VEC + v: whole 16-byte chunks). */
#define ROWS_ONE_PASS_PER_LANE (ROWS_ONE_PASS_MAX_K / 32)
/** @brief 16-byte loads of K (and of V) per lane per attention tile. */
#define STEP_ATT_PASSES 8

/**
 * @brief Most units (outputs × slices) of one block's share of a linear that
 *        go through shared memory: at most ⌈4C / blocks⌉ outputs (fc, the
 *        widest), or, when outputs are split into slices, at most one unit per
 *        warp. On tensor cores (v4 at 4-8 rows) every output is split over
 *        all the warps. The kernel lays out its shared memory with it, the
 *        host sizes it.
 */
static __host__ __device__ __forceinline__ int step_max_units(int C, int blocks, bool mma)
{
    int most_outputs = 4 * C / blocks + 1;
    if (mma) return most_outputs * STEP_WARPS;
    return most_outputs > STEP_WARPS ? most_outputs : STEP_WARPS;
}

/** @brief Dynamic shared memory of one block: the layer table, ROWS rows of 4C, the partial sums, the block tables
 *         (v4, v5's ring follows, from the next 16-byte boundary: step_ring_offset). */
static __host__ __device__ __forceinline__ size_t step_smem_bytes(size_t elem, int rows, int C, int L, int max_pages,
                                                                  int blocks, bool mma)
{
    return (size_t)L * sizeof(decode_layer_weights) + (size_t)rows * 4 * C * elem +
           (size_t)step_max_units(C, blocks, mma) * rows * 4 + (size_t)rows * max_pages * 4;
}

/** @brief Where v4, v5's plan of the ring (a RingPlan per linear) begins in the dynamic shared memory. */
static __host__ __device__ __forceinline__ size_t step_plan_offset(size_t elem, int rows, int C, int L, int max_pages,
                                                                   int blocks, bool mma)
{
    return (step_smem_bytes(elem, rows, C, L, max_pages, blocks, mma) + 15) & ~(size_t)15;
}

/** @brief Where v4, v5's weight ring begins in the dynamic shared memory, after a plan of `plan_entries` (4L, and
 *         v4's pieces of the LM head): 16-byte aligned, for the bulk copies. */
static __host__ __device__ __forceinline__ size_t step_ring_offset(size_t elem, int rows, int C, int L, int max_pages,
                                                                   int blocks, bool mma, int plan_entries)
{
    return step_plan_offset(elem, rows, C, L, max_pages, blocks, mma) + (size_t)plan_entries * 16; /* a RingPlan */
}

static_assert(sizeof(decode_layer_weights) % 16 == 0, "the rows after the layer table are read 16 bytes at a time");

/**
 * @brief The step's trace: with a trace buffer, thread 0 writes when its
 *        block starts each phase, has its rows ready, has its dot products
 *        done, and ends the phase (globaltimer, ns).
 */
struct StepTrace {
    unsigned long long *trace; /**< [blocks][phases][4] (start, end, rows ready, dot products done), or NULL */
    int phase;                 /**< the phase this block is in */
    int phases;                /**< phases in the step (the trace's second dimension) */
    /** @brief Trace point `which` of this phase (0 start, 1 end, 2 rows ready, 3 dot products done). */
    __device__ __forceinline__ void mark(int which)
    {
        if (trace && threadIdx.x == 0) trace[((long long)blockIdx.x * phases + phase) * 4 + which] = wb_global_ns();
    }
};

/**
 * @brief The grid barrier, split in two: arrive() adds one to a counter in
 *        global memory, wait() waits until it reaches (barriers so far) ×
 *        (blocks). Between them a block may do what does not depend on the
 *        other blocks — request the next phase's weights — so the loads are in
 *        flight while the slowest block finishes.
 *
 *        arrive() counts the block with a releasing add, so its writes are
 *        visible before the count is (it runs before the weight loads are
 *        issued: a release also waits for the thread's loads in flight).
 *        wait() polls with relaxed loads and ends with one acquiring load.
 *        Every read of data written inside the step goes through L2
 *        (__ldcg), so no block sees a stale L1 line. Only a cooperative
 *        launch guarantees that all blocks are resident, so that waiting
 *        cannot deadlock.
 */
struct GridBarrier : StepTrace {
    unsigned *count; /**< the arrivals so far, in global memory (zeroed before the launch) */
    unsigned target; /**< what the count reaches when every block has arrived at this barrier */
    /** @brief Count this block in: its writes of the phase are done and visible. */
    __device__ __forceinline__ void arrive()
    {
        target += gridDim.x;
        __syncthreads(); /* the block's writes of this phase are done */
        mark(1);
        if (threadIdx.x == 0) /* release: the block's writes before it are visible to whoever sees the count */
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
    }
    /** @brief Wait until every block has arrived, then start the next phase. */
    __device__ __forceinline__ void wait()
    {
        if (threadIdx.x == 0) {
            unsigned seen;
            do { /* relaxed polls: an acquiring load invalidates the SM's L1, every time */
                asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
            } while (seen < target);
            /* then one acquiring load (a fence would also wait for this thread's weight loads in flight) */
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
        }
        __syncthreads();
        ++phase;
        mark(0);
    }
};

/**
 * @brief A block's share of one linear layer: outputs n0 … n0 + outs − 1 of W
 *        ([N][K], a contiguous run of rows). With fewer outputs than warps,
 *        each output's K is split into S slices (a power of 2), so that every
 *        warp streams: unit u is output u / S, slice u % S (a shift and a
 *        mask), and slice s takes the lanes' 16-byte chunks (j·S + s)·32 +
 *        lane for j = 0, 1, … On tensor cores (v4), every output is split
 *        over all STEP_WARPS warps instead: slice w is warp w's 64-wide
 *        segments of K.
 */
struct LinearShare {
    const uint4 *w; /**< the block's first output's weights, as 16-byte chunks */
    int n0;         /**< the block's first output */
    int outs;       /**< its outputs */
    int S;          /**< slices per output (2^log2S) */
    int log2S;      /**< log2 of S */
    int units;      /**< outs · S: the warps take them in turn */
    int chunks;     /**< 16-byte chunks per output (K / elements per 16 bytes) */
};

/** @brief Block blockIdx.x's share of W [N][K]: split_k slices outputs over idle warps, every_warp (tensor cores)
 *         splits each over all of them. */
template <typename T>
static __device__ LinearShare share_of(const void *w_t, int N, int K, bool split_k, bool every_warp = false)
{
    LinearShare p;
    p.n0 = (int)((long long)N * blockIdx.x / gridDim.x);
    p.outs = (int)((long long)N * (blockIdx.x + 1) / gridDim.x) - p.n0;
    p.chunks = K / Vec16<T>::N;
    p.S = 1;
    p.log2S = 0;
    if (split_k && p.outs > 0) /* the most slices (a power of 2) that keep every warp busy and every slice at
                                * least one chunk per lane */
        while (p.outs << (p.log2S + 1) <= STEP_WARPS && 32 << (p.log2S + 1) <= p.chunks) ++p.log2S;
    if (every_warp)
        while (1 << p.log2S < STEP_WARPS) ++p.log2S;
    p.S = 1 << p.log2S;
    p.units = p.outs * p.S;
    p.w = reinterpret_cast<const uint4 *>(w_t) + (long long)p.n0 * p.chunks;
    return p;
}

/** @brief Where a warp is in its work: unit u (output o, slice s), round j of the slice's chunks. */
struct StepCursor {
    int u;      /**< the unit */
    int o;      /**< its output (within the block's share) */
    int s;      /**< its slice */
    int j;      /**< the round within the slice */
    int rounds; /**< the slice's rounds */
    /** @brief Move to the first round of `unit`. */
    __device__ __forceinline__ void start(const LinearShare &p, int unit)
    {
        u = unit, j = 0, o = u >> p.log2S, s = u & (p.S - 1); /* S a power of 2: no division */
        rounds = (p.chunks - s * 32 + (32 << p.log2S) - 1) >> (p.log2S + 5);
    }
    /** @brief Whether this is the unit's last round (its dot products are then complete). */
    __device__ __forceinline__ bool last_round() const { return j + 1 == rounds; }
    /** @brief The next round, or the warp's next unit (STEP_WARPS on). */
    __device__ __forceinline__ void advance(const LinearShare &p)
    {
        if (++j == rounds) start(p, u + STEP_WARPS);
    }
    /** @brief This lane's 16-byte chunk of the output's K in this round. */
    __device__ __forceinline__ int chunk(const LinearShare &p, int lane) const { return (j * p.S + s) * 32 + lane; }
    /** @brief This lane's 16 bytes of the step (zeros past the work or the row: no memory access). */
    __device__ __forceinline__ uint4 fetch(const LinearShare &p, int lane) const
    {
        int c = chunk(p, lane);
        return u < p.units && c < p.chunks ? __ldg(p.w + (long long)o * p.chunks + c) : make_uint4(0, 0, 0, 0);
    }
};

/** @brief What a phase's epilogue needs that the phase before does not write: requested before the barrier. */
struct Prefetched {
    float bias;   /**< the bias of this thread's output (output thread / ROWS, row thread % ROWS) */
    float colsum; /**< v5: the sum of that output's folded weights (decode_tagged.cu) */
    float resid;  /**< for a residual add, y's old value there */
    float chunk_gain[ROWS_ONE_PASS_PER_LANE];  /**< the LayerNorm gain at this lane's k of a row, in 16-byte chunks */
    float chunk_shift[ROWS_ONE_PASS_PER_LANE]; /**< the shift at the same k */
};

/** @brief Before the barrier (v3): each lane's first STEP_SLOTS 16-byte weight loads of the
 *         block's share `p`; the cursor then points past them. */
static __device__ __forceinline__ void issue_weights(const LinearShare &p, uint4 (&slot)[STEP_SLOTS], StepCursor &ahead)
{
    const int lane = threadIdx.x % 32;
    ahead.start(p, threadIdx.x / 32);
#pragma unroll
    for (int r = 0; r < STEP_SLOTS; ++r) {
        slot[r] = ahead.fetch(p, lane);
        ahead.advance(p);
    }
}

/**
 * @brief Before the barrier: what the phase's epilogue needs that the phase
 *        before does not write. This thread's output (thread / ROWS) and row
 *        (thread % ROWS): its bias (v5: and the folded weights' sum,
 *        `colsum`) and the old residual value.
 */
template <typename T, int ROWS>
static __device__ __forceinline__ void prefetch_epilogue(const LinearShare &p, Prefetched &pre, const float *bias,
                                                         const T *resid_y, int N, int M, const float *colsum = NULL)
{
    int o = threadIdx.x / ROWS, m = threadIdx.x % ROWS;
    pre.bias = pre.resid = 0.0f;
    if (o < p.outs && m < M) {
        if (bias) pre.bias = __ldg(bias + p.n0 + o);
        if (colsum) pre.colsum = __ldg(colsum + p.n0 + o); /* read only where it was set */
        if (resid_y) pre.resid = load_cg(resid_y + (long long)m * N + p.n0 + o); /* written in this step: not __ldg */
    }
}

/** @brief Before the barrier of a LayerNorm phase: this lane's gain and shift of each 16-byte chunk of a row it
 *         normalises (k = (lane + 32·i)·VEC + v; ln_w and ln_b are whole cudaMalloc'd arrays: 16-byte aligned). */
template <typename T>
static __device__ __forceinline__ void prefetch_ln_chunks(Prefetched &pre, const float *ln_w, const float *ln_b,
                                                          int K)
{
    constexpr int VEC = Vec16<T>::N;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < ROWS_ONE_PASS_PER_LANE / VEC; ++i) {
        const int k = (lane + 32 * i) * VEC;
#pragma unroll
        for (int v = 0; v < VEC; v += 4) {
            const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            const float4 g = k < K ? __ldg(reinterpret_cast<const float4 *>(ln_w + k + v)) : zero;
            const float4 b = k < K ? __ldg(reinterpret_cast<const float4 *>(ln_b + k + v)) : zero;
            float *gain = pre.chunk_gain + i * VEC + v, *shift = pre.chunk_shift + i * VEC + v;
            gain[0] = g.x, gain[1] = g.y, gain[2] = g.z, gain[3] = g.w;
            shift[0] = b.x, shift[1] = b.y, shift[2] = b.z, shift[3] = b.w;
        }
    }
}

/** @brief load_fresh with an L2 cache policy for the line (v4: the K and V past the kept layers, evict-first; sm_80). */
static __device__ __forceinline__ uint4 load_fresh_with_policy(const void *p, uint64_t policy)
{
#if __CUDA_ARCH__ >= 800
    uint4 v;
    asm("ld.global.cg.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(policy));
    return v;
#else
    return load_fresh(p);
#endif
}

/**
 * @brief The phase's input rows, after the barrier: M rows of K from `src`
 *        (written by the phase before) into shared memory, rows M..ROWS−1
 *        zero. All 16-byte loads are issued at once: one trip to L2.
 */
template <typename T, int ROWS>
static __device__ void stage_step_rows(const T *src, T *rows, int M, int K)
{
    constexpr int VEC = Vec16<T>::N;
#pragma unroll 4
    for (int i = threadIdx.x; i < ROWS * K / VEC; i += STEP_THREADS) {
        int m = i * VEC / K;
        reinterpret_cast<uint4 *>(rows)[i] = m < M ? load_fresh(reinterpret_cast<const uint4 *>(src) + i) : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
}

/** @brief Sequence m's token in this step: from the host, or (steps queued on the GPU, engine_generate) the argmax
 *         key of the step before, a kernel before. */
static __device__ __forceinline__ int step_token(const decode_step_args &a, int m)
{
    return a.prev_best ? gpt2_argmax_key_token(__ldg(a.prev_best + m), a.V) : __ldg(a.tokens + m);
}

/**
 * @brief A LayerNorm's two sums over a row, of d = x − x₀ (x₀ the row's first
 *        value). Shifted by x₀ so that var = E[d²] − E[d]² is never a
 *        difference of two large numbers when the mean is far from zero.
 */
struct RowSums {
    float x0; /**< the row's first value */
    float s1; /**< Σ d */
    float s2; /**< Σ d² */
    /** @brief Add N of the row's values (this lane's). */
    template <int N>
    __device__ __forceinline__ void add(const float (&v)[N])
    {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const float d = v[i] - x0;
            s1 += d, s2 = fmaf(d, d, s2);
        }
    }
    /** @brief The warp's lanes' sums, in every lane. */
    __device__ __forceinline__ void warp_reduce() { s1 = warp_allreduce<SumOp>(s1), s2 = warp_allreduce<SumOp>(s2); }
    /** @brief (mean, 1/σ) of the row of K values. */
    __device__ __forceinline__ float2 mean_rstd(int K) const
    {
        const float mean_d = s1 / K;
        return make_float2(x0 + mean_d, rsqrtf(fmaxf(s2 / K - mean_d * mean_d, 0.0f) + GPT2_LN_EPS));
    }
};

/** @brief One warp's LayerNorm sums over a staged row (shared memory, K a multiple of 16 bytes), in every lane. */
template <typename T>
static __device__ __forceinline__ RowSums warp_row_sums(const T *row, int K)
{
    constexpr int VEC = Vec16<T>::N;
    RowSums r = {load(row, 0), 0.0f, 0.0f};
    for (int c = threadIdx.x % 32; c < K / VEC; c += 32) {
        float v[VEC];
        unpack16(*reinterpret_cast<const uint4 *>(row + c * VEC), v, T());
        r.add(v);
    }
    r.warp_reduce();
    return r;
}

/**
 * @brief A LayerNorm phase's input rows (K <= ROWS_ONE_PASS_MAX_K) in one
 *        pass: warp m loads row m of `src` (written by the phase before:
 *        through L2; FROM_SHARED: a row already in shared memory) into
 *        registers, reduces its two sums with one butterfly, normalises in
 *        registers and writes the row to shared memory, rounded to T as v1's
 *        LayerNorm kernel rounds its output. Rows M .. ROWS − 1 are zero. One
 *        __syncthreads, at the end: staging the rows, their statistics and
 *        normalising them as three passes over shared memory would cost two
 *        more on the step's chain. With src NULL (the first QKV) row m is
 *        the embedding of sequence m, wte's row of its token plus wpe's of
 *        its position, summed in registers (block 0 writes the sum to x, the
 *        residual stream).
 */
template <typename T, int ROWS, bool FROM_SHARED = false>
static __device__ void stage_layernorm_rows(const T *src, T *rows, int M, int K, const Prefetched &pre,
                                            const decode_step_args &a)
{
    constexpr int VEC = Vec16<T>::N, CHUNKS = ROWS_ONE_PASS_PER_LANE / VEC; /* a lane's chunks of a row */
    const int lane = threadIdx.x % 32;
    for (int m = threadIdx.x / 32; m < ROWS; m += STEP_WARPS) {
        const uint4 *in, *position = NULL;
        uint4 *x = NULL;
        if (src) {
            in = reinterpret_cast<const uint4 *>(src + (long long)m * K);
        } else {
            const int token = m < M ? step_token(a, m) : 0, pos = m < M ? __ldg(a.positions + m) : 0;
            in = reinterpret_cast<const uint4 *>((const T *)a.wte + (long long)token * K);
            position = reinterpret_cast<const uint4 *>((const T *)a.wpe + (long long)pos * K);
            if (blockIdx.x == 0) x = reinterpret_cast<uint4 *>((T *)a.x + (long long)m * K);
        }
        uint4 *out = reinterpret_cast<uint4 *>(rows + (long long)m * K);
        float v[CHUNKS][VEC];
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) { /* every load first: one trip to L2 */
            const int c = lane + 32 * i;
            const bool live = m < M && c * VEC < K;
            unpack16(live ? (FROM_SHARED ? in[c] : load_fresh(in + c)) : make_uint4(0, 0, 0, 0), v[i], T());
            if (position && live) { /* the embedding: plus wpe, rounded to T */
                float p[VEC];
                unpack16(__ldg(position + c), p, T());
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[i][e] += p[e];
                const uint4 sum = pack16(v[i], T());
                unpack16(sum, v[i], T());
                if (x) x[c] = sum;
            }
        }
        if (m >= M) { /* a row of the tile with no sequence: zeros */
            for (int c = lane; c * VEC < K; c += 32) out[c] = make_uint4(0, 0, 0, 0);
            continue;
        }
        RowSums r = {__shfl_sync(0xffffffffu, v[0][0], 0), 0.0f, 0.0f}; /* x₀: lane 0's first value */
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i)
            if ((lane + 32 * i) * VEC < K) r.add(v[i]);
        r.warp_reduce();
        const float2 st = r.mean_rstd(K);
        const float mean = st.x, rstd = st.y;
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
            const int c = lane + 32 * i;
            if (c * VEC >= K) break;
            float y[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                y[e] = (v[i][e] - mean) * rstd * pre.chunk_gain[i * VEC + e] + pre.chunk_shift[i * VEC + e];
            out[c] = pack16(y, T());
        }
    }
    __syncthreads();
}

/** @brief One 16-byte chunk of an output's weights (chunk c of its K) times the ROWS staged rows, added to acc:
 *         the inner step of run_phase (weights from a register slot) and run_phase_ring (from the ring). */
template <typename T, int ROWS>
static __device__ __forceinline__ void multiply_chunk(uint4 w16, const T *rows, int K, int c, float (&acc)[ROWS])
{
    constexpr int VEC = Vec16<T>::N;
    float w[VEC];
    unpack16(w16, w, T());
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        float x[VEC];
        unpack16(*reinterpret_cast<const uint4 *>(rows + m * K + c * VEC), x, T());
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[m] = fmaf(w[v], x[v], acc[m]);
    }
}

/** @brief The warp's dot products of one output, one per row (acc[m], a part per lane), reduced by the butterfly:
 *         lane m gets row m's. */
template <int ROWS>
static __device__ __forceinline__ float reduce_rows_to_lanes(const float (&acc)[ROWS])
{
    float mine = 0.0f;
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        float s = warp_allreduce<SumOp>(acc[m]);
        if (threadIdx.x % 32 == m) mine = s;
    }
    return mine;
}

/** @brief The LM head's logit of row m, output n: written, and kept in `best` if it is the row's largest so far. */
template <typename T>
static __device__ __forceinline__ void keep_logit(float logit, int m, int n, unsigned long long &best,
                                                  const decode_step_args &a)
{
    store((T *)a.logits, (long long)m * a.ldy + n, logit);
    unsigned long long key = gpt2_argmax_key(logit, n);
    best = key > best ? key : best;
}

/** @brief The step's own inputs, in shared memory for the whole step. */
struct StepInputs {
    int lens[DECODE_MAX_ROWS];        /**< each sequence's context length, the new token included */
    long long slots[DECODE_MAX_ROWS]; /**< each sequence's slot in the page pools */
    const int *tables;                /**< [M][max_pages], shared memory */
};

/**
 * @brief The step's start, in every block: the layer table and the block
 *        tables into shared memory, the lengths and slots into `in`, the
 *        block's argmax keys zeroed; block 0 writes the tokens it was fed
 *        (engine_generate reads them back) and, when `zero_best`, zeroes the
 *        step's argmax keys (read only by the LM head, many barriers on).
 *        The caller's __syncthreads follows.
 */
template <int ROWS>
static __device__ __forceinline__ void load_step_inputs(const decode_step_args &a, decode_layer_weights *layers,
                                                        int *tables, StepInputs &in, unsigned long long *block_best,
                                                        bool zero_best)
{
    for (int i = threadIdx.x; i < a.L * (int)(sizeof(decode_layer_weights) / 8); i += STEP_THREADS)
        reinterpret_cast<unsigned long long *>(layers)[i] = __ldg(reinterpret_cast<const unsigned long long *>(a.layers) + i);
    for (int i = threadIdx.x; i < a.M * a.max_pages; i += STEP_THREADS) tables[i] = __ldg(a.tables + i);
    if (threadIdx.x < a.M) in.lens[threadIdx.x] = __ldg(a.lens + threadIdx.x), in.slots[threadIdx.x] = __ldg(a.slots + threadIdx.x);
    if (threadIdx.x < ROWS) block_best[threadIdx.x] = 0;
    if (threadIdx.x == 0) in.tables = tables;
    if (blockIdx.x == 0 && threadIdx.x < a.M) {
        if (zero_best) a.best[threadIdx.x] = 0;
        if (a.fed_tokens) a.fed_tokens[threadIdx.x] = step_token(a, threadIdx.x);
    }
}

/** @brief The step's end: the block's best argmax key per row (held by lane best_row), then one atomic per row. */
template <int ROWS>
static __device__ __forceinline__ void argmax_to_step(const decode_step_args &a, unsigned long long *block_best,
                                                      int best_row, unsigned long long best)
{
    if (best_row < a.M) atomicMax(&block_best[best_row], best);
    __syncthreads();
    if (threadIdx.x < a.M) atomicMax(a.best + threadIdx.x, block_best[threadIdx.x]);
}

/**
 * @brief Run a linear phase after its barrier (the input rows staged), the
 *        weights from registers (v3): each warp consumes its
 *        slots in order and refills each with the load STEP_SLOTS steps
 *        further on, so loads stay in flight while it multiplies. A unit's
 *        finished dot products (one per row, reduced by the butterfly) go to
 *        shared memory (`partial`) for finish_phase; or, for the LM head
 *        (`direct`, never split), lane m writes row m's logit and keeps its
 *        best (value, token) key in `best`.
 */
template <typename T, int ROWS>
static __device__ __forceinline__ void run_phase(const LinearShare &p, uint4 (&slot)[STEP_SLOTS], StepCursor &ahead,
                                                 const T *rows, int K, float *partial, bool direct,
                                                 unsigned long long &best, const decode_step_args &a)
{
    const int lane = threadIdx.x % 32;
    StepCursor use;
    use.start(p, threadIdx.x / 32);
    float acc[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; ++m) acc[m] = 0.0f;
    while (use.u < p.units) {
#pragma unroll
        for (int r = 0; r < STEP_SLOTS; ++r) {
            if (use.u >= p.units) break;
            int c = use.chunk(p, lane);
            if (c < p.chunks) multiply_chunk<T, ROWS>(slot[r], rows, K, c, acc);
            slot[r] = ahead.fetch(p, lane); /* the slot is free: the load STEP_SLOTS steps on */
            ahead.advance(p);
            if (use.last_round()) { /* the unit is done: its dot products, one per row */
                float mine = 0.0f;
#pragma unroll
                for (int m = 0; m < ROWS; ++m) {
                    float s = warp_allreduce<SumOp>(acc[m]);
                    if (lane == m) mine = s;
                    acc[m] = 0.0f;
                }
                if (direct) {
                    if (lane < a.M) keep_logit<T>(mine, lane, p.n0 + use.o, best, a);
                } else if (lane < ROWS) {
                    partial[use.u * ROWS + lane] = mine;
                }
            }
            use.advance(p);
        }
    }
}

/**
 * @brief The block's epilogue of a linear phase: each (output, row)'s slices
 *        added, its bias, then the epilogue (kernels.h: decode_epilogue): the
 *        K/V append of QKV into the page pools, GELU, or the residual add.
 */
template <typename T, int ROWS>
static __device__ __forceinline__ void finish_phase(decode_epilogue epi, const LinearShare &p, const float *partial,
                                                    const Prefetched &pre, const float *bias, T *y, int N,
                                                    const decode_step_args &a, const StepInputs &in, void *k_pool,
                                                    void *v_pool)
{
    __syncthreads(); /* every warp's partial sums are in */
    for (int i = threadIdx.x; i < p.outs * ROWS; i += STEP_THREADS) {
        int o = i / ROWS, m = i % ROWS, n = p.n0 + o;
        if (m >= a.M) continue;
        float s = 0.0f;
        for (int sl = 0; sl < p.S; ++sl) s += partial[(o * p.S + sl) * ROWS + m];
        bool mine = i == (int)threadIdx.x; /* the first pass: what prefetch_epilogue fetched */
        s += mine ? pre.bias : bias ? __ldg(bias + n) : 0.0f;
        if (epi == DECODE_GELU) {
            store(y, (long long)m * N + n, gelu_tanh(s));
        } else if (epi == DECODE_RESIDUAL) {
            store(y, (long long)m * N + n, (mine ? pre.resid : load_cg(y + (long long)m * N + n)) + s);
        } else { /* DECODE_QKV_APPEND: q to its rows, k and v to their slots in the page pools */
            int C = a.C, part = n / C, c = n - part * C, d = DECODE_STEP_HEAD_DIM;
            if (part == 0) {
                store((T *)a.q, (long long)m * C + c, s);
            } else { /* k and v also to the pools, for the steps after */
                long long slot = in.slots[m], page = slot / a.block_size, offset = slot % a.block_size;
                store((T *)(part == 1 ? k_pool : v_pool), ((page * a.H + c / d) * a.block_size + offset) * d + c % d, s);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Attention through the paged cache (stage 09's layout)                     */
/* ------------------------------------------------------------------------ */

/** @brief Tokens one warp of attention reads a pass: STEP_ATT_PASSES loads a lane, each of 32 / (64 / N) tokens (a
 *         token's 64 values are 64 / N lanes' 16-byte chunks): 16 in fp32, 32 in fp16. */
template <typename T>
static __host__ __device__ constexpr int attention_warp_tokens()
{
    return STEP_ATT_PASSES * (32 / (DECODE_STEP_HEAD_DIM / Vec16<T>::N));
}

/** @brief The factor that takes a softmax part kept at its own max `m` to the common max `most` (0 for a part with no
 *         tokens, whose max is −∞). */
static __device__ __forceinline__ float rescale_to_max(float m, float most)
{
    return m == -INFINITY ? 0.0f : exp2f(m - most);
}

/**
 * @brief One warp's online softmax over one (sequence, head) pair's tokens:
 *        the query, the running max `mx`, sum `l` and output `acc` of the
 *        lane's chunk of the head (lanes of one chunk hold different tokens
 *        until `finish` adds them).
 */
template <typename T>
struct AttentionWarp {
    static constexpr int D = DECODE_STEP_HEAD_DIM; /**< the head's width */
    static constexpr int EP = Vec16<T>::N;         /**< elements per 16-byte chunk */
    static constexpr int CHUNKS = D / EP;          /**< chunks per token's row: the lanes that share a token */
    static constexpr int TPP = 32 / CHUNKS;        /**< tokens per pass of the warp */
    static constexpr int TILE = attention_warp_tokens<T>(); /**< tokens per warp per tile: STEP_ATT_PASSES · TPP */
    float qv[EP];  /**< the query's chunk, times log2(e)/√d */
    float acc[EP]; /**< Σ p·v over the tokens so far, at the running max */
    float mx;      /**< the running max of the scores (base 2) */
    float l;       /**< Σ p */
    /** @brief Start with the query's 16 bytes of this lane's chunk. */
    __device__ __forceinline__ void start(uint4 q16)
    {
        unpack16(q16, qv, T());
        const float scale_log2 = LOG2E * rsqrtf((float)D);
#pragma unroll
        for (int k = 0; k < EP; ++k) qv[k] *= scale_log2, acc[k] = 0.0f;
        mx = -INFINITY, l = 0.0f;
    }
    /** @brief One tile: pass p's token t0 + p·TPP + lane / CHUNKS has K row kr[p] and V row vr[p] (any value past
     *         len: its score is −∞). */
    __device__ __forceinline__ void tile(const uint4 (&kr)[STEP_ATT_PASSES], const uint4 (&vr)[STEP_ATT_PASSES], int t0,
                                         int len)
    {
        const int sub = threadIdx.x % 32 / CHUNKS;
        float s[STEP_ATT_PASSES], tile_max = -INFINITY;
#pragma unroll
        for (int p = 0; p < STEP_ATT_PASSES; ++p) {
            float kf[EP], x = 0.0f;
            unpack16(kr[p], kf, T());
#pragma unroll
            for (int k = 0; k < EP; ++k) x += qv[k] * kf[k];
#pragma unroll
            for (int off = 1; off < CHUNKS; off *= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
            s[p] = t0 + p * TPP + sub < len ? x : -INFINITY;
            tile_max = fmaxf(tile_max, s[p]);
        }
#pragma unroll
        for (int off = CHUNKS; off < 32; off *= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
        float m_new = fmaxf(mx, tile_max), base = m_new == -INFINITY ? 0.0f : m_new, alpha = exp2f(mx - base);
        l *= alpha;
#pragma unroll
        for (int k = 0; k < EP; ++k) acc[k] *= alpha;
        mx = m_new;
#pragma unroll
        for (int p = 0; p < STEP_ATT_PASSES; ++p) {
            float vf[EP], pr = exp2f(s[p] - base);
            unpack16(vr[p], vf, T());
            l += pr;
#pragma unroll
            for (int k = 0; k < EP; ++k) acc[k] += pr * vf[k];
        }
    }
    /**
     * @brief The warps merged in shared memory: each leaves its (max, sum,
     *        output), then thread k < 64 rescales them to the block's max and
     *        adds, and hands (k, output k, max, sum) to `out` (which divides,
     *        or keeps the part unnormalised). Ends with the __syncthreads
     *        that frees the slots for the next pair.
     */
    template <typename Out>
    __device__ __forceinline__ void finish(Out out)
    {
        __shared__ float warp_m[STEP_WARPS], warp_l[STEP_WARPS], warp_o[STEP_WARPS][D];
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % CHUNKS, sub = lane / CHUNKS;
#pragma unroll
        for (int off = CHUNKS; off < 32; off *= 2) { /* the lanes of one chunk held different tokens */
            l += __shfl_xor_sync(0xffffffffu, l, off);
#pragma unroll
            for (int k = 0; k < EP; ++k) acc[k] += __shfl_xor_sync(0xffffffffu, acc[k], off);
        }
        if (lane == 0) warp_m[warp] = mx, warp_l[warp] = l;
        if (sub == 0)
#pragma unroll
            for (int k = 0; k < EP; ++k) warp_o[warp][c * EP + k] = acc[k];
        __syncthreads();
        if (threadIdx.x < D) { /* the warps merged: rescaled to the block's max, added */
            float M = -INFINITY, L = 0.0f, o = 0.0f;
            for (int w = 0; w < STEP_WARPS; ++w) M = fmaxf(M, warp_m[w]);
            for (int w = 0; w < STEP_WARPS; ++w) {
                float f = rescale_to_max(warp_m[w], M);
                L += f * warp_l[w], o += f * warp_o[w][threadIdx.x];
            }
            out((int)threadIdx.x, o, M, L);
        }
        __syncthreads(); /* the merge has read the slots before the next pair writes them */
    }
};

/** @brief Where token t's row of head h starts in a page pool ([pages][H][bs][64]), its page from `table`. */
static __device__ __forceinline__ long long kv_row(const int *table, int t, int H, int h, int bs)
{
    return (((long long)table[t / bs] * H + h) * bs + t % bs) * DECODE_STEP_HEAD_DIM;
}

/** @brief One tile's K and V rows for this lane: pass p's token t0 + p·TPP + lane / CHUNKS, its chunk lane % CHUNKS,
 *         every load issued before any is used (zeros past len: no memory access); with `evict_first`, read with
 *         L2 policy `policy` (v4 at 5-8 rows). */
template <typename T>
static __device__ __forceinline__ void load_kv_tile(uint4 (&kr)[STEP_ATT_PASSES], uint4 (&vr)[STEP_ATT_PASSES],
                                                    const T *k_pool, const T *v_pool, const int *table, int t0,
                                                    int len, int H, int h, int bs, bool evict_first = false,
                                                    uint64_t policy = 0)
{
    using W = AttentionWarp<T>;
    const int c = threadIdx.x % 32 % W::CHUNKS, sub = threadIdx.x % 32 / W::CHUNKS;
#pragma unroll
    for (int p = 0; p < STEP_ATT_PASSES; ++p) {
        const int t = t0 + p * W::TPP + sub;
        kr[p] = vr[p] = make_uint4(0, 0, 0, 0);
        if (t < len) {
            const long long off = kv_row(table, t, H, h, bs) + c * W::EP;
            if (evict_first)
                kr[p] = load_fresh_with_policy(k_pool + off, policy), vr[p] = load_fresh_with_policy(v_pool + off, policy);
            else
                kr[p] = load_fresh(k_pool + off), vr[p] = load_fresh(v_pool + off);
        }
    }
}

/**
 * @brief The attention phase (v3): (sequence, head) pairs go to blocks in
 *        turn; in a block the 8 warps take tiles of the context in turn
 *        (stage 09's layout: each token's K row read whole by consecutive
 *        lanes, every lane's loads of the tile issued together), keep their
 *        own online softmax, and merge in shared memory — no partials in
 *        global memory, no second pass.
 */
template <typename T, int ROWS>
static __device__ void attention_phase(const decode_step_args &a, const StepInputs &in, const T *k_pool, const T *v_pool)
{
    using W = AttentionWarp<T>;
    const int warp = threadIdx.x / 32, c = threadIdx.x % 32 % W::CHUNKS, C = a.C;
    for (int pair = blockIdx.x; pair < a.M * a.H; pair += gridDim.x) {
        const int m = pair / a.H, h = pair - m * a.H, len = in.lens[m];
        W w;
        w.start(load_fresh((const T *)a.q + (long long)m * C + h * W::D + c * W::EP));
        for (int t0 = warp * W::TILE; t0 < len; t0 += STEP_WARPS * W::TILE) {
            uint4 kr[STEP_ATT_PASSES], vr[STEP_ATT_PASSES];
            load_kv_tile(kr, vr, k_pool, v_pool, in.tables + m * a.max_pages, t0, len, a.H, h, a.block_size);
            w.tile(kr, vr, t0, len);
        }
        w.finish([&](int k, float o, float, float L) { store((T *)a.att, (long long)m * C + h * W::D + k, o / L); });
    }
}

/* ------------------------------------------------------------------------ */
/* The phases                                                                */
/* ------------------------------------------------------------------------ */

/** @brief The phases of a step: five per block (QKV, attention, proj, fc, fc-proj), then the LM head. */
enum StepPhase { PHASE_QKV, PHASE_ATTENTION, PHASE_PROJ, PHASE_FC, PHASE_FCPROJ };

/** @brief What a linear phase multiplies, with what before and after. */
struct LinearPhase {
    decode_epilogue epilogue; /**< what happens to each output */
    const void *w;            /**< [N][K] */
    const float *bias;        /**< [N], or NULL */
    const float *ln_w;        /**< LayerNorm gain [K] before the multiply, or NULL */
    const float *ln_b;        /**< LayerNorm shift [K] */
    const void *src;          /**< the input rows [M][K]; NULL: the embedding (the first QKV) */
    void *y;                  /**< q, x (residual), hidden, or the logits */
    const void *resid;        /**< the residual's old values (x), or NULL */
    int N;                    /**< outputs per row */
    int K;                    /**< inputs per row */
    int linear;               /**< the step's linear number (4 per block): v3's L2 prefetch, v4, v5's ring */
    void *k_pool;             /**< the QKV phase's K page pool */
    void *v_pool;             /**< and V */
};

/** @brief Phase i of the step (not an attention phase). */
static __device__ __forceinline__ LinearPhase describe_phase(const decode_step_args &a,
                                                             const decode_layer_weights *layers, int i)
{
    const int C = a.C, l = i / 5;
    if (i == 5 * a.L) /* the LM head: wte [V][C] is already [N][K] */
        return {DECODE_LOGITS_ARGMAX, a.wte, NULL, a.lnf_w, a.lnf_b, a.x, a.logits, NULL, a.V, C, 4 * l, NULL, NULL};
    const decode_layer_weights &W = layers[l];
    switch (i % 5) {
    case PHASE_QKV:
        return {DECODE_QKV_APPEND, W.qkv_wt, W.qkv_b, W.ln1_w, W.ln1_b, i ? a.x : NULL, a.q, NULL, 3 * C, C, 4 * l,
                W.k_pool, W.v_pool};
    case PHASE_PROJ:
        return {DECODE_RESIDUAL, W.proj_wt, W.proj_b, NULL, NULL, a.att, a.x, a.x, C, C, 4 * l + 1, NULL, NULL};
    case PHASE_FC:
        return {DECODE_GELU, W.fc_wt, W.fc_b, W.ln2_w, W.ln2_b, a.x, a.hidden, NULL, 4 * C, C, 4 * l + 2, NULL, NULL};
    default:
        return {DECODE_RESIDUAL, W.fcproj_wt, W.fcproj_b, NULL, NULL, a.hidden, a.x, a.x, C, 4 * C, 4 * l + 3, NULL, NULL};
    }
}

/** @brief The phase of the step's linear number j (four per block): phases 0, 2, 3 and 4 of a block (attention is 1). */
static __device__ __forceinline__ int phase_of_linear(int j) { return 5 * (j / 4) + (j % 4 ? j % 4 + 1 : 0); }

#endif /* STAGE10_DECODE_STEP_CUH */
