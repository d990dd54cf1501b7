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
 *        block. A decode batch of 3-64 rows (fp16, sm_80) runs on tensor
 *        cores: the batch linear, every block holding all the rows (fc-proj's
 *        4C inputs a slice at a time, its sums added by a second pass).
 */
#include <cuda_fp16.h>
#include <math.h>

#include "02_reduction/block_reduce.cuh"      /* warp_allreduce: stage 02's butterfly */
#include "03_gemm/mma_ptx.cuh"              /* ldmatrix, mma.sync, cp.async: the batch linear */
#include "04_fused_gelu_linear/bias_gelu.cuh" /* gelu_tanh */
#include "argmax_key.h"
#include "cuda_check.h"
#include "dependent_launch.cuh" /* on sm_90 the decode linears launch as programmatic dependents */
#include "device.h"             /* wb_current_gpu, wb_current_smem_per_block */
#include "dtype_device.cuh"
#include "fresh_load.cuh" /* load_fresh, load_cg: what the kernel before wrote, through L2 */
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
            m < M ? load_fresh(reinterpret_cast<const uint4 *>(x) + i) : make_uint4(0, 0, 0, 0);
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

/** @brief The arguments for rows m0 … m0 + group − 1 of a (fewer at the end): x, y, the slots and the argmax keys
 *         moved on by m0 rows, for a launch of one group of rows. */
static decode_linear_args rows_of(const decode_linear_args *a, int m0, int group, size_t elem)
{
    decode_linear_args g = *a;
    g.M = a->M - m0 < group ? a->M - m0 : group;
    g.x = (const char *)a->x + (size_t)m0 * a->K * elem;
    const size_t y_row = a->epilogue == DECODE_QKV_APPEND      ? a->N / 3 /* q only: k and v go to the pools */
                         : a->epilogue == DECODE_LOGITS_ARGMAX ? a->ldy
                                                               : a->N;
    g.y = (char *)a->y + (size_t)m0 * y_row * elem;
    if (a->slots) g.slots = a->slots + m0;
    if (a->best) g.best = a->best + m0;
    return g;
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
        const decode_linear_args g = rows_of(a, m0, group, sizeof(T));
        switch (decode_rows_for(g.M)) {
        case 1: launch_decode_rows<T, 1, EPI>(&g); break;
        case 2: launch_decode_rows<T, 2, EPI>(&g); break;
        case 4: launch_decode_rows<T, 4, EPI>(&g); break;
        default: launch_decode_rows<T, 8, EPI>(&g); break;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* 3-64 rows: the batch's rows in shared memory, the weights on tensor cores  */
/* ------------------------------------------------------------------------ */

/** @brief Warps of the batch linear: (tiles of 16 rows) × (slices of K). At 1-16 rows 8 warps, each K / 8; from 17
 *         rows 16, so that each warp's chain of mma and the chunk's sums stay short (at 1 tile 16 warps measured
 *         slower: 16 slices' sums to add). */
static __host__ __device__ constexpr int batch_warps(int m_tiles) { return m_tiles == 1 ? 8 : 16; }
/** @brief Outputs a chunk of the ring holds: two mma tiles of 8, so that each warp has two independent products. */
#define BATCH_CHUNK 16
/** @brief Halves after each row in shared memory: rows of 768 + 8 halves are 1552 bytes apart, 16 modulo 128, so
 *         the 8 row addresses of an ldmatrix fall on all 32 banks. */
#define BATCH_PAD 8
/** @brief Most chunks (24 KB each at K = 768) a block's ring holds. */
#define BATCH_MAX_STAGES 8

/** @brief Slots a ring of `stages` fills over a block's `cols` outputs: no more than it has chunks (the host sizes
 *         the shared memory by it, the kernel places the slices' sums after them). */
static __host__ __device__ int batch_ring_slots(int stages, int cols)
{
    return stages < cols / BATCH_CHUNK ? stages : cols / BATCH_CHUNK;
}

/** @brief cp.async.wait_group with a count known at run time: the ring's depth depends on the GPU's shared memory. */
static __device__ __forceinline__ void cp_async_wait_pending(int n)
{
    switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    default: cp_async_wait<BATCH_MAX_STAGES - 2>(); break;
    }
}

/**
 * @brief v2's linear for a decode batch of 3-64 rows whose outputs need
 *        nothing but themselves (QKV, proj, fc, the LM head; fp16, sm_80): y
 *        = epilogue(x·W + bias), W transposed ([N][K]), K at most
 *        DECODE_BATCH_MAX_K; with ln_folded, x's LayerNorm folded into W.
 *
 * The whole batch's input, 64 rows of 768 fp16 values, is 96 KB: it fits in
 * one block's shared memory beside a ring of weights. So every block
 *  - requests its first chunks of weights (cp.async, 16 outputs' rows of Wᵀ a
 *    chunk) and loads its outputs' biases before it waits for the kernel
 *    before;
 *  - loads all the rows at once and stores them in shared memory;
 *  - keeps its warp's A fragments (16 rows × its slice of K) in registers;
 *  - with a folded LayerNorm, sums each row and its squares on the tensor
 *    cores (x·1 and the diagonal of x·xᵀ), for the epilogue's mean and 1/σ
 *    (decode_tagged.cu's row_statistics shows the fold's algebra);
 *  - per chunk: one ldmatrix of B and two mma a 16 of K (four chains of
 *    accumulators), the slices' sums added in shared memory, the epilogue on
 *    the spot, the chunk's slot refilled.
 * A block's outputs are one run of Wᵀ; the blocks are one wave. No K split over
 * blocks and no partial sums in memory: a layer is one kernel, its epilogue
 * included. Save for fc-proj (PARTIALS), whose 4C inputs of 64 rows would not
 * fit: each of its blocks holds one slice of k_slice inputs of every row, the
 * slices' blocks side by side in the grid, and leaves the slice's sums in
 * `partials` for decode_batch_finish. One block holds an SM (two at most 16
 * rows), and no other block hides its latencies, so the kernel keeps every
 * chain short: 16 warps from 17 rows, each warp of a tile finishing a share of
 * its outputs (the LM head 56.0 against 49.3 µs at 64 rows when one warp a
 * tile finished them all, ncu, H200), the copies' addresses and the K/V slots
 * worked out once.
 */
template <int M_TILES, decode_epilogue EPI, bool PARTIALS = false>
__global__ void __launch_bounds__(batch_warps(M_TILES) * 32, M_TILES == 1 ? 2 : 1) /* 1 tile: two blocks an SM */
    decode_batch_linear(decode_linear_args a, int cols_per_block, int stages, int k_slice, float *partials)
{
    constexpr int WARPS = batch_warps(M_TILES), K_SLICES = WARPS / M_TILES, MAX_KK = DECODE_BATCH_MAX_K / 16 / K_SLICES;
    constexpr int ROWS_PER_WARP = M_TILES * 16 / WARPS, LANE_PIECES = DECODE_BATCH_MAX_K / 8 / 32;
    constexpr int PIECES = BATCH_CHUNK * DECODE_BATCH_MAX_K / 8 / (WARPS * 32); /* a chunk's 16-byte copies a thread */
    constexpr int VALS = 8 / K_SLICES; /* a lane's outputs of a chunk that its warp finishes: 2 or 1 */
    extern __shared__ __align__(16) unsigned char smem[];
    /* this block's slice of the inputs (the whole row but for fc-proj, in slices of k_slice) and its outputs */
    const int per_slice = (a.N + cols_per_block - 1) / cols_per_block, slice = blockIdx.x / per_slice;
    const int M = a.M, K = k_slice, k0 = slice * k_slice, k16 = (K + 15) / 16, ldk = 16 * k16 + BATCH_PAD;
    __half *rows = reinterpret_cast<__half *>(smem);                                    /* [16·M_TILES][ldk] */
    __half *ring = rows + 16 * M_TILES * ldk;                                            /* [slots][16][ldk] */
    float4 *part = reinterpret_cast<float4 *>(ring + (size_t)batch_ring_slots(stages, cols_per_block) * BATCH_CHUNK *
                                              ldk); /* [slice][tile][2][32] */
    float2 *row_sums = reinterpret_cast<float2 *>(part + WARPS * 2 * 32); /* [slice][16·M_TILES]: Σx, Σx² */
    float2 *col_consts = row_sums + WARPS * 16; /* [cols_per_block]: each output's bias and Σ_k of its weights */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int mt = warp % M_TILES, ks = warp / M_TILES; /* this warp's 16 rows and slice of K */
    const int kk0 = ks * k16 / K_SLICES, kk1 = (ks + 1) * k16 / K_SLICES;
    const int n0 = blockIdx.x % per_slice * cols_per_block, n1 = min(a.N, n0 + cols_per_block);
    const int chunks = (n1 - n0 + BATCH_CHUNK - 1) / BATCH_CHUNK;
    const __half *W = static_cast<const __half *>(a.w_t);

    /* this thread's pieces of every chunk: row j of the chunk, inputs k … k + 7 (the divisions done once) */
    int piece_j[PIECES], piece_k[PIECES];
#pragma unroll
    for (int q = 0; q < PIECES; ++q) {
        const int i = threadIdx.x + q * WARPS * 32;
        piece_j[q] = i / (2 * k16), piece_k[q] = i % (2 * k16) * 8;
    }
    auto request = [&](int c, int s) { /* chunk c's weights into slot s (c % stages), zeros past n1 and K */
        if (c < chunks) {
            __half *slot = ring + (size_t)s * BATCH_CHUNK * ldk;
            const int nc = n0 + BATCH_CHUNK * c;
#pragma unroll
            for (int q = 0; q < PIECES; ++q) {
                const int j = piece_j[q], k = piece_k[q];
                const bool real = j < BATCH_CHUNK && nc + j < n1 && k < K;
                if (j < BATCH_CHUNK)
                    cp_async_16(slot + j * ldk + k, real ? W + (long long)(nc + j) * a.K + k0 + k : W, real ? 16 : 0);
            }
        }
        cp_async_commit(); /* one group a chunk, empty past the last: the waits below count groups */
    };
    for (int c = 0; c < stages - 1; ++c) request(c, c); /* the weights do not depend on the kernel before */
    /* nor do the outputs' constants: in shared memory before the wait, they are off every chunk's chain (loaded in
     * the chunk loop, their trips to DRAM made QKV 7.1 µs at 64 rows against 6.1; globaltimer, H200) */
    for (int i = threadIdx.x; i < n1 - n0; i += WARPS * 32)
        col_consts[i] = make_float2(a.bias ? __ldg(a.bias + n0 + i) : 0.0f,
                                    a.ln_folded ? __ldg(a.bias + a.N + n0 + i) : 0.0f);
    wb_dependent_launch_sync();

    /* the rows: warp w takes rows w, w + WARPS, …, lane l their pieces l, l + 32, l + 64; all loads issued at once,
     * through L2 (fresh_load.cuh: the kernel before may still be writing them) */
    uint4 raw[ROWS_PER_WARP][LANE_PIECES];
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r)
#pragma unroll
        for (int j = 0; j < LANE_PIECES; ++j) {
            const int m = warp + WARPS * r, k = (lane + 32 * j) * 8;
            const uint4 *src =
                reinterpret_cast<const uint4 *>(static_cast<const __half *>(a.x) + (long long)m * a.K + k0 + k);
            raw[r][j] = m < M && k < K ? load_fresh(src)
                                       : make_uint4(0, 0, 0, 0); /* zeros past M and K: the tiles' padding */
        }
    /* a lane's 8 outputs of a chunk are acc[j][2h + e]: output 8j + 2t + e of the chunk, row mt·16 + g + 8h. This
     * warp finishes VALS of them, from v = ks·VALS: one row, and outputs col, col + 1 */
    const int v0 = ks * VALS, vj = v0 / 4, vh = v0 / 2 % 2, ve = v0 % 2, m = mt * 16 + g + 8 * vh;
    /* QKV: where row m's K and V go in stage 08's pools, [page][head][offset][d], but for the head */
    const int C = a.N / 3, d = EPI == DECODE_QKV_APPEND ? C / a.H : 1;
    long long kv_row = 0;
    if (EPI == DECODE_QKV_APPEND) {
        const long long slot = m < M ? a.slots[m] : 0;
        kv_row = slot / a.block_size * a.H * a.block_size * d + slot % a.block_size * d;
    }
#pragma unroll
    for (int r = 0; r < ROWS_PER_WARP; ++r)
#pragma unroll
        for (int j = 0; j < LANE_PIECES; ++j) {
            const int k = (lane + 32 * j) * 8;
            if (k < 16 * k16) *reinterpret_cast<uint4 *>(rows + (warp + WARPS * r) * ldk + k) = raw[r][j];
        }
    __syncthreads();
    unsigned afrag[MAX_KK][4]; /* loaded once: every chunk multiplies the same rows */
#pragma unroll
    for (int i = 0; i < MAX_KK; ++i)
        if (kk0 + i < kk1) ldmatrix_x4(afrag[i], rows + (mt * 16 + lane % 16) * ldk + (kk0 + i) * 16 + lane / 16 * 8);

    if (a.ln_folded) { /* the LayerNorm folded into W: its rows' Σx and Σx² over this warp's slice of K, on the
                          * tensor cores: Σx is x·1 (B all ones), Σx² the diagonal of x·xᵀ (B the tile's own rows) */
        const unsigned ones = 0x3C003C00u; /* two fp16 1.0 */
        float s1[4] = {}, sq[2][4] = {};
#pragma unroll
        for (int i = 0; i < MAX_KK; ++i)
            if (kk0 + i < kk1) { /* B's column n is the tile's row n: a lane's B fragment (k 2t and 2t + 8 of column
                                   * g) is its own A fragment's row g (a0, a2), or row g + 8 (a1, a3): no load */
                mma_16x8x16(s1, afrag[i], ones, ones);
                mma_16x8x16(sq[0], afrag[i], afrag[i][0], afrag[i][2]); /* rows g, g + 8 times the tile's rows 0-7 */
                mma_16x8x16(sq[1], afrag[i], afrag[i][1], afrag[i][3]); /* … times rows 8-15 */
            }
        if (t == g / 2) { /* the lane that holds column g: row g·row g, and row (g + 8)·row (g + 8) */
            row_sums[ks * 16 * M_TILES + mt * 16 + g] = make_float2(s1[0], g % 2 ? sq[0][1] : sq[0][0]);
            row_sums[ks * 16 * M_TILES + mt * 16 + g + 8] = make_float2(s1[2], g % 2 ? sq[1][3] : sq[1][2]);
        }
    }

    unsigned long long best = 0; /* row m's best (value, token) key */
    /* this lane's rows of B in a slot worked out once, each k step's ldmatrix a constant offset from one shared
     * address, and the slots counted, not c % stages: a division by a number known only at run time and three
     * multiplies an ldmatrix were a fifth of the chunk loop's instructions (the head at 64 rows: 15.1 M against
     * 19.2 M, 42.8 µs against 49.9; ncu, H200) */
    const int b_at = (lane / 16 * 8 + lane % 8) * ldk + kk0 * 16 + lane / 8 % 2 * 8;
    for (int c = 0, slot = 0; c < chunks; ++c, slot = slot + 1 == stages ? 0 : slot + 1) {
        const int nc = n0 + BATCH_CHUNK * c, col = nc + 8 * vj + 2 * t + ve;
        float resid[VALS] = {};
#pragma unroll
        for (int u = 0; u < VALS; ++u) /* requested before the wait: they land while the chunk does */
            if (EPI == DECODE_RESIDUAL && !PARTIALS && col + u < n1 && m < M) /* y as it was: the residual stream */
                resid[u] = load_cg((const __half *)a.y + (long long)m * a.N + col + u);
        cp_async_wait_pending(stages - 2); /* chunk c has landed; the later ones may still be in flight */
        __syncthreads();                   /* every thread's copies are visible, and chunk c − 1 is done with */
        request(c + stages - 1, slot ? slot - 1 : stages - 1); /* into chunk c − 1's slot */
        const unsigned w = (unsigned)__cvta_generic_to_shared(ring + (size_t)slot * BATCH_CHUNK * ldk + b_at);
        float acc[2][2][4] = {}; /* [k step parity][tile]: four independent chains */
#pragma unroll
        for (int i = 0; i < MAX_KK; ++i)
            if (kk0 + i < kk1) { /* B: outputs 0-7 then 8-15 of the chunk, k and k + 8 of each */
                unsigned b[4];
                ldmatrix_x4(b, w + i * 32); /* 16 halves, 32 bytes, a k step */
                mma_16x8x16(acc[i % 2][0], afrag[i], b[0], b[1]);
                mma_16x8x16(acc[i % 2][1], afrag[i], b[2], b[3]);
            }
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[0][j][v] += acc[1][j][v];
        /* the slices' sums meet in shared memory, and each warp of a tile finishes 8 / K_SLICES of its lanes' 8
         * outputs, so that the epilogue's chain is spread over all the warps */
#pragma unroll
        for (int jj = 0; jj < 2; ++jj)
            part[((ks * M_TILES + mt) * 2 + jj) * 32 + lane] =
                make_float4(acc[0][jj][0], acc[0][jj][1], acc[0][jj][2], acc[0][jj][3]);
        __syncthreads();
        float out[VALS] = {};
        for (int sl = 0; sl < K_SLICES; ++sl) {
            const float *p =
                reinterpret_cast<const float *>(part + ((sl * M_TILES + mt) * 2 + vj) * 32 + lane) + 2 * vh + ve;
#pragma unroll
            for (int u = 0; u < VALS; ++u) out[u] += p[u];
        }
        float bias[VALS], colsum[VALS];
#pragma unroll
        for (int u = 0; u < VALS; ++u) {
            const float2 cc = col + u < n1 ? col_consts[col - n0 + u] : make_float2(0.0f, 0.0f);
            bias[u] = cc.x, colsum[u] = cc.y;
        }
        if (m >= M) continue;
        if (PARTIALS) { /* fc-proj: this slice's sums, added with the bias and the residual by decode_batch_finish */
#pragma unroll
            for (int u = 0; u < VALS; ++u)
                if (col + u < n1) partials[((long long)slice * M + m) * a.N + col + u] = out[u];
            continue;
        }
        if (a.ln_folded) { /* y = 1/σ·(x·W' − mean·Σ_k W') + bias', σ² = E[x²] − mean² (in fp32 as close as fp16's
                            * rounding while the mean is under a hundred σ, as a residual stream's is) */
            float sum = 0.0f, sum_sq = 0.0f;
            for (int sl = 0; sl < K_SLICES; ++sl) {
                const float2 p = row_sums[sl * 16 * M_TILES + m];
                sum += p.x, sum_sq += p.y;
            }
            const float mean = sum / K, rstd = rsqrtf(fmaxf(sum_sq / K - mean * mean, 0.0f) + GPT2_LN_EPS);
#pragma unroll
            for (int u = 0; u < VALS; ++u) out[u] = rstd * (out[u] - mean * colsum[u]);
        }
#pragma unroll
        for (int u = 0; u < VALS; ++u) out[u] += bias[u];
        if (EPI == DECODE_QKV_APPEND) { /* a chunk of 16 lies in one of q, k, v and in one head (d a multiple of 16) */
            const int which = nc / C, cc = col - which * C, head = (nc - which * C) / d;
            __half *dst = which == 0 ? (__half *)a.y + (long long)m * C + cc
                                     : (__half *)(which == 1 ? a.k_pool : a.v_pool) + kv_row +
                                           (long long)head * a.block_size * d + cc - head * d;
            if (VALS == 2)
                *reinterpret_cast<__half2 *>(dst) = __floats2half2_rn(out[0], out[VALS - 1]);
            else
                *dst = __float2half_rn(out[0]);
        } else {
#pragma unroll
            for (int u = 0; u < VALS; ++u)
                if (col + u < n1) decode_epilogue_apply<__half, EPI>(a, m, col + u, out[u], resid[u], best);
        }
    }
    if (EPI == DECODE_LOGITS_ARGMAX) { /* the row's best over the 4 lanes that share it, one atomic each */
        for (int offset = 1; offset < 4; offset *= 2) {
            unsigned long long other = __shfl_xor_sync(0xffffffffu, best, offset);
            best = other > best ? other : best;
        }
        if (t == 0 && m < M) atomicMax(a.best + m, best);
    }
    cp_async_wait<0>(); /* the empty groups past the last chunk */
}

/** @brief Bytes of one row of K inputs in the batch linear's shared memory (an input row, or an output's weights). */
static size_t batch_row_bytes(int K) { return ((size_t)(K + 15) / 16 * 16 + BATCH_PAD) * sizeof(__half); }

/** @brief Outputs a block of the batch linear takes: whole chunks, one wave of `per_sm` blocks an SM. */
static int batch_cols_per_block(int N, int per_sm)
{
    int sms;
    wb_current_gpu(NULL, &sms);
    const int out_chunks = (N + BATCH_CHUNK - 1) / BATCH_CHUNK;
    return (out_chunks + per_sm * sms - 1) / (per_sm * sms) * BATCH_CHUNK;
}

/** @brief Shared memory of the batch linear: the rows of M_TILES tiles, a ring of `stages` chunks, the slices' sums,
 *         the block's `cols` outputs' constants. */
static size_t batch_smem_bytes(int m_tiles, int K, int stages, int cols)
{
    return (16 * (size_t)m_tiles + BATCH_CHUNK * (size_t)stages) * batch_row_bytes(K) +
           (size_t)batch_warps(m_tiles) * (2 * 32 * sizeof(float4) + 16 * sizeof(float2)) + cols * sizeof(float2);
}

/** @brief Launch for a's rows (at most 64), with the instantiation of the fewest 16-row tiles that holds them: one
 *         wave of blocks, each a run of whole chunks of outputs of one slice of K (k_slice inputs: K, or fc-proj's
 *         quarters, which leave their sums in `partials`). */
template <decode_epilogue EPI, bool PARTIALS = false>
static void launch_batch_tiles(const decode_linear_args *a, size_t limit, int k_slice, float *partials = NULL)
{
    const int m_tiles = a->M <= 16 ? 1 : a->M <= 32 ? 2 : 4, slices = a->K / k_slice;
    int cols = batch_cols_per_block(a->N * slices, 1);
    /* At most 16 rows a block's 8 warps take at most half an SM's registers (__launch_bounds__). Where half its
     * shared memory (less 2 KB a block: the system's reserve and the static arrays) also holds the block's rows and
     * ring, two blocks share each SM: twice the blocks, each with half the chunks, so each linear's chain of chunks
     * is half as long (batch 8's serving step 274-277 µs against 305-310, H200) */
    const int cols_two = batch_cols_per_block(a->N * slices, 2);
    const size_t half = limit / 2 - 2048;
    if (m_tiles == 1 && batch_smem_bytes(1, k_slice, batch_ring_slots(2, cols_two), cols_two) <= half)
        cols = cols_two, limit = half;
    auto kernel = m_tiles == 1   ? decode_batch_linear<1, EPI, PARTIALS>
                  : m_tiles == 2 ? decode_batch_linear<2, EPI, PARTIALS>
                                 : decode_batch_linear<4, EPI, PARTIALS>;
    static size_t allowed[3]; /* each instantiation's limit, raised once (the limit is the GPU's) */
    if (allowed[m_tiles / 2] < limit) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)limit));
        allowed[m_tiles / 2] = limit;
    }
    const int per_block = cols / BATCH_CHUNK;
    const int out_chunks = (a->N + BATCH_CHUNK - 1) / BATCH_CHUNK;
    const size_t chunk_bytes = BATCH_CHUNK * batch_row_bytes(k_slice);
    /* the ring need not be longer than the block's chunks + 1, and fills no more slots than it has chunks */
    const int fit = (int)((limit - batch_smem_bytes(m_tiles, k_slice, 0, cols)) / chunk_bytes);
    int stages = fit >= per_block ? per_block + 1 : fit;
    stages = stages > BATCH_MAX_STAGES ? BATCH_MAX_STAGES : stages;
    const dim3 grid((unsigned)((out_chunks + per_block - 1) / per_block * slices)), block(batch_warps(m_tiles) * 32);
    const size_t smem = batch_smem_bytes(m_tiles, k_slice, batch_ring_slots(stages, cols), cols);
    wb_launch_config launch;
    cudaLaunchConfig_t *cfg = wb_launch_config_init(&launch, grid, block, smem, a->dependent_launch);
    WB_CUDA_CHECK(cudaLaunchKernelEx(cfg, kernel, *a, cols, stages, k_slice, partials));
    WB_CHECK_LAUNCH("decode_batch_linear");
}

/** @brief All M rows: in groups of the most rows (64, 32 or 16) whose tiles and two chunks fit the GPU's shared
 *         memory (all 64 from an A100 on), each with the instantiation of the fewest tiles that holds it. */
template <decode_epilogue EPI>
static const char *launch_batch_linear(const decode_linear_args *a)
{
    const size_t limit = decode_max_smem();
    const int cols = batch_cols_per_block(a->N, 1);
    int group = 64;
    while (group > 16 && batch_smem_bytes(group / 16, a->K, 2, cols) > limit) group /= 2;
    if (batch_smem_bytes(group / 16, a->K, 2, cols) > limit)
        return "batch decode linear: 16 rows and two chunks of weights do not fit in shared memory";
    for (int m0 = 0; m0 < a->M; m0 += group) {
        const decode_linear_args g = rows_of(a, m0, group, sizeof(__half));
        launch_batch_tiles<EPI>(&g, limit, a->K);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* 3-64 rows: the sums of a linear's slices, the epilogue in a second pass    */
/* ------------------------------------------------------------------------ */

/**
 * @brief The second pass of a linear whose K is split over blocks (fc-proj's
 *        slices in the batch linear; the skinny linear, v1's, for a linear
 *        the batch linear does not take): row m's outputs, the slices'
 *        partial sums added, through v2's epilogue. fc-proj ends with the
 *        residual add, and at the last layer with the LM head's LayerNorm,
 *        which needs a whole row.
 *
 * A LayerNorm cannot be the prologue of a GEMM that streams its rows into
 * the tensor cores, and every block of the batch linear would normalise all
 * the rows again. It moves to the end of the residual add before it: with
 * ln_next, one block holds the whole row (gridDim.x is 1, a thread an
 * output), adds the residual, and writes the new row normalised for the next
 * linear. Block (x, m) takes output x·blockDim.x + threadIdx.x of row m.
 * On sm_90 it starts as a programmatic dependent of the kernel before, and
 * lets the linear after it start the same way.
 */
template <decode_epilogue EPI>
__global__ void __launch_bounds__(1024)
    decode_batch_finish(decode_linear_args a, decode_batch_args b, int splits, int pitch)
{
    extern __shared__ float new_row[]; /* with ln_next: the row's N values as stored */
    __shared__ float stat;
    const int m = blockIdx.y;
    const long long chunk = (long long)a.M * pitch; /* one K chunk's partial sums */
    unsigned long long best = 0;
    /* the wait comes first: the kernel before may be a programmatic dependent in turn (the sliced batch linear),
     * and before its end even the residual stream may not be final (a chain of dependents runs ahead) */
    wb_dependent_launch_sync(); /* the next linear's blocks may start, and the sums are all written */
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < a.N; n += gridDim.x * blockDim.x) {
        const float *part = b.partials + (long long)m * pitch + n;
        float s = a.bias ? __ldg(a.bias + n) : 0.0f;
#pragma unroll 8 /* the chunks' loads in flight together: the kernel lasts a thread's chain of trips to L2 */
        for (int k = 0; k < splits; ++k) s += load_cg(part + k * chunk);
        const float resid = EPI == DECODE_RESIDUAL ? load((const __half *)a.y, (long long)m * a.N + n) : 0.0f;
        decode_epilogue_apply<__half, EPI>(a, m, n, s, resid, best);
        if (EPI == DECODE_RESIDUAL && b.ln_next) new_row[n] = __half2float(__float2half(resid + s));
    }
    if (EPI == DECODE_LOGITS_ARGMAX) { /* the block's best key, then one atomic per block */
        __shared__ unsigned long long warp_best[32];
        for (int offset = 16; offset > 0; offset /= 2) {
            unsigned long long other = __shfl_xor_sync(0xffffffffu, best, offset);
            best = other > best ? other : best;
        }
        if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < (int)blockDim.x / 32; ++w) best = warp_best[w] > best ? warp_best[w] : best;
            atomicMax(a.best + m, best);
        }
    }
    if (EPI == DECODE_RESIDUAL && b.ln_next) { /* stage 05's two passes, over the row in shared memory */
        float sum = 0.0f;
        for (int n = threadIdx.x; n < a.N; n += blockDim.x) sum += new_row[n];
        sum = block_reduce<SumOp>(sum);
        if (threadIdx.x == 0) stat = sum / a.N;
        __syncthreads();
        const float mu = stat;
        float var = 0.0f;
        for (int n = threadIdx.x; n < a.N; n += blockDim.x) var += (new_row[n] - mu) * (new_row[n] - mu);
        var = block_reduce<SumOp>(var);
        __syncthreads(); /* everyone has read mu before thread 0 overwrites stat */
        if (threadIdx.x == 0) stat = rsqrtf(var / a.N + GPT2_LN_EPS);
        __syncthreads();
        for (int n = threadIdx.x; n < a.N; n += blockDim.x)
            store((__half *)b.ln_next, (long long)m * a.N + n,
                  (new_row[n] - mu) * stat * __ldg(b.ln_next_w + n) + __ldg(b.ln_next_b + n));
    }
}

/** @brief decode_batch_finish over `splits` slices' partial sums, rows `pitch` apart. */
template <decode_epilogue EPI>
static const char *launch_batch_finish(const decode_linear_args *a, const decode_batch_args *b, int splits, int pitch)
{
    const bool whole_rows = EPI == DECODE_RESIDUAL && b->ln_next;
    const int threads = whole_rows ? (a->N < 1024 ? (a->N + 31) / 32 * 32 : 1024) : 256;
    dim3 grid(whole_rows ? 1 : (a->N + threads - 1) / threads, a->M);
    /* a programmatic dependent of the linear (sm_90): launched as its blocks end, it overlaps its start with their
     * tail, and lets the next linear start in turn */
    wb_launch_config launch;
    cudaLaunchConfig_t *cfg =
        wb_launch_config_init(&launch, grid, dim3(threads), whole_rows ? a->N * sizeof(float) : 0, a->dependent_launch);
    WB_CUDA_CHECK(cudaLaunchKernelEx(cfg, decode_batch_finish<EPI>, *a, *b, splits, pitch));
    WB_CHECK_LAUNCH("decode_batch_finish");
    return NULL;
}

/**
 * @brief fc-proj (a residual add after more than DECODE_BATCH_MAX_K inputs:
 *        4C) on the batch linear: K in slices of at most that many, each block
 *        one slice's outputs with one slice of every row in its shared memory,
 *        the slice's sums into b->partials ([slice][M][N], fp32); then
 *        decode_batch_finish adds the slices, the bias and the residual (and
 *        normalises with ln_next). Where v1's skinny linear took 20 slices of
 *        160 inputs in a GEMM launched after fc had ended, this is 4 slices in
 *        a programmatic dependent of fc that requests its weights before it
 *        waits. False when the linear does not split so (the skinny linear
 *        takes it); else *why is the finish's error, or NULL.
 */
static bool launch_batch_sliced(const decode_linear_args *a, const decode_batch_args *b, const char **why)
{
    const int slices = (a->K + DECODE_BATCH_MAX_K - 1) / DECODE_BATCH_MAX_K, k_slice = a->K / slices;
    const size_t limit = decode_max_smem();
    const int cols = batch_cols_per_block(a->N * slices, 1); /* the slices' chunks over the SMs, one wave */
    if (a->K <= DECODE_BATCH_MAX_K || a->K % slices || k_slice % 8 || batch_smem_bytes(4, k_slice, 2, cols) > limit ||
        (size_t)slices * a->M * a->N > b->partials_floats)
        return false;
    launch_batch_tiles<DECODE_RESIDUAL, true>(a, limit, k_slice, b->partials);
    *why = launch_batch_finish<DECODE_RESIDUAL>(a, b, slices, a->N);
    return true;
}

/** @brief 3-64 rows: the skinny linear's partial sums, then decode_batch_finish. */
template <decode_epilogue EPI>
static const char *launch_decode_batch(const decode_linear_args *a, const decode_batch_args *b)
{
    const int pitch = EPI == DECODE_LOGITS_ARGMAX ? a->ldy : a->N; /* the head's GEMM: its rows padded to 8 */
    int splits;
    const char *why = gpt2_skinny_partials(a->x, b->w, a->M, pitch, a->K, b->partials, b->partials_floats, &splits);
    if (why) return why;
    return launch_batch_finish<EPI>(a, b, splits, pitch);
}

/** @brief The batch path (3-64 rows in the engine): the batch linear (fc-proj's in slices, then its second pass), or
 *         for a linear it does not take, the skinny linear and the second pass. */
static const char *decode_linear_batch(wb_dtype dtype, const decode_linear_args *a, const decode_batch_args *b)
{
    int cc;
    wb_current_gpu(&cc, NULL);
    if (dtype != WB_F16 || cc < 80 || a->ln_w)
        return "fused decode linear: the batch path needs fp16, sm_80 (cp.async, mma.sync m16n8k16) and rows "
               "already normalised (no ln_w)";
    /* the linears whose outputs need nothing but themselves take the batch linear (QKV's chunks of 16 in one head;
     * a residual add with no LayerNorm after it) */
    const bool own_epilogue = (a->epilogue != DECODE_RESIDUAL || !b->ln_next) && a->K <= DECODE_BATCH_MAX_K &&
                              (a->epilogue != DECODE_QKV_APPEND || (a->N / 3 / a->H) % BATCH_CHUNK == 0);
    if (own_epilogue) switch (a->epilogue) {
        case DECODE_QKV_APPEND: return launch_batch_linear<DECODE_QKV_APPEND>(a);
        case DECODE_RESIDUAL: return launch_batch_linear<DECODE_RESIDUAL>(a);
        case DECODE_GELU: return launch_batch_linear<DECODE_GELU>(a);
        default: return launch_batch_linear<DECODE_LOGITS_ARGMAX>(a);
        }
    if (a->ln_folded)
        return "fused decode linear: a folded LayerNorm needs the batch linear (at most 768 inputs, QKV's heads a "
               "multiple of 16)";
    if (!b->w || !b->partials) return "fused decode linear: the skinny linear needs W as [K][N] and the partials' room";
    if (b->ln_next && (!b->ln_next_w || !b->ln_next_b))
        return "fused decode linear: ln_next needs its gain and shift";
    const char *why = NULL;
    if (a->epilogue == DECODE_RESIDUAL && launch_batch_sliced(a, b, &why)) return why; /* fc-proj */
    switch (a->epilogue) {
    case DECODE_QKV_APPEND: return launch_decode_batch<DECODE_QKV_APPEND>(a, b);
    case DECODE_RESIDUAL: return launch_decode_batch<DECODE_RESIDUAL>(a, b);
    case DECODE_GELU: return launch_decode_batch<DECODE_GELU>(a, b);
    case DECODE_LOGITS_ARGMAX: return launch_decode_batch<DECODE_LOGITS_ARGMAX>(a, b);
    }
    return "fused decode linear: unknown epilogue";
}

const char *gpt2_decode_linear(wb_dtype dtype, const decode_linear_args *a, const decode_batch_args *batch)
{
    int per16 = 16 / (int)wb_dtype_bytes(dtype);
    if (a->M < 1 || a->M > SKINNY_MAX_ROWS) return "fused decode linear: needs 1 <= M <= 64 rows";
    if (a->N < 1 || a->K < 1 || a->K % per16)
        return "fused decode linear: K must be a positive multiple of 16 bytes (4 fp32 or 8 fp16 values)";
    if (a->epilogue == DECODE_QKV_APPEND && (a->N % 3 || a->H < 1 || (a->N / 3) % a->H))
        return "fused decode linear: the QKV epilogue needs N = 3·C with C a multiple of the heads";
    if (a->epilogue == DECODE_LOGITS_ARGMAX && (!a->best || a->ldy < a->N))
        return "fused decode linear: the argmax epilogue needs best[] and ldy >= N";
    if (a->ln_folded && (!a->bias || a->ln_w || !batch))
        return "fused decode linear: a folded LayerNorm needs the batch path, its bias and sums ([2][N]) and no ln_w";
    if (batch) return decode_linear_batch(dtype, a, batch);
    if (a->M > DECODE_MAX_ROWS)
        return "fused decode linear: past 8 rows it needs the batch path's arguments (batch)";
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

