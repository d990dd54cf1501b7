/** @file timing.c @brief Event timing with warm-up, L2 flush and median. */
/** @brief clock_gettime() is POSIX, not C11. */
#define _POSIX_C_SOURCE 199309L
#include "timing.h"

#include <time.h>

#include "cuda_check.h"
#include "device.h"

#include <stdlib.h>

double wb_wall_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double wb_median(double *values, int n)
{
    qsort(values, (size_t)n, sizeof *values, cmp_double);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

const char *wb_time_runs(const wb_device *dev, wb_run_fn fn, void *ctx, int warmup, int runs, wb_timing *out)
{
    if (runs < 1) runs = 1;
    cudaEvent_t start, stop;
    WB_CUDA_CHECK(cudaEventCreate(&start));
    WB_CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < warmup; ++i) {
        WB_CUDA_CHECK(cudaEventRecord(start, cudaStreamPerThread));
        const char *why = fn(ctx);
        WB_CUDA_CHECK(cudaEventRecord(stop, cudaStreamPerThread));
        WB_CUDA_CHECK(cudaEventSynchronize(stop));
        if (why) {
            WB_CUDA_CHECK(cudaEventDestroy(start));
            WB_CUDA_CHECK(cudaEventDestroy(stop));
            return why;
        }
        float t = 0.0f;
        WB_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        if (i == 0 && t * runs > WB_TIME_BUDGET_MS) {
            int fit = (int)(WB_TIME_BUDGET_MS / t);
            runs = fit > 5 ? fit : 5;
            warmup = 1; /* a run this long needs no more warming up */
        }
    }
    double *ms = (double *)wb_host_alloc(sizeof(double) * (size_t)runs, "timings");
    const char *why = NULL;
    for (int i = 0; i < runs && !why; ++i) {
        if (dev && dev->l2_flush)
            wb_flush_l2(dev->l2_flush, dev->l2_flush_bytes);
        else
            wb_hold_gpu(WB_HOLD_NS); /* what the flush does too: the GPU is busy while the host queues the run */
        WB_CUDA_CHECK(cudaEventRecord(start, cudaStreamPerThread));
        why = fn(ctx);
        WB_CUDA_CHECK(cudaEventRecord(stop, cudaStreamPerThread));
        WB_CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0.0f;
        WB_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        ms[i] = t;
    }
    if (!why) {
        out->runs = runs;
        out->median_ms = wb_median(ms, runs); /* sorts ms */
        out->min_ms = ms[0];
        out->max_ms = ms[runs - 1];
    }
    free(ms);
    WB_CUDA_CHECK(cudaEventDestroy(start));
    WB_CUDA_CHECK(cudaEventDestroy(stop));
    return why;
}

/* ---------------------------------------------------------------------------
 * The roof: a device-to-device copy, timed as every kernel is.
 * ------------------------------------------------------------------------- */

/** @brief One device-to-device copy, the work the roof measurement times. */
typedef struct {
    void *dst;        /**< destination */
    const void *src;  /**< source */
    size_t bytes;     /**< bytes copied */
} copy_job;

static const char *run_copy(void *ctx)
{
    copy_job *job = (copy_job *)ctx;
    WB_CUDA_CHECK(cudaMemcpyAsync(job->dst, job->src, job->bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
    return NULL;
}

double wb_measure_copy_bandwidth(wb_device *dev)
{
    size_t bytes = (size_t)256 << 20;
    if (8 * dev->l2_bytes > bytes) bytes = 8 * dev->l2_bytes;
    size_t free_b = 0, total_b = 0;
    WB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    while (bytes > ((size_t)16 << 20) && 2 * bytes > free_b / 2) bytes /= 2;
    copy_job job;
    job.bytes = bytes;
    job.src = wb_device_alloc(bytes, "copy-roof source");
    job.dst = wb_device_alloc(bytes, "copy-roof destination");
    WB_CUDA_CHECK(cudaMemset((void *)job.src, 0x3c, bytes)); /* not zeros: measure real data */
    wb_timing t;
    wb_time_runs(dev, run_copy, &job, 3, 20, &t);
    WB_CUDA_CHECK(cudaFree(job.dst));
    WB_CUDA_CHECK(cudaFree((void *)job.src));
    dev->copy_gbps = 2.0 * (double)bytes / (t.median_ms * 1e-3) / 1e9;
    return dev->copy_gbps;
}
