/**
 * @file test_reference.c
 * @brief CPU tests of reference/: known values, properties, and a float64 cross-check.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fp16.h"
#include "gelu.h"
#include "gemm.h"
#include "layernorm.h"
#include "reduce.h"
#include "rng.h"
#include "rope.h"
#include "softmax.h"
#include "attention.h"
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

static void test_softmax(void)
{
    /* known values: softmax(0, ln 3) = (1/4, 3/4); a one-element row is 1 */
    float x[2] = {0.0f, (float)log(3.0)}, y[2];
    ref_softmax(x, y, 1, 2);
    EXPECT(fabsf(y[0] - 0.25f) < 1e-7f && fabsf(y[1] - 0.75f) < 1e-7f);
    float one = -123.0f, y1;
    ref_softmax(&one, &y1, 1, 1);
    EXPECT(y1 == 1.0f);

    /* properties on random rows: sums to 1, all in [0, 1], invariant under a shift */
    enum { R = 4, C = 1000 };
    static float a[R * C], b[R * C], ya[R * C], yb[R * C];
    wb_fill_int_f32(a, R * C, -1280, 1280, 5);
    for (int i = 0; i < R * C; ++i) a[i] /= 64.0f, b[i] = a[i] + 256.0f * (float)(i / C); /* both exact */
    ref_softmax(a, ya, R, C);
    ref_softmax(b, yb, R, C);
    for (int r = 0; r < R; ++r) {
        double s = 0;
        for (int j = 0; j < C; ++j) {
            s += ya[r * C + j];
            EXPECT(ya[r * C + j] >= 0.0f && ya[r * C + j] <= 1.0f);
        }
        EXPECT(fabs(s - 1.0) < 1e-5);
    }
    int differ = 0;
    for (int i = 0; i < R * C; ++i) differ += fabsf(ya[i] - yb[i]) > 1e-6f * ya[i];
    EXPECT(differ == 0);

    /* huge values do not overflow; masked entries get 0; a fully masked row is all zeros */
    float h[3] = {1e30f, -1e30f, 0.0f}, yh[3];
    ref_softmax(h, yh, 1, 3);
    EXPECT(yh[0] == 1.0f && yh[1] == 0.0f && yh[2] == 0.0f);
    float m[6] = {1.0f, -INFINITY, 1.0f, -INFINITY, -INFINITY, -INFINITY}, ym[6];
    ref_softmax(m, ym, 2, 3);
    EXPECT(ym[0] == 0.5f && ym[1] == 0.0f && ym[2] == 0.5f);
    EXPECT(ym[3] == 0.0f && ym[4] == 0.0f && ym[5] == 0.0f);
}

static void test_layernorm(void)
{
    /* known values: (1, 2, 3) has mean 2, var 2/3 */
    float x[3] = {1.0f, 2.0f, 3.0f}, w[3] = {1.0f, 1.0f, 2.0f}, b[3] = {0.0f, 0.5f, 0.0f}, y[3], mean, rstd;
    ref_layernorm(x, w, b, 0.0f, y, &mean, &rstd, 1, 3);
    double s = sqrt(1.5);
    EXPECT(mean == 2.0f && fabs(rstd - s) < 1e-6);
    EXPECT(fabs(y[0] + s) < 1e-6 && fabs(y[1] - 0.5) < 1e-6 && fabs(y[2] - 2 * s) < 1e-6);

    /* properties: with w = 1, b = 0 each row has mean 0 and variance var/(var + eps) */
    enum { R = 3, C = 768 };
    static float a[R * C], ones[C], zeros[C], out[R * C], means[R], rstds[R];
    wb_fill_uniform_f32(a, R * C, 40.0f, 60.0f, 6); /* a large mean: the two-pass form must not cancel */
    for (int j = 0; j < C; ++j) ones[j] = 1.0f, zeros[j] = 0.0f;
    ref_layernorm(a, ones, zeros, 1e-5f, out, means, rstds, R, C);
    for (int r = 0; r < R; ++r) {
        double mu = 0, var = 0;
        for (int j = 0; j < C; ++j) mu += out[r * C + j];
        mu /= C;
        for (int j = 0; j < C; ++j) var += (out[r * C + j] - mu) * (out[r * C + j] - mu);
        var /= C;
        EXPECT(fabs(mu) < 1e-5 && fabs(var - 1.0) < 1e-4);
        EXPECT(means[r] > 49.0f && means[r] < 51.0f);
    }
    /* a constant row has variance 0: y = b, rstd = 1/sqrt(eps) */
    float c[4] = {7.0f, 7.0f, 7.0f, 7.0f}, cw[4] = {1, 2, 3, 4}, cb[4] = {0.1f, 0.2f, 0.3f, 0.4f}, cy[4];
    ref_layernorm(c, cw, cb, 1e-5f, cy, &mean, &rstd, 1, 4);
    EXPECT(cy[0] == 0.1f && cy[3] == 0.4f && fabs(rstd - 1.0 / sqrt(1e-5)) < 1e-2);
}

static double dot(const float *a, const float *b, int d)
{
    double s = 0;
    for (int i = 0; i < d; ++i) s += (double)a[i] * b[i];
    return s;
}

static void test_rope(void)
{
    enum { D = 64, N = 40 };
    static float q[N * D], k[N * D], rq[N * D], rk[N * D];
    for (int style = 0; style < 2; ++style) {
        /* the same q and k at every position, so only the rotation differs by token */
        float q0[D], k0[D];
        wb_fill_uniform_f32(q0, D, -1.0f, 1.0f, 11);
        wb_fill_uniform_f32(k0, D, -1.0f, 1.0f, 12);
        for (int n = 0; n < N; ++n) memcpy(q + n * D, q0, sizeof q0), memcpy(k + n * D, k0, sizeof k0);
        long long start = 30000;
        ref_rope(q, rq, 1, 1, N, D, start, 10000.0, (rope_style)style);
        ref_rope(k, rk, 1, 1, N, D, start, 10000.0, (rope_style)style);
        /* each pair keeps its norm */
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < D / 2; ++i) {
                int a = style == ROPE_ROTATE_HALF ? i : 2 * i, b = style == ROPE_ROTATE_HALF ? i + D / 2 : 2 * i + 1;
                double before = hypot(q0[a], q0[b]), after = hypot(rq[n * D + a], rq[n * D + b]);
                EXPECT(fabs(before - after) < 1e-6);
            }
        /* q(m)·k(n) depends only on m − n: (5, 2), (20, 17), (39, 36) all have m − n = 3 */
        double d1 = dot(rq + 5 * D, rk + 2 * D, D), d2 = dot(rq + 20 * D, rk + 17 * D, D), d3 = dot(rq + 39 * D, rk + 36 * D, D);
        EXPECT(fabs(d1 - d2) < 1e-5 && fabs(d1 - d3) < 1e-5);
        double other = dot(rq + 5 * D, rk + 3 * D, D);
        EXPECT(fabs(d1 - other) > 1e-4); /* and it does depend on the distance */
        /* position 0 is the identity; d = 2 at position 1 with base b is a rotation by 1 radian */
        ref_rope(q0, rq, 1, 1, 1, D, 0, 10000.0, (rope_style)style);
        EXPECT(memcmp(q0, rq, sizeof q0) == 0);
    }
    float v[2] = {1.0f, 0.0f}, r[2];
    ref_rope(v, r, 1, 1, 1, 2, 1, 10000.0, ROPE_ROTATE_HALF);
    EXPECT(fabs(r[0] - cos(1.0)) < 1e-7 && fabs(r[1] - sin(1.0)) < 1e-7);
    /* the two conventions pair different elements */
    float w[4] = {1.0f, 2.0f, 3.0f, 4.0f}, rh[4], ri[4];
    ref_rope(w, rh, 1, 1, 1, 4, 1, 10000.0, ROPE_ROTATE_HALF);
    ref_rope(w, ri, 1, 1, 1, 4, 1, 10000.0, ROPE_INTERLEAVED);
    EXPECT(fabs(rh[0] - (cos(1.0) - 3 * sin(1.0))) < 1e-6 && fabs(ri[0] - (cos(1.0) - 2 * sin(1.0))) < 1e-6);
    EXPECT(fabs(ref_rope_angle(32768, 1, 64, 10000.0) - 32768 * pow(10000.0, -2.0 / 64)) < 1e-9);
}

static void test_gemm(void)
{
    /* known values: [1 2; 3 4]·[5 6; 7 8] = [19 22; 43 50]; a 2x3 · 3x1 */
    float A[4] = {1, 2, 3, 4}, B[4] = {5, 6, 7, 8}, C[4];
    ref_gemm_rows(A, B, C, 2, 2, 2, NULL, 0);
    EXPECT(C[0] == 19 && C[1] == 22 && C[2] == 43 && C[3] == 50);
    float A2[6] = {1, 0, -1, 2, 3, 4}, B2[3] = {1, 2, 3}, C2[2];
    ref_gemm_rows(A2, B2, C2, 2, 1, 3, NULL, 0);
    EXPECT(C2[0] == -2 && C2[1] == 20);

    /* a sample of rows equals the same rows of the full product; float64 cross-check */
    enum { M = 37, N = 29, K = 41 };
    static float a[M * K], b[K * N], full[M * N], part[M * N];
    wb_fill_uniform_f32(a, M * K, -1.0f, 1.0f, 21);
    wb_fill_uniform_f32(b, K * N, -1.0f, 1.0f, 22);
    ref_gemm_rows(a, b, full, M, N, K, NULL, 0);
    int rows[3] = {0, 17, M - 1};
    memset(part, 0, sizeof part);
    ref_gemm_rows(a, b, part, M, N, K, rows, 3);
    for (int t = 0; t < 3; ++t) EXPECT(memcmp(part + rows[t] * N, full + rows[t] * N, sizeof(float) * N) == 0);
    EXPECT(part[1 * N] == 0.0f); /* rows outside the sample are not touched */
    int bad = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double s = 0;
            for (int k = 0; k < K; ++k) s += (double)a[i * K + k] * b[k * N + j];
            bad += full[i * N + j] != (float)s;
        }
    EXPECT(bad == 0);
}

static void test_gelu(void)
{
    /* known values: GELU(0) = 0; GELU(x) → x for large x, → 0 for very negative x */
    EXPECT(ref_gelu_erf(0.0) == 0.0 && ref_gelu_tanh(0.0) == 0.0);
    EXPECT(fabs(ref_gelu_erf(1.0) - 0.8413447460685429) < 1e-12); /* Φ(1) */
    EXPECT(fabs(ref_gelu_erf(10.0) - 10.0) < 1e-12 && fabs(ref_gelu_erf(-10.0)) < 1e-12);
    /* the tanh form stays within 5e-4 of the exact one */
    double worst = 0;
    for (double x = -8; x <= 8; x += 1.0 / 64) worst = fmax(worst, fabs(ref_gelu_tanh(x) - ref_gelu_erf(x)));
    EXPECT(worst < 5e-4 && worst > 1e-5);
    /* the fused layer: one row by hand */
    float X[2] = {1.0f, -2.0f}, W[4] = {0.5f, 1.0f, 0.25f, -1.0f}, b[2] = {0.1f, 0.0f}, Y[2];
    ref_linear_gelu_rows(X, W, b, GELU_ERF, Y, 1, 2, 2, NULL, 0); /* [1 -2]·W = [0, 3]; + b = [0.1, 3] */
    EXPECT(fabs(Y[0] - ref_gelu_erf(0.1)) < 1e-7 && fabs(Y[1] - ref_gelu_erf(3.0)) < 1e-6);
    ref_linear_gelu_rows(X, W, NULL, GELU_TANH, Y, 1, 2, 2, NULL, 0);
    EXPECT(Y[0] == 0.0f && fabs(Y[1] - ref_gelu_tanh(3.0)) < 1e-6);
}

static void test_attention(void)
{
    /* one key: o is its value, L is its score */
    float q[2] = {1.0f, 2.0f}, k1[2] = {3.0f, -1.0f}, v1[2] = {0.25f, -4.0f}, o[2], L;
    ref_attention_row(q, k1, v1, 1, 2, 2, 0.5f, o, &L);
    EXPECT(o[0] == 0.25f && o[1] == -4.0f && L == 0.5f);
    /* two keys with scores 0 and ln 3: weights 1/4 and 3/4, L = ln 4 */
    float qq[1] = {1.0f}, kk[2] = {0.0f, (float)log(3.0)}, vv[2] = {1.0f, 5.0f};
    ref_attention_row(qq, kk, vv, 2, 1, 1, 1.0f, o, &L);
    EXPECT(fabs(o[0] - 4.0) < 1e-6 && fabs(L - log(4.0)) < 1e-6);
    /* no visible key: o = 0, L = −∞ */
    ref_attention_row(q, k1, v1, 0, 2, 2, 1.0f, o, &L);
    EXPECT(o[0] == 0.0f && o[1] == 0.0f && isinf(L) && L < 0);
    /* properties on random rows: o is a convex mix of the values (inside their
     * range per column); equal keys give the mean of the values; shifting every
     * score (a key direction orthogonal to nothing: add c·q/|q|² to each key)
     * shifts L by scale·c and leaves o unchanged */
    enum { N = 300, D = 8 };
    static float K[N * D], V[N * D], K2[N * D], Q[D], O[D], O2[D];
    wb_fill_uniform_f32(K, N * D, -2.0f, 2.0f, 11);
    wb_fill_uniform_f32(V, N * D, -1.0f, 1.0f, 12);
    wb_fill_uniform_f32(Q, D, -1.0f, 1.0f, 13);
    float L2;
    ref_attention_row(Q, K, V, N, D, D, 0.35f, O, &L);
    for (int c = 0; c < D; ++c) {
        float lo = INFINITY, hi = -INFINITY;
        for (int j = 0; j < N; ++j) lo = fminf(lo, V[j * D + c]), hi = fmaxf(hi, V[j * D + c]);
        EXPECT(O[c] >= lo && O[c] <= hi);
    }
    double qn = 0;
    for (int c = 0; c < D; ++c) qn += (double)Q[c] * Q[c];
    for (int j = 0; j < N; ++j)
        for (int c = 0; c < D; ++c) K2[j * D + c] = (float)(K[j * D + c] + 3.0 * Q[c] / qn);
    ref_attention_row(Q, K2, V, N, D, D, 0.35f, O2, &L2);
    EXPECT(fabs(L2 - L - 0.35 * 3.0) < 1e-4);
    for (int c = 0; c < D; ++c) EXPECT(fabs(O2[c] - O[c]) < 1e-5);
    for (int j = 0; j < N; ++j)
        for (int c = 0; c < D; ++c) K2[j * D + c] = K[c];
    ref_attention_row(Q, K2, V, N, D, D, 0.35f, O2, &L2);
    for (int c = 0; c < D; ++c) {
        double mean = 0;
        for (int j = 0; j < N; ++j) mean += V[j * D + c];
        EXPECT(fabs(O2[c] - mean / N) < 1e-6);
    }
    /* the stride lets a row read keys of a wider layout: the first D of 2D */
    static float KW[N * 2 * D], VW[N * 2 * D];
    for (int j = 0; j < N; ++j)
        for (int c = 0; c < 2 * D; ++c) {
            KW[j * 2 * D + c] = c < D ? K[j * D + c] : 1e30f;
            VW[j * 2 * D + c] = c < D ? V[j * D + c] : 1e30f;
        }
    ref_attention_row(Q, KW, VW, N, D, 2 * D, 0.35f, O2, &L2);
    EXPECT(L2 == L);
    for (int c = 0; c < D; ++c) EXPECT(O2[c] == O[c]);
}

int main(int argc, char **argv)
{
    const wb_test_group groups[] = {{"vector_add", test_vector_add}, {"sum", test_sum}, {"max", test_max},
                                    {"softmax", test_softmax}, {"layernorm", test_layernorm}, {"rope", test_rope}, {"gemm", test_gemm}, {"gelu", test_gelu}, {"attention", test_attention}};
    return wb_test_main(argc, argv, groups, sizeof groups / sizeof groups[0]);
}
