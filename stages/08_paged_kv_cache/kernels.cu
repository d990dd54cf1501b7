/**
 * @file stages/08_paged_kv_cache/kernels.cu
 * @brief Stage 08 kernels: append (new tokens → their slots) and gather (pages →
 *        contiguous), scalar then vectorized.
 *
 * Both are pure data movement: the roof is the copy bandwidth, and the only
 * thing paging adds is one indirection per token (a slot, or a block-table
 * entry), 8 or 4 bytes against the 128+ bytes of the token's row.
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_check.h"
#include "dtype_device.cuh"
#include "kernels.h"

/** @brief Where element c of head h of the token in `slot` lives in a pool. */
static __device__ __forceinline__ long long pool_index(long long slot, int h, int c, int H, int d, int block_size)
{
    long long page = slot / block_size, offset = slot % block_size;
    return ((page * H + h) * block_size + offset) * d + c;
}

/* ------------------------------------------------------------------------ */
/* v1 — one thread per element                                              */
/* ------------------------------------------------------------------------ */

/** @brief v1 append: thread i copies element i of the new K and V rows to its slot. */
template <typename T>
__global__ void kv_append_scalar(const T *new_k, const T *new_v, const int64_t *slots, T *k_pool, T *v_pool,
                                 int n_tokens, int H, int d, int block_size)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)n_tokens * H * d) return;
    int c = (int)(i % d), h = (int)(i / d % H);
    long long t = i / ((long long)d * H);
    long long dst = pool_index(slots[t], h, c, H, d, block_size);
    k_pool[dst] = new_k[i];
    v_pool[dst] = new_v[i];
}

/** @brief v1 gather: thread i writes element i of the contiguous output, reading through the block table. */
template <typename T>
__global__ void kv_gather_scalar(const int *block_tables, const int *lens, const T *k_pool, const T *v_pool,
                                 T *k_out, T *v_out, int B, int H, int d, int block_size, int max_len,
                                 int max_pages_per_seq)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)B * H * max_len * d) return;
    int c = (int)(i % d), t = (int)(i / d % max_len), h = (int)(i / ((long long)d * max_len) % H);
    int b = (int)(i / ((long long)d * max_len * H));
    T k = T(0.0f), v = T(0.0f);
    if (t < lens[b]) {
        long long slot = (long long)block_tables[b * max_pages_per_seq + t / block_size] * block_size + t % block_size;
        long long src = pool_index(slot, h, c, H, d, block_size);
        k = k_pool[src], v = v_pool[src];
    }
    k_out[i] = k, v_out[i] = v;
}

/* ------------------------------------------------------------------------ */
/* v2 — 16 bytes per thread                                                 */
/* ------------------------------------------------------------------------ */

/** @brief Tokens v2's append walks one head at a time: 4 rows of d = 64 fp16 are a warp's 512 bytes. */
#define APPEND_RUN_TOKENS 4

/**
 * @brief v2 append: the same walk in 16-byte pieces (8 fp16 or 4 fp32): a quarter or an eighth of the
 *        instructions. Threads go through runs of APPEND_RUN_TOKENS new tokens head by head, so a warp
 *        writes 4 consecutive rows of one head (fp16, d = 64): 512 contiguous bytes of a page, not one
 *        token's rows of 4 heads, 2 KB apart. Measured on the H200 (the prefill append): fp16 88.5% ->
 *        90.2% of the roof; fp32, whose rows are 256 bytes, unchanged.
 */
template <typename T>
__global__ void kv_append_vec16(const uint4 *new_k, const uint4 *new_v, const int64_t *slots, T *k_pool,
                                T *v_pool, int n_tokens, int H, int d, int block_size)
{
    constexpr int PER = 16 / sizeof(T); /* elements per 16 bytes */
    int vecs_per_row = d / PER;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int v = (int)(i % vecs_per_row);
    long long rest = i / vecs_per_row;
    int r = (int)(rest % APPEND_RUN_TOKENS); /* the token within its run */
    rest /= APPEND_RUN_TOKENS;
    int h = (int)(rest % H);
    long long t = rest / H * APPEND_RUN_TOKENS + r;
    if (t >= n_tokens) return; /* the last run may be short */
    long long dst = pool_index(slots[t], h, v * PER, H, d, block_size);
    long long src = (t * H + h) * vecs_per_row + v; /* the new rows are [token][head][d] */
    *reinterpret_cast<uint4 *>(k_pool + dst) = new_k[src];
    *reinterpret_cast<uint4 *>(v_pool + dst) = new_v[src];
}

/** @brief v2 gather: 16 bytes per thread. */
template <typename T>
__global__ void kv_gather_vec16(const int *block_tables, const int *lens, const T *k_pool, const T *v_pool,
                                uint4 *k_out, uint4 *v_out, int B, int H, int d, int block_size, int max_len,
                                int max_pages_per_seq)
{
    constexpr int PER = 16 / sizeof(T);
    int vecs_per_row = d / PER;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)B * H * max_len * vecs_per_row) return;
    int c = (int)(i % vecs_per_row) * PER, t = (int)(i / vecs_per_row % max_len);
    int h = (int)(i / ((long long)vecs_per_row * max_len) % H);
    int b = (int)(i / ((long long)vecs_per_row * max_len * H));
    uint4 k = make_uint4(0, 0, 0, 0), v = k; /* all-zero bits are +0.0 in fp16 and fp32 */
    if (t < lens[b]) {
        long long slot = (long long)block_tables[b * max_pages_per_seq + t / block_size] * block_size + t % block_size;
        long long src = pool_index(slot, h, c, H, d, block_size);
        k = *reinterpret_cast<const uint4 *>(k_pool + src);
        v = *reinterpret_cast<const uint4 *>(v_pool + src);
    }
    k_out[i] = k, v_out[i] = v;
}

/** @brief Blocks of 256 threads covering n items. */
static unsigned blocks_for(long long n) { return (unsigned)((n + 255) / 256); }

static const char *check_sizes(long long elements)
{
    if (elements <= 0) return NULL;
    if ((elements + 255) / 256 > 0x7fffffffLL) return "needs fewer than 2^39 elements";
    return NULL;
}

/**
 * @brief v1 append — one thread per element: coalesced reads of the new rows;
 *        each row's d elements land contiguously in the pool.
 */
static const char *append_scalar(const kv_append_args *a)
{
    long long n = (long long)a->n_tokens * a->H * a->d;
    if (const char *why = check_sizes(n)) return why;
    if (n == 0) return NULL;
    return dispatch(a->dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        kv_append_scalar<T><<<blocks_for(n), 256>>>((const T *)a->new_k, (const T *)a->new_v, a->slots,
                                                    (T *)a->k_pool, (T *)a->v_pool, a->n_tokens, a->H, a->d,
                                                    a->block_size);
        WB_CHECK_LAUNCH("kv_append_scalar");
        return NULL;
    });
}

/** @brief v1 gather — one thread per output element. */
static const char *gather_scalar(const kv_gather_args *a)
{
    long long n = (long long)a->B * a->H * a->max_len * a->d;
    if (const char *why = check_sizes(n)) return why;
    if (n == 0) return NULL;
    return dispatch(a->dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        kv_gather_scalar<T><<<blocks_for(n), 256>>>(a->block_tables, a->lens, (const T *)a->k_pool,
                                                    (const T *)a->v_pool, (T *)a->k_out, (T *)a->v_out, a->B, a->H,
                                                    a->d, a->block_size, a->max_len, a->max_pages_per_seq);
        WB_CHECK_LAUNCH("kv_gather_scalar");
        return NULL;
    });
}

/** @brief 16-byte pieces need d to be a multiple of 8 (fp16) or 4 (fp32). */
static const char *vec16_contract(wb_dtype dtype, int d)
{
    if (d % (16 / (int)wb_dtype_bytes(dtype))) return dtype == WB_F16 ? "needs d % 8 == 0 (16-byte pieces of fp16)"
                                                                      : "needs d % 4 == 0 (16-byte pieces of fp32)";
    return NULL;
}

/**
 * @brief v2 append — 16-byte loads and stores: a row of d = 64 fp16 is 8
 *        threads instead of 64, so the indexing arithmetic (a 64-bit division
 *        per element in v1) is paid once per 16 bytes.
 */
static const char *append_vec16(const kv_append_args *a)
{
    if (const char *why = vec16_contract(a->dtype, a->d)) return why;
    long long runs = ((long long)a->n_tokens + APPEND_RUN_TOKENS - 1) / APPEND_RUN_TOKENS; /* the last one padded */
    long long n = runs * APPEND_RUN_TOKENS * a->H * a->d / (16 / (long long)wb_dtype_bytes(a->dtype));
    if (const char *why = check_sizes(n)) return why;
    if (n == 0) return NULL;
    return dispatch(a->dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        kv_append_vec16<T><<<blocks_for(n), 256>>>((const uint4 *)a->new_k, (const uint4 *)a->new_v, a->slots,
                                                   (T *)a->k_pool, (T *)a->v_pool, a->n_tokens, a->H, a->d,
                                                   a->block_size);
        WB_CHECK_LAUNCH("kv_append_vec16");
        return NULL;
    });
}

/** @brief v2 gather — 16 bytes per thread. */
static const char *gather_vec16(const kv_gather_args *a)
{
    if (const char *why = vec16_contract(a->dtype, a->d)) return why;
    long long n = (long long)a->B * a->H * a->max_len * a->d / (16 / (long long)wb_dtype_bytes(a->dtype));
    if (const char *why = check_sizes(n)) return why;
    if (n == 0) return NULL;
    return dispatch(a->dtype, [&](auto t) -> const char * {
        using T = decltype(t);
        kv_gather_vec16<T><<<blocks_for(n), 256>>>(a->block_tables, a->lens, (const T *)a->k_pool,
                                                   (const T *)a->v_pool, (uint4 *)a->k_out, (uint4 *)a->v_out, a->B,
                                                   a->H, a->d, a->block_size, a->max_len, a->max_pages_per_seq);
        WB_CHECK_LAUNCH("kv_gather_vec16");
        return NULL;
    });
}

const char *kv_copy_page(wb_dtype dtype, void *k_pool, void *v_pool, int H, int d, int block_size, int src_page,
                         int dst_page, int n_tokens)
{
    /* a page is H runs of block_size·d elements; copy the first n_tokens·d of each run, both pools */
    size_t es = wb_dtype_bytes(dtype), run = (size_t)block_size * d * es;
    for (int p = 0; p < 2; ++p) {
        char *pool = (char *)(p ? v_pool : k_pool);
        WB_CUDA_CHECK(cudaMemcpy2DAsync(pool + (size_t)dst_page * H * run, run, pool + (size_t)src_page * H * run, run,
                                        (size_t)n_tokens * d * es, (size_t)H, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
    }
    return NULL;
}

/* The table the host program walks, in teaching order. */
const kv_variant kv_variants[] = {
    {"v1", "one thread per element", append_scalar, gather_scalar},
    {"v2", "16 bytes per thread (uint4)", append_vec16, gather_vec16},
};
const int kv_variant_count = sizeof kv_variants / sizeof kv_variants[0];
