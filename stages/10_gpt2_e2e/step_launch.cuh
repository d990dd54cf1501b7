/**
 * @file stages/10_gpt2_e2e/step_launch.cuh
 * @brief The host side of the persistent decode steps (v3-v5): the
 *        contract every variant checks, the launch state asked of the runtime
 *        once per kernel, the ring's size, and the cooperative launch.
 */
#ifndef STAGE10_STEP_LAUNCH_CUH
/** @brief Include guard. */
#define STAGE10_STEP_LAUNCH_CUH

#include "cuda_check.h"
#include "decode_step.cuh"
#include "device.h" /* wb_current_gpu, wb_current_smem_per_block */


/** @brief Why no persistent step takes these sizes (every variant's contract), or NULL. */
static const char *step_args_refused(const decode_step_args *a)
{
    if (a->M < 1 || a->M > DECODE_MAX_ROWS) return "persistent decode step: needs 1 <= M <= 8 sequences";
    if (a->H < 1 || a->C != a->H * DECODE_STEP_HEAD_DIM) return "persistent decode step: needs heads of 64 (C = 64·H)";
    if (a->C > ROWS_ONE_PASS_MAX_K) return "persistent decode step: needs C <= 768 (a warp normalises a row in registers)";
    if (a->L < 1 || a->V < 1 || a->ldy < a->V || a->max_pages < 1 || a->block_size < 1)
        return "persistent decode step: needs L, V, max_pages, block_size >= 1 and ldy >= V";
    return NULL;
}

/** @brief What the runtime was told about one kernel instantiation: asked once per size, not on every step. */
struct StepLaunch {
    size_t asked_smem;  /**< the dynamic shared memory its limit was raised to */
    int per_sm;         /**< blocks an SM holds at that size */
    size_t static_smem; /**< its static shared memory (0: not asked yet) */
};

/** @brief The static shared memory of `kernel` (its __shared__ arrays), asked of the runtime once. */
template <typename Kernel>
static size_t step_static_smem(Kernel kernel, StepLaunch &s)
{
    if (!s.static_smem) {
        cudaFuncAttributes attr;
        WB_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
        s.static_smem = attr.sharedSizeBytes ? attr.sharedSizeBytes : 1;
    }
    return s.static_smem;
}

/** @brief A step kernel's instantiation for T and ROWS as a type: Kernel<T, ROWS>::kernel() is its __global__. */
typedef void (*step_kernel_fn)(decode_step_args);

/** @brief The launch state of the instantiation K (one per instantiation), its static shared memory asked once. */
template <typename K>
static StepLaunch &step_launch_state()
{
    static StepLaunch s;
    step_static_smem(K::kernel(), s);
    return s;
}

/** @brief Call f(kernel, launch state) with the instantiation of Kernel<T, ROWS> that takes M rows (1, 2, 4, 8). */
template <template <typename, int> class Kernel, typename T, typename F>
static auto with_step_rows(int M, F f)
{
    switch (decode_rows_for(M)) {
    case 1: return f(Kernel<T, 1>::kernel(), step_launch_state<Kernel<T, 1>>());
    case 2: return f(Kernel<T, 2>::kernel(), step_launch_state<Kernel<T, 2>>());
    case 4: return f(Kernel<T, 4>::kernel(), step_launch_state<Kernel<T, 4>>());
    default: return f(Kernel<T, 8>::kernel(), step_launch_state<Kernel<T, 8>>());
    }
}

/** @brief The same, for the storage type of `dtype`. */
template <template <typename, int> class Kernel, typename F>
static auto with_step_kernel(wb_dtype dtype, int M, F f)
{
    return dtype == WB_F16 ? with_step_rows<Kernel, __half>(M, f) : with_step_rows<Kernel, float>(M, f);
}

/**
 * @brief v4, v5: the ring takes the shared memory the rest of the block
 *        leaves: from `offset` (step_ring_offset) to the GPU's limit, less
 *        the static arrays; in whole 128-byte lines when `lines` (the tensor
 *        cores' fragments keep their banks where a row wraps). Sets
 *        args->ring_chunks and *smem; NULL, or why it does not hold `largest`
 *        chunks (ring_largest_share).
 */
static const char *size_ring(decode_step_args *args, size_t offset, size_t static_smem, unsigned largest, bool lines,
                             size_t *smem)
{
    const size_t limit = wb_current_smem_per_block(), used = offset + static_smem;
    args->ring_chunks = limit > used ? (unsigned)((limit - used) / 16) : 0;
    if (lines) args->ring_chunks &= ~7u;
    if (args->ring_chunks < largest)
        return "persistent decode step with the weight ring: one block's share of a linear does not fit in the shared "
               "memory the rows leave (fewer sequences do)";
    *smem = offset + (size_t)args->ring_chunks * 16;
    return NULL;
}

/**
 * @brief A cooperative launch of one instantiation: one block per SM, all
 *        resident (the grid barrier's premise: no block waits for one that
 *        never starts). Before it, the counter of v3, v4's grid barrier is
 *        zeroed (unless the caller did: engine_generate zeroes a queue's in
 *        one memset).
 */
template <typename Kernel>
static const char *launch_step(Kernel kernel, StepLaunch &s, const decode_step_args &args, size_t smem,
                               const char *name)
{
    int sms;
    wb_current_gpu(NULL, &sms);
    if (smem != s.asked_smem) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s.per_sm, kernel, STEP_THREADS, smem));
        s.asked_smem = smem;
    }
    if (s.per_sm < 1) return "persistent decode step: one block of 256 threads does not fit on an SM";
    if (args.barrier && !args.barrier_zeroed)
        WB_CUDA_CHECK(cudaMemsetAsync(args.barrier, 0, sizeof(unsigned), cudaStreamPerThread));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute cooperative;
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    cfg.gridDim = dim3((unsigned)sms), cfg.blockDim = dim3(STEP_THREADS), cfg.dynamicSmemBytes = smem;
    cfg.stream = cudaStreamPerThread, cfg.attrs = &cooperative, cfg.numAttrs = 1;
    WB_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args));
    const cudaError_t err = cudaGetLastError(); /* WB_CHECK_LAUNCH, with the kernel's name as an argument */
    if (err != cudaSuccess) wb_cuda_fail(err, name, __FILE__, __LINE__);
    return NULL;
}

/** @brief v4, v5's launch: the ring sized (size_ring), then launch_step. */
template <typename Kernel>
static const char *launch_ring_step(Kernel kernel, StepLaunch &s, decode_step_args args, size_t offset, unsigned largest,
                                    bool lines, const char *name)
{
    size_t smem;
    if (const char *why = size_ring(&args, offset, s.static_smem, largest, lines, &smem)) return why;
    return launch_step(kernel, s, args, smem, name);
}

#endif /* STAGE10_STEP_LAUNCH_CUH */
