/** @file compare.c @brief Element-wise comparison with a per-precision tolerance. */
#include "compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "rng.h"

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

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int wb_rows_to_check(int M, long long work, long long max_work, int n_sample, unsigned long long seed, int **rows)
{
    int full = work <= max_work || M <= n_sample;
    int n = full ? M : n_sample;
    *rows = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!*rows) {
        fprintf(stderr, "malloc of %d row indices failed\n", n);
        exit(1);
    }
    wb_rng r;
    wb_rng_seed(&r, seed);
    for (int i = 0; i < n; ++i) (*rows)[i] = full ? i : (i == 0 ? 0 : i == 1 ? M - 1 : wb_rng_int(&r, 0, M - 1));
    qsort(*rows, (size_t)n, sizeof(int), cmp_int);
    return n;
}

wb_compare_result wb_compare_rows(const float *got, const float *ref, int rows_total, int cols, const int *rows,
                                  int n_rows, wb_tolerance tol, const char *label)
{
    wb_compare_result total = empty_result();
    char row_label[160];
    for (int i = 0; i < n_rows; ++i) {
        size_t off = (size_t)rows[i] * (size_t)cols;
        snprintf(row_label, sizeof row_label, "%s row %d", label ? label : "", rows[i]);
        wb_compare_result r = wb_compare_f32(got + off, ref + off, (size_t)cols, tol, row_label, total.n_bad < 5 ? 5 : 0);
        if (r.worst_frac >= total.worst_frac) {
            total.worst_frac = r.worst_frac, total.worst_index = off + r.worst_index;
            total.worst_got = r.worst_got, total.worst_ref = r.worst_ref;
        }
        total.max_abs_err = fmax(total.max_abs_err, r.max_abs_err);
        total.max_rel_err = fmax(total.max_rel_err, r.max_rel_err);
        total.n_bad += r.n_bad;
        total.n += r.n;
    }
    size_t all = (size_t)rows_total * (size_t)cols, unwritten = 0;
    for (size_t i = 0; i < all; ++i) unwritten += !isfinite(got[i]);
    if (unwritten) fprintf(stderr, "  %s: %zu elements not finite (never written?)\n", label ? label : "", unwritten);
    total.n_bad += unwritten;
    total.ok = total.n_bad == 0;
    return total;
}
