/**
 * @file stages/10_gpt2_e2e/fresh_load.cuh
 * @brief Loads of data written while the kernel runs: through L2 (ld.global.cg), never the read-only path (__ldg)
 *        nor a stale L1 line. Two cases in this stage: the persistent step's phases read what other blocks wrote in
 *        the same kernel, and v2's linears, launched as programmatic dependents (sm_90), are already running while
 *        the kernel before writes their input (through __ldg, the batch linear's rows of x came back stale at 33
 *        rows).
 */
#ifndef STAGE10_FRESH_LOAD_CUH
#define STAGE10_FRESH_LOAD_CUH

#include <cuda_fp16.h>

/** @brief One fp32 element written while the kernel runs. */
static __device__ __forceinline__ float load_cg(const float *p) { return __ldcg(p); }
/** @brief The same in fp16. */
static __device__ __forceinline__ float load_cg(const __half *p) { return __half2float(__ldcg(p)); }
/** @brief 16 bytes of a row written while the kernel runs. */
static __device__ __forceinline__ uint4 load_fresh(const void *p) { return __ldcg(reinterpret_cast<const uint4 *>(p)); }

#endif /* STAGE10_FRESH_LOAD_CUH */
