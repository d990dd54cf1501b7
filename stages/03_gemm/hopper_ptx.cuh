/**
 * @file stages/03_gemm/hopper_ptx.cuh
 * @brief The Hopper instructions as small wrappers — mbarriers, TMA copies, wgmma and
 *        its descriptors, setmaxnreg — and the host's tensor-map encoder: what stage 03's
 *        v10–v14 (gemm_hopper.cuh) and stage 06's v7 are built from (sm_90a only; the
 *        mbarriers and the bulk copies alone, which stage 10's v7/v8 use, are plain sm_90).
 */
#ifndef STAGE03_HOPPER_PTX_CUH
/** @brief Include guard. */
#define STAGE03_HOPPER_PTX_CUH

#include <cuda.h> /* CUtensorMap and its enums; the encoder itself is fetched through the runtime */
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_check.h"

/* ---------------------------------------------------------------------------
 * The PTX the Hopper kernels need, one small wrapper each.
 * ------------------------------------------------------------------------- */

/** @brief A shared-memory address as the 32-bit offset PTX's shared:: instructions take. */
static __device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/** @brief Make an mbarrier that completes a phase after `count` arrivals (and its expected bytes). */
[[maybe_unused]] static __device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

/** @brief Make the initialised barriers visible to the TMA engine (the async proxy) before first use. */
[[maybe_unused]] static __device__ __forceinline__ void mbar_fence_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/** @brief Arrive, and tell the barrier to wait also for `bytes` of TMA transfers in this phase. */
[[maybe_unused]] static __device__ __forceinline__ void mbar_arrive_expect_bytes(uint64_t *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

/** @brief Arrive (count one of the barrier's expected arrivals). */
[[maybe_unused]] static __device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

/**
 * @brief Wait until the barrier's phase of parity `parity` has completed. A barrier
 *        counts phases 0, 1, 2, …; waiting on parity 1 of a fresh barrier returns at
 *        once (the phase "before" 0 counts as complete), which is how the producer
 *        finds every buffer empty on its first pass.
 */
[[maybe_unused]] static __device__ __forceinline__ void mbar_wait(uint64_t *bar, int parity)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
}

/**
 * @brief Order this thread's shared-memory accesses before the copy engine's
 *        (the async proxy's) that follow: its writes before a TMA store reads
 *        them, or its reads before a TMA load overwrites them.
 */
[[maybe_unused]] static __device__ __forceinline__ void fence_shared_for_tma()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/**
 * @brief The copy engine's plain bulk copy (no tensor map): `bytes` contiguous
 *        bytes from global into shared memory, both 16-byte aligned and the
 *        size a multiple of 16; the bytes count on `bar` (stage 10's v7/v8).
 */
[[maybe_unused]] static __device__ __forceinline__ void bulk_load(void *dst, const void *src, unsigned bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

/**
 * @brief An L2 cache policy that marks the lines it touches evict-first: the
 *        first that L2 replaces (stage 10's v12/v13: the weights, read once a
 *        step, so the K/V cache that the next step reads again stays).
 */
[[maybe_unused]] static __device__ __forceinline__ uint64_t l2_policy_evict_first()
{
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

/** @brief bulk_load with an L2 cache policy (l2_policy_evict_first) for the lines it reads. */
[[maybe_unused]] static __device__ __forceinline__ void bulk_load_with_policy(void *dst, const void *src, unsigned bytes,
                                                                              uint64_t *bar, uint64_t policy)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
                 "%4;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
                 : "memory");
}

/** @brief TMA: copy the box at (column c0, row c1) of the tensor `map` into shared memory; signal `bar`. */
[[maybe_unused]] static __device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, int c0, int c1,
                                                                    uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];\n" ::"r"(smem_addr(dst)),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_addr(bar))
                 : "memory");
}

/** @brief TMA: the box at (column c0, row c1, plane c2) of a 3-D tensor `map` into shared memory; signal `bar`. */
[[maybe_unused]] static __device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, int c0, int c1,
                                                                    int c2, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4}], [%5];\n" ::"r"(smem_addr(dst)),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
                 : "memory");
}

/**
 * @brief A wgmma shared-memory descriptor for a tile in the 128-byte swizzled layout.
 *
 * Bits 0–13: start address / 16; 16–29: the *leading* byte offset / 16; 32–45: the
 * *stride* byte offset / 16; 62–63: swizzle mode (1 = 128 bytes). The operand is
 * read in 8×(16-byte) "core matrices"; the two offsets say how far apart they are.
 */
static __device__ __forceinline__ uint64_t wgmma_desc(const void *tile, unsigned leading_bytes, unsigned stride_bytes)
{
    uint64_t d = (smem_addr(tile) & 0x3FFFF) >> 4;
    d |= (uint64_t)((leading_bytes & 0x3FFFF) >> 4) << 16;
    d |= (uint64_t)((stride_bytes & 0x3FFFF) >> 4) << 32;
    d |= 1ull << 62;
    return d;
}

/** @brief Order this warpgroup's register and shared-memory accesses before the wgmma that follow. */
[[maybe_unused]] static __device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

/** @brief Close the group of wgmma issued since the last commit. */
[[maybe_unused]] static __device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/** @brief Wait until at most N committed groups of wgmma are still running. */
template <int N>
[[maybe_unused]] static __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/** @brief Eight accumulator operands of the wgmma below (PTX wants each register named). */
#define WGMMA_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                      "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

/**
 * @brief d (64×256, fp32, 128 registers per thread) += A (64×16, fp16, K-major) ·
 *        B (16×256, fp16, N-major: our row-major B), both read from shared memory.
 *
 * The four immediates after the descriptors: scale A and B by +1, A not transposed
 * (K-major), B transposed (its rows run along N, as stage 03's row-major B does).
 */
[[maybe_unused]] static __device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
                 : WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24), WGMMA_ACC8(32), WGMMA_ACC8(40),
                   WGMMA_ACC8(48), WGMMA_ACC8(56), WGMMA_ACC8(64), WGMMA_ACC8(72), WGMMA_ACC8(80), WGMMA_ACC8(88),
                   WGMMA_ACC8(96), WGMMA_ACC8(104), WGMMA_ACC8(112), WGMMA_ACC8(120)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

/**
 * @brief The same, 64×128: d has 64 registers per thread. TRANS_B = 0 reads B K-major
 *        instead (its rows run along K: stage 06's K tile, keys × d, for S = Q·Kᵀ), and
 *        accumulate = 0 overwrites d instead of adding to it (no zeroing needed).
 */
template <int TRANS_B = 1>
[[maybe_unused]] static __device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                                         int accumulate = 1)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, %67;\n}\n"
                 : WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24), WGMMA_ACC8(32), WGMMA_ACC8(40),
                   WGMMA_ACC8(48), WGMMA_ACC8(56)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
}

/** @brief Give this warpgroup's registers back (the producer needs few). */
template <int REGS>
[[maybe_unused]] static __device__ __forceinline__ void warpgroup_release_registers()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

/** @brief Take registers for this warpgroup (the consumers hold 128 accumulators each). */
template <int REGS>
[[maybe_unused]] static __device__ __forceinline__ void warpgroup_claim_registers()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

/* ---------------------------------------------------------------------------
 * Host side: tensor maps.
 * ------------------------------------------------------------------------- */

/** @brief The driver's cuTensorMapEncodeTiled, as a pointer type (fetched through the runtime: no -lcuda). */
typedef CUresult (*tensor_map_encoder)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                       CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/**
 * @brief NULL on a compute capability 9.0 GPU; otherwise why the sm_90a code (wgmma, TMA,
 *        setmaxnreg: H100 and H200 only) cannot run there. Every Hopper launcher asks first.
 */
[[maybe_unused]] static const char *hopper_gpu_refusal(int cc)
{
    return cc == 90 ? NULL : "needs a compute capability 9.0 GPU (wgmma and TMA code is built for sm_90a)";
}

/**
 * @brief Describe an fp16 tensor of `rank` dimensions to TMA (dims[0] contiguous, each
 *        further one packed after the last): boxes of box[0] × box[1] × …, the 128-byte
 *        swizzle, zeros for every element of a box outside the tensor.
 * @return NULL, or why the driver refused it
 */
static const char *make_tensor_map_nd(CUtensorMap *map, const __half *base, int rank, const cuuint64_t *dims,
                                      const cuuint32_t *box)
{
    static tensor_map_encoder encode = NULL;
    if (!encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050 /* the versioned lookup; the unversioned one is deprecated from 12.5 on */
        WB_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
#else
        WB_CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found));
#endif
        if (found != cudaDriverEntryPointSuccess || !fn) return "the driver has no cuTensorMapEncodeTiled (needs CUDA 12+)";
        encode = (tensor_map_encoder)fn;
    }
    cuuint64_t stride_bytes[4]; /* of dimensions 1 … rank-1 */
    cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    cuuint64_t bytes = 2;
    for (int i = 0; i + 1 < rank; ++i) stride_bytes[i] = bytes *= dims[i];
    CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, (cuuint32_t)rank, (void *)base, dims, stride_bytes, box,
                        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? NULL : "cuTensorMapEncodeTiled refused the tensor";
}

/** @brief A row-major fp16 matrix (rows × cols) in boxes of box_rows × box_cols (stage 03's A, B and C). */
[[maybe_unused]] static const char *make_tensor_map(CUtensorMap *map, const __half *base, int rows, int cols,
                                                    int box_rows, int box_cols)
{
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}; /* innermost (contiguous) first */
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    return make_tensor_map_nd(map, base, 2, dims, box);
}

/**
 * @brief planes × rows × cols fp16, row-major (stage 06's [B·H, N, d]) in boxes of box_rows
 *        × box_cols of one plane: a box that runs past `rows` is zero-filled, never read from
 *        the next plane.
 */
[[maybe_unused]] static const char *make_tensor_map_3d(CUtensorMap *map, const __half *base, int planes, int rows,
                                                       int cols, int box_rows, int box_cols)
{
    cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)rows, (cuuint64_t)planes};
    cuuint32_t box[3] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows, 1};
    return make_tensor_map_nd(map, base, 3, dims, box);
}

#endif /* STAGE03_HOPPER_PTX_CUH */
