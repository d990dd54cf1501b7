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

/** @brief Elements of T in 16 bytes (one vector load): 4 fp32 or 8 fp16. */
template <typename T>
struct Vec16 {
    static constexpr int N = 16 / sizeof(T); /**< elements per 16 bytes */
};

/** @brief 16 bytes of fp32 as 4 floats (the last argument picks the storage type: pass T()). */
static __device__ __forceinline__ void unpack16(uint4 raw, float *out, float)
{
    out[0] = __uint_as_float(raw.x), out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z), out[3] = __uint_as_float(raw.w);
}

/** @brief 16 bytes of fp16 as 8 floats (each fp16 value is exactly a float). */
static __device__ __forceinline__ void unpack16(uint4 raw, float *out, __half)
{
    const __half2 *h2 = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 f = __half22float2(h2[i]);
        out[2 * i] = f.x, out[2 * i + 1] = f.y;
    }
}

/** @brief 4 fp32 values back into 16 bytes (unpack16 reads them; the last argument picks the storage type). */
static __device__ __forceinline__ uint4 pack16(const float *v, float)
{
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
}

/** @brief 8 fp32 values into 16 bytes of fp16, each rounded to the nearest. */
static __device__ __forceinline__ uint4 pack16(const float *v, __half)
{
    uint4 q;
    __half2 *h = reinterpret_cast<__half2 *>(&q);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
    return q;
}

/** @brief Call f(T{}) with T = float or __half, the storage type of the run. */
template <typename F>
static const char *dispatch(wb_dtype dtype, F f)
{
    return dtype == WB_F16 ? f(__half()) : f(float());
}

#endif /* WB_DTYPE_DEVICE_CUH */
