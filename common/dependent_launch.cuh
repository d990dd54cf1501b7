/**
 * @file dependent_launch.cuh
 * @brief Programmatic dependent launch (sm_90): a kernel launched as a
 *        dependent of the one before it in the stream starts while that one
 *        still runs, does what does not depend on it, and waits only before
 *        reading what it wrote. Stage 10's decode step launches its linears
 *        and stage 09's attention this way.
 */
#ifndef WB_DEPENDENT_LAUNCH_CUH
#define WB_DEPENDENT_LAUNCH_CUH

#include <cuda_runtime.h>

/**
 * @brief In the kernel: let the next kernel in the stream start launching now,
 *        then wait until the kernel before this one has finished and its
 *        writes are visible. Whatever runs before this call must not read what
 *        the kernel before writes. Launched without the attribute (or below
 *        sm_90, where the instructions do not exist) it does nothing.
 */
static __device__ __forceinline__ void wb_dependent_launch_sync()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/** @brief A launch configuration with its one attribute (cudaLaunchKernelEx reads both). */
typedef struct {
    cudaLaunchConfig_t config; /**< pass &config to cudaLaunchKernelEx */
    cudaLaunchAttribute attr;  /**< programmatic stream serialisation, when asked */
} wb_launch_config;

/**
 * @brief On the host: a launch on the per-thread default stream, as a
 *        programmatic dependent of the kernel before when `dependent` is set
 *        (the kernel must call wb_dependent_launch_sync before reading that
 *        kernel's output), an ordinary launch otherwise.
 */
static inline cudaLaunchConfig_t *wb_launch_config_init(wb_launch_config *l, dim3 grid, dim3 block, size_t smem,
                                                        int dependent)
{
    l->config = cudaLaunchConfig_t{};
    l->config.gridDim = grid;
    l->config.blockDim = block;
    l->config.dynamicSmemBytes = smem;
    l->config.stream = cudaStreamPerThread;
    l->attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    l->attr.val.programmaticStreamSerializationAllowed = 1;
    l->config.attrs = &l->attr;
    l->config.numAttrs = dependent ? 1 : 0;
    return &l->config;
}

#endif /* WB_DEPENDENT_LAUNCH_CUH */
