/**
 * @file common/gpu_clock.cuh
 * @brief The GPU's own clock, for device code that measures time (stage 10's step trace, the timer's hold).
 */
#ifndef WB_GPU_CLOCK_CUH
/** @brief Include guard. */
#define WB_GPU_CLOCK_CUH

/** @brief The GPU's clock in nanoseconds (%globaltimer), the same on every SM. */
static __device__ __forceinline__ unsigned long long wb_global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#endif
