/**
 * @file stages/10_gpt2_e2e/decode_ring.cu
 * @brief v4: v3's step with the linears' weights brought by the copy engine
 *        into a ring in each block's shared memory, phases ahead (sm_90;
 *        weight_ring.cuh says why and how).
 */
#include "step_launch.cuh"
#include "weight_ring.cuh"

/**
 * @brief v4: v3's kernel, but the linears' weights come from the block's
 *        WeightRing in shared memory: its producer requests the step's
 *        linears in order as the ring has room, and gives each back once its
 *        dot products are done. A phase waits for its linear's mbarrier
 *        instead of for loads it issued itself. The LM head's weights still
 *        stream through registers, as in v3: a block's share, 585 KB in fp16,
 *        is larger than the ring.
 */
template <typename T, int ROWS>
__global__ void __launch_bounds__(STEP_THREADS, 1) decode_step_ring(decode_step_args a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int C = a.C, M = a.M, L = a.L, P = 5 * L + 1;
    decode_layer_weights *layers = reinterpret_cast<decode_layer_weights *>(smem); /* [L] */
    T *rows = reinterpret_cast<T *>(layers + L);                                   /* [ROWS][4C] */
    float *partial = reinterpret_cast<float *>(rows + (long long)ROWS * 4 * C);   /* [units][ROWS] */
    int *tables = reinterpret_cast<int *>(partial + step_max_units(C, gridDim.x, false) * ROWS); /* [M][max_pages] */
    RingPlan *plan = reinterpret_cast<RingPlan *>(smem + step_plan_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x,
                                                                          false)); /* [4L] */
    __shared__ uint64_t ring_bars[RING_LINEARS];
    __shared__ unsigned ring_start[RING_LINEARS];
    WeightRing ring = {reinterpret_cast<uint4 *>(smem + step_ring_offset(sizeof(T), ROWS, C, L, a.max_pages, gridDim.x,
                                                                         false, 4 * L)),
                       a.ring_chunks, ring_bars, ring_start, plan, 4 * L, 0, 0, 0, 0, false, RING_PRODUCER};
    __shared__ StepInputs in;
    __shared__ unsigned long long block_best[ROWS];
    GridBarrier barrier = {{a.trace, 0, P}, a.barrier, 0};
    barrier.mark(0);
    uint4 slot[STEP_SLOTS]; /* the LM head's weights */
    StepCursor ahead;
    Prefetched pre;
    unsigned long long best = 0;
    load_step_inputs<ROWS>(a, layers, tables, in, block_best, true);
    __syncthreads();
    for (int j = threadIdx.x; j < 4 * L; j += STEP_THREADS) plan[j] = plan_linear<T>(a, layers, j);
    __syncthreads();
    if (ring.is_producer()) { /* the mbarriers, then the first copies: as many linears as fit */
        ring.init();
        ring.request();
    }
    __syncthreads(); /* the mbarriers are initialised before any thread waits on one */

    for (int i = 0; i < P; ++i) {
        const bool attention = i < 5 * L && i % 5 == PHASE_ATTENTION;
        const bool from_ring = !attention && i < 5 * L; /* the LM head streams through registers */
        LinearPhase d;
        LinearShare share;
        if (!attention) { /* before the barrier: everything that does not depend on the phase before */
            d = describe_phase(a, layers, i);
            share = share_of<T>(d.w, d.N, d.K, d.epilogue != DECODE_LOGITS_ARGMAX);
            if (!from_ring) issue_weights(share, slot, ahead);
            prefetch_epilogue<T, ROWS>(share, pre, d.bias, (const T *)d.resid, d.N, M);
            if (d.ln_w) prefetch_ln_chunks<T>(pre, d.ln_w, d.ln_b, d.K);
        }
        if (i > 0) barrier.wait();
        if (attention) {
            const decode_layer_weights &W = layers[i / 5];
            attention_phase<T, ROWS>(a, in, (const T *)W.k_pool, (const T *)W.v_pool);
        } else {
            if (d.ln_w)
                stage_layernorm_rows<T, ROWS>((const T *)d.src, rows, M, d.K, pre, a);
            else
                stage_step_rows<T, ROWS>((const T *)d.src, rows, M, d.K);
            barrier.mark(2);
            const bool head = d.epilogue == DECODE_LOGITS_ARGMAX;
            if (from_ring) {
                /* the producer requests as the rows are ready, not at the barrier (RING_PRODUCER says why) */
                if (ring.is_producer()) ring.request();
                ring.wait(d.linear);
                run_phase_ring<T, ROWS>(share, ring, d.linear, rows, d.K, partial);
            } else {
                run_phase<T, ROWS>(share, slot, ahead, rows, d.K, partial, head, best, a);
            }
            barrier.mark(3);
            if (!head)
                finish_phase<T, ROWS>(d.epilogue, share, partial, pre, d.bias, (T *)d.y, d.N, a, in, d.k_pool, d.v_pool);
        }
        if (i + 1 < P) barrier.arrive();
        if (from_ring && ring.is_producer()) ring.give_back(); /* read (finish_phase's __syncthreads): its bytes go back */
    }
    argmax_to_step<ROWS>(a, block_best, threadIdx.x % 32, best);
    barrier.mark(1);
}

/** @brief The shared memory before the ring (the rows, the plan of 4L linears), 16-byte aligned. */
static size_t ring_offset(wb_dtype dtype, const decode_step_args *a, int sms)
{
    return step_ring_offset(wb_dtype_bytes(dtype), decode_rows_for(a->M), a->C, a->L, a->max_pages, sms, false, 4 * a->L);
}

/** @brief decode_step_ring<T, ROWS> as a type, for with_step_kernel. */
template <typename T, int ROWS>
struct RingKernel {
    /** @brief The instantiation. */
    static step_kernel_fn kernel() { return decode_step_ring<T, ROWS>; }
};

size_t gpt2_step_ring_smem(wb_dtype dtype, const decode_step_args *a)
{
    int sms;
    wb_current_gpu(NULL, &sms);
    if (step_args_refused(a)) return 0;
    const size_t static_smem = with_step_kernel<RingKernel>(dtype, a->M, [](step_kernel_fn, StepLaunch &s) { return s.static_smem; });
    return ring_offset(dtype, a, sms) + (size_t)ring_largest_share(dtype, a, sms, false) * 16 +
           static_smem;
}

const char *gpt2_step_ring(wb_dtype dtype, const decode_step_args *a)
{
    if (const char *why = step_args_refused(a)) return why;
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (cc < 90) return "persistent decode step with the weight ring: needs sm_90 (the copy engine)";
    return with_step_kernel<RingKernel>(dtype, a->M, [&](step_kernel_fn kernel, StepLaunch &s) {
        return launch_ring_step(kernel, s, *a, ring_offset(dtype, a, sms),
                                ring_largest_share(dtype, a, sms, false), false,
                                "launch of decode_step_ring");
    });
}
