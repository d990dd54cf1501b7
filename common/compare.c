/** @file compare.c @brief Element-wise comparison with a per-precision tolerance. */
#include "compare.h"

#include <math.h>
#include <stdio.h>

static void consider(wb_compare_result *r, size_t i, double got, double ref, wb_tolerance tol,
                     const char *label, int max_print)
{
    double limit = tol.atol + tol.rtol * fabs(ref);
    double err = fabs(got - ref);
    double frac;
    int bad;
    if (!isfinite(got)) {
        frac = INFINITY;
        bad = 1;
    } else {
        if (err > r->max_abs_err) r->max_abs_err = err;
        if (ref != 0.0 && err / fabs(ref) > r->max_rel_err) r->max_rel_err = err / fabs(ref);
        frac = limit > 0.0 ? err / limit : (err == 0.0 ? 0.0 : INFINITY);
        bad = !(err <= limit);
    }
    if (frac > r->worst_frac || (r->n == 0 && i == 0)) {
        r->worst_frac = frac;
        r->worst_index = i;
        r->worst_got = got;
        r->worst_ref = ref;
    }
    if (bad) {
        if ((long long)r->n_bad < max_print)
            fprintf(stderr, "  mismatch %s at [%zu]: got %.9g, expected %.9g (|err| %.3g > tol %.3g)\n",
                    label ? label : "", i, got, ref, err, limit);
        r->n_bad++;
    }
}

static wb_compare_result empty_result(void)
{
    wb_compare_result r = {0, 0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0};
    return r;
}

wb_compare_result wb_compare_f32(const float *got, const float *ref, size_t n, wb_tolerance tol,
                                 const char *label, int max_print)
{
    wb_compare_result r = empty_result();
    for (size_t i = 0; i < n; ++i) consider(&r, i, got[i], ref[i], tol, label, max_print);
    r.n = n;
    if ((long long)r.n_bad > max_print && max_print > 0)
        fprintf(stderr, "  ... %zu of %zu elements out of tolerance in %s\n", r.n_bad, n,
                label ? label : "");
    r.ok = r.n_bad == 0;
    return r;
}

wb_compare_result wb_compare_scalar(double got, double ref, wb_tolerance tol, const char *label,
                                    int max_print)
{
    wb_compare_result r = empty_result();
    consider(&r, 0, got, ref, tol, label, max_print);
    r.n = 1;
    r.ok = r.n_bad == 0;
    return r;
}
