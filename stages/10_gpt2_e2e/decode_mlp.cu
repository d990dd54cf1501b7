/**
 * @file stages/10_gpt2_e2e/decode_mlp.cu
 * @brief v7: v6's step with each block's slice of the MLP in one phase, fc →
 *        GELU → fc-proj with no wait between them: two waits a layer (fp16,
 *        1 row, sm_90).
 *
 * v6's layer is four phases: QKV, attention with proj, fc, fc-proj; and each
 * phase waits for the words the one before wrote. But the MLP splits by
 * hidden unit as attention splits by head (Megatron's split, inside one GPU):
 * y = Σ_k GELU(x·W_fc[:, k] + b_k)·W_fcproj[k, :], a sum over the 3072
 * hidden units k. A block that computes hidden units k0 … k1 (its share of fc)
 * can multiply them at once by their rows of fc-proj's weights and leave a
 * part of every one of the C outputs; no other block needs its hidden units.
 * So v7's layer is three phases and two waits:
 *
 *     QKV         waits for x after the MLP before: every block's part counted in
 *     attention   waits for its head's q, k, v only (v6's)
 *       + proj      adds a part of every output (v6's counted sums)
 *     MLP         waits for x after attention: every head's part counted in;
 *                 fc for its hidden units, GELU, their rows of fc-proj: a part
 *                 of every output, added to the MLP's counted sums
 *
 * The residual stream never goes through memory as a row: every block keeps
 * its own copy of x in shared memory (fp32) and adds the two sums to it as
 * it stages the next phase's row. The MLP's sums count their parts as proj's
 * do, with more bits for the count (132 parts, one a block): a part goes in
 * as part·2^20·2^16 + 1, and a row waits until the low 8 bits say gridDim.x.
 * Integer addition is associative, so the sums are the same bits in
 * whatever order the 132 blocks' atomics land: the same tokens every run.
 */
#include "tagged_rows.cuh"

/** @brief The MLP's counted part: part·2^20 shifted left past 16 bits, and a count of 1 in the low 8; a part out of
 *         range (or NaN) adds 1 + 256 instead, no value: bits 8-15 flag the row. */
static __device__ __forceinline__ void add_counted_mlp(long long *acc, float part)
{
    const bool in_range = fabsf(part) < DECODE_MLP_PART_MOST; /* false for NaN too */
    const unsigned long long fixed = (unsigned long long)(in_range ? __float2ll_rn(part * DECODE_MLP_FIXED_ONE) : 0);
    atomicAdd(reinterpret_cast<unsigned long long *>(acc), (fixed << 16) + (in_range ? 1 : 257));
}

/**
 * @brief The row after the MLP of layer l: x (the block's copy) + fc-proj's bias + the sum of every block's part,
 *        polled until all gridDim.x parts are counted in; kept in x (fp32) and staged as the next phase's row (fp16).
 *        A flagged part makes its column NaN.
 */
static __device__ void stage_mlp_sum_rows(const decode_step_args &a, const float *fcproj_b, const long long *acc,
                                          float *x, __half *rows)
{
    constexpr int R = DECODE_MLP_COPIES;
    for (int c = threadIdx.x * 2; c < a.C; c += STEP_THREADS * 2) {
        const float2 b = __ldg(reinterpret_cast<const float2 *>(fcproj_b + c)); /* asked for before the poll */
        long long v0s = 0, v1s = 0;
        bool flagged = false;
#pragma unroll
        for (int r = 0; r < R; ++r) { /* copy r: the parts of blocks r, r + R, … */
            const long long parts = ((long long)gridDim.x - r + R - 1) / R;
            longlong2 s;
            do {
                s = load_relaxed2(acc + (long long)r * a.C + c);
            } while ((s.x & 255) != parts || (s.y & 255) != parts);
            flagged |= ((s.x >> 8) & 255) != 0 || ((s.y >> 8) & 255) != 0;
            v0s += s.x >> 16, v1s += s.y >> 16;
        }
        const float nan = __int_as_float(0x7fffffff);
        const float v0 = flagged ? nan : x[c] + b.x + (float)v0s / DECODE_MLP_FIXED_ONE;
        const float v1 = flagged ? nan : x[c + 1] + b.y + (float)v1s / DECODE_MLP_FIXED_ONE;
        x[c] = v0, x[c + 1] = v1;
        reinterpret_cast<__half2 *>(rows)[c / 2] = __floats2half2_rn(v0, v1);
    }
    __syncthreads();
}

/**
 * @brief The row after attention of layer l: x + proj's bias + the heads' counted sums (stage_proj_sum_rows_tagged's
 *        poll and arithmetic), with x the block's own copy instead of tagged words; kept in x and staged as the MLP's
 *        row.
 */
static __device__ void stage_proj_sum_rows_kept(const decode_step_args &a, const float *proj_b, const long long *acc,
                                                float *x, __half *rows)
{
    const long long H = a.H;
    for (int c = threadIdx.x * 4; c < a.C; c += STEP_THREADS * 4) {
        const float4 b = __ldg(reinterpret_cast<const float4 *>(proj_b + c));
        longlong2 s01, s23;
        do {
            s01 = load_relaxed2(acc + c), s23 = load_relaxed2(acc + c + 2);
        } while (!((s01.x & 15) == H && (s01.y & 15) == H && (s23.x & 15) == H && (s23.y & 15) == H));
        const long long sum[4] = {s01.x, s01.y, s23.x, s23.y};
        const float bias[4] = {b.x, b.y, b.z, b.w};
        bool flagged = false;
#pragma unroll
        for (int k = 0; k < 4; ++k) flagged |= (sum[k] >> 4 & 15) != 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float v = flagged ? __int_as_float(0x7fffffff)
                                    : x[c + k] + bias[k] + (float)(sum[k] >> 8) / DECODE_PROJ_FIXED_ONE;
            x[c + k] = v;
            rows[c + k] = __float2half_rn(v);
        }
    }
    __syncthreads();
}

/**
 * @brief The block's hidden units (`outs` of them, GELU'd, in `hidden`) times their rows of fc-proj's weights (linear
 *        j in the ring: [outs][C], each unit's C weights contiguous): a part of each of the C outputs, added to its
 *        counted sum in `acc`. Thread t takes the 8 outputs of chunk t of a row, every unit.
 */
static __device__ void mlp_slice_dots(const WeightRing &ring, int j, const float *hidden, int outs, int C,
                                      long long *acc)
{
    constexpr int VEC = Vec16<__half>::N;
    const int chunks = C / VEC, c = threadIdx.x;
    if (c >= chunks) return;
    const unsigned from = ring.start[j % RING_LINEARS];
    float part[VEC] = {};
    for (int k = 0; k < outs; ++k) {
        float w[VEC];
        unpack16(ring.at(from, (unsigned)(k * chunks + c)), w, __half());
        const float h = hidden[k];
#pragma unroll
        for (int v = 0; v < VEC; ++v) part[v] = fmaf(h, w[v], part[v]);
    }
#pragma unroll
    for (int v = 0; v < VEC; ++v) add_counted_mlp(acc + c * VEC + v, part[v]);
}

/**
 * @brief v7: the step as v6's, with the MLP in one phase a block: three phases and two waits a layer. The residual
 *        stream stays in each block's shared memory (x, fp32); the phases that need it whole (QKV's and the MLP's
 *        rows, the LM head's) poll the counted sums of the phase before and add them to it.
 */
__global__ void __launch_bounds__(STEP_THREADS, 1) decode_step_mlp(decode_step_args a)
{
    using T = __half;
    constexpr int ROWS = 1;
    extern __shared__ __align__(16) unsigned char smem[];
    const int C = a.C, M = a.M, L = a.L, P = 5 * L + 1;
    decode_layer_weights *layers = reinterpret_cast<decode_layer_weights *>(smem); /* [L] */
    T *rows = reinterpret_cast<T *>(layers + L);            /* [C] a phase's row (v6's [4C]: the rest is x) */
    float *x = reinterpret_cast<float *>(rows + C);         /* [C] the block's copy of the residual stream */
    float *partial = reinterpret_cast<float *>(rows + 4 * C); /* [units]: dot products, then the hidden units */
    int *tables = reinterpret_cast<int *>(partial + step_max_units(C, gridDim.x, false)); /* [max_pages] */
    __shared__ uint64_t ring_bars[RING_LINEARS];
    __shared__ unsigned ring_start[RING_LINEARS];
    const int plan_entries = ring_plan_entries(L, a.V, gridDim.x, sizeof(T), true);
    RingPlan *plan = reinterpret_cast<RingPlan *>(smem + step_plan_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x, false));
    WeightRing ring = {reinterpret_cast<uint4 *>(smem + step_ring_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x,
                                                                         false, plan_entries)),
                       a.ring_chunks, ring_bars, ring_start, plan, 4 * L, 0, 0, 0, 0, true, RING_PRODUCER_LAST_WARP};
    __shared__ StepInputs in;
    __shared__ unsigned long long block_best[ROWS];
    __shared__ float2 ln_stats[ROWS]; /* the row's (mean, 1/σ), for the epilogue (row_statistics) */
    TaggedTrace trace = {{a.trace, 0, P}};
    trace.mark(0);
    Prefetched pre;
    unsigned long long best = 0;
    load_step_inputs<ROWS>(a, layers, tables, in, block_best, false);
    const unsigned epoch = __ldcg(a.epoch), tag = step_tag(epoch);
    const long long half = (long long)L * C, parity = epoch & 1, R = DECODE_MLP_COPIES;
    long long *const proj_acc = a.tagged_acc + parity * half, *const mlp_acc = a.mlp_acc + parity * half * R;
    __syncthreads();
    /* no barrier: the step zeroes the other halves of its sums, for the next step (the step before used them) */
    for (long long k = (long long)blockIdx.x * STEP_THREADS + threadIdx.x; k < half * R; k += (long long)gridDim.x * STEP_THREADS) {
        if (k < half) a.tagged_acc[(1 - parity) * half + k] = 0;
        a.mlp_acc[(1 - parity) * half * R + k] = 0;
    }
    plan_ring_by_head(a, layers, ring, plan);
    __syncthreads();
    const LinearShare fc = share_of<T>(layers[0].fc_wt, 4 * C, C, false); /* the block's hidden units, every layer */
    for (int l = threadIdx.x; l < L; l += STEP_THREADS) /* fc-proj's linear: those units' rows, [outs][C] */
        plan[4 * l + 3] = {reinterpret_cast<const uint4 *>(layers[l].fcproj_wt) + (long long)fc.n0 * (C / 8),
                           (unsigned)(fc.outs * (C / 8))};
    __syncthreads();
    if (ring.is_producer()) {
        ring.init();
        ring.request(PACED_FIRST_LINEARS);
    }
    __syncthreads(); /* the mbarriers are initialised before any thread waits on one */

    for (int l = 0; l < L; ++l) {
        const decode_layer_weights &W = layers[l];
        /* QKV: its row waits for x after the MLP before (every block's part), or is the embedding */
        if (l > 0) trace.phase = 5 * l, trace.mark(0);
        LinearPhase d = describe_phase(a, layers, 5 * l);
        LinearShare share = share_of<T>(d.w, d.N, d.K, true);
        prefetch_epilogue<T, ROWS>(share, pre, d.bias, NULL, d.N, M, NULL, NULL, d.K, d.bias + d.N);
        if (l > 0) {
            stage_mlp_sum_rows(a, layers[l - 1].fcproj_b, mlp_acc + (long long)(l - 1) * R * C, x, rows);
        } else {
            for (int e = threadIdx.x; e < C; e += STEP_THREADS) {
                x[e] = load((const T *)a.wte, (long long)step_token(a, 0) * C + e) +
                       load((const T *)a.wpe, (long long)__ldg(a.positions) * C + e);
                store(rows, e, x[e]);
            }
            __syncthreads();
        }
        trace.mark(2);
        if (ring.is_producer()) ring.request(paced_request_end(4 * l, PHASE_QKV));
        if (share.S == 1 && share.chunks == 32 * LOADS_FIRST_LANE_CHUNKS) {
            run_phase_ring_loads_first(share, ring, 4 * l, rows, partial, ln_stats);
        } else {
            if (threadIdx.x / 32 == STATS_WARP) row_statistics(rows, C, ln_stats);
            ring.wait(4 * l);
            run_phase_ring<T, ROWS>(share, ring, 4 * l, rows, C, partial);
        }
        trace.mark(3);
        finish_phase_tagged(DECODE_QKV_APPEND, share, partial, pre, d.bias, d.N, a, in, d.k_pool, d.v_pool, ln_stats,
                            tagged_qkv(a, l), tag);
        trace.leave();
        if (ring.is_producer()) ring.give_back();

        /* attention and proj (v6's phase): the head's q, k, v polled, its part of every output counted in */
        trace.phase = 5 * l + PHASE_ATTENTION, trace.mark(0);
        int head;
        const LinearShare proj = proj_head_share(a, W.proj_heads, &head);
        if (head >= 0) attention_head_tagged(a, in, (const T *)W.k_pool, (const T *)W.v_pool, l, head, rows, tag);
        __syncthreads(); /* the head's outputs are in rows */
        trace.mark(2);
        ring.wait(4 * l + 1);
        if (head >= 0)
            proj_head_dots(proj, ring, 4 * l + 1, rows, [&](int n, float part) { add_counted(proj_acc + (long long)l * C, n, part); });
        trace.mark(3);
        trace.leave(); /* every read of proj's weights is done: they go back */
        if (ring.is_producer()) ring.give_back();

        /* the MLP: its row waits for x after attention (every head's part); fc for the block's hidden units, GELU,
         * then their rows of fc-proj, a part of every output counted in. No wait between fc and fc-proj */
        trace.phase = 5 * l + PHASE_FC, trace.mark(0);
        const LinearShare fcs = share_of<T>(W.fc_wt, 4 * C, C, false); /* whole outputs: one partial sum each */
        prefetch_epilogue<T, ROWS>(fcs, pre, W.fc_b, NULL, 4 * C, M, NULL, NULL, C, W.fc_b + 4 * C);
        stage_proj_sum_rows_kept(a, W.proj_b, proj_acc + (long long)l * C, x, rows);
        trace.mark(2);
        if (ring.is_producer()) ring.request(paced_request_end(4 * l + 2, PHASE_FC));
        if (fcs.S == 1 && fcs.chunks == 32 * LOADS_FIRST_LANE_CHUNKS) {
            run_phase_ring_loads_first(fcs, ring, 4 * l + 2, rows, partial, ln_stats);
        } else {
            if (threadIdx.x / 32 == STATS_WARP) row_statistics(rows, C, ln_stats);
            ring.wait(4 * l + 2);
            run_phase_ring<T, ROWS>(fcs, ring, 4 * l + 2, rows, C, partial);
        }
        __syncthreads(); /* every warp's dot products are in, and every read of fc's weights is done */
        if (ring.is_producer()) {
            ring.give_back();
            ring.request(paced_request_end(4 * l + 3, PHASE_FCPROJ));
        }
        for (int o = threadIdx.x; o < fcs.outs; o += STEP_THREADS) { /* in place: the hidden units, GELU'd */
            const int n = fcs.n0 + o;
            float s = partial[o];
            const bool first = o == (int)threadIdx.x; /* what prefetch_epilogue fetched */
            s = fmaf(ln_stats[0].y, s - ln_stats[0].x * (first ? pre.colsum : __ldg(W.fc_b + 4 * C + n)),
                     first ? pre.bias : __ldg(W.fc_b + n));
            partial[o] = gelu_tanh(s);
        }
        __syncthreads();
        ring.wait(4 * l + 3);
        mlp_slice_dots(ring, 4 * l + 3, partial, fcs.outs, C, mlp_acc + ((long long)l * R + blockIdx.x % R) * C);
        trace.mark(3);
        trace.leave();
        if (ring.is_producer()) ring.give_back();
    }

    /* the LM head: its row waits for x after the last MLP, then ln_f in place, then the head through the ring */
    trace.phase = 5 * L, trace.mark(0);
    const LinearPhase d = describe_phase(a, layers, 5 * L);
    const LinearShare share = share_of<T>(d.w, d.N, d.K, false);
    prefetch_ln_chunks<T>(pre, d.ln_w, d.ln_b, d.K);
    stage_mlp_sum_rows(a, layers[L - 1].fcproj_b, mlp_acc + (long long)(L - 1) * R * C, x, rows);
    stage_layernorm_rows<T, ROWS, true>(rows, rows, M, C, pre, a);
    trace.mark(2);
    if (ring.is_producer()) ring.request();
    run_head_ring_ffma<T, ROWS>(share, ring, 4 * L, rows, C, best, a);
    trace.mark(3);
    argmax_to_step<ROWS>(a, block_best, threadIdx.x % 32, best);
    /* as v6's: the next step's tag, and the keys the next queued step raises zeroed. Block 0 gets here only after every
     * block's last MLP parts have reached it, so every block has read this step's epoch and tokens */
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) atomicAdd(a.epoch, 1u);
        if (threadIdx.x < M && a.prev_best) a.prev_best[threadIdx.x] = 0;
    }
    trace.mark(1);
}

/** @brief The launch state of v7's kernel. */
static StepLaunch &mlp_launch()
{
    static StepLaunch s;
    step_static_smem(decode_step_mlp, s);
    return s;
}

/** @brief Why v7's kernel cannot take these arguments (v6's reasons; its counts: at most 255 blocks), or NULL. */
static const char *mlp_step_refused(wb_dtype dtype, const decode_step_args *a, int cc, int sms)
{
    if (const char *why = tagged_step_refused(dtype, a, cc, sms)) return why;
    if (!a->mlp_acc) return "decode step with the MLP in one phase: needs mlp_acc";
    if (sms > 255) return "decode step with the MLP in one phase: at most 255 blocks (the count has 8 bits)";
    return NULL;
}

size_t gpt2_step_mlp_smem(wb_dtype dtype, const decode_step_args *a)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (mlp_step_refused(dtype, a, cc, sms)) return 0;
    return merged_ring_offset(a, sms) + (size_t)ring_largest_share(a->C, sms, 2, true) * 16 + mlp_launch().static_smem;
}

const char *gpt2_step_mlp(wb_dtype dtype, const decode_step_args *a)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (const char *why = mlp_step_refused(dtype, a, cc, sms)) return why;
    decode_step_args args = *a;
    args.barrier = NULL; /* none: v7 meets no barrier */
    if (!a->best_zeroed) WB_CUDA_CHECK(cudaMemsetAsync(a->best, 0, (size_t)a->M * sizeof *a->best, cudaStreamPerThread));
    return launch_ring_step(decode_step_mlp, mlp_launch(), args, merged_ring_offset(a, sms),
                            ring_largest_share(a->C, sms, 2, true), false, "launch of decode_step_mlp");
}
