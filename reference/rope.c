/** @file rope.c @brief RoPE on the CPU, in float64. */
#include "rope.h"

#include <math.h>

double ref_rope_angle(long long pos, int i, int d, double base)
{
    return (double)pos * pow(base, -2.0 * i / d);
}

void ref_rope(const float *x, float *y, int B, int H, int N, int d, long long start_pos, double base,
              rope_style style)
{
    int half = d / 2;
    for (long long row = 0; row < (long long)B * H * N; ++row) {
        long long pos = start_pos + row % N;
        const float *xr = x + row * d;
        float *yr = y + row * d;
        for (int i = 0; i < half; ++i) {
            int ia = style == ROPE_ROTATE_HALF ? i : 2 * i;
            int ib = style == ROPE_ROTATE_HALF ? i + half : 2 * i + 1;
            double theta = ref_rope_angle(pos, i, d, base), c = cos(theta), s = sin(theta);
            double a = xr[ia], b = xr[ib];
            yr[ia] = (float)(a * c - b * s);
            yr[ib] = (float)(b * c + a * s);
        }
    }
}
