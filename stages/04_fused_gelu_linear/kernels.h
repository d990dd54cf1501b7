/**
 * @file stages/04_fused_gelu_linear/kernels.h
 * @brief Stage 04 — Y = GELU(X·W + b): launchers and the table of variants.
 *
 * X is M×K, W is K×N (GPT-2's Conv1D layout, [in, out], as stage 03's B), b has N
 * entries (or is NULL: no bias), Y is M×N; all row-major. fp32 variants use fp32
 * throughout; fp16 variants read and write fp16 with fp32 accumulation (b stays fp32).
 */
#ifndef STAGE04_KERNELS_H
#define STAGE04_KERNELS_H

#include "dtype.h"
#include "gelu.h" /* gelu_kind: GELU_TANH, GELU_ERF */

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Everything one call needs. */
typedef struct {
    const void *X;     /**< M×K, device */
    const void *W;     /**< K×N, device */
    const float *bias; /**< N, device; NULL: no bias */
    void *Y;           /**< M×N, device */
    int M;             /**< rows of X and Y */
    int N;             /**< columns of W and Y */
    int K;             /**< columns of X, rows of W */
    gelu_kind gelu;    /**< tanh approximation or exact */
} linear_args;

/** @brief A launcher. Returns NULL, or why the variant cannot take the arguments. */
typedef const char *(*linear_launch_fn)(const linear_args *a);

/** @brief One variant. */
typedef struct {
    const char *id;          /**< "v1", …, or a peer's name */
    const char *what;        /**< one line for the table */
    wb_dtype dtype;          /**< WB_F32 or WB_F16 (X, W, Y) */
    int is_peer;             /**< 1 for the library rows */
    int min_cc;              /**< compute capability needed, 10·major + minor */
    int passes_over_y;       /**< times Y (or the intermediate) crosses DRAM: 1 fused, 3 with one extra kernel, 5 unfused */
    linear_launch_fn launch; /**< its launcher */
} linear_variant;

/** @brief The exercise slot (exercise.cu), the variant `ex`: your bias+GELU epilogue on stage 03's v7, fp32. */
const char *linear_exercise(const linear_args *a);

/** @brief The variants in teaching order, each precision's peers after its variants, then the exercise slot. */
extern const linear_variant linear_variants[];
/** @brief How many. */
extern const int linear_variant_count;

/**
 * @brief What v1 adds after its GEMM (fp32): the bias kernel and the GELU kernel,
 *        each a read and a write of Y. Timed alone, it is the measured cost of the
 *        intermediate's round trips that fusion removes.
 */
const char *linear_unfused_epilogue(const linear_args *a);

/**
 * @brief v7: bias + GELU in the epilogue of stage 03's Hopper GEMM (its v10), fp16.
 *        Built for sm_90a in a library of its own (kernels_sm90.cu); refuses any GPU
 *        but compute capability 9.0.
 */
const char *linear_v7_wgmma(const linear_args *a);

/**
 * @brief v8: v7 on stage 03's v11, the persistent Hopper GEMM (one block per SM
 *        walks the tiles; the next tile's loads run during this one's epilogue).
 *        fp16, sm_90a only, in the same library as v7.
 */
const char *linear_v8_wgmma_persistent(const linear_args *a);

/**
 * @brief v9: the epilogue on stage 03's v13: bias and GELU applied to the accumulators
 *        in registers, the fp16 tile stored by TMA while the next tile's wgmma run, a
 *        half-empty last wave of tiles split along K; each tile's bias staged in shared
 *        memory (one load per consumer thread before the tile's mainloop), so the
 *        epilogue reads the 64 columns a thread owns at shared-memory latency instead of
 *        waiting on L1/L2 64 times. fp16, sm_90a only, in the same library as v7.
 */
const char *linear_v9_staged_bias(const linear_args *a);

/**
 * @brief v10: v9 with GELU's tanh form on the hardware's tanh (one special-function
 *        instruction per element instead of two; absolute error up to about
 *        2.4e-4·|x|). The erf form and no activation run v9. fp16, sm_90a only.
 */
const char *linear_v10_hw_tanh(const linear_args *a);

/**
 * @brief v11: v10 on stage 03's v14, which takes 192×128 tiles where their waves
 *        end sooner than 128×256 ones (the deep 8192×768 output: 2 waves of 3/4 a
 *        wide tile's time instead of 2 whole ones). sm_90a.
 */
const char *linear_v11_tile_from_waves(const linear_args *a);

/** @brief Free the Hopper library's workspace (v9's to v11's partial tiles); linear_release calls it. */
void linear_sm90_release(void);

/**
 * @brief One round trip of the fp32 intermediate through memory: the bias kernel
 *        alone (one read and one write of Y; needs a bias). v1 makes two of them.
 */
const char *linear_round_trip(const linear_args *a);

/** @brief Release the cuBLAS/cuBLASLt handles and workspace (call once at the end). */
void linear_release(void);

#ifdef __cplusplus
}
#endif

#endif /* STAGE04_KERNELS_H */
