/**
 * @file stages/10_gpt2_e2e/decode_persistent.cu
 * @brief v3: the whole decode step as one persistent kernel, its blocks
 *        meeting at grid barriers (runs on sm_75 and up).
 *
 * v2 made each linear one kernel, but a step is still 62 kernels, and each is
 * a chain of latencies — launch, wait for the kernel ahead, its input rows,
 * LayerNorm's reductions, the multiply, the epilogue's stores — around a few
 * hundred kilobytes of weights. v3 launches one kernel per step, one block
 * per SM, that stays resident and runs the step's phases in order (QKV,
 * attention, proj, fc, fc-proj for every block, then the LM head). Between
 * phases the blocks meet at a grid barrier (a counter in global memory),
 * which replaces a launch. What a phase does not need from the phase before
 * — its weights, biases, LayerNorm parameters, the residual it will add to —
 * each block requests *before* it waits at the barrier, so the weights
 * stream while the slowest block of the previous phase finishes.
 */
#include "step_launch.cuh"

/**
 * @brief v3: one decode step, one kernel. Every block walks the step's
 *        5·L + 1 phases: for each it requests what does not depend on the
 *        phase before (its first STEP_SLOTS weight loads, its biases,
 *        LayerNorm parameters and old residual values), waits at the grid
 *        barrier, stages its input rows (the embedding, for the first),
 *        normalised as they come where a LayerNorm comes first (a warp a
 *        row, in registers: stage_layernorm_rows), multiplies, applies
 *        the epilogue, and arrives at the next barrier. One loop, so the
 *        phase code exists once in the binary: written out phase by phase it
 *        was 25 000 instructions (400 KB), more than the instruction cache,
 *        and every phase waited for its own code.
 */
template <typename T, int ROWS>
__global__ void __launch_bounds__(STEP_THREADS, 1) decode_step_persistent(decode_step_args a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int C = a.C, M = a.M, L = a.L, P = 5 * L + 1;
    decode_layer_weights *layers = reinterpret_cast<decode_layer_weights *>(smem); /* [L] */
    T *rows = reinterpret_cast<T *>(layers + L);                                   /* [ROWS][4C] */
    float *partial = reinterpret_cast<float *>(rows + (long long)ROWS * 4 * C);   /* [units][ROWS] */
    int *tables = reinterpret_cast<int *>(partial + step_max_units(C, gridDim.x, false) * ROWS); /* [M][max_pages] */
    __shared__ StepInputs in;
    __shared__ unsigned long long block_best[ROWS];
    GridBarrier barrier = {{a.trace, 0, P}, a.barrier, 0};
    barrier.mark(0);
    uint4 slot[STEP_SLOTS];
    StepCursor ahead;
    Prefetched pre;
    unsigned long long best = 0;
    load_step_inputs<ROWS>(a, layers, tables, in, block_best, true);
    __syncthreads();

    for (int i = 0; i < P; ++i) {
        const bool attention = i < 5 * L && i % 5 == PHASE_ATTENTION;
        LinearPhase d;
        LinearShare share;
        if (!attention) { /* before the barrier: everything that does not depend on the phase before */
            d = describe_phase(a, layers, i);
            share = share_of<T>(d.w, d.N, d.K, d.epilogue != DECODE_LOGITS_ARGMAX);
            issue_weights(share, slot, ahead);
            prefetch_epilogue<T, ROWS>(share, pre, d.bias, (const T *)d.resid, d.N, M);
            if (d.ln_w) prefetch_ln_chunks<T>(pre, d.ln_w, d.ln_b, d.K);
        }
        if (i > 0) barrier.wait();
        if (attention) {
            const decode_layer_weights &W = layers[i / 5];
            attention_phase<T, ROWS>(a, in, (const T *)W.k_pool, (const T *)W.v_pool);
        } else {
            if (d.ln_w) /* the rows normalised as they are staged (the first QKV's: the embedding) */
                stage_layernorm_rows<T, ROWS>((const T *)d.src, rows, M, d.K, pre, a);
            else
                stage_step_rows<T, ROWS>((const T *)d.src, rows, M, d.K);
            barrier.mark(2);
            const bool head = d.epilogue == DECODE_LOGITS_ARGMAX;
            run_phase<T, ROWS>(share, slot, ahead, rows, d.K, partial, head, best, a);
            barrier.mark(3);
            if (!head)
                finish_phase<T, ROWS>(d.epilogue, share, partial, pre, d.bias, (T *)d.y, d.N, a, in, d.k_pool, d.v_pool);
        }
        if (i + 1 < P) barrier.arrive();
    }
    /* the LM head's argmax: lane m holds row m's best key of the block's outputs */
    argmax_to_step<ROWS>(a, block_best, threadIdx.x % 32, best);
    barrier.mark(1);
}

size_t gpt2_step_persistent_smem(wb_dtype dtype, const decode_step_args *a)
{
    int sms;
    wb_current_gpu(NULL, &sms);
    if (step_args_refused(a)) return 0;
    return step_smem_bytes(wb_dtype_bytes(dtype), decode_rows_for(a->M), a->C, a->L, a->max_pages, sms, false);
}

/** @brief decode_step_persistent<T, ROWS> as a type, for with_step_kernel. */
template <typename T, int ROWS>
struct PersistentKernel {
    /** @brief The instantiation. */
    static step_kernel_fn kernel() { return decode_step_persistent<T, ROWS>; }
};

const char *gpt2_step_persistent(wb_dtype dtype, const decode_step_args *a)
{
    if (const char *why = step_args_refused(a)) return why;
    const size_t smem = gpt2_step_persistent_smem(dtype, a);
    if (smem > wb_current_smem_per_block())
        return "persistent decode step: the rows do not fit in one block's shared memory (fewer sequences do)";
    return with_step_kernel<PersistentKernel>(dtype, a->M, [&](step_kernel_fn kernel, StepLaunch &s) {
        return launch_step(kernel, s, *a, smem, "launch of decode_step_persistent");
    });
}
