/**
 * @file timing.h
 * @brief Honest GPU timing: CUDA events around each run, warm-up first, the L2
 *        flushed before every timed run, the median of many runs (with min and max).
 */
#ifndef WB_TIMING_H
#define WB_TIMING_H

#include <stddef.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Wall time (ms) the timed runs of one variant may take before fewer runs are made. */
#define WB_TIME_BUDGET_MS 2000.0

/** @brief Times of one variant, in milliseconds. */
typedef struct {
    double median_ms; /**< the figure every table and plot uses */
    double min_ms;    /**< fastest run */
    double max_ms;    /**< slowest run */
    int runs;         /**< timed runs */
} wb_timing;

/**
 * @brief One run of the work to time: enqueue it on the default stream and return
 *        NULL, or return why it cannot run (a variant's contract).
 */
typedef const char *(*wb_run_fn)(void *ctx);

/**
 * @brief Warm up, then time `runs` runs of fn one by one with CUDA events.
 *
 * Before each timed run the device's L2 flush buffer is read (outside the events,
 * wb_flush_l2), so every run starts with a cold cache as a run over fresh data
 * would, and with no dirty line left for the run to write back: a flush that
 * wrote its buffer (a memset) would leave the L2 full of dirty lines, and the
 * timed run would pay for writing them back (docs/method.md measures it).
 * Without a flush (dev NULL or no buffer: the caller rotates its inputs instead),
 * the GPU is held busy for WB_HOLD_NS instead (wb_hold_gpu), so that in both cases
 * the host has queued the start event, the run and the stop event before the GPU
 * reaches them: the events time the GPU's work, not the host's launch calls.
 * A slow variant gets fewer runs: when the first warm-up run shows that `runs`
 * runs would take over WB_TIME_BUDGET_MS, only as many as fit are made (at least 5).
 * @param dev    the device (its l2_flush buffer; NULL: no flush)
 * @param fn     the work; its first error is returned and timing stops
 * @param ctx    passed to fn
 * @param warmup untimed runs first (module load, clocks, caches of the runtime)
 * @param runs   timed runs (at least 1)
 * @param out    median, min, max
 * @return NULL, or the reason fn gave for not running
 */
const char *wb_time_runs(const wb_device *dev, wb_run_fn fn, void *ctx, int warmup, int runs, wb_timing *out);

/**
 * @brief The roof of the memory-bound stages: the device-to-device copy bandwidth (GB/s, bytes read + written),
 *        timed as every kernel is (wb_time_runs), stored in dev->copy_gbps and returned. Median of 20 copies of
 *        max(256 MiB, 8 × L2), fewer bytes if memory is short.
 */
double wb_measure_copy_bandwidth(wb_device *dev);

/** @brief How long the timer holds the GPU before a run that has no L2 flush ahead of it (ns): longer than the
 *         host takes to queue an event, a few launches and another event. */
#define WB_HOLD_NS 50000ull

/**
 * @brief The L2 flush: read `bytes` of `buf` (at least twice the L2, zero-filled) with one kernel on
 *        cudaStreamPerThread. Reads only, so that the lines left in L2 are clean.
 */
void wb_flush_l2(const void *buf, size_t bytes);

/** @brief Keep the GPU busy for `ns` nanoseconds: one thread spinning on the GPU's clock (cudaStreamPerThread). */
void wb_hold_gpu(unsigned long long ns);

/**
 * @brief A host clock in milliseconds (monotonic). For work that includes the
 *        host's share (stage 10's tokens per second), never for GPU kernels alone.
 */
double wb_wall_ms(void);

/** @brief The median of n values (n >= 1); the array is left sorted. */
double wb_median(double *values, int n);

#ifdef __cplusplus
}
#endif

#endif /* WB_TIMING_H */
