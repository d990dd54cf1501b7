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

/**
 * @brief The rows of an M-row result to check: every row when the work is small
 *        (at most `max_work`, or M <= n_sample), otherwise n_sample rows — the
 *        first, the last and random ones — sorted. For outputs whose reference is
 *        too slow to compute whole (a large GEMM).
 * @param M        rows of the result
 * @param work     the reference's cost (multiply-adds)
 * @param max_work largest cost computed whole
 * @param n_sample rows to take otherwise
 * @param seed     of the random rows
 * @param rows     receives a malloc'ed array (free it)
 * @return how many rows
 */
int wb_rows_to_check(int M, long long work, long long max_work, int n_sample, unsigned long long seed, int **rows);

/**
 * @brief Compare the listed rows of a rows_total × cols result with the reference,
 *        and require every element of the whole result to be finite: outputs are
 *        poisoned with NaN, so an element of an unchecked row that was never
 *        written still fails.
 * @param got        the GPU's result, rows_total × cols, copied to the host
 * @param ref        the reference (only the listed rows are read)
 * @param rows_total rows of the result
 * @param cols       row length
 * @param rows       the rows to compare
 * @param n_rows     how many
 * @param tol        the tolerance
 * @param label      printed with mismatches, followed by "row r"
 */
wb_compare_result wb_compare_rows(const float *got, const float *ref, int rows_total, int cols, const int *rows,
                                  int n_rows, wb_tolerance tol, const char *label);

#ifdef __cplusplus
}
#endif

#endif /* WB_COMPARE_H */
