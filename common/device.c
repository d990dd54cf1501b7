/** @file device.c @brief Device facts, the measured copy roof, the no-GPU path. */
#include "device.h"

#include "cuda_check.h"
#include "fp16.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The T4 (TU104) that WB_EMULATE_T4 stands in for: compute capability 7.5, 40 SMs, 64 KB of shared memory. */
enum { T4_CC = 75, T4_SMS = 40, T4_SMEM_BYTES = 64 * 1024 };

void wb_device_open_or_skip(wb_device *dev, const char *program)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        printf("%s: no CUDA device found (%s); GPU variants not run\n", program,
               err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
        exit(WB_EXIT_NO_DEVICE);
    }
    memset(dev, 0, sizeof *dev);
    dev->id = 0;
    WB_CUDA_CHECK(cudaSetDevice(dev->id));
    struct cudaDeviceProp p;
    WB_CUDA_CHECK(cudaGetDeviceProperties(&p, dev->id));
    snprintf(dev->name, sizeof dev->name, "%s", p.name);
    dev->cc_major = p.major;
    dev->cc_minor = p.minor;
    dev->sm_count = p.multiProcessorCount;
    dev->max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    dev->smem_per_block_optin = p.sharedMemPerBlockOptin;
    dev->smem_per_sm = p.sharedMemPerMultiprocessor;
    dev->l2_bytes = (size_t)p.l2CacheSize;
    dev->global_mem_bytes = p.totalGlobalMem;
    if (wb_emulating_t4()) { /* the T4's facts (TU104, sm_75) for every decision the program makes */
        snprintf(dev->name, sizeof dev->name, "%.200s (taking the T4's path)", p.name);
        dev->cc_major = T4_CC / 10;
        dev->cc_minor = T4_CC % 10;
        dev->sm_count = T4_SMS;
        dev->max_threads_per_sm = 1024;
        dev->smem_per_block_optin = T4_SMEM_BYTES;
        dev->smem_per_sm = T4_SMEM_BYTES;
    }
    dev->l2_flush_bytes = 2 * dev->l2_bytes;
    if (dev->l2_flush_bytes > 0) { /* zeros: the timer's sweep only reads it (wb_flush_l2) */
        dev->l2_flush = wb_device_alloc_zeroed(dev->l2_flush_bytes, "L2 flush buffer");
    }
}

void wb_device_close(wb_device *dev)
{
    if (dev->l2_flush) WB_CUDA_CHECK(cudaFree(dev->l2_flush));
    dev->l2_flush = NULL;
}

int wb_device_has_cc(const wb_device *dev, int major, int minor)
{
    return dev->cc_major > major || (dev->cc_major == major && dev->cc_minor >= minor);
}

void wb_device_print(const wb_device *dev, FILE *out)
{
    fprintf(out, "GPU: %s (sm_%d%d, %d SMs, L2 %.0f MiB, %.0f GiB)\n", dev->name, dev->cc_major,
            dev->cc_minor, dev->sm_count, dev->l2_bytes / 1048576.0, dev->global_mem_bytes / 1073741824.0);
    if (dev->copy_gbps > 0)
        fprintf(out, "memory roof: %.0f GB/s (device-to-device copy measured now, bytes read + written)\n",
                dev->copy_gbps);
}

void wb_current_gpu(int *cc, int *sm_count)
{
    static int known_cc = -1, known_sms = 0;
    if (known_cc < 0) {
        int device = 0, major = 0, minor = 0;
        WB_CUDA_CHECK(cudaGetDevice(&device));
        WB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
        WB_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
        WB_CUDA_CHECK(cudaDeviceGetAttribute(&known_sms, cudaDevAttrMultiProcessorCount, device));
        known_cc = major * 10 + minor;
        if (wb_emulating_t4()) known_cc = T4_CC, known_sms = T4_SMS;
    }
    if (cc) *cc = known_cc;
    if (sm_count) *sm_count = known_sms;
}

size_t wb_current_smem_per_block(void)
{
    static int known = 0;
    if (!known) {
        int device = 0;
        WB_CUDA_CHECK(cudaGetDevice(&device));
        WB_CUDA_CHECK(cudaDeviceGetAttribute(&known, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        if (wb_emulating_t4()) known = T4_SMEM_BYTES;
    }
    return (size_t)known;
}

int wb_emulating_t4(void)
{
    const char *v = getenv("WB_EMULATE_T4");
    return v && *v && strcmp(v, "0") != 0;
}

int wb_blocks_to_fill_gpu(const void *kernel, int threads_per_block, size_t dynamic_smem_bytes)
{
    int sms = 0, per_sm = 0;
    wb_current_gpu(NULL, &sms);
    WB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads_per_block,
                                                                dynamic_smem_bytes));
    return sms * (per_sm > 0 ? per_sm : 1);
}

void wb_poison(void *device_ptr, size_t bytes)
{
    WB_CUDA_CHECK(cudaMemset(device_ptr, 0xFF, bytes));
}

int wb_device_reserve(void **buf, size_t *capacity_bytes, size_t bytes, const char *what)
{
    if (bytes <= *capacity_bytes && *buf) return 0;
    if (*buf) WB_CUDA_CHECK(cudaFree(*buf));
    *buf = wb_device_alloc(bytes, what);
    *capacity_bytes = bytes;
    return 1;
}

void *wb_device_alloc(size_t bytes, const char *what)
{
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        fprintf(stderr, "cudaMalloc of %zu bytes (%.1f MiB) for %s failed: %s\n", bytes,
                bytes / 1048576.0, what, cudaGetErrorString(err));
        exit(1);
    }
    return p;
}

void *wb_device_alloc_zeroed(size_t bytes, const char *what)
{
    void *p = wb_device_alloc(bytes, what);
    WB_CUDA_CHECK(cudaMemset(p, 0, bytes));
    return p;
}

void *wb_device_upload(const float *src, size_t n, wb_dtype dtype, const char *what)
{
    void *d = wb_device_alloc(n * wb_dtype_bytes(dtype), what);
    if (dtype == WB_F16) {
        uint16_t *h = wb_host_alloc(n * 2, what);
        wb_floats_to_halves(src, h, n);
        WB_CUDA_CHECK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
        free(h);
    } else {
        WB_CUDA_CHECK(cudaMemcpy(d, src, n * 4, cudaMemcpyHostToDevice));
    }
    return d;
}

void *wb_device_upload_transposed(const float *src, size_t rows, size_t cols, wb_dtype dtype, const char *what)
{
    float *t = wb_host_alloc(rows * cols * sizeof(float), what);
    for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) t[c * rows + r] = src[r * cols + c];
    void *d = wb_device_upload(t, rows * cols, dtype, what);
    free(t);
    return d;
}

void *wb_host_alloc(size_t bytes, const char *what)
{
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (!p) {
        fprintf(stderr, "malloc of %zu bytes (%.1f MiB) for %s failed\n", bytes, bytes / 1048576.0, what);
        exit(1);
    }
    return p;
}
