/**
 * @file stages/07_rope/kernels.cu
 * @brief Stage 07 — RoPE: from a cos/sin table, to angles computed in the kernel
 *        (accurately), to Q and K rotated in one launch with 16-byte loads.
 *
 * RoPE is elementwise and memory-bound: per pair, 4 (fp16) or 8 (fp32) bytes read
 * and written per tensor, and a sine and a cosine. The lessons: where the angle
 * comes from (a table costs bytes, computing costs instructions — and accuracy),
 * and how much work one thread can share (the angles of a token are the same for
 * every head of Q and K).
 */
#include "kernels.h"

#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_check.h"
#include "dtype_device.cuh" /* load, store, dispatch over fp32/fp16 */

/** @brief Indices of pair i's two elements in a head vector of length d. */
template <int STYLE>
static __device__ __forceinline__ void pair_index(int i, int d, int *a, int *b)
{
    if (STYLE == ROPE_ROTATE_HALF)
        *a = i, *b = i + d / 2;
    else
        *a = 2 * i, *b = 2 * i + 1;
}

/** @brief Threads per block of every variant. */
#define ROPE_THREADS 256

static const char *check_args(const rope_args *a)
{
    if (a->B < 1 || a->H < 1 || a->N < 1 || a->d < 2) return "needs B, H, N >= 1 and d >= 2";
    if (a->d % 2) return "needs an even head dimension d";
    if (a->start_pos < 0 || a->start_pos + a->N > (1LL << 24)) return "needs 0 <= positions < 2^24";
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v1 — a precomputed table of cos θ and sin θ.
 * ------------------------------------------------------------------------- */

/**
 * @brief v1 — one thread per pair, cos θ and sin θ read from a table.
 *
 * The table [positions][d/2] of (cos, sin) is computed once on the host in float64
 * (as a model computes its cache once), so the angles are as accurate as fp32 can
 * hold. Per pair: two loads of x, one 8-byte table load, two stores, four FMAs.
 * The table costs bytes: for fp16 Q it is twice the size of the rotated data per
 * token and head (8 bytes of table for 4 bytes of pair) — although across heads
 * and between Q and K it is re-read from the L2, not DRAM. One launch per tensor.
 */
template <typename T, int STYLE>
__global__ void rope_table(const T *x, T *y, long long pairs, int N, int d, long long start, const float2 *cs)
{
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    int half = d / 2, i = (int)(p % half);
    long long row = p / half; /* (b·H + h)·N + n */
    float2 c = cs[(start + row % N) * half + i];
    int ia, ib;
    pair_index<STYLE>(i, d, &ia, &ib);
    float xa = load(x, row * d + ia), xb = load(x, row * d + ib);
    store(y, row * d + ia, xa * c.x - xb * c.y);
    store(y, row * d + ib, xb * c.x + xa * c.y);
}

/** @brief Launch a one-thread-per-pair kernel over Q, then over K. */
template <typename T, typename Kernel, typename... Extra>
static const char *per_tensor(Kernel kernel, const char *name, const rope_args *a, Extra... extra)
{
    long long pairs = (long long)a->B * a->H * a->N * (a->d / 2);
    long long blocks = (pairs + ROPE_THREADS - 1) / ROPE_THREADS;
    if (blocks > 2147483647LL) return "too many pairs for one launch";
    kernel<<<(unsigned)blocks, ROPE_THREADS>>>((const T *)a->q, (T *)a->q_out, pairs, a->N, a->d, a->start_pos, extra...);
    WB_CHECK_LAUNCH("rope (Q)");
    kernel<<<(unsigned)blocks, ROPE_THREADS>>>((const T *)a->k, (T *)a->k_out, pairs, a->N, a->d, a->start_pos, extra...);
    WB_CHECK_LAUNCH("rope (K)");
    (void)name;
    return NULL;
}

static const char *rope_v1(const rope_args *a)
{
    const char *why = check_args(a);
    if (why) return why;
    if (!a->cos_sin) return "needs the cos/sin table";
    return dispatch(a->dtype, [&](auto t) {
        using T = decltype(t);
        const float2 *cs = (const float2 *)a->cos_sin;
        if (a->style == ROPE_ROTATE_HALF) return per_tensor<T>(rope_table<T, ROPE_ROTATE_HALF>, "rope_table", a, cs);
        return per_tensor<T>(rope_table<T, ROPE_INTERLEAVED>, "rope_table", a, cs);
    });
}

/* ---------------------------------------------------------------------------
 * Computing the angle in the kernel, accurately.
 * ------------------------------------------------------------------------- */

/** @brief 2π as the sum of three floats (Cody–Waite): C1 + C2 + C3 ≈ 2π to ~2^-72. */
#define TWO_PI_1 6.28318548202514648437500f
/** @brief Second part of 2π. */
#define TWO_PI_2 -1.74845553146951715461909e-7f
/** @brief Third part of 2π. */
#define TWO_PI_3 -6.86049804002352749121573793900097e-15f
/** @brief 1/(2π) */
#define INV_TWO_PI 0.159154943091895335768883763f

/**
 * @brief θ = pos · ω reduced to about [−π, π], accurate to a few 1e-7 for any
 *        position below 2^24.
 *
 * In plain fp32, θ = pos · ω carries a relative error of ~1e-7 — at θ = 32768 that
 * is 4e-3 radians, far more than any sine's error. So: ω arrives as two floats
 * (hi + lo, split from float64 on the host); pos · hi is made exact by an FMA that
 * recovers the product's rounding error; the integer multiple of 2π nearest θ is
 * removed with three FMAs against 2π split in three (Cody–Waite), each exact or
 * nearly; the low parts are added last, to a number below π.
 */
static __device__ __forceinline__ float reduced_angle(long long pos, float2 omega)
{
    float p = (float)pos;                         /* exact below 2^24 */
    float hi = p * omega.x;
    float lo = fmaf(p, omega.x, -hi) + p * omega.y; /* the product's rounding error, and the low part of ω */
    float k = rintf(hi * INV_TWO_PI);
    float r = fmaf(-k, TWO_PI_1, hi);              /* hi − k·C1: exact (Sterbenz) */
    r = fmaf(-k, TWO_PI_2, r);
    r = fmaf(-k, TWO_PI_3, r);
    return r + lo;
}

/**
 * @brief v2 — one thread per pair, the angle computed in the kernel.
 *
 * No table: per pair, the 8 table bytes are replaced by ~15 instructions —
 * reduced_angle() and one __sincosf (two MUFU instructions: sine and cosine in
 * hardware). __sincosf alone is fast but does no range reduction: its error grows
 * with |θ| (see the angle study on the page), which is why it only ever sees the
 * reduced angle here. One launch per tensor, and the same sine and cosine are
 * recomputed for every head of Q and of K.
 */
template <typename T, int STYLE>
__global__ void rope_fused(const T *x, T *y, long long pairs, int N, int d, long long start, const float2 *omega)
{
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= pairs) return;
    int half = d / 2, i = (int)(p % half);
    long long row = p / half;
    float s, c;
    __sincosf(reduced_angle(start + row % N, omega[i]), &s, &c);
    int ia, ib;
    pair_index<STYLE>(i, d, &ia, &ib);
    float xa = load(x, row * d + ia), xb = load(x, row * d + ib);
    store(y, row * d + ia, xa * c - xb * s);
    store(y, row * d + ib, xb * c + xa * s);
}

static const char *rope_v2(const rope_args *a)
{
    const char *why = check_args(a);
    if (why) return why;
    return dispatch(a->dtype, [&](auto t) {
        using T = decltype(t);
        const float2 *omega = (const float2 *)a->inv_freq;
        if (a->style == ROPE_ROTATE_HALF) return per_tensor<T>(rope_fused<T, ROPE_ROTATE_HALF>, "rope_fused", a, omega);
        return per_tensor<T>(rope_fused<T, ROPE_INTERLEAVED>, "rope_fused", a, omega);
    });
}

/* ---------------------------------------------------------------------------
 * v3 — Q and K in one launch, 16-byte loads, angles shared by all heads.
 * ------------------------------------------------------------------------- */

/**
 * @brief The pair index of the k-th of a thread's P pairs. The thread owns two
 *        16-byte slots of each head vector: elements [j, j + P) and [j + d/2, j + d/2 + P),
 *        j = c·P for its chunk c. Rotate-half: those are the a's and the b's of pairs
 *        j … j + P − 1. Interleaved: each slot holds P/2 whole (a, b) pairs, pairs
 *        j/2 … and (j + d/2)/2 … . Either way every warp load is 32 consecutive slots.
 */
template <int STYLE, int P>
static __device__ __forceinline__ int pair_of(int k, int j, int d)
{
    if (STYLE == ROPE_ROTATE_HALF) return j + k;
    return k < P / 2 ? j / 2 + k : (j + d / 2) / 2 + (k - P / 2);
}

/** @brief Rotate the P pairs held in a thread's two slots, in place, by the angles (c, s) of pair_of(). */
template <typename T, int STYLE, int P>
static __device__ __forceinline__ void rotate_slots(uint4 &slot0, uint4 &slot1, const float *c, const float *s)
{
    float x[2 * P]; /* slot 0 then slot 1 */
    unpack16(slot0, x, T());
    unpack16(slot1, x + P, T());
#pragma unroll
    for (int k = 0; k < P; ++k) {
        int ia = STYLE == ROPE_ROTATE_HALF ? k : 2 * k, ib = STYLE == ROPE_ROTATE_HALF ? P + k : 2 * k + 1;
        float a = x[ia], b = x[ib];
        x[ia] = a * c[k] - b * s[k];
        x[ib] = b * c[k] + a * s[k];
    }
    slot0 = pack16(x, T());
    slot1 = pack16(x + P, T());
}

/** @brief Heads one thread of v3 rotates (Q and K each): their loads are all in flight together. */
#ifndef ROPE_HEADS_PER_THREAD
#define ROPE_HEADS_PER_THREAD 2
#endif

/**
 * @brief v3 — one thread per (batch, 2 heads, token, P pairs), Q and K together.
 *
 * The angles of a pair depend on the token's position and the pair index only, not
 * on the head or on Q vs K: computed once, they serve 2 heads × (Q, K) = 4 head
 * vectors (the trigonometry divided by 4). Each thread owns P pairs (4 in fp32, 8 in
 * fp16) so that every access is a 16-byte load or store, and it issues all 8 loads
 * (2 slots × 2 heads × Q, K) before the first store: the compiler may not move a
 * load above a store that could alias it (in place, q_out is q), so the order in the
 * source is the order in flight. Contract: d a multiple of 2P (8 fp32, 16 fp16) and
 * 16-byte aligned tensors.
 */
template <typename T, int STYLE>
__global__ void rope_qk_vectorized(const T *q, const T *k, T *q_out, T *k_out, int B, int H, int N, int d,
                                   long long start, const float2 *omega)
{
    constexpr int P = 16 / sizeof(T), HG = ROPE_HEADS_PER_THREAD;
    int chunks = d / (2 * P), groups = (H + HG - 1) / HG;
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)B * groups * N * chunks) return;
    int j = (int)(t % chunks) * P; /* element offset of the first slot */
    long long rest = t / chunks;
    int n = (int)(rest % N);
    rest /= N;
    int g = (int)(rest % groups), b = (int)(rest / groups);
    float c[P], s[P];
#pragma unroll
    for (int kk = 0; kk < P; ++kk) __sincosf(reduced_angle(start + n, omega[pair_of<STYLE, P>(kk, j, d)]), &s[kk], &c[kk]);
    int first = j, second = j + d / 2; /* the thread's two 16-byte slots */
    uint4 qs[HG][2], ks[HG][2];
    long long offset[HG];
#pragma unroll
    for (int h = 0; h < HG; ++h) { /* all loads first */
        int head = g * HG + h;
        offset[h] = (((long long)b * H + head) * N + n) * d;
        if (head < H) {
            qs[h][0] = *(const uint4 *)(q + offset[h] + first), qs[h][1] = *(const uint4 *)(q + offset[h] + second);
            ks[h][0] = *(const uint4 *)(k + offset[h] + first), ks[h][1] = *(const uint4 *)(k + offset[h] + second);
        }
    }
#pragma unroll
    for (int h = 0; h < HG; ++h) {
        if (g * HG + h >= H) continue;
        rotate_slots<T, STYLE, P>(qs[h][0], qs[h][1], c, s);
        rotate_slots<T, STYLE, P>(ks[h][0], ks[h][1], c, s);
        *(uint4 *)(q_out + offset[h] + first) = qs[h][0], *(uint4 *)(q_out + offset[h] + second) = qs[h][1];
        *(uint4 *)(k_out + offset[h] + first) = ks[h][0], *(uint4 *)(k_out + offset[h] + second) = ks[h][1];
    }
}

static const char *rope_v3(const rope_args *a)
{
    const char *why = check_args(a);
    if (why) return why;
    int P = (int)(16 / wb_dtype_bytes(a->dtype));
    if (a->d % (2 * P)) return a->dtype == WB_F16 ? "needs d a multiple of 16 (fp16)" : "needs d a multiple of 8 (fp32)";
    if ((((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->q_out | (uintptr_t)a->k_out) & 15u) != 0)
        return "needs 16-byte aligned tensors";
    long long groups = (a->H + ROPE_HEADS_PER_THREAD - 1) / ROPE_HEADS_PER_THREAD;
    long long threads = (long long)a->B * groups * a->N * (a->d / (2 * P));
    long long blocks = (threads + ROPE_THREADS - 1) / ROPE_THREADS;
    if (blocks > 2147483647LL) return "too many threads for one launch";
    return dispatch(a->dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        auto kernel = a->style == ROPE_ROTATE_HALF ? rope_qk_vectorized<T, ROPE_ROTATE_HALF>
                                                   : rope_qk_vectorized<T, ROPE_INTERLEAVED>;
        kernel<<<(unsigned)blocks, ROPE_THREADS>>>((const T *)a->q, (const T *)a->k, (T *)a->q_out, (T *)a->k_out,
                                                   a->B, a->H, a->N, a->d, a->start_pos,
                                                   (const float2 *)a->inv_freq);
        WB_CHECK_LAUNCH("rope_qk_vectorized");
        return NULL;
    });
}

extern "C" const rope_variant rope_variants[] = {
    {"v1", "cos/sin table, thread per pair, Q then K", 1, rope_v1},
    {"v2", "angles in kernel (reduced), thread per pair", 0, rope_v2},
    {"v3", "Q+K in one launch, 16-byte loads, shared angles", 0, rope_v3},
    {"ex", "your kernel (exercise.cu)", 0, rope_exercise},
};
extern "C" const int rope_variant_count = sizeof rope_variants / sizeof rope_variants[0];

/* ---------------------------------------------------------------------------
 * The angle study: sin θ and cos θ three ways, for the page's accuracy table.
 * ------------------------------------------------------------------------- */

/** @brief One thread per (position, pair): the three methods side by side. */
__global__ void angle_study(const long long *positions, int n_pos, int half, const float2 *omega, float *out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_pos * half) return;
    long long pos = positions[t / half];
    float2 w = omega[t % half];
    float theta = (float)pos * w.x, s, c;
    float *o = out + (long long)t * ANGLE_METHODS * 2;
    sincosf(theta, &s, &c);
    o[2 * ANGLE_F32_SINCOSF] = s, o[2 * ANGLE_F32_SINCOSF + 1] = c;
    __sincosf(theta, &s, &c);
    o[2 * ANGLE_F32_FAST] = s, o[2 * ANGLE_F32_FAST + 1] = c;
    __sincosf(reduced_angle(pos, w), &s, &c);
    o[2 * ANGLE_REDUCED_FAST] = s, o[2 * ANGLE_REDUCED_FAST + 1] = c;
}

extern "C" void rope_angle_study(const long long *positions, int n_pos, int d, const float *inv_freq, float *out)
{
    int total = n_pos * (d / 2);
    angle_study<<<(total + 255) / 256, 256>>>(positions, n_pos, d / 2, (const float2 *)inv_freq, out);
    WB_CHECK_LAUNCH("angle_study");
}
