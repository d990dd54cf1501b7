/**
 * @file stages/10_gpt2_e2e/decode_fused.cu
 * @brief v2: the fused decode linear. A decode step is ~100 matrix–vector
 *        products whose weights are read once each: the step's floor is its
 *        weight bytes at the copy roof. v1 spends 14 launches per block on
 *        it (LayerNorm, the small-M linear's two passes, the head split, the
 *        cache append, the residual adds), each a few µs of launch and ramp
 *        for well under a µs of bytes. v2 gives each linear its neighbours:
 *        LayerNorm as its prologue, and bias, GELU, residual add or the K/V
 *        append as its epilogue — 4 kernels and stage 09's attention per
 *        block.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "02_reduction/block_reduce.cuh"      /* warp_allreduce: stage 02's butterfly */
#include "03_gemm/mma_ptx.cuh"                /* mma_16x8x16: 9-64 rows on tensor cores */
#include "04_fused_gelu_linear/bias_gelu.cuh" /* gelu_tanh */
#include "argmax_key.h"
#include "cuda_check.h"
#include "dependent_launch.cuh" /* on sm_90 the decode linears launch as programmatic dependents */
#include "device.h"             /* wb_current_gpu, wb_current_smem_per_block */
#include "dtype_device.cuh"
#include "gpt2.h" /* GPT2_LN_EPS */
#include "kernels.h"

/** @brief Warps per block of the fused decode linear. */
#define DECODE_WARPS 4
/** @brief Outputs each warp computes at once: the x it reads from shared memory serves both. */
#define DECODE_OUTS 2
/** @brief 16-byte loads of W each lane keeps in flight per output: with DECODE_OUTS, 16 loads, 8 KB a warp. */
#define DECODE_LOADS 8

/** @brief 16 bytes of W's row n at k (zeros past K or N: no memory access). */
template <typename T>
static __device__ __forceinline__ uint4 weight_chunk(const T *W, int n, int N, int K, int k)
{
    return n < N && k < K ? __ldg(reinterpret_cast<const uint4 *>(W + (long long)n * K + k)) : make_uint4(0, 0, 0, 0);
}

/**
 * @brief The prologue: the block's ROWS input rows in shared memory, in the
 *        storage type, rows M..ROWS−1 zero (so the main loop has no branch on
 *        M). With LayerNorm (gain and shift already in shared memory), each
 *        row is then normalised in place (stage 05's two passes, a warp per
 *        row), rounded to T as v1's LayerNorm kernel rounds its output. All
 *        16-byte loads of x are issued at once: one latency, where reading x
 *        inside the main loop would put a trip to L2 in front of every use of
 *        the weights.
 */
template <typename T, int ROWS>
static __device__ void stage_rows(const T *x, const float *gain, const float *shift, T *rows, int M, int K)
{
    constexpr int VEC = Vec16<T>::N;
    __shared__ float mean[ROWS], rstd[ROWS];
#pragma unroll 4 /* up to 4 loads in flight per thread before the first is stored (K 3072: 6 per thread in fp32) */
    for (int i = threadIdx.x; i < ROWS * K / VEC; i += blockDim.x) {
        int m = i * VEC / K;
        reinterpret_cast<uint4 *>(rows)[i] =
            m < M ? __ldg(reinterpret_cast<const uint4 *>(x) + i) : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    if (!gain) return;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int m = warp; m < M; m += DECODE_WARPS) {
        const T *r = rows + (long long)m * K;
        float s = 0.0f;
#pragma unroll 8
        for (int k = lane; k < K; k += 32) s += load(r, k);
        float mu = warp_allreduce<SumOp>(s) / K, v = 0.0f;
#pragma unroll 8
        for (int k = lane; k < K; k += 32) v += (load(r, k) - mu) * (load(r, k) - mu);
        v = warp_allreduce<SumOp>(v) / K;
        if (lane == 0) mean[m] = mu, rstd[m] = rsqrtf(v + GPT2_LN_EPS);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < M * K; i += blockDim.x) {
        int m = i / K, k = i % K;
        store(rows, i, (load(rows, i) - mean[m]) * rstd[m] * gain[k] + shift[k]);
    }
    __syncthreads();
}

/**
 * @brief The epilogue of output n of row m: s is the finished dot product plus
 *        its bias; for DECODE_RESIDUAL, resid is y[m][n] as it was.
 */
template <typename T, decode_epilogue EPI>
static __device__ __forceinline__ void decode_epilogue_apply(const decode_linear_args &a, int m, int n, float s,
                                                             float resid, unsigned long long &best)
{
    if (EPI == DECODE_GELU) {
        store((T *)a.y, (long long)m * a.N + n, gelu_tanh(s));
    } else if (EPI == DECODE_RESIDUAL) {
        store((T *)a.y, (long long)m * a.N + n, resid + s);
    } else if (EPI == DECODE_QKV_APPEND) { /* n in [0, 3C): q, k or v; k and v go straight to the page pools */
        int C = a.N / 3, part = n / C, c = n - part * C, d = C / a.H;
        if (part == 0) {
            store((T *)a.y, (long long)m * C + c, s);
        } else { /* stage 08's pool layout [page][head][offset][d], at this row's slot */
            long long slot = a.slots[m], page = slot / a.block_size, offset = slot % a.block_size;
            T *pool = (T *)(part == 1 ? a.k_pool : a.v_pool);
            store(pool, ((page * a.H + c / d) * a.block_size + offset) * d + c % d, s);
        }
    } else { /* DECODE_LOGITS_ARGMAX */
        store((T *)a.y, (long long)m * a.ldy + n, s);
        unsigned long long key = gpt2_argmax_key(s, n);
        best = key > best ? key : best;
    }
}

/** @brief The biases of outputs n … n + DECODE_OUTS − 1 (zero past N, or without a bias). */
static __device__ __forceinline__ void fetch_bias(float (&b)[DECODE_OUTS], const float *bias, int n, int N)
{
#pragma unroll
    for (int o = 0; o < DECODE_OUTS; ++o) b[o] = bias && n + o < N ? __ldg(bias + n + o) : 0.0f;
}

/**
 * @brief v2's decode linear: y = epilogue(LayerNorm?(x)·W + bias) for M <= ROWS
 *        rows, W given transposed ([N][K]).
 *
 * A warp computes DECODE_OUTS outputs at a time, the grid at most one wave,
 * each warp looping over output pairs. Every lane keeps DECODE_LOADS 16-byte
 * loads of each output's weights in flight, and refills each slot as soon as
 * it has used it: with the same slot one round further along K, or, in the
 * last round, with the next pair's first round. So the next pair's weights
 * stream while this pair's dot products are reduced and its epilogue runs.
 *
 * Everything that does not depend on the kernel ahead — the first pair's
 * weights and biases, the LayerNorm gain and shift — is requested before
 * waiting for it (as a programmatic dependent, while it still runs). After
 * the wait, one latency: the input rows (all their loads at once) and, for
 * the residual add, the old y. The rows then come from shared memory, zero
 * past M: the loops over rows have no branches, so they stay unrolled.
 */
template <typename T, int ROWS, decode_epilogue EPI>
__global__ void __launch_bounds__(DECODE_WARPS * 32) decode_linear_fused(decode_linear_args a)
{
    constexpr int VEC = Vec16<T>::N, ROUND = 32 * VEC * DECODE_LOADS; /* the K one round of loads covers */
    extern __shared__ __align__(16) unsigned char smem[];
    T *rows = reinterpret_cast<T *>(smem);                     /* [ROWS][K] the input rows (LayerNorm'd) */
    float *gain = reinterpret_cast<float *>(rows + ROWS * a.K); /* [K] with LayerNorm, then shift [K] */
    float *shift = gain + a.K;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, N = a.N, K = a.K;
    const int stride = gridDim.x * DECODE_WARPS * DECODE_OUTS;
    const T *W = (const T *)a.w_t;
    const int lane_o = lane / ROWS, lane_m = lane % ROWS; /* the output and row this lane's epilogue handles */
    const bool epilogue_lane = lane < DECODE_OUTS * ROWS && lane_m < a.M;
    int n = (blockIdx.x * DECODE_WARPS + warp) * DECODE_OUTS;
    uint4 w16[DECODE_OUTS][DECODE_LOADS];
#pragma unroll
    for (int u = 0; u < DECODE_LOADS; ++u)
#pragma unroll
        for (int o = 0; o < DECODE_OUTS; ++o) w16[o][u] = weight_chunk(W, n + o, N, K, (u * 32 + lane) * VEC);
    float bias[DECODE_OUTS];
    fetch_bias(bias, a.bias, n, N);
    if (a.ln_w)
#pragma unroll 4 /* K 768: 6 values of each per thread, their loads in flight together */
        for (int k = threadIdx.x; k < K; k += blockDim.x) gain[k] = __ldg(a.ln_w + k), shift[k] = __ldg(a.ln_b + k);
    wb_dependent_launch_sync();
    float resid = 0.0f; /* DECODE_RESIDUAL: y[lane_m][n + lane_o] before the add, requested with the rows */
    if (EPI == DECODE_RESIDUAL && epilogue_lane && n + lane_o < N)
        resid = load((const T *)a.y, (long long)lane_m * N + n + lane_o);
    stage_rows<T, ROWS>((const T *)a.x, a.ln_w ? gain : NULL, shift, rows, a.M, K);
    unsigned long long best = 0; /* lane o·ROWS + m: row m's best (value, token) key over this warp's outputs */
    for (; n < N; n += stride) {
        float acc[DECODE_OUTS][ROWS] = {};
        for (int k0 = 0; k0 < K; k0 += ROUND) {
            const bool last = k0 + ROUND >= K;
#pragma unroll
            for (int u = 0; u < DECODE_LOADS; ++u) {
                int k = k0 + (u * 32 + lane) * VEC;
                if (k < K) {
                    float w[DECODE_OUTS][VEC];
#pragma unroll
                    for (int o = 0; o < DECODE_OUTS; ++o) unpack16(w16[o][u], w[o], T());
#pragma unroll
                    for (int m = 0; m < ROWS; ++m) {
                        float x[VEC];
                        unpack16(*reinterpret_cast<const uint4 *>(rows + m * K + k), x, T());
#pragma unroll
                        for (int o = 0; o < DECODE_OUTS; ++o)
#pragma unroll
                            for (int v = 0; v < VEC; ++v) acc[o][m] = fmaf(w[o][v], x[v], acc[o][m]);
                    }
                }
                /* the slot is free: refill it (this pair one round on, or the next pair's first round) */
                int next_n = last ? n + stride : n, next_k = last ? (u * 32 + lane) * VEC : k + ROUND;
#pragma unroll
                for (int o = 0; o < DECODE_OUTS; ++o) w16[o][u] = weight_chunk(W, next_n + o, N, K, next_k);
            }
        }
        float next_bias[DECODE_OUTS], next_resid = 0.0f; /* the next pair's, requested before the reductions */
        fetch_bias(next_bias, a.bias, n + stride, N);
        if (EPI == DECODE_RESIDUAL && epilogue_lane && n + stride + lane_o < N)
            next_resid = load((const T *)a.y, (long long)lane_m * N + n + stride + lane_o);
        float mine = 0.0f, my_bias = 0.0f; /* lane o·ROWS + m keeps output n + o of row m */
#pragma unroll
        for (int o = 0; o < DECODE_OUTS; ++o)
#pragma unroll
            for (int m = 0; m < ROWS; ++m) {
                float s = warp_allreduce<SumOp>(acc[o][m]);
                if (lane == o * ROWS + m) mine = s, my_bias = bias[o];
            }
        if (epilogue_lane && n + lane_o < N)
            decode_epilogue_apply<T, EPI>(a, lane_m, n + lane_o, mine + my_bias, resid, best);
#pragma unroll
        for (int o = 0; o < DECODE_OUTS; ++o) bias[o] = next_bias[o];
        resid = next_resid;
    }
    if (EPI == DECODE_LOGITS_ARGMAX) { /* the block's best per row, then one atomic per block and row */
        __shared__ unsigned long long warp_best[DECODE_WARPS][DECODE_OUTS * ROWS];
        if (lane < DECODE_OUTS * ROWS) warp_best[warp][lane] = best;
        __syncthreads();
        if (threadIdx.x < a.M) {
            unsigned long long b = 0;
            for (int w = 0; w < DECODE_WARPS; ++w)
                for (int o = 0; o < DECODE_OUTS; ++o) {
                    unsigned long long key = warp_best[w][o * ROWS + threadIdx.x];
                    b = key > b ? key : b;
                }
            atomicMax(a.best + threadIdx.x, b);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 9-64 rows (fp16): the decode linear on tensor cores                      */
/* ------------------------------------------------------------------------ */
/*
 * Serving 64 sequences, every weight meets 64 rows: 128 FLOP for its 2 bytes.
 * The kernel above spends one FFMA per weight and row, and CUDA cores do
 * about 16 FLOP per byte of the H200's copy roof (67 TFLOP/s against 4.3
 * TB/s): past 8-16 rows it is bound by instructions, and the weights are read
 * once per group of 8 rows. Tensor cores do about 230 FLOP per byte (990
 * TFLOP/s): one mma.sync.m16n8k16 multiplies 16 rows by 8 outputs over 16 k,
 * so the linear is back under the bytes up to 64 rows, each weight read once.
 *
 * A block finishes a unit of 32 outputs (4 tiles of mma's n = 8) for every
 * row: its 8 warps split the unit's K, each lane holding MMA_ROUND 16-byte
 * loads of each tile's weights (48 KB a block in flight); the warps' parts
 * are added in shared memory in a fixed order, so every run gives the same
 * sums. The rows (A) are staged once per block, 16 bytes of padding a row so
 * a fragment's 8 rows fall on different banks. Lane (g, t) takes k 8t … 8t + 7
 * of a 32-wide chunk as one 16-byte load, of the rows and of the weights
 * alike: mma's k {2t, 2t+1, 2t+8, 2t+9} of two consecutive mma — the order of
 * k inside a dot product is free as long as both operands share it.
 *
 * Where the outputs are few (proj, fc-proj: 24 units) K is cut into slices,
 * a block a slice (split-K): each block leaves its sums in a workspace, and
 * the last block of a unit to finish (a counter) adds the slices in order and
 * applies the epilogue. With LayerNorm the rows are staged whole (the
 * statistics need all of K): one slice.
 */

/** @brief Warps per block of the tensor-core decode linear. */
#define MMA_WARPS 8
/** @brief Outputs a block finishes at once: 4 tiles of mma's n (8). */
#define MMA_UNIT 32
/** @brief mma tiles (8 outputs each) in a unit. */
#define MMA_TILES (MMA_UNIT / 8)
/** @brief 32-wide chunks of K each warp's lanes load per round: 8 warps × 3 × 32 = a round of 768 k. */
#define MMA_ROUND 3
/** @brief Widest slice of K a block stages without LayerNorm (64 rows: 99 KB). */
#define MMA_SLICE_MAX_K 768
/** @brief Halves of padding after each staged row (16 bytes: a fragment's 8 rows on different banks). */
#define MMA_PAD 8
/** @brief Floats between two rows of a warp's parts in shared memory: 32 outputs and 8 of padding, so a fragment's
 *         8 rows stored as float2 fall on different banks (at 32 they all fell on the same 8: 8-way conflicts). */
#define MMA_PARTS_PITCH 40

/** @brief Row pitch in shared memory (halves) of a slice of K: whole 32-wide chunks (zeros past K), then the pad. */
static __host__ __device__ __forceinline__ int mma_pitch(int slice_k) { return (slice_k + 31) / 32 * 32 + MMA_PAD; }

/** @brief Rows in 16-row tiles (mma's m) the instantiation for M rows takes: 1, 2 or 4 (16, 32, 64 rows). */
static int mma_tiles_for(int M) { return M <= 16 ? 1 : M <= 32 ? 2 : 4; }

/** @brief x[:, kb … kb + kw) of the M rows into shared memory with row pitch KP (zeros past M and past K; kw whole
 *         chunks); with LayerNorm (kb = 0: all of K) each row then normalised in place, rounded to fp16 as v1's
 *         LayerNorm is. */
template <int ROWS>
static __device__ void stage_slice(const __half *x, const float *gain, const float *shift, __half *rows, int M, int K,
                                   int kb, int kw, int KP)
{
    const int per_row = kw / 8, chunks = ROWS * per_row, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#if __CUDA_ARCH__ >= 800 /* cp.async: every 16-byte copy in flight at once, through no register (zeros past M, K) */
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
        const int m = i / per_row, k = kb + i % per_row * 8;
        const bool live = m < M && k < K;
        cp_async_16(rows + m * KP + i % per_row * 8, live ? x + (long long)m * K + k : x, live ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait<0>();
#else /* sm_75: through registers, IN_FLIGHT loads a thread before it stores the first (3 trips to L2, not 24) */
    constexpr int IN_FLIGHT = 8;
    for (int i0 = threadIdx.x; i0 < chunks; i0 += IN_FLIGHT * blockDim.x) {
        uint4 v[IN_FLIGHT];
#pragma unroll
        for (int b = 0; b < IN_FLIGHT; ++b) {
            const int i = i0 + b * blockDim.x, m = i / per_row, k = kb + i % per_row * 8;
            v[b] = i < chunks && m < M && k < K ? __ldg(reinterpret_cast<const uint4 *>(x + (long long)m * K + k))
                                                : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < IN_FLIGHT; ++b) {
            const int i = i0 + b * blockDim.x;
            if (i < chunks) *reinterpret_cast<uint4 *>(rows + i / per_row * KP + i % per_row * 8) = v[b];
        }
    }
#endif
    __syncthreads();
    if (!gain) return;
    __shared__ float mean[ROWS], rstd[ROWS];
    for (int m = warp; m < M; m += MMA_WARPS) { /* a warp a row, 16 bytes a lane at a time: stage 05's two passes */
        const uint4 *r = reinterpret_cast<const uint4 *>(rows + m * KP);
        float s = 0.0f, q = 0.0f, f[8];
        for (int c = lane; c < K / 8; c += 32) {
            unpack16(r[c], f, __half());
#pragma unroll
            for (int e = 0; e < 8; ++e) s += f[e];
        }
        const float mu = warp_allreduce<SumOp>(s) / K;
        for (int c = lane; c < K / 8; c += 32) {
            unpack16(r[c], f, __half());
#pragma unroll
            for (int e = 0; e < 8; ++e) q += (f[e] - mu) * (f[e] - mu);
        }
        const float var = warp_allreduce<SumOp>(q) / K;
        if (lane == 0) mean[m] = mu, rstd[m] = rsqrtf(var + GPT2_LN_EPS);
    }
    __syncthreads();
#pragma unroll 4
    for (int i = threadIdx.x; i < M * (K / 8); i += blockDim.x) { /* 8 values at a time */
        const int m = i / (K / 8), k = i % (K / 8) * 8;
        uint4 *chunk = reinterpret_cast<uint4 *>(rows + m * KP + k);
        const float4 g0 = __ldg(reinterpret_cast<const float4 *>(gain + k)), g1 = __ldg(reinterpret_cast<const float4 *>(gain + k + 4));
        const float4 s0 = __ldg(reinterpret_cast<const float4 *>(shift + k)), s1 = __ldg(reinterpret_cast<const float4 *>(shift + k + 4));
        const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w}, b[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
        float f[8];
        unpack16(*chunk, f, __half());
#pragma unroll
        for (int e = 0; e < 8; ++e) f[e] = (f[e] - mean[m]) * rstd[m] * g[e] + b[e];
        *chunk = pack16(f, __half());
    }
    __syncthreads();
}

/** @brief This lane's round of weights of unit u from chunk c0 of the block's slice: tile i's output g, k 8t … 8t + 7
 *         of chunk c0 + warp + j·MMA_WARPS (zeros past N or the slice: no memory access). */
static __device__ __forceinline__ void fetch_round(uint4 (&w)[MMA_ROUND][MMA_TILES], const __half *W, int u, int c0,
                                                   int N, int K, int kb, int ke)
{
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int j = 0; j < MMA_ROUND; ++j)
#pragma unroll
        for (int i = 0; i < MMA_TILES; ++i) {
            const int n = u * MMA_UNIT + i * 8 + g, k = kb + (c0 + warp + j * MMA_WARPS) * 32 + 8 * t;
            w[j][i] = n < N && k < ke ? __ldg(reinterpret_cast<const uint4 *>(W + (long long)n * K + k))
                                      : make_uint4(0, 0, 0, 0);
        }
}

/**
 * @brief The decode linear for 9-64 rows on tensor cores (fp16): block
 *        (x, y) finishes units x, x + gridDim.x, … over slice y of K (slice_k
 *        wide), with v2's prologue and epilogues.
 */
template <int MT, decode_epilogue EPI>
__global__ void __launch_bounds__(MMA_WARPS * 32) decode_linear_mma(decode_linear_args a, int slice_k)
{
    constexpr int ROWS = 16 * MT;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int last_slice;
    const int K = a.K, N = a.N, lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int slices = gridDim.y, kb = blockIdx.y * slice_k, ke = min(K, kb + slice_k), KP = mma_pitch(slice_k);
    const int units = (N + MMA_UNIT - 1) / MMA_UNIT, chunks = (ke - kb + 31) / 32;
    __half *rows = reinterpret_cast<__half *>(smem);                     /* [ROWS][KP] */
    float *parts = reinterpret_cast<float *>(rows + (size_t)ROWS * KP); /* [MMA_WARPS][ROWS][MMA_PARTS_PITCH] */
    unsigned *counters = (unsigned *)a.workspace;                        /* [units], then the sums [slices][M][N] */
    float *sums = reinterpret_cast<float *>(counters + ((units + 3) & ~3));
    const __half *W = (const __half *)a.w_t;
    uint4 w[MMA_ROUND][MMA_TILES];
    int u = blockIdx.x;
    if (u < units) fetch_round(w, W, u, 0, N, K, kb, ke); /* the weights do not wait for the kernel ahead */
    wb_dependent_launch_sync();
    stage_slice<ROWS>((const __half *)a.x, a.ln_w, a.ln_b, rows, a.M, K, kb, KP - MMA_PAD, KP);
    unsigned long long best[ROWS / MMA_WARPS] = {}; /* DECODE_LOGITS_ARGMAX: row warp + 8j's best over this lane's outputs */
    for (; u < units; u += gridDim.x) {
        float acc[MT][MMA_TILES][4] = {};
        for (int c0 = 0; c0 < chunks; c0 += MMA_WARPS * MMA_ROUND) {
#pragma unroll
            for (int j = 0; j < MMA_ROUND; ++j) {
                const int c = c0 + warp + j * MMA_WARPS;
                if (c >= chunks) break;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const __half *r = rows + (mt * 16 + g) * KP + c * 32 + 8 * t;
                    const uint4 lo = *reinterpret_cast<const uint4 *>(r), hi = *reinterpret_cast<const uint4 *>(r + 8 * KP);
                    const unsigned first[4] = {lo.x, hi.x, lo.y, hi.y}, second[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
                    for (int i = 0; i < MMA_TILES; ++i) {
                        mma_16x8x16(acc[mt][i], first, w[j][i].x, w[j][i].y);
                        mma_16x8x16(acc[mt][i], second, w[j][i].z, w[j][i].w);
                    }
                }
            }
            /* the registers are free: the next round's weights, or the next unit's first, stream during the sums */
            const bool more = c0 + MMA_WARPS * MMA_ROUND < chunks;
            if (more || u + (int)gridDim.x < units)
                fetch_round(w, W, more ? u : u + gridDim.x, more ? c0 + MMA_WARPS * MMA_ROUND : 0, N, K, kb, ke);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) /* lane (g, t): rows g and g + 8 of the tile, outputs 2t and 2t + 1 */
#pragma unroll
            for (int i = 0; i < MMA_TILES; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    *reinterpret_cast<float2 *>(parts + (warp * ROWS + mt * 16 + g + 8 * h) * MMA_PARTS_PITCH + i * 8 +
                                                2 * t) = make_float2(acc[mt][i][2 * h], acc[mt][i][2 * h + 1]);
        __syncthreads();
        /* thread (warp, lane) adds the 8 warps' parts of output lane of rows warp, warp + 8, … in warp order */
        const int n = u * MMA_UNIT + lane;
        float sum[ROWS / MMA_WARPS];
#pragma unroll
        for (int j = 0; j < ROWS / MMA_WARPS; ++j) {
            sum[j] = 0.0f;
#pragma unroll
            for (int p = 0; p < MMA_WARPS; ++p) sum[j] += parts[(p * ROWS + warp + 8 * j) * MMA_PARTS_PITCH + lane];
        }
        __syncthreads(); /* parts is free for the next unit */
        if (slices > 1) { /* split-K: this slice's sums out; the unit's last slice adds them all, in slice order */
#pragma unroll
            for (int j = 0; j < ROWS / MMA_WARPS; ++j)
                if (warp + 8 * j < a.M && n < N) sums[((size_t)blockIdx.y * a.M + warp + 8 * j) * N + n] = sum[j];
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) last_slice = atomicAdd(counters + u, 1) == (unsigned)slices - 1;
            __syncthreads();
            if (!last_slice) continue;
            __threadfence();
#pragma unroll
            for (int j = 0; j < ROWS / MMA_WARPS; ++j) {
                sum[j] = 0.0f;
                for (int s = 0; s < slices && warp + 8 * j < a.M && n < N; ++s)
                    sum[j] += __ldcg(sums + ((size_t)s * a.M + warp + 8 * j) * N + n);
            }
            if (threadIdx.x == 0) counters[u] = 0; /* ready for the next launch */
        }
        const float bias = a.bias && n < N ? __ldg(a.bias + n) : 0.0f;
#pragma unroll
        for (int j = 0; j < ROWS / MMA_WARPS; ++j) {
            const int m = warp + 8 * j;
            if (m >= a.M || n >= N) continue;
            const float resid = EPI == DECODE_RESIDUAL ? __half2float(((const __half *)a.y)[(long long)m * N + n]) : 0.0f;
            decode_epilogue_apply<__half, EPI>(a, m, n, sum[j] + bias, resid, best[j]);
        }
    }
    if (EPI == DECODE_LOGITS_ARGMAX) /* each row's best over the warp's lanes, one atomic per block and row */
#pragma unroll
        for (int j = 0; j < ROWS / MMA_WARPS; ++j) {
            unsigned long long b = best[j];
            for (int o = 16; o; o /= 2) {
                unsigned long long other = __shfl_xor_sync(0xffffffffu, b, o);
                b = other > b ? other : b;
            }
            if (lane == 0 && warp + 8 * j < a.M) atomicMax(a.best + warp + 8 * j, b);
        }
}

/** @brief A cap below the GPU's own limit (gpt2_decode_linear_smem_cap), or 0. */
static size_t decode_smem_cap = 0;

void gpt2_decode_linear_smem_cap(size_t bytes) { decode_smem_cap = bytes; }

/** @brief Static shared memory of the kernel, at most (LayerNorm statistics, the argmax's per-warp keys). */
#define DECODE_STATIC_SMEM_BYTES (2 * DECODE_MAX_ROWS * 4 + DECODE_WARPS * DECODE_OUTS * DECODE_MAX_ROWS * 8)

/** @brief Shared memory of one block: the rows, LayerNorm's gain and shift, the static arrays. */
static size_t decode_smem_bytes(int rows, int K, size_t elem, int ln)
{
    return (size_t)rows * K * elem + (ln ? 2 * (size_t)K * sizeof(float) : 0);
}

/** @brief The most dynamic shared memory a block may ask for: the GPU's limit, or the cap, less the static arrays. */
static size_t decode_max_smem()
{
    size_t gpu = wb_current_smem_per_block();
    size_t limit = decode_smem_cap && decode_smem_cap < gpu ? decode_smem_cap : gpu;
    return limit - DECODE_STATIC_SMEM_BYTES;
}

/** @brief Launch one instantiation for a group of at most ROWS rows: one wave of blocks at most, a programmatic dependent when asked. */
template <typename T, int ROWS, decode_epilogue EPI>
static void launch_decode_rows(const decode_linear_args *a)
{
    const void *kernel = (const void *)decode_linear_fused<T, ROWS, EPI>;
    size_t smem = decode_smem_bytes(ROWS, a->K, sizeof(T), a->ln_w != NULL);
    /* asked of the runtime once per shared-memory size (K), not on every launch (a decode step makes ~50) */
    static size_t asked_smem[4], allowed_smem = 0;
    static int asked_per_sm[4], asked = 0;
    int per_sm = 0;
    for (int i = 0; i < asked; ++i)
        if (asked_smem[i] == smem) per_sm = asked_per_sm[i];
    if (!per_sm) {
        /* the kernel's limit, raised to every size asked and never lowered: one limit bounds every launch, so
         * lowering it for a smaller size made the next launch of a larger, already asked one fail (an invalid
         * argument, seen under WB_EMULATE_T4). 48 KB of dynamic shared memory plus the static arrays is already
         * too many without it (the caller checked the GPU's limit) */
        if (smem > allowed_smem) {
            WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            allowed_smem = smem;
        }
        WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, DECODE_WARPS * 32, smem));
        if (per_sm < 1) per_sm = 1;
        int slot = asked < 4 ? asked++ : 0; /* more than 4 sizes: the first slot is reused */
        asked_smem[slot] = smem, asked_per_sm[slot] = per_sm;
    }
    int sms;
    wb_current_gpu(NULL, &sms);
    const int per_block = DECODE_WARPS * DECODE_OUTS;
    long long wanted = (a->N + per_block - 1) / per_block, wave = (long long)per_sm * sms;
    wb_launch_config launch;
    cudaLaunchConfig_t *cfg = wb_launch_config_init(&launch, dim3((unsigned)(wanted < wave ? wanted : wave)),
                                                    dim3(DECODE_WARPS * 32), smem, a->dependent_launch);
    WB_CUDA_CHECK(cudaLaunchKernelEx(cfg, decode_linear_fused<T, ROWS, EPI>, *a));
    WB_CHECK_LAUNCH("decode_linear_fused");
}

/**
 * @brief Launch for all M rows: in groups whose rows fit in shared memory
 *        (all of them on an H100; on a GPU with 64 KB a block, fp32 rows of
 *        K = 3072 go 4 at a time), each with the instantiation of the fewest
 *        rows that holds it.
 */
template <typename T, decode_epilogue EPI>
static const char *launch_decode_linear(const decode_linear_args *a)
{
    int group = decode_rows_for(a->M), ln = a->ln_w != NULL;
    while (group > 1 && decode_smem_bytes(group, a->K, sizeof(T), ln) > decode_max_smem()) group /= 2;
    if (decode_smem_bytes(group, a->K, sizeof(T), ln) > decode_max_smem())
        return "fused decode linear: one row of K inputs does not fit in shared memory";
    for (int m0 = 0; m0 < a->M; m0 += group) {
        decode_linear_args g = *a;
        g.M = a->M - m0 < group ? a->M - m0 : group;
        g.x = (const T *)a->x + (long long)m0 * a->K;
        long long y_row = EPI == DECODE_QKV_APPEND ? a->N / 3 : EPI == DECODE_LOGITS_ARGMAX ? a->ldy : a->N;
        g.y = (T *)a->y + m0 * y_row;
        if (a->slots) g.slots = a->slots + m0;
        if (a->best) g.best = a->best + m0;
        switch (decode_rows_for(g.M)) {
        case 1: launch_decode_rows<T, 1, EPI>(&g); break;
        case 2: launch_decode_rows<T, 2, EPI>(&g); break;
        case 4: launch_decode_rows<T, 4, EPI>(&g); break;
        default: launch_decode_rows<T, 8, EPI>(&g); break;
        }
    }
    return NULL;
}

/** @brief The slice of K a block of the tensor-core linear takes: all of K with LayerNorm; else, where the units are
 *         fewer than the SMs, K cut so units × slices fills them (32-wide chunks, at most MMA_SLICE_MAX_K). */
static int mma_slice_k(int ln, int N, int K)
{
    int sms;
    wb_current_gpu(NULL, &sms);
    if (ln) return K;
    int units = (N + MMA_UNIT - 1) / MMA_UNIT, slices = units < sms ? sms / units : 1;
    int k = (K + slices - 1) / slices;
    k = (k + 31) / 32 * 32;
    return k < MMA_SLICE_MAX_K ? k : MMA_SLICE_MAX_K;
}

/** @brief Shared memory of one block of the tensor-core linear: 16·MT rows of the slice, the warps' parts. */
static size_t mma_smem_bytes(int mt, int slice_k)
{
    return (size_t)16 * mt * mma_pitch(slice_k) * sizeof(__half) +
           (size_t)MMA_WARPS * 16 * mt * MMA_PARTS_PITCH * sizeof(float);
}

size_t gpt2_decode_linear_workspace_bytes(int M, int N, int K)
{
    int units = (N + MMA_UNIT - 1) / MMA_UNIT, slice_k = mma_slice_k(0, N, K), slices = (K + slice_k - 1) / slice_k;
    return (size_t)((units + 3) & ~3) * sizeof(unsigned) + (size_t)slices * M * N * sizeof(float);
}

/** @brief Launch the tensor-core linear for a group of at most 16·MT rows. */
template <int MT, decode_epilogue EPI>
static void launch_mma_rows(const decode_linear_args *a, int slice_k)
{
    const void *kernel = (const void *)decode_linear_mma<MT, EPI>;
    const size_t smem = mma_smem_bytes(MT, slice_k);
    static size_t allowed_smem = 0; /* raised to every size asked, never lowered (as launch_decode_rows) */
    if (smem > allowed_smem) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        allowed_smem = smem;
    }
    int sms, per_sm = 0;
    wb_current_gpu(NULL, &sms);
    WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, MMA_WARPS * 32, smem));
    const int units = (a->N + MMA_UNIT - 1) / MMA_UNIT, slices = (a->K + slice_k - 1) / slice_k;
    const int wave = (per_sm > 0 ? per_sm : 1) * sms / slices;
    wb_launch_config launch;
    cudaLaunchConfig_t *cfg = wb_launch_config_init(&launch, dim3(units < wave ? units : wave > 0 ? wave : 1, slices),
                                                    dim3(MMA_WARPS * 32), smem, a->dependent_launch);
    WB_CUDA_CHECK(cudaLaunchKernelEx(cfg, decode_linear_mma<MT, EPI>, *a, slice_k));
    WB_CHECK_LAUNCH("decode_linear_mma");
}

/** @brief The tensor-core linear for all M rows: in groups of the most rows (64, 32 or 16) whose slice fits. */
template <decode_epilogue EPI>
static const char *launch_linear_mma(const decode_linear_args *a)
{
    const int slice_k = mma_slice_k(a->ln_w != NULL, a->N, a->K);
    int mt = mma_tiles_for(a->M);
    while (mt > 1 && mma_smem_bytes(mt, slice_k) > decode_max_smem()) mt /= 2;
    if (mma_smem_bytes(mt, slice_k) > decode_max_smem())
        return "fused decode linear: 16 rows of K inputs (LayerNorm needs them whole) do not fit in shared memory";
    const int slices = (a->K + slice_k - 1) / slice_k;
    if (slices > 1 && (!a->workspace || a->workspace_bytes < gpt2_decode_linear_workspace_bytes(a->M, a->N, a->K)))
        return "fused decode linear: past 8 rows K is split over blocks and needs the workspace";
    for (int m0 = 0; m0 < a->M; m0 += 16 * mt) {
        decode_linear_args g = *a;
        g.M = a->M - m0 < 16 * mt ? a->M - m0 : 16 * mt;
        g.x = (const __half *)a->x + (long long)m0 * a->K;
        long long y_row = EPI == DECODE_QKV_APPEND ? a->N / 3 : EPI == DECODE_LOGITS_ARGMAX ? a->ldy : a->N;
        g.y = (__half *)a->y + m0 * y_row;
        if (a->slots) g.slots = a->slots + m0;
        if (a->best) g.best = a->best + m0;
        switch (mma_tiles_for(g.M)) {
        case 1: launch_mma_rows<1, EPI>(&g, slice_k); break;
        case 2: launch_mma_rows<2, EPI>(&g, slice_k); break;
        default: launch_mma_rows<4, EPI>(&g, slice_k); break;
        }
    }
    return NULL;
}

const char *gpt2_decode_linear(wb_dtype dtype, const decode_linear_args *a)
{
    int per16 = 16 / (int)wb_dtype_bytes(dtype);
    const int most = dtype == WB_F16 ? DECODE_MMA_MAX_ROWS : DECODE_MAX_ROWS;
    if (a->M < 1 || a->M > most) return "fused decode linear: needs 1 <= M <= 8 rows (fp16: 64)";
    if (a->N < 1 || a->K < 1 || a->K % per16)
        return "fused decode linear: K must be a positive multiple of 16 bytes (4 fp32 or 8 fp16 values)";
    if (a->epilogue == DECODE_QKV_APPEND && (a->N % 3 || a->H < 1 || (a->N / 3) % a->H))
        return "fused decode linear: the QKV epilogue needs N = 3·C with C a multiple of the heads";
    if (a->epilogue == DECODE_LOGITS_ARGMAX && (!a->best || a->ldy < a->N))
        return "fused decode linear: the argmax epilogue needs best[] and ldy >= N";
    if (a->M > DECODE_MAX_ROWS) switch (a->epilogue) { /* fp16 past 8 rows: tensor cores */
        case DECODE_QKV_APPEND: return launch_linear_mma<DECODE_QKV_APPEND>(a);
        case DECODE_RESIDUAL: return launch_linear_mma<DECODE_RESIDUAL>(a);
        case DECODE_GELU: return launch_linear_mma<DECODE_GELU>(a);
        case DECODE_LOGITS_ARGMAX: return launch_linear_mma<DECODE_LOGITS_ARGMAX>(a);
        }
    return dispatch(dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        switch (a->epilogue) {
        case DECODE_QKV_APPEND: return launch_decode_linear<T, DECODE_QKV_APPEND>(a);
        case DECODE_RESIDUAL: return launch_decode_linear<T, DECODE_RESIDUAL>(a);
        case DECODE_GELU: return launch_decode_linear<T, DECODE_GELU>(a);
        case DECODE_LOGITS_ARGMAX: return launch_decode_linear<T, DECODE_LOGITS_ARGMAX>(a);
        }
        return "fused decode linear: unknown epilogue";
    });
}

