/** @file gpu_hold.cu @brief A kernel that keeps the GPU busy for a while (the timer's stand-in for the L2 flush). */
#include "timing.h"

#include "cuda_check.h"
#include "gpu_clock.cuh"

/** @brief One thread that returns once `ns` nanoseconds of the GPU's clock have passed. */
__global__ void wb_hold_kernel(unsigned long long ns)
{
    unsigned long long start = wb_global_ns();
    while (wb_global_ns() - start < ns) {
    }
}

extern "C" void wb_hold_gpu(unsigned long long ns)
{
    wb_hold_kernel<<<1, 1, 0, cudaStreamPerThread>>>(ns);
    WB_CHECK_LAUNCH("wb_hold_kernel");
}
