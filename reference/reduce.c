/** @file reduce.c @brief Compensated float64 sum and exact max on the CPU. */
#include "reduce.h"

#include <math.h>

#include "fp16.h"

/* Neumaier's variant of Kahan summation: c collects the low-order bits that each
 * addition to s loses, whichever of the two operands is larger. */
/** @brief A running compensated sum. */
typedef struct {
    double s;     /**< the running sum */
    double c;     /**< the low-order bits s has lost so far */
    double abs_s; /**< the running Σ|x| */
} neumaier;

/** @brief Add x to the running sum, keeping what the addition rounds away in c. */
static void add(neumaier *acc, double x)
{
    double t = acc->s + x;
    if (fabs(acc->s) >= fabs(x))
        acc->c += (acc->s - t) + x;
    else
        acc->c += (x - t) + acc->s;
    acc->s = t;
    acc->abs_s += fabs(x);
}

ref_sum_result ref_sum_f32(const float *x, size_t n)
{
    neumaier acc = {0, 0, 0};
    for (size_t i = 0; i < n; ++i) add(&acc, x[i]);
    ref_sum_result r = {acc.s + acc.c, acc.abs_s};
    return r;
}

ref_sum_result ref_sum_f16(const uint16_t *x, size_t n)
{
    neumaier acc = {0, 0, 0};
    for (size_t i = 0; i < n; ++i) add(&acc, wb_half_to_float(x[i]));
    ref_sum_result r = {acc.s + acc.c, acc.abs_s};
    return r;
}

float ref_max_f32(const float *x, size_t n)
{
    float m = x[0];
    for (size_t i = 1; i < n; ++i)
        if (x[i] > m) m = x[i];
    return m;
}

float ref_max_f16(const uint16_t *x, size_t n)
{
    float m = wb_half_to_float(x[0]);
    for (size_t i = 1; i < n; ++i) {
        float v = wb_half_to_float(x[i]);
        if (v > m) m = v;
    }
    return m;
}
