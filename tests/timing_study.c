/**
 * @file timing_study.c
 * @brief What the timer's L2 flush costs a run: docs/method.md's table.
 *
 * A device-to-device cudaMemcpy, the simplest memory-bound work there is, timed
 * the way the stages time a kernel (CUDA events around one run, the median of
 * 50), at 100, 200 and 400 MB moved (read + written), with three things before
 * each run:
 *
 * - **hold**: no flush, the GPU held busy for WB_HOLD_NS (the data is in L2
 *   from the run before where it fits: an upper bound);
 * - **memset**: twice the L2 overwritten (cudaMemsetAsync), the timer's first
 *   flush: the L2 is left full of dirty lines the timed run writes back;
 * - **read**: twice the L2 read (wb_flush_l2), the timer's flush now.
 *
 * Each figure is printed as GB/s and as a fraction of the copy roof that
 * common/ measures at start (a copy of max(256 MiB, 8 × L2), no flush, median of 20).
 * Not a test: timing never decides a pass. Run by hand on a GPU:
 * `build/bin/wb_timing_study`.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "cuda_check.h"
#include "device.h"
#include "timing.h"

/** @brief Timed runs per (size, flush). */
#define RUNS 50

enum flush { FLUSH_HOLD, FLUSH_MEMSET, FLUSH_READ };
static const char *const flush_names[] = {"hold (no flush)", "memset of 2 x L2", "read of 2 x L2"};

/** @brief The median time (ms) of RUNS copies of `bytes` from src to dst, each after `how`. */
static double time_copy(const wb_device *dev, void *dst, const void *src, size_t bytes, enum flush how)
{
    cudaEvent_t start, stop;
    WB_CUDA_CHECK(cudaEventCreate(&start));
    WB_CUDA_CHECK(cudaEventCreate(&stop));
    double ms[RUNS];
    for (int i = -3; i < RUNS; ++i) { /* three warm-up runs */
        if (how == FLUSH_MEMSET)
            WB_CUDA_CHECK(cudaMemsetAsync(dev->l2_flush, i & 0xff, dev->l2_flush_bytes, cudaStreamPerThread));
        else if (how == FLUSH_READ)
            wb_flush_l2(dev->l2_flush, dev->l2_flush_bytes);
        else
            wb_hold_gpu(WB_HOLD_NS);
        WB_CUDA_CHECK(cudaEventRecord(start, cudaStreamPerThread));
        WB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
        WB_CUDA_CHECK(cudaEventRecord(stop, cudaStreamPerThread));
        WB_CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0.0f;
        WB_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        if (i >= 0) ms[i] = t;
    }
    if (how == FLUSH_MEMSET) /* the flush buffer back to zeros: wb_flush_l2 reads it */
        WB_CUDA_CHECK(cudaMemsetAsync(dev->l2_flush, 0, dev->l2_flush_bytes, cudaStreamPerThread));
    WB_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    WB_CUDA_CHECK(cudaEventDestroy(start));
    WB_CUDA_CHECK(cudaEventDestroy(stop));
    return wb_median(ms, RUNS);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "usage: %s (no arguments): times a copy with each L2 flush; see docs/method.md\n", argv[0]);
        return 2;
    }
    wb_device dev;
    wb_device_open_or_skip(&dev, "wb_timing_study");
    double roof = wb_measure_copy_bandwidth(&dev);
    wb_device_print(&dev, stdout);
    static const size_t moved_mb[] = {100, 200, 400};
    size_t max_bytes = 400u * 1000 * 1000 / 2;
    void *src = wb_device_alloc(max_bytes, "copy source"), *dst = wb_device_alloc(max_bytes, "copy destination");
    WB_CUDA_CHECK(cudaMemset(src, 1, max_bytes));
    printf("\n| MB moved (read + written) | flush before each run | median | GB/s | %% of the copy roof |\n");
    printf("|---:|---|---:|---:|---:|\n");
    for (int s = 0; s < 3; ++s)
        for (int f = 0; f < 3; ++f) {
            size_t bytes = moved_mb[s] * 1000 * 1000 / 2; /* copied: read once, written once */
            double ms = time_copy(&dev, dst, src, bytes, (enum flush)f);
            double gbps = 2.0 * bytes / (ms * 1e6);
            printf("| %zu | %s | %.1f us | %.0f | %.1f%% |\n", moved_mb[s], flush_names[f], ms * 1e3, gbps,
                   100.0 * gbps / roof);
        }
    WB_CUDA_CHECK(cudaFree(src));
    WB_CUDA_CHECK(cudaFree(dst));
    wb_device_close(&dev);
    return 0;
}
