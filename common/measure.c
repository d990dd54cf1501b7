/** @file measure.c @brief check → time → check again, into a table row. */
#include "measure.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int exercise_unwritten;

int wb_exercise_unwritten(void) { return exercise_unwritten; }

void wb_note_reason(const char *why)
{
    if (why && strcmp(why, WB_EXERCISE_NOT_WRITTEN) == 0) exercise_unwritten = 1;
}

void wb_print_rejected(const char *id, const char *why)
{
    wb_note_reason(why);
    if (strcmp(why, WB_EXERCISE_NOT_WRITTEN) == 0)
        printf(" %s:%s", id, why);
    else
        printf(" %s:rejected(%s)", id, why);
}

int wb_exit_status(int ok)
{
    if (ok) return 0;
    if (exercise_unwritten) {
        printf("the exercise slot (variant ex) is %s: reported as skipped\n", WB_EXERCISE_NOT_WRITTEN);
        return WB_EXIT_NO_DEVICE;
    }
    return 1;
}

int wb_check_variant(const char *id, wb_check_fn check, void *ctx, int runs)
{
    int ok = 1;
    for (int r = 0; r < runs; ++r) {
        wb_compare_result res;
        const char *why = check(ctx, &res);
        if (why) {
            wb_print_rejected(id, why);
            return -1;
        }
        ok = ok && res.ok;
    }
    printf(" %s:%s", id, ok ? "ok" : "FAIL");
    return ok;
}

void wb_check_and_time(const wb_device *dev, const wb_common_opts *opt, wb_run_fn run, wb_check_fn check,
                       void *ctx, wb_row *row)
{
    wb_compare_result before, after;
    const char *why = check(ctx, &before);
    if (!why) why = wb_time_runs(dev, run, ctx, (int)opt->warmup, (int)opt->iters, &row->time);
    if (!why) why = check(ctx, &after);
    if (why) {
        wb_note_reason(why);
        row->status = WB_ROW_REJECTED;
        row->note = why;
        return;
    }
    row->status = WB_ROW_RAN;
    row->max_err = fmax(before.max_abs_err, after.max_abs_err);
    row->err_over_tol = fmax(before.worst_frac, after.worst_frac);
    row->ok = before.ok && after.ok;
}
