/** @file softmax.c @brief Row-wise softmax on the CPU, in float64. */
#include "softmax.h"

#include <math.h>

void ref_softmax(const float *x, float *y, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        double m = -INFINITY;
        for (size_t j = 0; j < cols; ++j) m = xr[j] > m || isnan(xr[j]) ? xr[j] : m;
        if (m == -INFINITY) { /* every entry masked: defined as zeros */
            for (size_t j = 0; j < cols; ++j) yr[j] = 0.0f;
            continue;
        }
        double sum = 0.0;
        for (size_t j = 0; j < cols; ++j) sum += exp((double)xr[j] - m);
        for (size_t j = 0; j < cols; ++j) yr[j] = (float)(exp((double)xr[j] - m) / sum);
    }
}
