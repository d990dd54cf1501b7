/**
 * @file stages/03_gemm/mma_ptx.cuh
 * @brief The tensor-core and asynchronous-copy instructions of stage 03's v9 —
 *        ldmatrix, mma.sync, cp.async — each wrapped once.
 *
 * Stage 03's v9 (gemm_tiles.cuh) and stage 06's FlashAttention-2 (v4, v5) both
 * include this header. Each wrapper compiles to nothing on a GPU without the
 * instruction; the kernels that use them say which GPUs they need.
 */
#ifndef STAGE03_MMA_PTX_CUH
/** @brief Include guard. */
#define STAGE03_MMA_PTX_CUH

#include <cuda_fp16.h>

/*
 * The instructions, wrapped. mma m16n8k16 (fp16 in, fp32 accumulate) exists from
 * sm_80; on sm_75 the same tile is two m16n8k8, which split A and B along k:
 * A's registers a0,a1 are k 0–7 and a2,a3 are k 8–15, B's b0 is k 0–7 and b1 k 8–15.
 * ldmatrix exists from sm_75; cp.async from sm_80.
 */

/** @brief Four 8×8 fp16 matrices from shared memory, one row address per lane (ldmatrix.x4), the address a
 *         shared-memory one (`__cvta_generic_to_shared`): a loop can step it by constants. */
[[maybe_unused]] static __device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned a)
{
#if __CUDA_ARCH__ >= 750
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}

/** @brief The same from a pointer into shared memory. */
[[maybe_unused]] static __device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const __half *p)
{
    ldmatrix_x4(r, (unsigned)__cvta_generic_to_shared(p));
}

/** @brief The same, each matrix transposed on the way (for an operand stored k-major that mma wants by column). */
[[maybe_unused]] static __device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const __half *p)
{
#if __CUDA_ARCH__ >= 750
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}

/** @brief c += a·b on a 16×8×16 tile, fp16 in, fp32 accumulators: m16n8k16 on sm_80+, two m16n8k8 on sm_75. */
[[maybe_unused]] static __device__ __forceinline__ void mma_16x8x16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif __CUDA_ARCH__ >= 750
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}

/**
 * @brief c += a·b on the top half of a 16×8×16 tile: rows 0–7 only, for a product whose A has
 *        at most 8 real rows (stage 09's v7: the query heads of one KV head). A's rows 8–15 are
 *        zero and their results are dropped, so the caller keeps 2 accumulators per tile, not 4.
 *        a0 is A's rows 0–7 at k 0–7 (a thread's a[0] in mma_16x8x16), a2 at k 8–15 (a[2]).
 */
[[maybe_unused]] static __device__ __forceinline__ void mma_16x8x16_top(float (&c)[2], unsigned a0, unsigned a2,
                                                                      unsigned b0, unsigned b1)
{
    /* rows 8–15 of the result: written by the instruction into two scratch registers, never read */
#if __CUDA_ARCH__ >= 800
    asm volatile("{\n.reg .f32 unused0, unused1;\n"
                 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,unused0,unused1}, {%2,%3,%4,%3}, {%5,%6}, "
                 "{%0,%1,%7,%7};\n}\n"
                 : "+f"(c[0]), "+f"(c[1])
                 : "r"(a0), "r"(0u), "r"(a2), "r"(b0), "r"(b1), "f"(0.0f));
#elif __CUDA_ARCH__ >= 750
    asm volatile("{\n.reg .f32 unused0, unused1;\n"
                 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,unused0,unused1}, {%2,%3}, {%4}, {%0,%1,%6,%6};\n"
                 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,unused0,unused1}, {%5,%3}, {%7}, {%0,%1,%6,%6};\n}\n"
                 : "+f"(c[0]), "+f"(c[1])
                 : "r"(a0), "r"(0u), "r"(b0), "r"(a2), "f"(0.0f), "r"(b1));
#endif
}

/** @brief Copy 16 bytes global → shared without a register (sm_80+); src_bytes 0 writes 16 zeros. */
[[maybe_unused]] static __device__ __forceinline__ void cp_async_16(void *smem, const void *gmem, int src_bytes)
{
#if __CUDA_ARCH__ >= 800
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
#endif
}

/** @brief Close the group of cp.async issued so far. */
[[maybe_unused]] static __device__ __forceinline__ void cp_async_commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/** @brief Wait until at most N groups are still in flight. */
template <int N>
[[maybe_unused]] static __device__ __forceinline__ void cp_async_wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

#endif /* STAGE03_MMA_PTX_CUH */
