/**
 * @file attention.c
 * @brief CPU reference of attention (see attention.h): two passes over the keys
 *        in float64, the textbook order (scores, max, exponentials, weighted sum).
 */
#include "attention.h"

#include <math.h>
#include <stdlib.h>

void ref_attention_row(const float *q, const float *k, const float *v, size_t n, size_t d, size_t stride,
                       float scale, float *o, float *lse)
{
    for (size_t c = 0; c < d; ++c) o[c] = 0.0f;
    if (n == 0) {
        if (lse) *lse = -INFINITY;
        return;
    }
    double *s = malloc(n * sizeof *s);
    double *acc = calloc(d, sizeof *acc);
    if (!s || !acc) abort();
    double m = -INFINITY;
    for (size_t j = 0; j < n; ++j) {
        double dot = 0.0;
        for (size_t c = 0; c < d; ++c) dot += (double)q[c] * (double)k[j * stride + c];
        s[j] = (double)scale * dot;
        if (s[j] > m) m = s[j];
    }
    double sum = 0.0;
    for (size_t j = 0; j < n; ++j) {
        double p = exp(s[j] - m);
        sum += p;
        for (size_t c = 0; c < d; ++c) acc[c] += p * (double)v[j * stride + c];
    }
    for (size_t c = 0; c < d; ++c) o[c] = (float)(acc[c] / sum);
    if (lse) *lse = (float)(m + log(sum));
    free(s);
    free(acc);
}
