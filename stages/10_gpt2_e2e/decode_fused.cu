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

/* ------------------------------------------------------------------------ */
/* 3-64 rows: v1's skinny linear, the epilogue in its second pass            */
/* ------------------------------------------------------------------------ */

/**
 * @brief The second pass of a decode batch's linear: row m's outputs, the K
 *        chunks added, through v2's epilogue. The warps' dot products above
 *        issue instructions in proportion to the rows, and past 8 rows
 *        would read W once per 8; the skinny linear (tensor cores, one
 *        64-row tile, K split, v1's) takes 64 rows for the instructions of
 *        one and reads W once. From 3 rows it is the faster, and its second
 *        pass, which must add the chunks anyway, is where the epilogue goes.
 *
 * A LayerNorm cannot be the prologue of a GEMM that streams its rows into
 * the tensor cores. It moves to the end of the residual add before it: with
 * ln_next, one block holds the whole row (gridDim.x is 1, a thread an
 * output), adds the residual, and writes the new row normalised for the next
 * linear. Block (x, m) takes output x·blockDim.x + threadIdx.x of row m.
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
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < a.N; n += gridDim.x * blockDim.x) {
        const float *part = b.partials + (long long)m * pitch + n;
        float s = a.bias ? __ldg(a.bias + n) : 0.0f;
#pragma unroll 8 /* the chunks' loads in flight together: the kernel lasts a thread's chain of trips to L2 */
        for (int k = 0; k < splits; ++k) s += part[k * chunk];
        float resid = EPI == DECODE_RESIDUAL ? load((const __half *)a.y, (long long)m * a.N + n) : 0.0f;
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

/** @brief 3-64 rows: the skinny linear's partial sums, then decode_batch_finish. */
template <decode_epilogue EPI>
static const char *launch_decode_batch(const decode_linear_args *a, const decode_batch_args *b)
{
    const int pitch = EPI == DECODE_LOGITS_ARGMAX ? a->ldy : a->N; /* the head's GEMM: its rows padded to 8 */
    int splits;
    const char *why = gpt2_skinny_partials(a->x, b->w, a->M, pitch, a->K, b->partials, b->partials_floats, &splits);
    if (why) return why;
    const bool whole_rows = EPI == DECODE_RESIDUAL && b->ln_next;
    const int threads = whole_rows ? (a->N < 1024 ? (a->N + 31) / 32 * 32 : 1024) : 256;
    dim3 grid(whole_rows ? 1 : (a->N + threads - 1) / threads, a->M);
    decode_batch_finish<EPI><<<grid, threads, whole_rows ? a->N * sizeof(float) : 0>>>(*a, *b, splits, pitch);
    WB_CHECK_LAUNCH("decode_batch_finish");
    return NULL;
}

/** @brief The batch path (3-64 rows in the engine): what it needs, then its launch. */
static const char *decode_linear_batch(wb_dtype dtype, const decode_linear_args *a, const decode_batch_args *b)
{
    if (dtype != WB_F16 || !b->w || !b->partials || a->ln_w)
        return "fused decode linear: the batch path needs fp16, W as [K][N], the partials' room, and rows already "
               "normalised (no ln_w)";
    if (b->ln_next && (!b->ln_next_w || !b->ln_next_b))
        return "fused decode linear: ln_next needs its gain and shift";
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
    if (batch) return decode_linear_batch(dtype, a, batch);
    if (a->M > DECODE_MAX_ROWS)
        return "fused decode linear: past 8 rows it needs the skinny linear's arguments (batch)";
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

