/**
 * @file stages/06_flash_attention/kernels_sm90.cu
 * @brief Stage 06's v7 — FlashAttention on Hopper, the FlashAttention-3 way: TMA
 *        copies of the K/V tiles into a ring of shared-memory buffers, a producer
 *        warpgroup and two or three consumer warpgroups, and `wgmma` for both products (sm_90a).
 *
 * v5 is FlashAttention-2 as an A100 runs it: every warp loads its own fragments with
 * `ldmatrix` and issues 16×8×16 `mma.sync`, and every thread of the block helps copy the
 * tiles. On an H100 that leaves the tensor cores waiting, as stage 03's v9 did. v7 takes
 * the three things stage 03's v10 introduced (see gemm_hopper.cuh and the stage 03 page)
 * and applies them to attention:
 *
 * - **TMA** copies Q once and each K and V tile (128 keys × d; 176 at d 128 non-causal)
 *   as boxes of 64 columns (128 bytes, the swizzle's span) into the 128-byte swizzled
 *   layout `wgmma` reads. The tensor maps are 3-D, [B·H][N][d], so a tile that runs past
 *   N is zero-filled by the copy engine instead of read from the next head.
 * - **Warp specialisation**: one thread of the producer warpgroup issues every copy; three
 *   consumer warpgroups (d 64) or two (d 128) each own 64 query rows. K and V have separate full/empty
 *   mbarriers, so S = Q·Kᵀ of a tile starts before its V has landed, and K's buffer
 *   is handed back as soon as S is computed.
 * - **wgmma**: S = Q·Kᵀ is one warpgroup-wide 64×128 product over d (both operands in
 *   shared memory: Q and K are both K-major, stored with d contiguous); O += P·V takes P
 *   **from registers** — the accumulator layout of S is, fragment for fragment, the
 *   register layout of wgmma's A operand (as it was mma.sync's for v4), so P never
 *   touches shared memory — and V from shared memory, N-major like stage 03's B.
 *
 * FlashAttention-3's schedule keeps the tensor cores busy through the softmax: the consumers
 * take turns issuing their wgmma (named barriers), so one's matmuls run while another runs
 * its softmax (exponentials on the SFU, shuffles); and within a warpgroup, S of tile j is
 * issued together with P·V of tile j−1, whose wait comes after tile j's softmax.
 *
 * Contract: fp16 storage, d = 64 or 128, any N ≥ 1, B·H ≤ 65535, 16-byte aligned
 * pointers, a compute capability 9.0 GPU.
 */
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "device.h"     /* wb_current_gpu */
#include "fa_rows.cuh"  /* LOG2E, LN2; pack_half2, write_rows_fp16 (shared with v4, v5) */
#include "fast_math.cuh" /* exp2_approx: one ex2.approx.ftz */
#include "hopper_ptx.cuh" /* stage 03: mbarriers, TMA, wgmma descriptors, setmaxnreg, tensor maps */
#include "kernels.h"

/**
 * @brief v7's shape, in one place, for head dimension D (64 or 128), CONSUMERS warpgroups
 *        (3 at d 64, 2 at d 128) and BN keys per K/V tile (128, or 176 at d 128 non-causal).
 */
template <int D_, int CONSUMERS_ = 2, int BN_ = 128>
struct HopperAttentionTile {
    static constexpr int D = D_;                      /**< head dimension: 64 or 128 */
    static constexpr int CONSUMERS = CONSUMERS_;      /**< warpgroups that compute: 64 query rows each */
    static constexpr int BM = 64 * CONSUMERS;         /**< query rows per block */
    static constexpr int BN = BN_;                    /**< keys per K/V tile (one 64×BN S per warpgroup) */
    static constexpr int STAGES = D == 64 ? 4 : 2;    /**< K/V tiles in flight: what fits beside Q */
    static constexpr int THREADS = 128 * (1 + CONSUMERS); /**< plus one producer warpgroup */
    /** The producer's registers once it gives the rest back: 24, setmaxnreg's least, so that two
     *  consumers get 240 each, not 232 (a producer of 40): at d 128 causal on the H200, 529 -> 546
     *  TFLOP/s, though neither count spills. */
    static constexpr int PRODUCER_REGS = 24;
    static constexpr int CONSUMER_REGS = (65536 - 128 * PRODUCER_REGS) / (128 * CONSUMERS) / 8 * 8; /**< 240 (2), 160 (3) */
    static constexpr int BOX_COLS = 64;               /**< d columns per TMA box: 128 bytes, the swizzle's span */
    static constexpr int BOXES = D / BOX_COLS;        /**< boxes across one row of Q, K or V */
    static constexpr int Q_BOX_BYTES = BM * 128;      /**< Q: BM rows × 128 bytes per box (24 KB at d 64, 16 KB at 128) */
    static constexpr int KV_BOX_BYTES = BN * 128;     /**< K or V: BN rows × 128 bytes per box (16 KB) */
    static constexpr int Q_BYTES = BOXES * Q_BOX_BYTES;   /**< 24 KB (d 64, 192 rows), 32 KB (d 128, 128 rows) */
    static constexpr int KV_BYTES = BOXES * KV_BOX_BYTES; /**< one K or V tile: 16 or 32 KB */
    static constexpr int SMEM_BYTES = Q_BYTES + 2 * STAGES * KV_BYTES + 1024; /**< + room to align to 1024 */
    static constexpr int S_REGS = BN / 2;             /**< S: 64×BN fp32 over 128 threads */
    static constexpr int O_REGS = D / 2;              /**< O: 64×D fp32 over 128 threads */
};

/* ---------------------------------------------------------------------------
 * O += P·V: wgmma with A from registers (S = Q·Kᵀ uses stage 03's
 * wgmma_m64n128k16<0>, B K-major).
 * ------------------------------------------------------------------------- */

/** @brief o (64×64, fp32, 32 registers per thread) += P (64×16, fp16, from registers) · V (16×64, N-major). */
static __device__ __forceinline__ void wgmma_pv_m64n64k16(float (&d)[32], const unsigned (&p)[4], uint64_t desc_v)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24)
                 : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(desc_v), "r"(1));
}

/** @brief o (64×128, fp32, 64 registers per thread) += P (64×16, fp16, from registers) · V (16×128, N-major). */
static __device__ __forceinline__ void wgmma_pv_m64n128k16(float (&d)[64], const unsigned (&p)[4], uint64_t desc_v)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24), WGMMA_ACC8(32), WGMMA_ACC8(40), WGMMA_ACC8(48), WGMMA_ACC8(56)
                 : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(desc_v), "r"(1));
}

/**
 * @brief S (64×176, fp32, 88 registers per thread) = or += Q (64×16, K-major) · K (16×176, K-major):
 *        stage 03's wgmma_m64n128k16<0> at the 176-key tile of d 128 non-causal.
 */
static __device__ __forceinline__ void wgmma_m64n176k16_kmajor(float (&d)[88], uint64_t desc_a, uint64_t desc_b,
                                                               int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
                 "%80, %81, %82, %83, %84, %85, %86, %87"
                 "}, %88, %89, p, 1, 1, 0, 0;\n}\n"
                 : WGMMA_ACC8(0), WGMMA_ACC8(8), WGMMA_ACC8(16), WGMMA_ACC8(24), WGMMA_ACC8(32), WGMMA_ACC8(40),
                   WGMMA_ACC8(48), WGMMA_ACC8(56), WGMMA_ACC8(64), WGMMA_ACC8(72), WGMMA_ACC8(80)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/** @brief S = or += Q·Kᵀ for one 16-wide slice of d, at either tile width. */
template <int BN>
static __device__ __forceinline__ void wgmma_scores(float (&s)[BN / 2], uint64_t desc_q, uint64_t desc_k, int accumulate)
{
    if constexpr (BN == 128)
        wgmma_m64n128k16</*TRANS_B=*/0>(s, desc_q, desc_k, accumulate); /* K-major B: not transposed */
    else
        wgmma_m64n176k16_kmajor(s, desc_q, desc_k, accumulate);
}

/** @brief O += P·V for one 16-key slice, at either head dimension. */
template <int D>
static __device__ __forceinline__ void wgmma_pv(float (&o)[D / 2], const unsigned (&p)[4], uint64_t desc_v)
{
    if constexpr (D == 64)
        wgmma_pv_m64n64k16(o, p, desc_v);
    else
        wgmma_pv_m64n128k16(o, p, desc_v);
}

/**
 * @brief Tell the compiler these registers are read and written here: placed right after a
 *        wgmma wait, it keeps the registers an asynchronous wgmma writes (S, O) from being
 *        read before that wait. No instruction is emitted.
 */
template <int N>
static __device__ __forceinline__ void fence_operands(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

/** @brief Named barrier 1 is consumer warpgroup 1's turn to issue its wgmma, 2 is warpgroup 2's, 3 is 3's (0 is __syncthreads). */
#define TURN_BARRIER 1

/** @brief Wait at named barrier `id` until `threads` threads have arrived or waited there. */
static __device__ __forceinline__ void named_barrier_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/** @brief Count this thread at named barrier `id` without waiting. */
static __device__ __forceinline__ void named_barrier_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/** @brief The producer's copy of one K or V tile (BN keys × d from key0 of `head`) into `dst`, announced on `full`. */
template <typename T>
static __device__ __forceinline__ void produce_tile(unsigned char *dst, const CUtensorMap *map, int key0, int head,
                                                    uint64_t *full)
{
    mbar_arrive_expect_bytes(full, T::KV_BYTES);
#pragma unroll
    for (int b = 0; b < T::BOXES; ++b) tma_load_3d(dst + b * T::KV_BOX_BYTES, map, b * T::BOX_COLS, key0, head, full);
}

/**
 * @brief Issue S = Q·Kᵀ for this warpgroup's 64 rows and a tile of BN keys, as one committed
 *        group: d/16 wgmma of 16 along d — 32 bytes along a 128-byte swizzled row, box by box.
 *        Q and K are both K-major (d contiguous); 8-row groups 1024 bytes apart.
 */
template <typename T>
static __device__ __forceinline__ void issue_scores(float (&sc)[T::S_REGS], const unsigned char *q_mine,
                                                    const unsigned char *k_tile)
{
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::D / 16; ++kk) {
        int box = kk / 4, step_bytes = (kk % 4) * 32;
        uint64_t desc_q = wgmma_desc(q_mine + box * T::Q_BOX_BYTES, 16, 1024) + (step_bytes >> 4);
        uint64_t desc_k = wgmma_desc(k_tile + box * T::KV_BOX_BYTES, 16, 1024) + (step_bytes >> 4);
        wgmma_scores<T::BN>(sc, desc_q, desc_k, /*accumulate=*/kk > 0);
    }
    wgmma_commit();
}

/**
 * @brief Issue O += P·V for a tile of BN keys, as one committed group: BN/16 wgmma of 16 keys,
 *        P from registers, V N-major — 16 rows (2048 bytes) down its boxes, boxes KV_BOX_BYTES apart along d.
 */
template <typename T>
static __device__ __forceinline__ void issue_pv(float (&o)[T::O_REGS], const unsigned (&p)[T::BN / 16][4],
                                                const unsigned char *v_tile)
{
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::BN / 16; ++kk)
        wgmma_pv<T::D>(o, p[kk], wgmma_desc(v_tile, T::KV_BOX_BYTES, 1024) + (uint64_t)(kk * 2048 >> 4));
    wgmma_commit();
}

/**
 * @brief The online softmax of one S tile (v4's, BN keys wide), in place: each score becomes its
 *        unnormalised probability 2^(s·c − m·c), c = scale·log2(e) > 0 (so the max of s is the max
 *        of s·c, and the scale costs nothing: one FFMA per score feeds the exponential). Masks the
 *        tile when it crosses N or the causal diagonal; updates the running max m (of raw scores)
 *        and this thread's partial sums l; returns in alpha the factor the O accumulated so far
 *        must be scaled by.
 */
template <typename T>
static __device__ __forceinline__ void online_softmax(float (&sc)[T::S_REGS], float (&m)[2], float (&l)[2],
                                                      float (&alpha)[2], int key0, int N, int causal, int first_row,
                                                      const int (&my_row)[2], int lane, float scale_log2)
{
    if (key0 + T::BN > N || (causal && key0 + T::BN - 1 > first_row)) { /* the tile crosses N or the diagonal */
#pragma unroll
        for (int n = 0; n < T::BN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int key = key0 + n * 8 + 2 * (lane % 4) + (e & 1);
                if (key >= N || (causal && key > my_row[e / 2])) sc[4 * n + e] = -INFINITY;
            }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < T::S_REGS; ++i) tile_max[(i / 2) % 2] = fmaxf(tile_max[(i / 2) % 2], sc[i]);
    float neg_base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
        tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
        float m_new = fmaxf(m[h], tile_max[h]);
        float base = m_new == -INFINITY ? 0.0f : m_new * scale_log2; /* nothing visible yet: keep 2^x finite */
        alpha[h] = exp2_approx(m[h] * scale_log2 - base);
        neg_base[h] = -base;
        m[h] = m_new;
        l[h] *= alpha[h];
    }
#pragma unroll
    for (int i = 0; i < T::S_REGS; ++i) {
        sc[i] = exp2_approx(fmaf(sc[i], scale_log2, neg_base[(i / 2) % 2]));
        l[(i / 2) % 2] += sc[i];
    }
}

/**
 * @brief The probabilities as wgmma A fragments in fp16: S's slice n (8 keys) = 2kk gives
 *        registers 0 (row lane/4) and 1 (row lane/4 + 8) of p[kk], slice 2kk+1 registers 2 and 3
 *        — the accumulator layout of S is the A-operand layout, so this is a conversion, no shuffle.
 */
template <typename T>
static __device__ __forceinline__ void probabilities_to_fp16(const float (&sc)[T::S_REGS], unsigned (&p)[T::BN / 16][4])
{
#pragma unroll
    for (int n = 0; n < T::BN / 8; ++n) {
        p[n / 2][(n % 2) * 2 + 0] = pack_half2(sc[4 * n], sc[4 * n + 1]);
        p[n / 2][(n % 2) * 2 + 1] = pack_half2(sc[4 * n + 2], sc[4 * n + 3]);
    }
}

/** @brief O *= alpha, row by row (alpha[0] for row lane/4, alpha[1] for row lane/4 + 8). */
template <typename T>
static __device__ __forceinline__ void rescale_output(float (&o)[T::O_REGS], const float (&alpha)[2])
{
#pragma unroll
    for (int i = 0; i < T::O_REGS; i += 4) {
        o[i] *= alpha[0], o[i + 1] *= alpha[0];
        o[i + 2] *= alpha[1], o[i + 3] *= alpha[1];
    }
}

/* ---------------------------------------------------------------------------
 * v7 — the kernel.
 * ------------------------------------------------------------------------- */

/**
 * @brief v7 kernel: one block per BM = 64·CONSUMERS query rows of one head (192 at d 64, 128 at d 128).
 *
 * Shared memory: Q (BM × d, loaded once), then STAGES K tiles and STAGES V tiles of
 * BN = 128 (or 176) keys × d, every box 1024-byte aligned (the swizzle pattern repeats every
 * 1024 bytes). Barriers: q_full; k_full/k_empty and v_full/v_empty per stage. The
 * producer's thread 0 walks the key tiles: wait until stage s is empty, announce its
 * bytes, issue the boxes. A consumer warpgroup, per tile j ≥ 1:
 *
 *   wait k_full[j], v_full[j−1] → wait for its turn → issue S_j = Q·K_jᵀ (d/16 wgmma),
 *   scale O by tile j−1's factor, issue O += P_{j−1}·V_{j−1} (BN/16 wgmma) → pass the turn →
 *   wait for S_j → arrive k_empty[j] → online softmax of S_j in registers →
 *   wait for P·V → arrive v_empty[j−1] → P_j to fp16 A fragments.
 *
 * Accumulator layout (both S and O; mma.sync's m16n8 repeated along N): warp w of the
 * warpgroup holds rows 16w + lane/4 and 16w + lane/4 + 8; registers 4j + {0,1} are
 * columns 8j + 2·(lane%4) + {0,1} of the first row, 4j + {2,3} of the second.
 */
template <int D, int CONSUMERS, int BN>
__global__ void __launch_bounds__(HopperAttentionTile<D, CONSUMERS, BN>::THREADS, 1)
    attention_wgmma_tma(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                        const __grid_constant__ CUtensorMap map_v, __half *o, float *lse, int N, float scale_log2,
                        int causal)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using T = HopperAttentionTile<D, CONSUMERS, BN>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    unsigned char *q_s = smem, *k_s = q_s + T::Q_BYTES, *v_s = k_s + T::STAGES * T::KV_BYTES;
    __shared__ __align__(8) uint64_t q_full, k_full[T::STAGES], k_empty[T::STAGES], v_full[T::STAGES],
        v_empty[T::STAGES];
    int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;
    int head = blockIdx.y;
    /* causal blocks near the end of the sequence have the most keys: start them first */
    int q_block = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    int row0 = q_block * T::BM;
    int n_keys = causal ? min(N, row0 + T::BM) : N;
    int n_tiles = (n_keys + T::BN - 1) / T::BN;

    if (threadIdx.x == 0) {
        mbar_init(&q_full, 1);
        for (int s = 0; s < T::STAGES; ++s) {
            mbar_init(&k_full[s], 1), mbar_init(&v_full[s], 1);
            mbar_init(&k_empty[s], T::CONSUMERS * 128), mbar_init(&v_empty[s], T::CONSUMERS * 128);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (warpgroup == 0) { /* the producer: one thread issues every copy */
        warpgroup_release_registers<T::PRODUCER_REGS>();
        if (t == 0) {
            mbar_arrive_expect_bytes(&q_full, T::Q_BYTES);
#pragma unroll
            for (int b = 0; b < T::BOXES; ++b)
                tma_load_3d(q_s + b * T::Q_BOX_BYTES, &map_q, b * T::BOX_COLS, row0, head, &q_full);
            for (int j = 0; j < n_tiles; ++j) {
                int s = j % T::STAGES, empty_parity = ((j / T::STAGES) & 1) ^ 1; /* a fresh buffer counts as empty */
                mbar_wait(&k_empty[s], empty_parity);
                produce_tile<T>(k_s + s * T::KV_BYTES, &map_k, j * T::BN, head, &k_full[s]);
                mbar_wait(&v_empty[s], empty_parity);
                produce_tile<T>(v_s + s * T::KV_BYTES, &map_v, j * T::BN, head, &v_full[s]);
            }
        }
        return;
    }

    /* the consumers: warpgroup 1 owns rows 0–63 of the block, warpgroup 2 rows 64–127 (and 3 rows 128–191) */
    warpgroup_claim_registers<T::CONSUMER_REGS>();
    int group = warpgroup - 1, warp = t / 32, lane = t % 32;
    int first_row = row0 + group * 64; /* this warpgroup's first query row */
    /* turns go round the consumers: this one's is barrier TURN_BARRIER + group, then the next one's */
    int my_turn = TURN_BARRIER + group, next_turn = TURN_BARRIER + (group + 1) % CONSUMERS;
    bool last_group = group == CONSUMERS - 1;
    int my_row[2] = {first_row + warp * 16 + lane / 4, first_row + warp * 16 + lane / 4 + 8};
    float o_acc[T::O_REGS];
#pragma unroll
    for (int i = 0; i < T::O_REGS; ++i) o_acc[i] = 0.0f;
    /* m: the running max of the raw scores q·k; l: this thread's part of the running sum */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    unsigned p[T::BN / 16][4]; /* the last tile's P in fp16, the A operand of its P·V */
    float alpha[2];            /* the factor O must be scaled by before that P·V is added */
    /* Q (K-major): this warpgroup's 64 rows start 64·128 bytes into each box; 8-row groups 1024 bytes apart */
    const unsigned char *q_mine = q_s + group * 64 * 128;
    mbar_wait(&q_full, 0);
    if (last_group) named_barrier_arrive(TURN_BARRIER, 256); /* warpgroup 1 issues first */

    /* Tile 0 on its own: there is no P·V before it. Peeling it keeps every wgmma of the loop on one
     * unconditional path (ptxas serialises wgmma that sit in branches). */
    {
        float sc[T::S_REGS];
        mbar_wait(&k_full[0], 0);
        named_barrier_sync(my_turn, 256);
        issue_scores<T>(sc, q_mine, k_s);
        if (!last_group || n_tiles > 1) named_barrier_arrive(next_turn, 256);
        wgmma_wait<0>();
        fence_operands(sc);
        mbar_arrive(&k_empty[0]);
        online_softmax<T>(sc, m, l, alpha, 0, N, causal, first_row, my_row, lane, scale_log2);
        probabilities_to_fp16<T>(sc, p);
    }

    for (int j = 1; j < n_tiles; ++j) {
        int s = j % T::STAGES, full_parity = (j / T::STAGES) & 1;
        int prev_s = (j - 1) % T::STAGES, prev_parity = ((j - 1) / T::STAGES) & 1;

        /* In this warpgroup's turn: issue S_j = Q·K_jᵀ, scale O to tile j-1's max while it runs, issue
         * O += P_{j-1}·V_{j-1}; then hand the turn over — the other warpgroup's wgmma queue behind
         * these while this one runs the softmax of S_j. */
        float sc[T::S_REGS];
        mbar_wait(&k_full[s], full_parity);
        mbar_wait(&v_full[prev_s], prev_parity);
        named_barrier_sync(my_turn, 256);
        issue_scores<T>(sc, q_mine, k_s + s * T::KV_BYTES);
        rescale_output<T>(o_acc, alpha);
        issue_pv<T>(o_acc, p, v_s + prev_s * T::KV_BYTES);
        if (!last_group || j + 1 < n_tiles) named_barrier_arrive(next_turn, 256); /* balanced at the end */
        wgmma_wait<1>(); /* S_j is done (P·V may still run) */
        fence_operands(sc);
        mbar_arrive(&k_empty[s]); /* S is in registers: K's buffer can be refilled */

        /* the softmax writes only S's registers: P_{j-1} and O belong to the running wgmma */
        online_softmax<T>(sc, m, l, alpha, j * T::BN, N, causal, first_row, my_row, lane, scale_log2);

        wgmma_wait<0>(); /* P_{j-1}·V_{j-1} has finished: V's buffer goes back, P's registers are free */
        fence_operands(o_acc);
        mbar_arrive(&v_empty[prev_s]);
        probabilities_to_fp16<T>(sc, p);
    }
    /* the last tile's O += P·V */
    {
        int last = n_tiles - 1, s = last % T::STAGES;
        mbar_wait(&v_full[s], (last / T::STAGES) & 1);
        rescale_output<T>(o_acc, alpha);
        issue_pv<T>(o_acc, p, v_s + s * T::KV_BYTES);
        wgmma_wait<0>();
        fence_operands(o_acc);
        mbar_arrive(&v_empty[s]);
    }

    /* finish: add the 4 lanes' partial sums, divide, write O as fp16 and L (v4's last step) */
    float m_log2[2] = {m[0] * scale_log2, m[1] * scale_log2};
    write_rows_fp16<D>(reinterpret_cast<const float(&)[D / 8][4]>(o_acc), l, m_log2, my_row, N, head, o, lse, lane);
#endif
}

/* ---------------------------------------------------------------------------
 * Host side.
 * ------------------------------------------------------------------------- */

/** @brief Describe Q, K and V to TMA as [B·H][N][d] and launch v7 at head dimension D. */
template <int D, int CONSUMERS, int BN>
static const char *launch_wgmma_tiles(const attention_problem *p)
{
    using T = HopperAttentionTile<D, CONSUMERS, BN>;
    int planes = p->B * p->H;
    CUtensorMap map_q, map_k, map_v;
    const char *why = make_tensor_map_3d(&map_q, (const __half *)p->q, planes, p->N, D, T::BM, T::BOX_COLS);
    if (!why) why = make_tensor_map_3d(&map_k, (const __half *)p->k, planes, p->N, D, T::BN, T::BOX_COLS);
    if (!why) why = make_tensor_map_3d(&map_v, (const __half *)p->v, planes, p->N, D, T::BN, T::BOX_COLS);
    if (why) return why;
    static bool configured = false; /* more than 48 KB of dynamic shared memory must be asked for */
    if (!configured) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(attention_wgmma_tma<D, CONSUMERS, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           T::SMEM_BYTES));
        configured = true;
    }
    dim3 grid((p->N + T::BM - 1) / T::BM, planes);
    attention_wgmma_tma<D, CONSUMERS, BN><<<grid, T::THREADS, T::SMEM_BYTES>>>(map_q, map_k, map_v, (__half *)p->o, p->lse, p->N,
                                                                p->scale * LOG2E, p->causal);
    WB_CHECK_LAUNCH("attention_wgmma_tma");
    return NULL;
}

extern "C" const char *attention_v7_wgmma(const attention_problem *p)
{
    if (p->dtype != WB_F16) return "needs fp16 storage (wgmma)";
    if (p->d != 64 && p->d != 128) return "needs d = 64 or 128";
    if ((long long)p->B * p->H > 65535) return "needs B*H <= 65535";
    if (((uintptr_t)p->q | (uintptr_t)p->k | (uintptr_t)p->v | (uintptr_t)p->o) % 16)
        return "needs 16-byte aligned Q, K, V, O";
    int cc;
    wb_current_gpu(&cc, NULL);
    if (const char *why = hopper_gpu_refusal(cc)) return why;
    /* d 64: three consumer warpgroups (192 query rows per block), as FlashAttention-3 does: its
     * exponentials take as long as its matmuls, and a third warpgroup's softmax hides more of them
     * (measured on the H100: 508 against 404 TFLOP/s with two). Its registers fit the 160 each that
     * three get; at d 128 O takes 32 more (S, O and P alone are 160), so it keeps two consumers with 240 each.
     * At d 128 non-causal the K/V tiles are 176 keys wide, not 128, as FlashAttention-3's are: each
     * tile's fixed costs (its turn, the row maxima's shuffles, the rescale of O) are paid for more
     * keys, and 4096 keys take 24 tiles, the last one 48 keys full. Measured on the H200: 646 against
     * 638 TFLOP/s (+1.4%). Causal tiles stay 128 wide: the diagonal masks more of a wider tile. */
    if (p->d == 64) return launch_wgmma_tiles<64, 3, 128>(p);
    return p->causal ? launch_wgmma_tiles<128, 2, 128>(p) : launch_wgmma_tiles<128, 2, 176>(p);
}
