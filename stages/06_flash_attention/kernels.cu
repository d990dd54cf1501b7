/**
 * @file stages/06_flash_attention/kernels.cu
 * @brief Stage 06 kernels: attention forward, variant by variant.
 *
 * v1 writes the N×N score matrix to memory; v2–v5 never do. They walk the keys a
 * tile at a time and keep, per query row, the running maximum m, the running sum
 * l and the unnormalised output o — stage 05's online softmax, applied to a
 * weighted sum of value rows instead of a sum of ones:
 *
 *     m' = max(m, max_j s_j)      α = exp(m − m')
 *     l' = α·l + Σ_j exp(s_j − m')
 *     o' = α·o + Σ_j exp(s_j − m')·v_j          and at the end   O = o / l,  L = m + log l
 *
 * The tiled variants work in base 2: s is pre-multiplied by scale·log2(e), so
 * every exponential is one `ex2` instruction (exp(x) = 2^(x·log2 e)).
 */
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "block_reduce.cuh" /* stage 02: warp_allreduce, block_allreduce */
#include "cuda_check.h"
#include "device.h" /* wb_device_reserve */
#include "dtype_device.cuh"
#include "fa_rows.cuh" /* LOG2E, LN2; pack_half2, write_rows_fp16 (shared with v7) */
#include "05_softmax/kernels.h" /* stage 05's softmax, for the unfused peer */
#include "cublas_check.h"
#include "kernels.h"
#include "mma_ptx.cuh" /* stage 03: ldmatrix_x4(_trans), mma_16x8x16, cp_async_16/commit/wait */

size_t attention_naive_workspace_bytes(int B, int H, int N)
{
    return (size_t)B * (size_t)H * (size_t)N * (size_t)N * sizeof(float);
}

/** @brief Rows of all heads: B·H·N. */
static long long total_rows(const attention_problem *p) { return (long long)p->B * p->H * p->N; }

/* ======================================================================== */
/* v1 — naive: S = scale·Q·Kᵀ to memory, softmax over each row, then O = P·V  */
/* ======================================================================== */

/** @brief S[i][j] = scale·q_i·k_j (−∞ above the diagonal when causal); one thread per score. */
template <typename T>
__global__ void attention_naive_scores(const T *q, const T *k, float *s, int N, int d, float scale, int causal)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x; /* key: consecutive threads, consecutive writes */
    int i = blockIdx.y * blockDim.y + threadIdx.y; /* query */
    long long head = blockIdx.z;
    if (i >= N || j >= N) return;
    const T *qi = q + (head * N + i) * d, *kj = k + (head * N + j) * d;
    float dot = 0.0f;
    for (int c = 0; c < d; ++c) dot += load(qi, c) * load(kj, c);
    s[(head * N + i) * N + j] = causal && j > i ? -INFINITY : scale * dot;
}

/** @brief Softmax of each row of S in place, and the row's log-sum-exp; one warp per row, three passes. */
__global__ void attention_naive_softmax(float *s, float *lse, long long rows, int N)
{
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    float *x = s + row * N;
    float m = -INFINITY;
    for (int j = lane; j < N; j += 32) m = fmaxf(m, x[j]);
    m = warp_allreduce<MaxOp>(m);
    float sum = 0.0f;
    for (int j = lane; j < N; j += 32) sum += expf(x[j] - m);
    sum = warp_allreduce<SumOp>(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < N; j += 32) x[j] = expf(x[j] - m) * inv;
    if (lane == 0) lse[row] = m + logf(sum);
}

/** @brief O = P·V: one thread per output element, reading a row of P and a column of V. */
template <typename T>
__global__ void attention_naive_pv(const float *p, const T *v, T *o, int N, int d)
{
    long long head = blockIdx.y;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * d) return;
    int i = idx / d, c = idx % d; /* consecutive threads: consecutive columns of V and O */
    const float *pi = p + (head * N + i) * N;
    const T *vh = v + head * N * d;
    float acc = 0.0f;
    for (int j = 0; j < N; ++j) acc += pi[j] * load(vh, (long long)j * d + c);
    store(o, (head * N + i) * d + c, acc);
}

/**
 * @brief v1 — naive attention in three kernels: the B·H·N² scores go to memory
 *        and come back twice.
 *
 * At B4 H12 N4096 S is 3.2 GB of fp32 (written once, read and rewritten by the
 * softmax, read by P·V: ~13 GB of traffic for a 25 MB fp16 output). At N = 16384
 * it is 51 GB: the quadratic memory, not the FLOPs, is what rules v1 out.
 */
static const char *launch_naive(const attention_problem *p)
{
    if (p->d > ATTENTION_MAX_HEAD_DIM) return "needs d <= 128";
    if (!p->workspace || p->workspace_bytes < attention_naive_workspace_bytes(p->B, p->H, p->N))
        return "needs a B*H*N*N fp32 score matrix; not allocated (too large for this GPU)";
    if ((long long)p->B * p->H > 65535) return "needs B*H <= 65535";
    return dispatch(p->dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        dim3 block(32, 8), grid((p->N + 31) / 32, (p->N + 7) / 8, p->B * p->H);
        attention_naive_scores<T><<<grid, block>>>((const T *)p->q, (const T *)p->k, p->workspace, p->N, p->d,
                                                   p->scale, p->causal);
        WB_CHECK_LAUNCH("attention_naive_scores");
        long long rows = total_rows(p);
        attention_naive_softmax<<<(unsigned)((rows + 7) / 8), 256>>>(p->workspace, p->lse, rows, p->N);
        WB_CHECK_LAUNCH("attention_naive_softmax");
        dim3 grid_pv((p->N * p->d + 255) / 256, p->B * p->H);
        attention_naive_pv<T><<<grid_pv, 256>>>(p->workspace, (const T *)p->v, (T *)p->o, p->N, p->d);
        WB_CHECK_LAUNCH("attention_naive_pv");
        return NULL;
    });
}

/* ======================================================================== */
/* v2 — FlashAttention, one thread per query row                            */
/* ======================================================================== */

/** @brief v2: query rows per block, one per thread. */
#define V2_ROWS 64
/** @brief v2: keys per shared-memory tile. */
#define V2_KEYS 32

/**
 * @brief v2 kernel. Each thread owns one query row: q and the running o in
 *        registers (D_MAX floats each), m and l as two floats. The block loads a
 *        tile of V2_KEYS keys and values into shared memory, every thread reads
 *        them (a broadcast: all threads read the same word), and the online
 *        softmax folds the tile in.
 */
template <typename T, int D_MAX>
__global__ void __launch_bounds__(V2_ROWS) attention_row_per_thread(const T *q, const T *k, const T *v, T *o,
                                                                    float *lse, int N, int d, float scale_log2,
                                                                    int causal)
{
    __shared__ float ks[V2_KEYS][D_MAX], vs[V2_KEYS][D_MAX];
    long long head = blockIdx.y;
    int i = blockIdx.x * V2_ROWS + threadIdx.x;
    const T *kh = k + head * N * d, *vh = v + head * N * d;

    float qr[D_MAX], acc[D_MAX];
#pragma unroll
    for (int c = 0; c < D_MAX; ++c) {
        qr[c] = i < N && c < d ? load(q, (head * N + i) * d + c) * scale_log2 : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    /* causal: no row of this block sees a key past the block's last row */
    int n_keys = causal ? min(N, (blockIdx.x + 1) * V2_ROWS) : N;
    for (int j0 = 0; j0 < n_keys; j0 += V2_KEYS) {
        __syncthreads(); /* everyone is done with the previous tile */
        for (int e = threadIdx.x; e < V2_KEYS * D_MAX; e += V2_ROWS) {
            int j = e / D_MAX, c = e % D_MAX;
            bool in = j0 + j < N && c < d; /* zeros past the end: they add nothing */
            ks[j][c] = in ? load(kh, (long long)(j0 + j) * d + c) : 0.0f;
            vs[j][c] = in ? load(vh, (long long)(j0 + j) * d + c) : 0.0f;
        }
        __syncthreads();
        float s[V2_KEYS], tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < V2_KEYS; ++j) {
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < D_MAX; ++c) dot += qr[c] * ks[j][c];
            bool masked = j0 + j >= N || (causal && j0 + j > i);
            s[j] = masked ? -INFINITY : dot;
            tile_max = fmaxf(tile_max, s[j]);
        }
        float m_new = fmaxf(m, tile_max);
        float base = m_new == -INFINITY ? 0.0f : m_new; /* a row with nothing visible yet: keep exp2 finite */
        float alpha = exp2f(m - base);
        l *= alpha;
#pragma unroll
        for (int c = 0; c < D_MAX; ++c) acc[c] *= alpha;
#pragma unroll
        for (int j = 0; j < V2_KEYS; ++j) {
            float pj = exp2f(s[j] - base);
            l += pj;
#pragma unroll
            for (int c = 0; c < D_MAX; ++c) acc[c] += pj * vs[j][c];
        }
        m = m_new;
    }
    if (i >= N) return;
    float inv = 1.0f / l;
    for (int c = 0; c < d; ++c) store(o, (head * N + i) * d + c, acc[c] * inv);
    lse[head * N + i] = (m + log2f(l)) * LN2;
}

/**
 * @brief v2 — the FlashAttention-1 idea in its simplest form: K and V are read
 *        once per block of 64 query rows instead of once per row, and S never
 *        exists in memory.
 *
 * Global traffic falls from v1's O(N²) to (N/64)·2·N·d per head. Each score is
 * still a d-long loop in one thread, and q plus o take 2·D_MAX registers
 * (256 at d = 128: they spill), which is why v3 shares the work of a row.
 */
static const char *launch_row_per_thread(const attention_problem *p)
{
    if (p->d > ATTENTION_MAX_HEAD_DIM) return "needs d <= 128";
    if ((long long)p->B * p->H > 65535) return "needs B*H <= 65535";
    dim3 grid((p->N + V2_ROWS - 1) / V2_ROWS, p->B * p->H);
    float scale_log2 = p->scale * LOG2E;
    return dispatch(p->dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        if (p->d <= 64)
            attention_row_per_thread<T, 64><<<grid, V2_ROWS>>>((const T *)p->q, (const T *)p->k, (const T *)p->v,
                                                              (T *)p->o, p->lse, p->N, p->d, scale_log2, p->causal);
        else
            attention_row_per_thread<T, 128><<<grid, V2_ROWS>>>((const T *)p->q, (const T *)p->k, (const T *)p->v,
                                                               (T *)p->o, p->lse, p->N, p->d, scale_log2, p->causal);
        WB_CHECK_LAUNCH("attention_row_per_thread");
        return NULL;
    });
}

/* ======================================================================== */
/* v3 — block-cooperative: warps share the S tile                           */
/* ======================================================================== */

/** @brief v3: Br, query rows per block (8 per warp). */
#define V3_BR 32
/** @brief v3: Bc, keys per tile (one per lane). */
#define V3_BC 32
/** @brief v3: warps per block. */
#define V3_WARPS 4

/** @brief v3's shared memory, in floats: Q and K tiles padded by one column (no bank conflicts), V, P. */
static constexpr int v3_smem_floats(int d_max)
{
    return V3_BR * (d_max + 1) + V3_BC * (d_max + 1) + V3_BC * d_max + V3_BR * V3_BC;
}

/**
 * @brief v3 kernel. A block of 4 warps owns V3_BR = 32 query rows; warp w owns
 *        rows 8w … 8w+7. For each tile of 32 keys, lane j computes the 8 scores
 *        of key j against the warp's rows, so a row's scores lie across the warp
 *        and its max and sum are five shuffles. The probabilities go through
 *        shared memory to P·V, where lane c accumulates output columns c, c+32, …
 */
template <typename T, int D_MAX>
__global__ void __launch_bounds__(V3_WARPS * 32) attention_block_tiled(const T *q, const T *k, const T *v, T *o,
                                                                       float *lse, int N, int d, float scale_log2,
                                                                       int causal)
{
    extern __shared__ float smem[];
    float(*qs)[D_MAX + 1] = (float(*)[D_MAX + 1])smem;
    float(*ks)[D_MAX + 1] = (float(*)[D_MAX + 1])(smem + V3_BR * (D_MAX + 1));
    float(*vs)[D_MAX] = (float(*)[D_MAX])(smem + (V3_BR + V3_BC) * (D_MAX + 1));
    float(*ps)[V3_BC] = (float(*)[V3_BC])(smem + (V3_BR + V3_BC) * (D_MAX + 1) + V3_BC * D_MAX);
    constexpr int ROWS_PER_WARP = V3_BR / V3_WARPS, COLS_PER_LANE = D_MAX / 32;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    long long head = blockIdx.y;
    int row0 = blockIdx.x * V3_BR;
    const T *kh = k + head * N * d, *vh = v + head * N * d;

    for (int e = threadIdx.x; e < V3_BR * D_MAX; e += blockDim.x) {
        int r = e / D_MAX, c = e % D_MAX;
        qs[r][c] = row0 + r < N && c < d ? load(q, (head * N + row0 + r) * d + c) * scale_log2 : 0.0f;
    }
    float m[ROWS_PER_WARP], l[ROWS_PER_WARP], acc[ROWS_PER_WARP][COLS_PER_LANE];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int t = 0; t < COLS_PER_LANE; ++t) acc[r][t] = 0.0f;
    }
    int n_keys = causal ? min(N, row0 + V3_BR) : N;
    for (int j0 = 0; j0 < n_keys; j0 += V3_BC) {
        __syncthreads();
        for (int e = threadIdx.x; e < V3_BC * D_MAX; e += blockDim.x) {
            int j = e / D_MAX, c = e % D_MAX;
            bool in = j0 + j < N && c < d;
            ks[j][c] = in ? load(kh, (long long)(j0 + j) * d + c) : 0.0f;
            vs[j][c] = in ? load(vh, (long long)(j0 + j) * d + c) : 0.0f;
        }
        __syncthreads();
        /* scores: lane = key; ks[lane][c] has stride D_MAX+1 across lanes, so 32 different banks */
        float s[ROWS_PER_WARP];
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) s[r] = 0.0f;
        for (int c = 0; c < d; ++c) {
            float kc = ks[lane][c];
#pragma unroll
            for (int r = 0; r < ROWS_PER_WARP; ++r) s[r] += qs[warp * ROWS_PER_WARP + r][c] * kc;
        }
        int key = j0 + lane;
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; ++r) {
            int row = row0 + warp * ROWS_PER_WARP + r;
            if (key >= N || (causal && key > row)) s[r] = -INFINITY;
            float m_new = fmaxf(m[r], warp_allreduce<MaxOp>(s[r]));
            float base = m_new == -INFINITY ? 0.0f : m_new;
            float pj = exp2f(s[r] - base), sum = warp_allreduce<SumOp>(pj);
            float alpha = exp2f(m[r] - base);
            l[r] = alpha * l[r] + sum;
            m[r] = m_new;
#pragma unroll
            for (int t = 0; t < COLS_PER_LANE; ++t) acc[r][t] *= alpha;
            ps[warp * ROWS_PER_WARP + r][lane] = pj;
        }
        __syncwarp(); /* the warp's P rows are written; only this warp reads them */
        for (int j = 0; j < V3_BC; ++j) {
#pragma unroll
            for (int t = 0; t < COLS_PER_LANE; ++t) {
                float vc = vs[j][lane + 32 * t]; /* consecutive lanes, consecutive words */
#pragma unroll
                for (int r = 0; r < ROWS_PER_WARP; ++r) acc[r][t] += ps[warp * ROWS_PER_WARP + r][j] * vc;
            }
        }
        __syncwarp(); /* P is read before the next tile overwrites it */
    }
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
        int row = row0 + warp * ROWS_PER_WARP + r;
        if (row >= N) continue;
        float inv = 1.0f / l[r];
#pragma unroll
        for (int t = 0; t < COLS_PER_LANE; ++t)
            if (lane + 32 * t < d) store(o, (head * N + row) * d + lane + 32 * t, acc[r][t] * inv);
        if (lane == 0) lse[head * N + row] = (m[r] + log2f(l[r])) * LN2;
    }
}

/**
 * @brief v3 — a block of 4 warps shares each K/V tile among 32 query rows, and
 *        a warp shares each score row among its 32 lanes.
 *
 * Against v2: a score is still one thread's d-long dot product, but the row's
 * max and sum become warp shuffles, o is spread over the warp (8 rows × d/32
 * columns per lane instead of d per thread: no spills), and K and V are staged
 * in fp32 once per 32 rows. Still fp32 FMA on CUDA cores: at most the fp32 peak.
 */
static const char *launch_block_tiled(const attention_problem *p)
{
    if (p->d > ATTENTION_MAX_HEAD_DIM) return "needs d <= 128";
    if ((long long)p->B * p->H > 65535) return "needs B*H <= 65535";
    dim3 grid((p->N + V3_BR - 1) / V3_BR, p->B * p->H);
    float scale_log2 = p->scale * LOG2E;
    return dispatch(p->dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        if (p->d <= 64) {
            size_t smem = v3_smem_floats(64) * sizeof(float);
            attention_block_tiled<T, 64><<<grid, V3_WARPS * 32, smem>>>(
                (const T *)p->q, (const T *)p->k, (const T *)p->v, (T *)p->o, p->lse, p->N, p->d, scale_log2,
                p->causal);
        } else {
            size_t smem = v3_smem_floats(128) * sizeof(float); /* 53 KB: above the 48 KB default, so opt in */
            WB_CUDA_CHECK(cudaFuncSetAttribute(attention_block_tiled<T, 128>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            attention_block_tiled<T, 128><<<grid, V3_WARPS * 32, smem>>>(
                (const T *)p->q, (const T *)p->k, (const T *)p->v, (T *)p->o, p->lse, p->N, p->d, scale_log2,
                p->causal);
        }
        WB_CHECK_LAUNCH("attention_block_tiled");
        return NULL;
    });
}

/* ======================================================================== */
/* v4, v5 — tensor cores, the FlashAttention-2 work split                    */
/* ======================================================================== */

/* The instructions (ldmatrix, mma.sync, cp.async) are wrapped once, in stage 03's
 * mma_ptx.cuh: m16n8k16 on sm_80+, two m16n8k8 on sm_75. */

/** @brief Tensor-core variants: Bc, keys per tile. */
#define FA_BC 64
/** @brief Tensor-core variants: query rows each warp owns (the mma's m). */
#define FA_ROWS_PER_WARP 16

/**
 * @brief Where 16-byte chunk `chunk` of tile row `row` lives in shared memory, in
 *        halves. Rows are D·2 bytes (128 or 256), so unswizzled the 8 rows one
 *        ldmatrix reads would all start in the same bank: an 8-way conflict.
 *        XOR-ing the chunk index with row % 8 puts those 8 rows' chunks in 8
 *        different 16-byte bank groups; writes and ldmatrix use the same map.
 */
template <int D>
static __device__ __forceinline__ int swizzle(int row, int chunk)
{
    return row * D + ((chunk ^ (row & 7)) << 3);
}

/**
 * @brief Load a rows × D fp16 tile (rows past N as zeros) into swizzled shared
 *        memory, 16 bytes per thread per step: through registers (sync) or with
 *        cp.async (ASYNC, sm_80+).
 */
template <int D, int ROWS, int THREADS, bool ASYNC>
static __device__ __forceinline__ void load_tile(__half *dst, const __half *src, int row0, int N)
{
    constexpr int CHUNKS = D / 8; /* 16-byte chunks per row */
    static_assert(ROWS * CHUNKS % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
    for (int i = 0; i < ROWS * CHUNKS / THREADS; ++i) {
        int e = threadIdx.x + i * THREADS;
        int r = e / CHUNKS, c = e % CHUNKS;
        bool in = row0 + r < N;
        const __half *g = src + (long long)(in ? row0 + r : 0) * D + c * 8;
        __half *s = dst + swizzle<D>(r, c);
        if constexpr (ASYNC) {
            cp_async_16(s, g, in ? 16 : 0);
        } else {
            uint4 val = in ? *reinterpret_cast<const uint4 *>(g) : make_uint4(0, 0, 0, 0);
            *reinterpret_cast<uint4 *>(s) = val;
        }
    }
}

/**
 * @brief v4 and v5 kernel: FlashAttention-2's work split on tensor cores.
 *
 * A block of WARPS warps owns WARPS·16 query rows; each warp owns 16 of them for
 * the whole kernel and never talks to the other warps about them (FA2: split the
 * queries across warps, not the keys, so no warp waits for another's partial
 * sums). Per tile of FA_BC = 64 keys, a warp computes its 16×64 block of S with
 * mma.sync (Q from registers, K by ldmatrix), folds it into m and l in
 * registers, turns it into fp16 P — whose accumulator layout is exactly the A
 * operand layout of the next mma, so P never touches shared memory — and adds
 * P·V (V by ldmatrix.trans) into its 16×D output accumulators.
 *
 * Thread `lane` holds rows lane/4 and lane/4 + 8 of the warp's 16, and of each
 * 8-column slice the columns 2·(lane%4) and +1: a row's max and sum are over 4
 * lanes (two shuffles). ASYNC (v5): K and V of tile t+1 are copied with
 * cp.async into the second buffer while tile t is computed.
 */
template <int D, int WARPS, bool ASYNC>
__global__ void __launch_bounds__(WARPS * 32) attention_fa2_tensor_core(const __half *q, const __half *k,
                                                                        const __half *v, __half *o, float *lse,
                                                                        int N, float scale_log2, int causal)
{
    constexpr int BR = WARPS * FA_ROWS_PER_WARP, THREADS = WARPS * 32, STAGES = ASYNC ? 2 : 1;
    constexpr int KSTEPS_QK = D / 16;   /* k-steps of S = Q·Kᵀ (over d) */
    constexpr int NTILES_S = FA_BC / 8; /* 8-column slices of S */
    constexpr int KSTEPS_PV = FA_BC / 16; /* k-steps of P·V (over keys) */
    constexpr int NTILES_O = D / 8;     /* 8-column slices of O */
    extern __shared__ __align__(16) __half fa_smem[];
    __half *q_s = fa_smem;
    __half *k_s = q_s + BR * D;            /* STAGES tiles of FA_BC × D */
    __half *v_s = k_s + STAGES * FA_BC * D; /* STAGES tiles */

    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    long long head = blockIdx.y;
    /* causal blocks near the end of the sequence have the most keys: start them first */
    int q_block = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    int row0 = q_block * BR;
    const __half *qh = q + head * N * D, *kh = k + head * N * D, *vh = v + head * N * D;
    int n_keys = causal ? min(N, row0 + BR) : N;
    int n_tiles = (n_keys + FA_BC - 1) / FA_BC;

    load_tile<D, BR, THREADS, ASYNC>(q_s, qh, row0, N);
    load_tile<D, FA_BC, THREADS, ASYNC>(k_s, kh, 0, N);
    load_tile<D, FA_BC, THREADS, ASYNC>(v_s, vh, 0, N);
    if constexpr (ASYNC) cp_async_commit();

    /* this thread's two rows, in the sequence */
    int my_row[2] = {row0 + warp * 16 + lane / 4, row0 + warp * 16 + lane / 4 + 8};
    unsigned q_frag[KSTEPS_QK][4];
    float acc[NTILES_O][4];
#pragma unroll
    for (int t = 0; t < NTILES_O; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int tile = 0; tile < n_tiles; ++tile) {
        int stage = ASYNC ? tile % 2 : 0;
        int key0 = tile * FA_BC;
        if constexpr (ASYNC) {
            if (tile + 1 < n_tiles) { /* start the next tile's copy into the other buffer */
                int next = (tile + 1) % 2;
                load_tile<D, FA_BC, THREADS, true>(k_s + next * FA_BC * D, kh, key0 + FA_BC, N);
                load_tile<D, FA_BC, THREADS, true>(v_s + next * FA_BC * D, vh, key0 + FA_BC, N);
            }
            cp_async_commit();
            cp_async_wait<1>(); /* everything but the group just issued has landed */
        } else if (tile > 0) {
            __syncthreads(); /* every warp is done with the previous tile */
            load_tile<D, FA_BC, THREADS, false>(k_s, kh, key0, N);
            load_tile<D, FA_BC, THREADS, false>(v_s, vh, key0, N);
        }
        __syncthreads();
        if (tile == 0) { /* Q stays in registers for the whole kernel */
#pragma unroll
            for (int kk = 0; kk < KSTEPS_QK; ++kk)
                ldmatrix_x4(q_frag[kk], q_s + swizzle<D>(warp * 16 + lane % 16, 2 * kk + lane / 16));
        }
        const __half *kt = k_s + stage * FA_BC * D, *vt = v_s + stage * FA_BC * D;

        /* S = Q·Kᵀ for this warp's 16 rows × 64 keys; K rows are the mma's B columns */
        float s[NTILES_S][4];
#pragma unroll
        for (int n = 0; n < NTILES_S; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KSTEPS_QK; ++kk) {
#pragma unroll
            for (int n = 0; n < NTILES_S; n += 2) {
                unsigned b[4]; /* b0, b1 of key slice n, then of slice n+1 */
                ldmatrix_x4(b, kt + swizzle<D>(n * 8 + lane % 8 + (lane / 16) * 8, 2 * kk + (lane / 8) % 2));
                mma_16x8x16(s[n], q_frag[kk], b[0], b[1]);
                mma_16x8x16(s[n + 1], q_frag[kk], b[2], b[3]);
            }
        }

        /* scale to base 2, mask (only the tiles that need it), and the online softmax */
        bool need_mask = key0 + FA_BC > N || (causal && key0 + FA_BC - 1 > row0);
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < NTILES_S; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int key = key0 + n * 8 + 2 * (lane % 4) + (e & 1), h = e / 2;
                float x = s[n][e] * scale_log2;
                if (need_mask && (key >= N || (causal && key > my_row[h]))) x = -INFINITY;
                s[n][e] = x;
                tile_max[h] = fmaxf(tile_max[h], x);
            }
        float alpha[2], base[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
            tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
            float m_new = fmaxf(m[h], tile_max[h]);
            base[h] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[h] = exp2f(m[h] - base[h]);
            m[h] = m_new;
            l[h] *= alpha[h]; /* l stays a per-thread partial sum; the 4 lanes' parts are added at the end */
        }
#pragma unroll
        for (int t = 0; t < NTILES_O; ++t) {
            acc[t][0] *= alpha[0], acc[t][1] *= alpha[0];
            acc[t][2] *= alpha[1], acc[t][3] *= alpha[1];
        }
        /* P = exp2(s − m) as fp16, straight into the A registers of P·V */
        unsigned p_frag[KSTEPS_PV][4];
#pragma unroll
        for (int n = 0; n < NTILES_S; ++n) {
            float p0 = exp2f(s[n][0] - base[0]), p1 = exp2f(s[n][1] - base[0]);
            float p2 = exp2f(s[n][2] - base[1]), p3 = exp2f(s[n][3] - base[1]);
            l[0] += p0 + p1, l[1] += p2 + p3;
            p_frag[n / 2][(n % 2) * 2 + 0] = pack_half2(p0, p1); /* row lane/4 */
            p_frag[n / 2][(n % 2) * 2 + 1] = pack_half2(p2, p3); /* row lane/4 + 8 */
        }
        /* O += P·V; V tile rows are keys (the k of this mma), so ldmatrix transposes them */
#pragma unroll
        for (int kk = 0; kk < KSTEPS_PV; ++kk) {
#pragma unroll
            for (int t = 0; t < NTILES_O; t += 2) {
                unsigned b[4]; /* b0, b1 of column slice t, then of t+1 */
                ldmatrix_x4_trans(b, vt + swizzle<D>(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, t + lane / 16));
                mma_16x8x16(acc[t], p_frag[kk], b[0], b[1]);
                mma_16x8x16(acc[t + 1], p_frag[kk], b[2], b[3]);
            }
        }
        if constexpr (ASYNC) __syncthreads(); /* this buffer is refilled two tiles from now */
    }

    /* finish: add the 4 lanes' partial sums, divide, write O as fp16 and L */
    write_rows_fp16<D>(acc, l, m, my_row, N, head, o, lse, lane);
}

/** @brief Shared memory of the tensor-core kernel, bytes: Q, and STAGES buffers of K and V. */
static size_t fa2_smem_bytes(int d, int warps, int stages)
{
    return ((size_t)warps * FA_ROWS_PER_WARP + 2u * stages * FA_BC) * (size_t)d * sizeof(__half);
}

/** @brief The contract of v4/v5, then the launch. */
template <int WARPS, bool ASYNC>
static const char *launch_fa2(const attention_problem *p)
{
    if (p->dtype != WB_F16) return "needs fp16 storage (tensor cores)";
    if (p->d != 64 && p->d != 128) return "needs d = 64 or 128";
    if ((long long)p->B * p->H > 65535) return "needs B*H <= 65535";
    if (((uintptr_t)p->q | (uintptr_t)p->k | (uintptr_t)p->v | (uintptr_t)p->o) % 16)
        return "needs 16-byte aligned Q, K, V, O";
    constexpr int BR = WARPS * FA_ROWS_PER_WARP;
    dim3 grid((p->N + BR - 1) / BR, p->B * p->H);
    size_t smem = fa2_smem_bytes(p->d, WARPS, ASYNC ? 2 : 1);
    float scale_log2 = p->scale * LOG2E;
    const __half *q = (const __half *)p->q, *k = (const __half *)p->k, *v = (const __half *)p->v;
    __half *o = (__half *)p->o;
    if (p->d == 64) {
        auto kernel = attention_fa2_tensor_core<64, WARPS, ASYNC>;
        WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        kernel<<<grid, WARPS * 32, smem>>>(q, k, v, o, p->lse, p->N, scale_log2, p->causal);
    } else {
        auto kernel = attention_fa2_tensor_core<128, WARPS, ASYNC>;
        WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        kernel<<<grid, WARPS * 32, smem>>>(q, k, v, o, p->lse, p->N, scale_log2, p->causal);
    }
    WB_CHECK_LAUNCH("attention_fa2_tensor_core");
    return NULL;
}

/**
 * @brief v4 — FA2 on tensor cores: mma.sync for both products, P kept in
 *        registers, ldmatrix from swizzled shared memory. Runs on sm_75.
 *
 * Both products move from CUDA-core FMAs (v3) to tensor cores; shared-memory
 * traffic per FLOP falls by the mma's 16×8 reuse, and no score ever goes to
 * shared memory. 4 warps × 16 rows = 64 query rows per block; K and V tiles of
 * 64 keys; 24 KB of shared memory at d = 64, 48 KB at d = 128.
 */
static const char *launch_fa2_sync(const attention_problem *p) { return launch_fa2<4, false>(p); }

/**
 * @brief v5 — v4 with a double-buffered cp.async K/V pipeline (sm_80+): the copy
 *        of tile t+1 runs while tile t is computed, instead of every warp waiting
 *        for each load at a barrier. 40 KB of shared memory at d = 64, 80 KB at 128.
 */
static const char *launch_fa2_async(const attention_problem *p) { return launch_fa2<4, true>(p); }

/* ======================================================================== */
/* The peer: the unfused library path                                       */
/* ======================================================================== */

size_t attention_unfused_workspace_bytes(int B, int H, int N)
{
    return (size_t)B * (size_t)H * (size_t)N * (size_t)N * (sizeof(float) + sizeof(__half));
}

/** @brief Causal mask on a row-major [BH][N][N] score matrix: key j > query i gets −∞ (softmax weight 0). */
__global__ void mask_future_keys(float *s, long long total, int N)
{
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
        int key = (int)(e % N), query = (int)(e / N % N);
        if (key > query) s[e] = -INFINITY;
    }
}

/** @brief P (fp32) → fp16, the precision the tensor-core variants use for P·V too. */
__global__ void probabilities_to_half(const float *p, __half *out, long long total)
{
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x)
        out[e] = __float2half_rn(p[e]);
}

/** @brief Stage 05's fastest softmax (v5, a block per row, the row in registers), found by its id: its table
 *         also holds the exercise slot, so its last row is not a lesson's. */
static const softmax_variant *stage05_softmax_v5(void)
{
    static const softmax_variant *found = NULL; /* looked up once, not on every timed launch */
    for (int i = 0; !found && i < softmax_variant_count; ++i)
        if (strcmp(softmax_variants[i].id, "v5") == 0) found = &softmax_variants[i];
    return found;
}

static cublasHandle_t attention_blas = NULL;

/** @brief The cuBLAS handle the peer and v6 share: made on first use, on the timer's stream, TF32 off. */
static cublasHandle_t attention_cublas(void)
{
    if (!attention_blas) {
        WB_CUBLAS_CHECK(cublasCreate(&attention_blas));
        WB_CUBLAS_CHECK(cublasSetStream(attention_blas, cudaStreamPerThread)); /* the stream the timer uses */
        WB_CUBLAS_CHECK(cublasSetMathMode(attention_blas, CUBLAS_PEDANTIC_MATH)); /* fp32: no TF32 */
    }
    return attention_blas;
}

/**
 * @brief S = scale·Q[row0 … row0 + rows)·K[0 … keys)ᵀ for every head: fp32, rows × keys per head,
 *        row-major; one strided-batched GEMM. Row-major S is column-major Sᵀ = K·Qᵀ: op(A) = T on K's
 *        [d×N] column-major view, B = Q as is.
 */
static void scores_gemm(const attention_problem *p, int row0, int rows, int keys, float *S)
{
    long long head_elems = (long long)p->N * p->d;
    float zero = 0.0f, scale = p->scale;
    cudaDataType_t in = p->dtype == WB_F16 ? CUDA_R_16F : CUDA_R_32F;
    const char *q0 = (const char *)p->q + (size_t)row0 * p->d * wb_dtype_bytes(p->dtype);
    WB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(attention_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, keys, rows, p->d, &scale,
                                               p->k, in, p->d, head_elems, q0, in, p->d, head_elems, &zero, S,
                                               CUDA_R_32F, keys, (long long)rows * keys, p->B * p->H,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/**
 * @brief O[row0 … row0 + rows) = P·V[0 … keys) for every head, P rows × keys per head (fp16 for fp16
 *        storage, on tensor cores with fp32 accumulation; fp32 otherwise, TF32 off). Row-major O = P·V
 *        is column-major Oᵀ = Vᵀ·Pᵀ: V and P as they are.
 */
static void pv_gemm(const attention_problem *p, int row0, int rows, int keys, const void *P)
{
    long long head_elems = (long long)p->N * p->d, p_elems = (long long)rows * keys;
    float one = 1.0f, zero = 0.0f;
    char *o0 = (char *)p->o + (size_t)row0 * p->d * wb_dtype_bytes(p->dtype);
    if (p->dtype == WB_F16) {
        WB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(attention_cublas(), CUBLAS_OP_N, CUBLAS_OP_N, p->d, rows, keys, &one,
                                                   p->v, CUDA_R_16F, p->d, head_elems, P, CUDA_R_16F, keys, p_elems,
                                                   &zero, o0, CUDA_R_16F, p->d, head_elems, p->B * p->H,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        WB_CUBLAS_CHECK(cublasSgemmStridedBatched(attention_cublas(), CUBLAS_OP_N, CUBLAS_OP_N, p->d, rows, keys, &one,
                                                  (const float *)p->v, p->d, head_elems, (const float *)P, keys,
                                                  p_elems, &zero, (float *)o0, p->d, head_elems, p->B * p->H));
    }
}

/**
 * @brief The peer — what a framework without a fused kernel does: cuBLAS
 *        writes S = scale·Q·Kᵀ to memory (strided-batched GEMM, one batch entry
 *        per head), stage 05's fastest softmax (v5) turns each row into P in
 *        place, cuBLAS computes O = P·V. fp16 inputs: both GEMMs on tensor cores
 *        with fp32 accumulation, S kept in fp32 and P rounded to fp16 for the
 *        second GEMM; fp32 inputs: SGEMM, TF32 off. Moves the N×N matrix through
 *        memory four times (S written, read, P written, read) where the fused
 *        variants move none of it; L is not produced.
 */
static const char *launch_unfused_cublas(const attention_problem *p)
{
    if (!p->workspace || p->workspace_bytes < attention_unfused_workspace_bytes(p->B, p->H, p->N))
        return "needs a workspace of attention_unfused_workspace_bytes() (the score matrix)";
    int N = p->N, batch = p->B * p->H;
    long long scores = (long long)batch * N * N;
    float *S = p->workspace;
    __half *P16 = (__half *)(S + scores);
    scores_gemm(p, 0, N, N, S);
    /* one element per thread up to half a million blocks; past that the kernels stride (they are grid-stride loops) */
    int blocks = (int)((scores + 255) / 256 < 65535 * 8 ? (scores + 255) / 256 : 65535 * 8);
    if (p->causal) {
        mask_future_keys<<<blocks, 256>>>(S, scores, N);
        WB_CHECK_LAUNCH("mask_future_keys");
    }
    const softmax_variant *softmax = stage05_softmax_v5();
    if (!softmax) return "stage 05's softmax v5 is not in its table";
    if (const char *why = softmax->launch(WB_F32, S, S, batch * N, N)) return why;
    if (p->dtype == WB_F16) {
        probabilities_to_half<<<blocks, 256>>>(S, P16, scores);
        WB_CHECK_LAUNCH("probabilities_to_half");
    }
    pv_gemm(p, 0, N, N, p->dtype == WB_F16 ? (const void *)P16 : (const void *)S);
    return NULL;
}

/* ======================================================================== */
/* v6 — large head dimensions: the unfused path, a block of queries at a time */
/* ======================================================================== */

size_t attention_chunked_workspace_bytes(int B, int H, int N)
{
    size_t rows = N < ATTENTION_CHUNK_ROWS ? (size_t)N : ATTENTION_CHUNK_ROWS;
    return (size_t)B * (size_t)H * rows * (size_t)N * (sizeof(float) + sizeof(__half));
}

/**
 * @brief v6's softmax, on a chunk's scores: block (head, r) takes query i = row0 + r,
 *        whose `keys` scores s (scale·q·k, from cuBLAS) are one row of the chunk.
 *
 * Three passes over the row, each thread striding over it: the maximum m and the
 * sum l of exp(s − m) over the keys it sees (0 … i when causal), each reduced
 * over the block; then P = exp(s − m)/l, written as TP (fp16 for the fp16 GEMM
 * that follows, fp32 in place otherwise), 0 for the keys it does not see; and
 * L = m + log l for row i of the head. A block per row: a chunk has few rows and
 * long ones (N keys), so a warp per row (v1's softmax) would leave most of the
 * GPU idle at small B·H.
 */
template <typename TP>
__global__ void chunk_softmax_lse(float *s, TP *p, float *lse, int rows, int keys, int row0, int N, int causal)
{
    long long row = blockIdx.x; /* head · rows + r: the chunk's rows, head after head */
    long long head = row / rows;
    int i = row0 + (int)(row % rows), seen = causal ? min(i + 1, keys) : keys;
    float *x = s + row * keys;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < seen; j += blockDim.x) m = fmaxf(m, x[j]);
    m = block_allreduce<MaxOp>(m);
    float l = 0.0f;
    for (int j = threadIdx.x; j < seen; j += blockDim.x) l += expf(x[j] - m);
    l = block_allreduce<SumOp>(l);
    float inv = 1.0f / l;
    TP *y = p + row * keys; /* fp32: y is x, each element read and rewritten by the same thread */
    for (int j = threadIdx.x; j < keys; j += blockDim.x) store(y, j, j < seen ? expf(x[j] - m) * inv : 0.0f);
    if (threadIdx.x == 0) lse[head * N + i] = m + logf(l);
}

static float *chunk_scores = NULL; /* v6's workspace: a chunk's fp32 scores, then their fp16 probabilities */
static size_t chunk_scores_bytes = 0;

/**
 * @brief v6 — any head dimension, memory linear in N: the peer's three steps on
 *        ATTENTION_CHUNK_ROWS query rows of every head at a time.
 *
 * At large d attention is two GEMMs with a softmax between them: per score, Q·Kᵀ
 * and P·V do 4·d FLOPs and the unfused path moves about 20 bytes, so from
 * d ≈ 1000 the library's GEMMs set the time and keeping S on chip saves little of
 * it. What the peer cannot afford is S's *memory*, B·H·N² scores. v6 takes the
 * queries 256 rows at a time: cuBLAS writes the chunk's scores (rows × keys per
 * head, one strided-batched GEMM for all heads), chunk_softmax_lse turns them into
 * P and writes L, cuBLAS adds P·V into those rows of O. The workspace is
 * B·H·256·N scores (6 bytes each), linear in N; the FLOPs are the peer's; cuBLAS
 * tiles d inside its GEMMs, on any GPU. Causal: the chunk of queries row0 … row0 +
 * rows − 1 sees keys 0 … row0 + rows − 1 only, so each GEMM is cut to those keys
 * (half the peer's FLOPs over the whole sequence).
 */
static const char *launch_chunked(const attention_problem *p)
{
    size_t need = attention_chunked_workspace_bytes(p->B, p->H, p->N);
    if (need > chunk_scores_bytes) {
        size_t free_b = 0, total_b = 0;
        WB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        if (need > free_b / 2) return "needs a B*H*256*N score chunk (6 bytes a score): too large for this GPU";
        wb_device_reserve((void **)&chunk_scores, &chunk_scores_bytes, need, "v6's score chunk");
    }
    int N = p->N, batch = p->B * p->H, R = N < ATTENTION_CHUNK_ROWS ? N : ATTENTION_CHUNK_ROWS;
    float *S = chunk_scores;
    __half *P16 = (__half *)(S + (size_t)batch * R * N);
    for (int row0 = 0; row0 < N; row0 += R) {
        int rows = N - row0 < R ? N - row0 : R, keys = p->causal ? row0 + rows : N;
        scores_gemm(p, row0, rows, keys, S); /* the chunk's rows × keys per head */
        unsigned blocks = (unsigned)((long long)batch * rows);
        if (p->dtype == WB_F16) {
            chunk_softmax_lse<__half><<<blocks, 256>>>(S, P16, p->lse, rows, keys, row0, N, p->causal);
            WB_CHECK_LAUNCH("chunk_softmax_lse<half>");
            pv_gemm(p, row0, rows, keys, P16);
        } else {
            chunk_softmax_lse<float><<<blocks, 256>>>(S, S, p->lse, rows, keys, row0, N, p->causal);
            WB_CHECK_LAUNCH("chunk_softmax_lse<float>");
            pv_gemm(p, row0, rows, keys, S);
        }
    }
    return NULL;
}

void attention_release(void)
{
    if (attention_blas) WB_CUBLAS_CHECK(cublasDestroy(attention_blas));
    attention_blas = NULL;
    if (chunk_scores) WB_CUDA_CHECK(cudaFree(chunk_scores));
    chunk_scores = NULL, chunk_scores_bytes = 0;
}

/* The table the host program walks, in teaching order, then the peer. */
const attention_variant attention_variants[] = {
    {"v1", "naive: S to memory, softmax, P*V (3 kernels)", 75, 1, 0, 1, launch_naive},
    {"v2", "tiled online softmax, one thread per query row", 75, 0, 0, 1, launch_row_per_thread},
    {"v3", "block of 4 warps shares K/V tiles, warp per S row", 75, 0, 0, 1, launch_block_tiled},
    {"v4", "FA2 on tensor cores: mma.sync + ldmatrix, P in regs", 75, 0, 0, 1, launch_fa2_sync},
    {"v5", "v4 + cp.async double-buffered K/V (sm_80)", 80, 0, 0, 1, launch_fa2_async},
    {"v6", "any d: cuBLAS + softmax, 256 query rows at a time", 75, 0, 0, 1, launch_chunked},
    {"v7", "Hopper, FA3-style: TMA + wgmma, producer/consumers (sm_90a)", 90, 0, 0, 1, attention_v7_wgmma},
    {"cublas", "unfused: cuBLAS QK^T, stage 05 softmax, cuBLAS PV", 75, 2, 1, 0, launch_unfused_cublas},
    {"ex", "your kernel (exercise.cu)", 75, 0, 0, 0, attention_exercise},
};
const int attention_variant_count = sizeof attention_variants / sizeof attention_variants[0];
