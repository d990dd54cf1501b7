/**
 * @file stages/01_vector_add/kernels.cu
 * @brief Stage 01 — c = a + b, from one element per thread to 16-byte vector loads.
 *
 * Each element costs 12 bytes of traffic (read a, read b, write c) for one FLOP,
 * so no variant can do better than the memory roof: the lesson is how close each
 * gets, and why. Every launcher checks its contract and returns why it refuses,
 * never a wrong answer.
 */
#include "kernels.h"

#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_check.h"
#include "device.h"

/** @brief Threads per block, short for the launches below. */
#define T VECADD_THREADS_PER_BLOCK

/* Grid limit of gridDim.x: 2^31 - 1 blocks. */
static const long long max_blocks = 2147483647LL;

/**
 * @brief v1 — one element per thread: thread i of the grid adds element i.
 *
 * The simplest mapping. Consecutive threads of a warp touch consecutive floats,
 * so each warp's load is one 128-byte transaction (coalesced). The cost: the grid
 * has n/256 blocks (262144 at the default n), each thread does one add and retires,
 * and a thread's index arithmetic and bounds check are paid for 12 bytes of work.
 */
__global__ void vector_add_one_per_thread(const float *a, const float *b, float *c, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; /* 64-bit: n may exceed 2^31 / 256 blocks' worth */
    if (i < n) c[i] = a[i] + b[i];
}

static const char *vecadd_one_per_thread(const void *a, const void *b, void *c, long long n)
{
    long long blocks = (n + T - 1) / T;
    if (n < 1 || blocks > max_blocks) return "needs 1 <= n <= 2^31 * 256";
    vector_add_one_per_thread<<<(unsigned)blocks, T>>>((const float *)a, (const float *)b, (float *)c, n);
    WB_CHECK_LAUNCH("vector_add_one_per_thread");
    return NULL;
}

/**
 * @brief v2 — grid-stride loop: a grid sized to fill the GPU once, each thread
 *        walking the array in steps of the whole grid's width.
 *
 * Same bytes as v1, fewer blocks: SMs × resident blocks (1056 on a 132-SM H100)
 * instead of n/256, so block launch and retirement are paid once per resident
 * slot, and the loop keeps each warp's accesses coalesced. This is the shape every
 * later memory-bound kernel takes. It also works for any n with one launch.
 */
__global__ void vector_add_grid_stride(const float *a, const float *b, float *c, long long n)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        c[i] = a[i] + b[i];
}

/* Blocks that fill the GPU once, for the kernel given; asked once per process. */
static int fill_blocks(const void *kernel, int *cache)
{
    if (*cache == 0) *cache = wb_blocks_to_fill_gpu(kernel, T, 0);
    return *cache;
}

static int blocks_for(long long work_items, int fill)
{
    long long needed = (work_items + T - 1) / T;
    return (int)(needed < fill ? (needed > 0 ? needed : 1) : fill);
}

static const char *vecadd_grid_stride(const void *a, const void *b, void *c, long long n)
{
    static int fill = 0;
    if (n < 1) return "needs n >= 1";
    int blocks = blocks_for(n, fill_blocks((const void *)vector_add_grid_stride, &fill));
    vector_add_grid_stride<<<blocks, T>>>((const float *)a, (const float *)b, (float *)c, n);
    WB_CHECK_LAUNCH("vector_add_grid_stride");
    return NULL;
}

/**
 * @brief v3 — float4 loads: each thread moves 16 bytes per array per step.
 *
 * One 128-bit load (LDG.E.128) replaces four 32-bit ones, so a warp asks the memory
 * system for 512 bytes per instruction instead of 128: a quarter of the load/store
 * instructions and of the loop overhead for the same bytes, and more bytes in
 * flight per thread. The n mod 4 elements past the last whole float4 (the tail)
 * are added one by one by the first threads of the grid.
 * Contract: a, b, c 16-byte aligned (cudaMalloc gives 256).
 */
__global__ void vector_add_float4(const float4 *a, const float4 *b, float4 *c, long long n)
{
    long long n4 = n / 4;
    long long stride = (long long)gridDim.x * blockDim.x;
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = first; i < n4; i += stride) {
        float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    long long tail = n4 * 4 + first; /* at most 3 elements, one per thread */
    if (tail < n) ((float *)c)[tail] = ((const float *)a)[tail] + ((const float *)b)[tail];
}

/* The contract of the 16-byte variants: n >= 1 and every pointer 16-byte aligned. */
static const char *check_vec16_contract(const void *a, const void *b, const void *c, long long n)
{
    if (n < 1) return "needs n >= 1";
    if ((((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15u) != 0) return "needs a, b, c aligned to 16 bytes";
    return NULL;
}

static const char *vecadd_float4(const void *a, const void *b, void *c, long long n)
{
    static int fill = 0;
    const char *why = check_vec16_contract(a, b, c, n);
    if (why) return why;
    int blocks = blocks_for(n / 4 + 1, fill_blocks((const void *)vector_add_float4, &fill));
    vector_add_float4<<<blocks, T>>>((const float4 *)a, (const float4 *)b, (float4 *)c, n);
    WB_CHECK_LAUNCH("vector_add_float4");
    return NULL;
}

/**
 * @brief v4 — fp16 with half2: 16-byte loads holding 8 halves, added as 4 half2.
 *
 * Storing fp16 halves the bytes per element (6 instead of 12), so at the same
 * bandwidth the add takes half the time: the cheapest speed-up in memory-bound
 * work is moving fewer bytes. __hadd2 adds two fp16 pairs in one instruction
 * (HADD2, sm_53 and later, so the T4 runs it); each 16-byte load is reinterpreted
 * as four half2. The tail (n mod 8) is added with scalar __hadd.
 * Contract: a, b, c 16-byte aligned.
 */
__global__ void vector_add_half2(const uint4 *a, const uint4 *b, uint4 *c, long long n)
{
    long long n8 = n / 8;
    long long stride = (long long)gridDim.x * blockDim.x;
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long i = first; i < n8; i += stride) {
        uint4 x = a[i], y = b[i], z;
        const __half2 *hx = (const __half2 *)&x, *hy = (const __half2 *)&y;
        __half2 *hz = (__half2 *)&z;
#pragma unroll
        for (int k = 0; k < 4; ++k) hz[k] = __hadd2(hx[k], hy[k]);
        c[i] = z;
    }
    long long tail = n8 * 8 + first; /* at most 7 elements */
    if (tail < n) ((__half *)c)[tail] = __hadd(((const __half *)a)[tail], ((const __half *)b)[tail]);
}

static const char *vecadd_half2(const void *a, const void *b, void *c, long long n)
{
    static int fill = 0;
    const char *why = check_vec16_contract(a, b, c, n);
    if (why) return why;
    int blocks = blocks_for(n / 8 + 1, fill_blocks((const void *)vector_add_half2, &fill));
    vector_add_half2<<<blocks, T>>>((const uint4 *)a, (const uint4 *)b, (uint4 *)c, n);
    WB_CHECK_LAUNCH("vector_add_half2");
    return NULL;
}

extern "C" const vecadd_variant vecadd_variants[] = {
    {"v1", "one element per thread", WB_F32, vecadd_one_per_thread},
    {"v2", "grid-stride loop, grid fills the GPU once", WB_F32, vecadd_grid_stride},
    {"v3", "float4: 16-byte loads and stores, tail", WB_F32, vecadd_float4},
    {"v4", "fp16: 16-byte loads, 4 x __hadd2, tail", WB_F16, vecadd_half2},
    {"ex", "your kernel (exercise.cu)", WB_F32, vecadd_exercise},
};
extern "C" const int vecadd_variant_count = sizeof vecadd_variants / sizeof vecadd_variants[0];
