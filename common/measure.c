/** @file measure.c @brief check → time → check again, into a table row. */
#include "measure.h"

#include <math.h>

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
