/**
 * @file compare.h
 * @brief Checking GPU results against the CPU reference: |got - ref| <= atol + rtol·|ref|.
 *
 * Every element is checked; NaN or Inf in the output fails even where the
 * reference has the same (outputs are poisoned with NaN before each run, so an
 * element the kernel never wrote shows up here). The worst element is reported
 * with its index and as a fraction of its tolerance (1.0 = exactly at the limit).
 */
#ifndef WB_COMPARE_H
#define WB_COMPARE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A tolerance of the form atol + rtol·|ref|; {0, 0} demands an exact match. */
typedef struct {
    double atol; /**< absolute part */
    double rtol; /**< relative part, times |ref| */
} wb_tolerance;

/** @brief What a comparison found. */
typedef struct {
    size_t n;              /**< elements compared */
    size_t n_bad;          /**< elements outside tolerance, or not finite */
    double max_abs_err;    /**< largest |got - ref| over finite elements */
    double max_rel_err;    /**< largest |got - ref| / |ref| over elements with ref != 0 */
    double worst_frac;     /**< largest |got - ref| / (atol + rtol·|ref|); INFINITY for a non-finite or an exact-match miss */
    size_t worst_index;    /**< index of the element with worst_frac */
    double worst_got;      /**< that element's value */
    double worst_ref;      /**< the reference there */
    int ok;                /**< 1 when n_bad == 0 */
} wb_compare_result;

/**
 * @brief Compare n floats with the reference.
 * @param got        the GPU's results, copied to the host
 * @param ref        the CPU reference
 * @param n          elements
 * @param tol        the tolerance
 * @param label      printed with mismatches ("v3 n=1000003")
 * @param max_print  how many mismatches to print to stderr (0: none)
 */
wb_compare_result wb_compare_f32(const float *got, const float *ref, size_t n, wb_tolerance tol,
                                 const char *label, int max_print);

/** @brief Compare one scalar result (a reduction) with its reference, the same way as one element. */
wb_compare_result wb_compare_scalar(double got, double ref, wb_tolerance tol, const char *label,
                                    int max_print);

#ifdef __cplusplus
}
#endif

#endif /* WB_COMPARE_H */
