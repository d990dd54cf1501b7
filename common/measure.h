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

/**
 * @brief What the exercise slot's launcher returns while it is the stub (each stage's
 *        exercise.cu, variant `ex`): the variant is then reported as not written, never
 *        as a failure, and a run of it alone exits 77 (skipped; see wb_exit_status).
 */
#define WB_EXERCISE_NOT_WRITTEN "not written yet - see exercise.cu"

/** @brief 1 once a launcher has returned WB_EXERCISE_NOT_WRITTEN (wb_check_variant and wb_check_and_time note it). */
int wb_exercise_unwritten(void);

/** @brief Note that `why`, a launcher's answer, may be the stub's (for stages that check without wb_check_variant). */
void wb_note_reason(const char *why);

/**
 * @brief --check's word for a variant its launcher refused: ` id:rejected(why)`, or
 *        ` ex:not written yet - see exercise.cu` for the stub (noted, see wb_exit_status).
 */
void wb_print_rejected(const char *id, const char *why);

/**
 * @brief The program's exit status: 0 when ok; when not, 77 (skipped, as without a GPU) if
 *        the exercise slot's stub was all there was to run (`--variant ex` before it is
 *        written), else 1.
 */
int wb_exit_status(int ok);

/** @brief GB/s of `bytes` moved in `ms` milliseconds. */
static inline double wb_gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }
/** @brief TFLOP/s of `flops` done in `ms` milliseconds. */
static inline double wb_tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

#ifdef __cplusplus
}
#endif

#endif /* WB_MEASURE_H */
