/**
 * @file stages/04_fused_gelu_linear/kernels.cu
 * @brief Stage 04 — kernel fusion: bias and GELU in the epilogue of stage 03's GEMM
 *        instead of separate passes over the product.
 *
 * The GEMM is stage 03's (gemm_tiles.cuh: v7 for fp32, v9 for fp16); this stage
 * only changes what happens to each result between the accumulator and memory.
 * Unfused, the M×N product is written, read and written by a bias kernel, read
 * and written by a GELU kernel: five passes of M·N elements over DRAM instead of one.
 */
#include "kernels.h"

#include <cublasLt.h>
#include <cuda_fp16.h>

#include "cublas_check.h"
#include "cuda_check.h"
#include "device.h"  /* wb_blocks_to_fill_gpu, wb_device_reserve */
#include "dtype_device.cuh" /* load, store, dispatch */
#include "bias_gelu.cuh"   /* the epilogue: BiasGelu, activate */
#include "gemm_tiles.cuh"   /* stage 03: launch_sgemm_warptile (v7), launch_hgemm_mma (v9), GemmIdentity */

/** @brief Threads per block of the elementwise kernels. */
#define ELEMENTWISE_THREADS 256

/*
 * The elementwise kernels walk Y as one flat array with a grid-stride loop. Element i
 * is in column i mod N; a 64-bit % per element would cost more than the arithmetic,
 * so each thread computes its column once and then steps it along with i.
 */

/** @brief y[i] += bias[i mod N], in place: one read and one write of Y. */
template <typename T>
__global__ void add_bias(T *y, const float *bias, long long total, int N)
{
    long long stride = (long long)gridDim.x * blockDim.x, i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int col = (int)(i % N), col_step = (int)(stride % N);
    for (; i < total; i += stride) {
        store(y, i, load(y, i) + bias[col]);
        col += col_step;
        if (col >= N) col -= N;
    }
}

/** @brief y[i] = GELU(y[i]), in place: one more read and write of Y. */
template <typename T>
__global__ void apply_gelu(T *y, long long total, int kind)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        float v = load(y, i);
        store(y, i, activate(kind, v));
    }
}

/** @brief y[i] = GELU(y[i] + bias[i mod N]) in one pass (the epilogue as its own kernel). */
template <typename T>
__global__ void bias_gelu(T *y, const float *bias, long long total, int N, int kind)
{
    long long stride = (long long)gridDim.x * blockDim.x, i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int col = (int)(i % N), col_step = (int)(stride % N);
    for (; i < total; i += stride) {
        float v = load(y, i) + (bias ? bias[col] : 0.0f);
        store(y, i, activate(kind, v));
        col += col_step;
        if (col >= N) col -= N;
    }
}

/** @brief Blocks for an elementwise pass over `total` elements: at most 8 per SM's worth, grid-stride beyond. */
static unsigned elementwise_blocks(long long total)
{
    long long b = (total + ELEMENTWISE_THREADS - 1) / ELEMENTWISE_THREADS;
    return (unsigned)(b < 132 * 16 ? (b > 0 ? b : 1) : 132 * 16);
}

template <typename T>
static void launch_bias_gelu_kernel(const linear_args *a)
{
    long long total = (long long)a->M * a->N;
    bias_gelu<T><<<elementwise_blocks(total), ELEMENTWISE_THREADS>>>((T *)a->Y, a->bias, total, a->N, a->gelu);
    WB_CHECK_LAUNCH("bias_gelu");
}

extern "C" const char *linear_round_trip(const linear_args *a)
{
    long long total = (long long)a->M * a->N;
    add_bias<float><<<elementwise_blocks(total), ELEMENTWISE_THREADS>>>((float *)a->Y, a->bias, total, a->N);
    WB_CHECK_LAUNCH("add_bias");
    return NULL;
}

extern "C" const char *linear_unfused_epilogue(const linear_args *a)
{
    long long total = (long long)a->M * a->N;
    if (a->bias) {
        add_bias<float><<<elementwise_blocks(total), ELEMENTWISE_THREADS>>>((float *)a->Y, a->bias, total, a->N);
        WB_CHECK_LAUNCH("add_bias");
    }
    apply_gelu<float><<<elementwise_blocks(total), ELEMENTWISE_THREADS>>>((float *)a->Y, total, a->gelu);
    WB_CHECK_LAUNCH("apply_gelu");
    return NULL;
}

/**
 * @brief v1 — unfused: the GEMM writes X·W, a bias kernel reads and rewrites it,
 *        a GELU kernel reads and rewrites it again (5 passes of M·N over DRAM).
 */
static const char *linear_v1(const linear_args *a)
{
    const char *why = launch_sgemm_warptile((const float *)a->X, (const float *)a->W, (float *)a->Y, a->M, a->N, a->K,
                                            GemmIdentity());
    if (why) return why;
    return linear_unfused_epilogue(a);
}

/** @brief v2 — the GEMM, then one kernel for bias and GELU together (3 passes of M·N). */
static const char *linear_v2(const linear_args *a)
{
    const char *why = launch_sgemm_warptile((const float *)a->X, (const float *)a->W, (float *)a->Y, a->M, a->N, a->K,
                                            GemmIdentity());
    if (why) return why;
    launch_bias_gelu_kernel<float>(a);
    return NULL;
}

/**
 * @brief v3 — bias and GELU fused into the epilogue of stage 03's v7 (fp32): each
 *        result is finished in registers and written once (1 pass of M·N).
 */
static const char *linear_v3(const linear_args *a)
{
    const float *X = (const float *)a->X, *W = (const float *)a->W;
    return with_bias_gelu(a->gelu, a->bias,
                          [&](auto epi) { return launch_sgemm_warptile(X, W, (float *)a->Y, a->M, a->N, a->K, epi); });
}

/* ---------------------------------------------------------------------------
 * v4 — split-K, for shapes with too few output tiles to fill the GPU evenly.
 * ------------------------------------------------------------------------- */

/**
 * @brief Split-K's second pass: y = GELU(Σ_z partial_z + bias), one read of each of
 *        the `splits` partial products (slices of `total` floats) and one write of Y.
 */
__global__ void splitk_sum_bias_gelu(const float *partials, int splits, float *y, const float *bias, long long total,
                                     int N, int kind)
{
    long long stride = (long long)gridDim.x * blockDim.x, i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int col = (int)(i % N), col_step = (int)(stride % N);
    for (; i < total; i += stride) {
        float v = bias ? bias[col] : 0.0f;
        for (int z = 0; z < splits; ++z) v += partials[z * total + i];
        y[i] = activate(kind, v);
        col += col_step;
        if (col >= N) col -= N;
    }
}

/** @brief Shortest chunk of K worth a split: below it, a block's prologue and its partial's write dominate. */
#define SPLIT_K_MIN_CHUNK 512

/**
 * @brief How many chunks to cut K into for stage 03's v7 (128×128 tiles) on this GPU.
 *
 * The blocks run in waves of `slots` = SMs × blocks per SM; a grid of n tiles takes
 * ⌈n / slots⌉ waves, each as long as one tile's K loop. With S chunks the grid has
 * n·S blocks whose loops are S times shorter: time ∝ ⌈n·S / slots⌉ / S. At
 * 8192×768 on the H100 n = 384 and slots = 264, so S = 1 runs 2 waves with the
 * second 45% full, and S = 2 runs 3 waves of half-length tiles: 1.5 instead of 2.
 * A split must gain at least 10% to pay for its second pass.
 */
static int split_k_for(int M, int N, int K)
{
    static int slots = 0; /* asked once: this runs on every launch */
    if (!slots) slots = wb_blocks_to_fill_gpu((const void *)sgemm_warptile_double_buffer<true, GemmIdentity>, 256, 0);
    long long tiles = (long long)((M + 127) / 128) * ((N + 127) / 128);
    double best_time = (double)((tiles + slots - 1) / slots);
    int best = 1;
    for (int S = 2; S <= 8 && K / S >= SPLIT_K_MIN_CHUNK; ++S) {
        double time = (double)((tiles * S + slots - 1) / slots) / S;
        if (time < 0.9 * best_time) best_time = time, best = S;
    }
    return best;
}

static float *split_partials = NULL;
static size_t split_partials_bytes = 0;

/**
 * @brief v4 — v3 with split-K where the output has too few tiles for the GPU: the
 *        GEMM writes S partial products of K/S each, and one pass sums them and
 *        applies bias and GELU (S+1 passes of M·N instead of 1, but all SMs busy).
 *        Where no split pays (split_k_for returns 1), v4 is v3.
 */
static const char *linear_v4_split_k(const linear_args *a)
{
    int splits = split_k_for(a->M, a->N, a->K);
    if (splits == 1) return linear_v3(a);
    /* grown once per shape, before the timed runs */
    wb_device_reserve((void **)&split_partials, &split_partials_bytes, sizeof(float) * (size_t)splits * a->M * a->N,
                      "v4's split-K partials");
    const char *why = launch_sgemm_warptile((const float *)a->X, (const float *)a->W, split_partials, a->M, a->N, a->K,
                                            GemmIdentity(), splits);
    if (why) return why;
    long long total = (long long)a->M * a->N;
    splitk_sum_bias_gelu<<<elementwise_blocks(total), ELEMENTWISE_THREADS>>>(split_partials, splits, (float *)a->Y,
                                                                             a->bias, total, a->N, a->gelu);
    WB_CHECK_LAUNCH("splitk_sum_bias_gelu");
    return NULL;
}

/**
 * @brief v5 — the same epilogue on stage 03's v8, the WMMA GEMM (fp16 in and out,
 *        sm_70+): the T4's tensor-core linear, where v6's cp.async and m16n8k16 are missing.
 */
static const char *linear_v5_wmma(const linear_args *a)
{
    const __half *X = (const __half *)a->X, *W = (const __half *)a->W;
    return with_bias_gelu(a->gelu, a->bias,
                          [&](auto epi) { return launch_hgemm_wmma(X, W, (__half *)a->Y, a->M, a->N, a->K, epi); });
}

/** @brief v6 — the same epilogue on stage 03's v9 tensor-core GEMM (fp16 in and out, sm_80+). */
static const char *linear_v6_mma(const linear_args *a)
{
    const __half *X = (const __half *)a->X, *W = (const __half *)a->W;
    return with_bias_gelu(a->gelu, a->bias,
                          [&](auto epi) { return launch_hgemm_mma(X, W, (__half *)a->Y, a->M, a->N, a->K, epi); });
}

/* ---------------------------------------------------------------------------
 * The peers: cuBLAS GEMM + our bias-GELU kernel, and cuBLASLt with its GELU
 * epilogue. Both column-major: the row-major Y = X·W is Yᵀ = Wᵀ·Xᵀ.
 * ------------------------------------------------------------------------- */

static cublasHandle_t blas = NULL;
static cublasLtHandle_t lt = NULL;
static void *lt_workspace = NULL;
/** @brief cuBLASLt's workspace, bytes. */
#define LT_WORKSPACE_BYTES (32u << 20)

static void handles(void)
{
    if (blas) return;
    WB_CUBLAS_CHECK(cublasCreate(&blas));
    WB_CUBLAS_CHECK(cublasSetStream(blas, cudaStreamPerThread)); /* the stream every kernel and the timer use */
    WB_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH)); /* no TF32 */
    WB_CUBLAS_CHECK(cublasLtCreate(&lt));
    WB_CUDA_CHECK(cudaMalloc(&lt_workspace, LT_WORKSPACE_BYTES));
}

static const char *peer_cublas_then_kernel(const linear_args *a, wb_dtype dtype)
{
    if (a->M < 1 || a->N < 1 || a->K < 1) return "needs M, N, K >= 1";
    handles();
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t t = dtype == WB_F16 ? CUDA_R_16F : CUDA_R_32F;
    WB_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, a->N, a->M, a->K, &one, a->W, t, a->N, a->X, t, a->K,
                                 &zero, a->Y, t, a->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (dtype == WB_F16)
        launch_bias_gelu_kernel<__half>(a);
    else
        launch_bias_gelu_kernel<float>(a);
    return NULL;
}

static const char *peer_cublas_f32(const linear_args *a) { return peer_cublas_then_kernel(a, WB_F32); }
static const char *peer_cublas_f16(const linear_args *a) { return peer_cublas_then_kernel(a, WB_F16); }

/** @brief A cuBLASLt plan: descriptors and the chosen algorithm, kept while the problem stays the same. */
typedef struct {
    int M;                      /**< the shape it was made for */
    int N;                      /**< ... */
    int K;                      /**< ... */
    int has_bias;               /**< GELU_BIAS or GELU epilogue */
    int dtype;                  /**< WB_F32 or WB_F16 */
    int valid;                  /**< descriptors exist */
    cublasLtMatmulDesc_t op;    /**< the operation, with its epilogue */
    cublasLtMatrixLayout_t w;   /**< Wᵀ, N×K column-major */
    cublasLtMatrixLayout_t x;   /**< Xᵀ, K×M column-major */
    cublasLtMatrixLayout_t y;   /**< Yᵀ, N×M column-major */
    cublasLtMatmulAlgo_t algo;  /**< the heuristic's first choice */
} lt_plan;

static lt_plan plans[2]; /* one per precision */

static const char *lt_prepare(const linear_args *a, wb_dtype dtype, lt_plan *p)
{
    int has_bias = a->bias != NULL;
    if (p->valid && p->M == a->M && p->N == a->N && p->K == a->K && p->has_bias == has_bias) return NULL;
    if (p->valid) {
        WB_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->op));
        WB_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->w));
        WB_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->x));
        WB_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->y));
        p->valid = 0;
    }
    cudaDataType_t t = dtype == WB_F16 ? CUDA_R_16F : CUDA_R_32F;
    WB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtEpilogue_t epi = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    WB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (has_bias) { /* the bias has the output's type (fp16 for the fp16 peer: see bias_as_half) */
        cudaDataType_t bias_type = t;
        WB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                       sizeof bias_type));
    }
    /* column-major: Yᵀ (N×M) = Wᵀ (N×K) · Xᵀ (K×M) */
    WB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->w, t, a->N, a->K, a->N));
    WB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->x, t, a->K, a->M, a->K));
    WB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->y, t, a->N, a->M, a->N));
    cublasLtMatmulPreference_t pref;
    WB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = LT_WORKSPACE_BYTES;
    WB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    /* not checked as fatal: for some shapes and types cuBLASLt has no kernel, and says so */
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->w, p->x, p->y, p->y, pref, 1, &result, &found);
    WB_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    p->valid = 1; /* the descriptors exist from here on: released by linear_release */
    p->M = a->M, p->N = a->N, p->K = a->K, p->has_bias = has_bias, p->dtype = dtype;
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        p->M = -1; /* prepare again next time */
        return "cuBLASLt offers no algorithm for this shape and type";
    }
    p->algo = result.algo;
    return NULL;
}

/** @brief fp32 → fp16, for the fp16 peer's bias. */
__global__ void to_half(const float *src, __half *dst, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2half_rn(src[i]);
}

static __half *bias16 = NULL;
static int bias16_n = 0;

/* cuBLASLt's fp16 GELU_BIAS takes an fp16 bias: convert (outside any timed work when cached). */
static const void *bias_as_half(const float *bias, int n)
{
    static const float *converted_from = NULL;
    if (bias16 && (bias != converted_from || n != bias16_n)) {
        WB_CUDA_CHECK(cudaFree(bias16));
        bias16 = NULL;
    }
    if (!bias16) {
        WB_CUDA_CHECK(cudaMalloc(&bias16, sizeof(__half) * (size_t)n));
        to_half<<<(n + 255) / 256, 256>>>(bias, bias16, n);
        WB_CHECK_LAUNCH("to_half");
        converted_from = bias, bias16_n = n;
    }
    return bias16;
}

static const char *peer_cublaslt(const linear_args *a, wb_dtype dtype)
{
    if (a->M < 1 || a->N < 1 || a->K < 1) return "needs M, N, K >= 1";
    if (a->gelu != GELU_TANH) return "cuBLASLt's GELU epilogue is the tanh form only";
    handles();
    lt_plan *p = &plans[dtype == WB_F16];
    const char *why = lt_prepare(a, dtype, p);
    if (why) return why;
    if (a->bias) {
        const void *bias = dtype == WB_F16 ? bias_as_half(a->bias, a->N) : (const void *)a->bias;
        WB_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    const float one = 1.0f, zero = 0.0f;
    WB_CUBLAS_CHECK(cublasLtMatmul(lt, p->op, &one, a->W, p->w, a->X, p->x, &zero, a->Y, p->y, a->Y, p->y, &p->algo,
                                   lt_workspace, LT_WORKSPACE_BYTES, cudaStreamPerThread));
    return NULL;
}

static const char *peer_cublaslt_f32(const linear_args *a) { return peer_cublaslt(a, WB_F32); }
static const char *peer_cublaslt_f16(const linear_args *a) { return peer_cublaslt(a, WB_F16); }

extern "C" void linear_release(void)
{
    for (int i = 0; i < 2; ++i)
        if (plans[i].valid) {
            WB_CUBLAS_CHECK(cublasLtMatmulDescDestroy(plans[i].op));
            WB_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plans[i].w));
            WB_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plans[i].x));
            WB_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plans[i].y));
            plans[i].valid = 0;
        }
    if (lt_workspace) WB_CUDA_CHECK(cudaFree(lt_workspace));
    if (bias16) WB_CUDA_CHECK(cudaFree(bias16));
    bias16 = NULL;
    if (split_partials) WB_CUDA_CHECK(cudaFree(split_partials));
    split_partials = NULL, split_partials_bytes = 0;
    linear_sm90_release();
    if (lt) WB_CUBLAS_CHECK(cublasLtDestroy(lt));
    if (blas) WB_CUBLAS_CHECK(cublasDestroy(blas));
    lt_workspace = NULL, lt = NULL, blas = NULL;
}

extern "C" const linear_variant linear_variants[] = {
    {"v1", "unfused: GEMM, bias kernel, GELU kernel", WB_F32, 0, 75, 5, linear_v1},
    {"v2", "GEMM, then one bias+GELU kernel", WB_F32, 0, 75, 3, linear_v2},
    {"v3", "bias+GELU in the GEMM epilogue (stage 03's v7)", WB_F32, 0, 75, 1, linear_v3},
    {"v4", "v3 + split-K when the tiles fill under 2 waves", WB_F32, 0, 75, 3, linear_v4_split_k},
    {"cublas", "cuBLAS SGEMM + our bias+GELU kernel (peer)", WB_F32, 1, 75, 3, peer_cublas_f32},
    {"cublaslt", "cuBLASLt, GELU_BIAS epilogue (peer)", WB_F32, 1, 75, 1, peer_cublaslt_f32},
    {"v5", "the epilogue on WMMA (stage 03's v8): the T4's", WB_F16, 0, 75, 1, linear_v5_wmma},
    {"v6", "the epilogue on mma.sync (stage 03's v9)", WB_F16, 0, 80, 1, linear_v6_mma},
    {"v7", "the epilogue on Hopper's GEMM (stage 03's v10)", WB_F16, 0, 90, 1, linear_v7_wgmma},
    {"v8", "v7 on the persistent GEMM (stage 03's v11)", WB_F16, 0, 90, 1, linear_v8_wgmma_persistent},
    {"v9", "v8 + TMA-store GEMM (03's v13), bias in smem", WB_F16, 0, 90, 1, linear_v9_staged_bias},
    {"v10", "v9 + GELU on the hardware's tanh", WB_F16, 0, 90, 1, linear_v10_hw_tanh},
    {"v11", "v10 + the tile shape from the waves (03's v14)", WB_F16, 0, 90, 1, linear_v11_tile_from_waves},
    {"cublas-h", "cuBLAS HGEMM + our bias+GELU kernel (peer)", WB_F16, 1, 75, 3, peer_cublas_f16},
    {"cublaslt-h", "cuBLASLt fp16, GELU_BIAS epilogue (peer)", WB_F16, 1, 75, 1, peer_cublaslt_f16},
    {"ex", "your kernel (exercise.cu)", WB_F32, 0, 75, 1, linear_exercise},
};
extern "C" const int linear_variant_count = sizeof linear_variants / sizeof linear_variants[0];
