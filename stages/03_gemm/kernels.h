/**
 * @file stages/03_gemm/kernels.h
 * @brief Stage 03 — matrix multiplication C = A·B: launchers and the table of variants.
 *
 * Row-major throughout: A is M×K, B is K×N, C is M×N, element (i, j) of an R×S
 * matrix at index i·S + j. fp32 variants read and write fp32; tensor-core variants
 * read fp16 A and B, accumulate in fp32 and write fp16 C.
 */
#ifndef STAGE03_KERNELS_H
#define STAGE03_KERNELS_H

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief A launcher: C = A·B.
 * @param A M×K, device, of the variant's input type
 * @param B K×N, device
 * @param C M×N, device, of the variant's output type
 * @param M rows of A and C
 * @param N columns of B and C
 * @param K columns of A, rows of B
 * @return NULL when launched, or why the variant cannot take these arguments
 */
typedef const char *(*gemm_launch_fn)(const void *A, const void *B, void *C, int M, int N, int K);

/** @brief One variant. */
typedef struct {
    const char *id;        /**< "v1", …, or a peer's name */
    const char *what;      /**< one line for the table */
    wb_dtype dtype;        /**< WB_F32: fp32 in and out; WB_F16: fp16 in and out, fp32 accumulation */
    int is_peer;           /**< 1 for cuBLAS */
    int min_cc;            /**< compute capability it needs, as 10·major + minor (75 = T4) */
    gemm_launch_fn launch; /**< its launcher */
} gemm_variant;

/** @brief The exercise slot (exercise.cu), the variant `ex`: your shared-memory tiled GEMM, fp32. */
const char *gemm_exercise(const void *A, const void *B, void *C, int M, int N, int K);

/** @brief The variants in teaching order, each precision's peer after its variants, then the exercise slot. */
extern const gemm_variant gemm_variants[];
/** @brief How many. */
extern const int gemm_variant_count;

/**
 * @brief v10, the Hopper GEMM (gemm_hopper.cuh): built for sm_90a in a library of its
 *        own (kernels_sm90.cu); refuses any GPU but compute capability 9.0.
 */
const char *gemm_v10_wgmma(const void *A, const void *B, void *C, int M, int N, int K);

/**
 * @brief v11, v10 made persistent (gemm_hopper.cuh): one block per SM walks the tiles,
 *        the producer running ahead into the next tile during the epilogue. sm_90a only,
 *        in the same library as v10.
 */
const char *gemm_v11_wgmma_persistent(const void *A, const void *B, void *C, int M, int N, int K);

/**
 * @brief v12, v11 with the epilogue finished in registers and stored by TMA
 *        (gemm_hopper.cuh): the consumers write the fp16 tile once into shared memory
 *        and go on with the next tile while the copy engine stores it. Same contract
 *        and library as v10.
 */
const char *gemm_v12_wgmma_tma_store(const void *A, const void *B, void *C, int M, int N, int K);

/**
 * @brief v13, v12 with the last wave's tiles split along K when that wave is at most
 *        half full: each piece on its own SM, the last to finish adds the others'
 *        partials and runs the epilogue. Same contract and library as v10.
 */
const char *gemm_v13_wgmma_split_tail(const void *A, const void *B, void *C, int M, int N, int K);

/**
 * @brief v14, v13 with the tile's shape chosen from the waves it makes: 128×256, or
 *        192×128 (three consumer warpgroups) when that shape's waves, each 3/4 as long,
 *        end sooner. Same contract and library as v10.
 */
const char *gemm_v14_wgmma_tile_from_waves(const void *A, const void *B, void *C, int M, int N, int K);

/** @brief Free the Hopper library's workspace (v13's partial tiles); gemm_release calls it. */
void gemm_sm90_release(void);

/** @brief Release the cuBLAS handle the peers created (call once at the end). */
void gemm_release(void);

#ifdef __cplusplus
}
#endif

#endif /* STAGE03_KERNELS_H */
