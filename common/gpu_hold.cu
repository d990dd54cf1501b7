/**
 * @file gpu_hold.cu
 * @brief The timer's kernels: the L2 flush (a read-only sweep) and, where there is
 *        no flush, a kernel that keeps the GPU busy for a while instead.
 */
#include "timing.h"

#include <stdint.h>

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

/** @brief Written only if the sweep reads a value the buffer never holds: the loads must happen, the store never. */
__device__ unsigned wb_l2_sweep_sink;

/**
 * @brief Read every 16 bytes of `buf` (zeros) once. Each line it brings into L2 evicts one
 *        there; the previous run's dirty lines are written back now, during the sweep, and
 *        the L2 is left holding clean lines that a run can drop without writing anything.
 */
__global__ void wb_l2_sweep_kernel(const uint4 *buf, size_t n)
{
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = buf[i];
        acc |= v.x | v.y | v.z | v.w;
    }
    if (acc == 0xFFFFFFFFu) wb_l2_sweep_sink = acc;
}

extern "C" void wb_flush_l2(const void *buf, size_t bytes)
{
    wb_l2_sweep_kernel<<<1024, 256, 0, cudaStreamPerThread>>>((const uint4 *)buf, bytes / sizeof(uint4));
    WB_CHECK_LAUNCH("wb_l2_sweep_kernel");
}
