/**
 * @file measure.h
 * @brief The measuring step every stage repeats for every variant: check, time,
 *        check again, and fill the table row.
 */
#ifndef WB_MEASURE_H
#define WB_MEASURE_H

#include "args.h"
#include "compare.h"
#include "device.h"
#include "report.h"
#include "timing.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief One checked run of a variant: poison its output, run it once, compare
 *        with the reference into *res. Returns NULL, or why the variant cannot run.
 */
typedef const char *(*wb_check_fn)(void *ctx, wb_compare_result *res);

/**
 * @brief Check the variant, time it, check it again (a race or a kernel that only
 *        works once shows up in the second check), and fill `row`.
 *
 * On return `row` has its status (WB_ROW_REJECTED with the launcher's reason as
 * note, or WB_ROW_RAN), time, max_err, err_over_tol and ok. The caller then sets
 * `row->throughput` from its own count of bytes or FLOPs (see wb_gbps,
 * wb_tflops) and adds the row to the report.
 * @param dev   the device (for the L2 flush between timed runs)
 * @param opt   --warmup and --iters
 * @param run   one run, as timed (no poisoning, no copy back)
 * @param check one checked run
 * @param ctx   passed to run and check
 * @param row   filled in
 */
void wb_check_and_time(const wb_device *dev, const wb_common_opts *opt, wb_run_fn run, wb_check_fn check,
                       void *ctx, wb_row *row);

/**
 * @brief --check for one variant: run `check` `runs` times (a kernel must also work
 *        on a second run) and print ` id:ok`, ` id:FAIL` or ` id:rejected(why)`.
 * @return 1 checked and correct, 0 checked and wrong, −1 rejected by its contract
 */
int wb_check_variant(const char *id, wb_check_fn check, void *ctx, int runs);

/** @brief GB/s of `bytes` moved in `ms` milliseconds. */
static inline double wb_gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }
/** @brief TFLOP/s of `flops` done in `ms` milliseconds. */
static inline double wb_tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

#ifdef __cplusplus
}
#endif

#endif /* WB_MEASURE_H */
