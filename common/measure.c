/** @file measure.c @brief check → time → check again, into a table row. */
#include "measure.h"

#include <math.h>
#include <stdio.h>

int wb_check_variant(const char *id, wb_check_fn check, void *ctx, int runs)
{
    int ok = 1;
    for (int r = 0; r < runs; ++r) {
        wb_compare_result res;
        const char *why = check(ctx, &res);
        if (why) {
            printf(" %s:rejected(%s)", id, why);
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
        row->status = WB_ROW_REJECTED;
        row->note = why;
        return;
    }
    row->status = WB_ROW_RAN;
    row->max_err = fmax(before.max_abs_err, after.max_abs_err);
    row->err_over_tol = fmax(before.worst_frac, after.worst_frac);
    row->ok = before.ok && after.ok;
}
