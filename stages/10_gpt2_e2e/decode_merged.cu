/**
 * @file stages/10_gpt2_e2e/decode_merged.cu
 * @brief v6: v5's step at 1 row (fp16) with attention and proj in one phase,
 *        proj's parts summed as they are stored (proj_heads.cuh says how):
 *        one phase and one barrier fewer a layer.
 *
 * The engine runs v6's kernel only in the steps whose context one pass of a
 * block's warps covers (256 tokens in fp16): past it, the head's attention,
 * one block a head, would read the context in two passes, where v5's phases
 * split it over the idle blocks, so those steps (and every step of 2-8
 * sequences) run v5's kernel. The host knows every step's lengths before it
 * launches the step, so it chooses.
 */
#include "proj_heads.cuh"
#include "step_launch.cuh"

/** @brief Layer `layer`'s row of proj_acc (its C sums, then the flag). */
static __device__ __forceinline__ long long *proj_acc_row(const decode_step_args &a, int layer)
{
    return a.proj_acc + (long long)layer * DECODE_PROJ_ACC_ROW(a.C);
}

/**
 * @brief Head h's attention (the one sequence's) into `out`, 64 values in
 *        shared memory: v3's attention phase for one pair, its output kept
 *        by the block for proj.
 */
static __device__ void attention_head(const decode_step_args &a, const StepInputs &in, const __half *k_pool,
                                      const __half *v_pool, int h, __half *out)
{
    using W = AttentionWarp<__half>;
    const int warp = threadIdx.x / 32, c = threadIdx.x % 32 % W::CHUNKS, len = in.lens[0];
    W w;
    w.start(load_fresh((const __half *)a.q + h * W::D + c * W::EP));
    for (int t0 = warp * W::TILE; t0 < len; t0 += STEP_WARPS * W::TILE) {
        uint4 kr[STEP_ATT_PASSES], vr[STEP_ATT_PASSES];
        load_kv_tile(kr, vr, k_pool, v_pool, in.tables, t0, len, a.H, h, a.block_size);
        w.tile(kr, vr, t0, len);
    }
    w.finish([&](int k, float o, float, float L) { store(out, k, o / L); });
}

/**
 * @brief The fixed-point part: `part` added into acc[n] as part·2^32, with
 *        one atomic. A part of 2^22 or more, or NaN, would not fit: it sets
 *        the row's flag, acc[C], and fc's rows make the row NaN rather than
 *        add a sum that wrapped round.
 */
static __device__ __forceinline__ void add_fixed_point(long long *acc, int C, int n, float part)
{
    if (!(fabsf(part) < DECODE_PROJ_PART_MOST)) atomicOr(reinterpret_cast<unsigned long long *>(acc + C), 1ull);
    const long long fixed = __float2ll_rn(part * DECODE_PROJ_FIXED_ONE); /* exact: a power of 2 */
    atomicAdd(reinterpret_cast<unsigned long long *>(acc + n), (unsigned long long)fixed);
}

/**
 * @brief fc's row before its LayerNorm: x plus proj's bias plus the heads'
 *        summed parts, acc[c]·2^-32 (what v5's proj epilogue adds), rounded
 *        to fp16 as the residual stream holds it, into rows[0 … C). The
 *        block also writes columns [n0, n1), its own outputs of fc-proj, to
 *        a.att: fc-proj's epilogue reads its residual there, before the
 *        barrier after fc (prefetch_epilogue), so each block reads only what
 *        it wrote itself; x is still being read by the other blocks. A
 *        thread sums 4 columns, its loads issued together (one trip to L2).
 *        A flagged row (a part out of range) is NaN.
 */
static __device__ void stage_proj_sum_rows(const decode_step_args &a, const float *proj_b, const long long *acc,
                                           __half *rows, int n0, int n1)
{
    const int C = a.C;
    for (int c = threadIdx.x * 4; c < C; c += STEP_THREADS * 4) {
        const longlong2 s01 = __ldcg(reinterpret_cast<const longlong2 *>(acc + c)),
                        s23 = __ldcg(reinterpret_cast<const longlong2 *>(acc + c + 2));
        const long long sum[4] = {s01.x, s01.y, s23.x, s23.y};
        const bool flagged = __ldcg(acc + C) != 0;
        const float4 b = __ldg(reinterpret_cast<const float4 *>(proj_b + c));
        float s[4] = {b.x, b.y, b.z, b.w}, x[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) x[k] = load_cg((const __half *)a.x + c + k);
#pragma unroll
        for (int k = 0; k < 4; ++k) s[k] += (float)sum[k] / DECODE_PROJ_FIXED_ONE;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float v = flagged ? __int_as_float(0x7fffffff) : x[k] + s[k];
            store(rows, c + k, v);
            if (c + k >= n0 && c + k < n1) store((__half *)a.att, c + k, v);
        }
    }
    __syncthreads();
}

/**
 * @brief v6: v5's kernel at 1 row in fp16, with each layer's attention and
 *        proj one phase. Block b computes head b / G's attention into its
 *        rows, multiplies it by its slice of proj's weights (which the ring
 *        brought, by head) and adds the parts into proj_acc; no proj phase,
 *        no barrier after attention. fc's rows are x + bias + the sums.
 */
__global__ void __launch_bounds__(STEP_THREADS, 1) decode_step_merged(decode_step_args a)
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
    const int plan_entries = ring_plan_entries(L, a.V, gridDim.x, sizeof(T), true);
    RingPlan *plan = reinterpret_cast<RingPlan *>(smem + step_plan_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x, false));
    WeightRing ring = {reinterpret_cast<uint4 *>(smem + step_ring_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x,
                                                                         false, plan_entries)),
                       a.ring_chunks, ring_bars, ring_start, plan, 4 * L, 0, 0, 0, 0, true, RING_PRODUCER_LAST_WARP};
    __shared__ StepInputs in;
    __shared__ unsigned long long block_best[ROWS];
    GridBarrier barrier = {{a.trace, 0, P}, a.barrier, 0};
    barrier.mark(0);
    Prefetched pre;
    unsigned long long best = 0;
    load_step_inputs<ROWS>(a, layers, tables, in, block_best, true);
    __syncthreads();
    /* the sums start at zero (the step before has read them, a kernel before); the barrier before the first
     * attention orders these stores before its atomics */
    for (long long k = (long long)blockIdx.x * STEP_THREADS + threadIdx.x; k < (long long)L * DECODE_PROJ_ACC_ROW(C);
         k += (long long)gridDim.x * STEP_THREADS)
        a.proj_acc[k] = 0;
    plan_ring_by_head(a, layers, ring, plan);
    __syncthreads();
    if (ring.is_producer()) {
        ring.init();
        ring.request(PACED_FIRST_LINEARS);
    }
    __syncthreads(); /* the mbarriers are initialised before any thread waits on one */

    for (int i = 0; i < P; ++i) {
        if (i < 5 * L && i % 5 == PHASE_PROJ) { /* done in the attention phase; no barrier */
            ++barrier.phase;
            continue;
        }
        const bool attention = i < 5 * L && i % 5 == PHASE_ATTENTION;
        const bool from_ring = !attention && i < 5 * L;
        LinearPhase d;
        LinearShare share;
        bool one_pass = false;
        if (!attention) {
            d = describe_phase(a, layers, i);
            if (i % 5 == PHASE_FCPROJ) d.resid = a.att; /* x + proj, as fc's rows left it */
            share = share_of<T>(d.w, d.N, d.K, d.epilogue != DECODE_LOGITS_ARGMAX);
            one_pass = d.ln_w != NULL; /* C <= ROWS_ONE_PASS_MAX_K: the launcher checks */
            prefetch_epilogue<T, ROWS>(share, pre, d.bias, (const T *)d.resid, d.N, M, NULL, NULL, d.K);
            if (one_pass) prefetch_ln_chunks<T>(pre, d.ln_w, d.ln_b, d.K);
        }
        if (i > 0) barrier.wait();
        if (attention) { /* the block's head's attention into rows, times its slice of proj */
            const decode_layer_weights &W = layers[i / 5];
            const int j = 4 * (i / 5) + 1;
            int head; /* -1: a block past G·H, with no head */
            const LinearShare proj = proj_head_share(a, W.proj_heads, &head);
            if (head >= 0) attention_head(a, in, (const T *)W.k_pool, (const T *)W.v_pool, head, rows);
            __syncthreads(); /* the head's outputs are in rows */
            barrier.mark(2);
            ring.wait(j);
            long long *acc = proj_acc_row(a, i / 5);
            if (head >= 0) proj_head_dots(proj, ring, j, rows, [&](int n, float part) { add_fixed_point(acc, C, n, part); });
            barrier.mark(3);
            __syncthreads(); /* every read of proj's weights is done: they go back */
            if (ring.is_producer()) ring.give_back();
        } else {
            if (i % 5 == PHASE_FC) { /* x + proj's bias + the heads' sums, then LayerNorm */
                const LinearShare fcproj = share_of<T>(layers[i / 5].fcproj_wt, C, 4 * C, true);
                stage_proj_sum_rows(a, layers[i / 5].proj_b, proj_acc_row(a, i / 5), rows, fcproj.n0,
                                    fcproj.n0 + fcproj.outs);
                stage_layernorm_rows<T, ROWS, true>(rows, rows, M, d.K, pre, a);
            } else if (one_pass) { /* QKV's and the LM head's rows (the first QKV's: the embedding) */
                stage_layernorm_rows<T, ROWS>((const T *)d.src, rows, M, d.K, pre, a);
            } else { /* fc-proj's hidden layer */
                stage_step_rows<T, ROWS>((const T *)d.src, rows, M, d.K);
            }
            barrier.mark(2);
            const bool head = d.epilogue == DECODE_LOGITS_ARGMAX;
            if (from_ring) {
                if (ring.is_producer()) ring.request(paced_request_end(d.linear, i % 5));
                ring.wait(d.linear);
                run_phase_ring<T, ROWS>(share, ring, d.linear, rows, d.K, partial);
            } else {
                if (ring.is_producer()) ring.request();
                run_head_ring_ffma<T, ROWS>(share, ring, 4 * L, rows, d.K, best, a);
            }
            barrier.mark(3);
            if (!head)
                finish_phase<T, ROWS>(d.epilogue, share, partial, pre, d.bias, (T *)d.y, d.N, a, in, d.k_pool, d.v_pool);
        }
        if (i + 1 < P) barrier.arrive();
        if (from_ring && ring.is_producer()) ring.give_back();
    }
    argmax_to_step<ROWS>(a, block_best, threadIdx.x % 32, best);
    barrier.mark(1);
}

/** @brief The launch state of v6's kernel. */
static StepLaunch &merged_launch()
{
    static StepLaunch s;
    step_static_smem(decode_step_merged, s);
    return s;
}

size_t gpt2_step_merged_smem(wb_dtype dtype, const decode_step_args *a)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (merged_step_refused(dtype, a, cc, sms) || !a->proj_acc) return 0;
    return merged_ring_offset(a, sms) + (size_t)ring_largest_share(a->C, sms, 2, true) * 16 + merged_launch().static_smem;
}

const char *gpt2_step_merged(wb_dtype dtype, const decode_step_args *a)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (const char *why = merged_step_refused(dtype, a, cc, sms)) return why;
    if (!a->proj_acc) return "decode step with attention and proj in one phase: needs proj_acc";
    return launch_ring_step(decode_step_merged, merged_launch(), *a, merged_ring_offset(a, sms),
                            ring_largest_share(a->C, sms, 2, true), false, "launch of decode_step_merged");
}
