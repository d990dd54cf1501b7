/**
 * @file test_reference.c
 * @brief CPU tests of reference/: known values, properties, and a float64 cross-check.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fp16.h"
#include "reduce.h"
#include "rng.h"
#include "test_util.h"
#include "vector_add.h"

static void test_vector_add(void)
{
    float a[4] = {1.0f, -2.5f, 1e30f, 0.1f}, b[4] = {2.0f, 2.5f, 1e30f, 0.2f}, c[4];
    ref_vector_add_f32(a, b, c, 4);
    EXPECT(c[0] == 3.0f && c[1] == 0.0f && c[2] == 2e30f && c[3] == 0.1f + 0.2f);

    /* float64 cross-check on random data: the result is the double sum, rounded once */
    enum { N = 10000 };
    static float x[N], y[N], z[N];
    wb_fill_uniform_f32(x, N, -1e3f, 1e3f, 1);
    wb_fill_uniform_f32(y, N, -1e-3f, 1e-3f, 2);
    ref_vector_add_f32(x, y, z, N);
    int bad = 0;
    for (int i = 0; i < N; ++i) bad += z[i] != (float)((double)x[i] + (double)y[i]) || z[i] != x[i] + y[i];
    EXPECT(bad == 0);

    /* fp16: 1 + 2^-11 rounds back to 1 (tie to even); 65504 + 32 overflows to inf */
    uint16_t ha[3] = {wb_float_to_half(1.0f), wb_float_to_half(65504.0f), wb_float_to_half(0.5f)};
    uint16_t hb[3] = {wb_float_to_half(ldexpf(1.0f, -11)), wb_float_to_half(32.0f), wb_float_to_half(0.25f)};
    uint16_t hc[3];
    ref_vector_add_f16(ha, hb, hc, 3);
    EXPECT(hc[0] == 0x3C00);
    EXPECT(hc[1] == 0x7C00);
    EXPECT(wb_half_to_float(hc[2]) == 0.75f);
}

static void test_sum(void)
{
    /* 1 + 2 + ... + n = n(n + 1)/2, exactly */
    enum { N = 4097 };
    static float x[N];
    for (int i = 0; i < N; ++i) x[i] = (float)(i + 1);
    ref_sum_result s = ref_sum_f32(x, N);
    EXPECT(s.sum == (double)N * (N + 1) / 2 && s.abs_sum == s.sum);

    /* compensation: a naive double sum loses the 1s next to 1e17; this must not */
    float c[5] = {1e17f, 1.0f, -1e17f, 1.0f, 1.0f};
    EXPECT(ref_sum_f32(c, 5).sum == 3.0);

    /* float64 cross-check and order independence on random data */
    enum { M = 100000 };
    static float y[M], shuffled[M];
    wb_fill_uniform_f32(y, M, -1.0f, 1.0f, 3);
    double naive = 0, abs_naive = 0;
    for (int i = 0; i < M; ++i) naive += y[i], abs_naive += fabs(y[i]);
    s = ref_sum_f32(y, M);
    EXPECT(fabs(s.sum - naive) < 1e-9 && fabs(s.abs_sum - abs_naive) < 1e-6);
    memcpy(shuffled, y, sizeof y);
    wb_rng r;
    wb_rng_seed(&r, 9);
    for (int i = M - 1; i > 0; --i) {
        int j = (int)(wb_rng_next(&r) % (uint64_t)(i + 1));
        float t = shuffled[i];
        shuffled[i] = shuffled[j];
        shuffled[j] = t;
    }
    EXPECT(fabs(ref_sum_f32(shuffled, M).sum - s.sum) < 1e-12);

    /* fp16 input: the sum of the values as fp16 represents them */
    uint16_t h[3] = {wb_float_to_half(0.1f), wb_float_to_half(0.2f), wb_float_to_half(-4.0f)};
    double expect = (double)wb_half_to_float(h[0]) + wb_half_to_float(h[1]) - 4.0;
    ref_sum_result hs = ref_sum_f16(h, 3);
    EXPECT(hs.sum == expect);
    EXPECT(hs.abs_sum == (double)wb_half_to_float(h[0]) + wb_half_to_float(h[1]) + 4.0);
}

static void test_max(void)
{
    float x[6] = {-3.0f, -1.0f, -7.0f, -0.5f, -2.0f, -9.0f};
    EXPECT(ref_max_f32(x, 6) == -0.5f); /* all negative: the identity is not 0 */
    EXPECT(ref_max_f32(x, 1) == -3.0f);
    x[5] = 4.0f;
    EXPECT(ref_max_f32(x, 6) == 4.0f); /* the last element counts */
    uint16_t h[3] = {wb_float_to_half(-1.0f), wb_float_to_half(2.5f), wb_float_to_half(-65504.0f)};
    EXPECT(ref_max_f16(h, 3) == 2.5f);
}

int main(int argc, char **argv)
{
    const wb_test_group groups[] = {{"vector_add", test_vector_add}, {"sum", test_sum}, {"max", test_max}};
    return wb_test_main(argc, argv, groups, sizeof groups / sizeof groups[0]);
}
