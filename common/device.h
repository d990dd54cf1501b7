/**
 * @file device.h
 * @brief The GPU the program runs on: its facts, its measured memory roof, and the
 *        no-GPU path.
 *
 * The memory roof of every memory-bound stage is not the datasheet number but the
 * device-to-device copy bandwidth measured here once per run (bytes read plus bytes
 * written, over a buffer well past the L2), so "% of roof" compares a kernel with
 * what this GPU really moves.
 */
#ifndef WB_DEVICE_H
#define WB_DEVICE_H

#include <stddef.h>
#include <stdio.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Exit code of a program that found no CUDA device (CTest's SKIP_RETURN_CODE). */
#define WB_EXIT_NO_DEVICE 77

/** @brief Facts about the GPU in use. */
typedef struct {
    int id;                        /**< CUDA device ordinal */
    char name[256];                /**< e.g. "NVIDIA H100 80GB HBM3" */
    int cc_major;                  /**< compute capability, major (7 for the T4) */
    int cc_minor;                  /**< compute capability, minor (5 for the T4) */
    int sm_count;                  /**< streaming multiprocessors */
    int max_threads_per_sm;        /**< resident threads per SM */
    size_t smem_per_block_optin;   /**< shared memory a block may opt in to, bytes */
    size_t smem_per_sm;            /**< shared memory per SM, bytes */
    size_t l2_bytes;               /**< L2 cache size, bytes */
    size_t global_mem_bytes;       /**< device memory, bytes */
    double copy_gbps;              /**< measured device-to-device copy, GB/s (read + write); 0 until measured */
    void *l2_flush;                /**< zeros the timer reads between runs to evict the L2 (wb_flush_l2) */
    size_t l2_flush_bytes;         /**< its size: twice the L2 */
} wb_device;

/**
 * @brief Open device 0 (or CUDA_VISIBLE_DEVICES' first) and read its facts.
 *
 * With no usable CUDA device it prints one line — `<program>: no CUDA device
 * found (<reason>); GPU variants not run` — and exits with WB_EXIT_NO_DEVICE (77).
 * Parse arguments before calling this, so argument errors look the same everywhere.
 *
 * With the environment variable `WB_EMULATE_T4=1` the program takes the T4's
 * path on whatever GPU it runs: the device reports compute capability 7.5, 40
 * SMs, 1024 threads and 64 KB of shared memory per SM (wb_current_gpu and
 * wb_current_smem_per_block too), so
 * variants that need sm_80 or sm_90 are skipped and launchers size their grids
 * for 40 SMs. The kernels still run on the real GPU. The T4 fitness test records
 * the launches of that path (tests/t4/); nothing else uses it.
 */
void wb_device_open_or_skip(wb_device *dev, const char *program);

/** @brief Release what wb_device_open_or_skip allocated. */
void wb_device_close(wb_device *dev);

/** @brief 1 when the device's compute capability is at least major.minor. */
int wb_device_has_cc(const wb_device *dev, int major, int minor);

/** @brief Print a two-line description of the device and its measured roof. */
void wb_device_print(const wb_device *dev, FILE *out);

/**
 * @brief The current GPU's compute capability (10·major + minor) and SM count,
 *        asked of the driver once per process: for launchers that run on every
 *        step of a hot loop (stage 10 calls some ~100 times per decode step) and
 *        have no wb_device at hand. Either pointer may be NULL.
 */
void wb_current_gpu(int *cc, int *sm_count);

/**
 * @brief The most shared memory a block of the current GPU may opt in to, in
 *        bytes (the T4's 64 KB on the T4's path), asked of the driver once per
 *        process: for launchers without a wb_device at hand, as wb_current_gpu.
 */
size_t wb_current_smem_per_block(void);

/** @brief 1 when `WB_EMULATE_T4` asks the program to take the T4's path (see wb_device_open_or_skip). */
int wb_emulating_t4(void);

/**
 * @brief Blocks of `threads_per_block` threads that fill every SM once (SMs ×
 *        resident blocks per SM, from the occupancy calculator): the grid size of
 *        a grid-stride kernel.
 * @param kernel             the __global__ function, cast to const void*
 * @param threads_per_block  its block size
 * @param dynamic_smem_bytes its dynamic shared memory per block
 */
int wb_blocks_to_fill_gpu(const void *kernel, int threads_per_block, size_t dynamic_smem_bytes);

/** @brief Fill `bytes` of device memory with 0xFF: NaN for fp32 and fp16, so unwritten outputs fail the check. */
void wb_poison(void *device_ptr, size_t bytes);

/** @brief cudaMalloc that names the buffer and its size when memory runs out, then exits 1. */
void *wb_device_alloc(size_t bytes, const char *what);

/** @brief wb_device_alloc, the bytes zeroed (counters and flags that kernels expect to start at zero). */
void *wb_device_alloc_zeroed(size_t bytes, const char *what);

/**
 * @brief Make a cached device workspace hold at least `bytes`: when it is smaller, free
 *        it and allocate `bytes` (wb_device_alloc), else leave it alone. For launchers
 *        that keep a buffer from one call to the next and grow it for a larger shape.
 * @param buf            the buffer (NULL at first)
 * @param capacity_bytes its size (0 at first)
 * @param bytes          the size needed now
 * @param what           what the buffer is, for the out-of-memory message
 * @return 1 when it was (re)allocated (its contents are undefined), 0 when kept
 */
int wb_device_reserve(void **buf, size_t *capacity_bytes, size_t bytes, const char *what);

/** @brief malloc that names the buffer and its size when memory runs out, then exits 1. */
void *wb_host_alloc(size_t bytes, const char *what);

/**
 * @brief A fresh device buffer holding n floats in `dtype` (fp16: each rounded to
 *        the nearest), named `what` if memory runs out.
 */
void *wb_device_upload(const float *src, size_t n, wb_dtype dtype, const char *what);

/** @brief The same for a rows × cols row-major matrix, uploaded transposed (cols × rows). */
void *wb_device_upload_transposed(const float *src, size_t rows, size_t cols, wb_dtype dtype, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* WB_DEVICE_H */
