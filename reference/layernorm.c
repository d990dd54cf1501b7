/** @file layernorm.c @brief LayerNorm on the CPU, in float64. */
#include "layernorm.h"

#include <math.h>

void ref_layernorm(const float *x, const float *weight, const float *bias, float eps, float *y, float *mean,
                   float *rstd, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        double mu = 0.0, var = 0.0;
        for (size_t j = 0; j < cols; ++j) mu += xr[j];
        mu /= (double)cols;
        for (size_t j = 0; j < cols; ++j) var += ((double)xr[j] - mu) * ((double)xr[j] - mu);
        var /= (double)cols;
        double s = 1.0 / sqrt(var + (double)eps);
        for (size_t j = 0; j < cols; ++j) y[r * cols + j] = (float)(((double)xr[j] - mu) * s * weight[j] + bias[j]);
        if (mean) mean[r] = (float)mu;
        if (rstd) rstd[r] = (float)s;
    }
}
