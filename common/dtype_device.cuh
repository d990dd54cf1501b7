/**
 * @file dtype_device.cuh
 * @brief Device-side access to fp32 or fp16 storage with fp32 math, and the
 *        switch from a run-time wb_dtype to a compile-time element type.
 *
 * Kernels are written once as templates over the storage type T (float or
 * __half); load() widens to fp32, store() rounds back.
 */
#ifndef WB_DTYPE_DEVICE_CUH
#define WB_DTYPE_DEVICE_CUH

#include <cuda_fp16.h>

#include "dtype.h"

/** @brief Read element i as fp32. */
static __device__ __forceinline__ float load(const float *p, long long i) { return p[i]; }
/** @brief Read element i as fp32 (every fp16 value is exactly a float). */
static __device__ __forceinline__ float load(const __half *p, long long i) { return __half2float(p[i]); }
/** @brief Write v to element i. */
static __device__ __forceinline__ void store(float *p, long long i, float v) { p[i] = v; }
/** @brief Write v to element i, rounded to the nearest fp16. */
static __device__ __forceinline__ void store(__half *p, long long i, float v) { p[i] = __float2half_rn(v); }

/** @brief Call f(T{}) with T = float or __half, the storage type of the run. */
template <typename F>
static const char *dispatch(wb_dtype dtype, F f)
{
    return dtype == WB_F16 ? f(__half()) : f(float());
}

#endif /* WB_DTYPE_DEVICE_CUH */
