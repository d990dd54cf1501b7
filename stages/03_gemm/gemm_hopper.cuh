/**
 * @file stages/03_gemm/gemm_hopper.cuh
 * @brief Stage 03's v10 — the Hopper GEMM: TMA copies, mbarriers, a producer
 *        warpgroup and two consumer warpgroups issuing `wgmma` (sm_90a only) — and
 *        its steps after it: v11 persistent, v12 with a TMA-stored epilogue, v13
 *        with the last wave split along K, v14 with the tile's shape (128×256 or
 *        192×128) chosen from the waves it makes.
 *
 * v9 is what an A100 does best: every warp loads its own fragments from shared
 * memory (`ldmatrix`) and issues small 16×8×16 MMAs. On an H100 that leaves the
 * tensor cores waiting: they are fast enough that the instructions feeding them
 * become the limit. Hopper adds three things, and v10 uses all three:
 *
 * - **TMA** (`cp.async.bulk.tensor`): one thread asks the copy engine for a whole
 *   2-D box of a matrix (64×128 halves of A, 64×64 of B); the engine computes the
 *   addresses, zero-fills what lies past the matrix's edges, writes shared memory
 *   in the swizzled layout the tensor cores read, and signals an **mbarrier** when
 *   the bytes have landed. No thread spends instructions on loads.
 * - **wgmma** (`wgmma.mma_async`): a warpgroup (4 warps, 128 threads) multiplies a
 *   64×16 tile of A by a 16×256 tile of B in one instruction, reading both straight
 *   from shared memory through 64-bit *descriptors* (address, strides, swizzle).
 *   It is asynchronous: the warpgroup issues four of them, then waits once.
 * - **Warp specialisation**: one warpgroup only produces (issues TMA copies into a
 *   4-stage ring of buffers); two warpgroups only consume (multiply). Full and empty
 *   mbarriers per stage hand the buffers back and forth, so copies of tiles k+1..k+3
 *   run while tile k is multiplied. `setmaxnreg` moves registers from the producer
 *   (40 per thread) to the consumers (232), whose 64×256 fp32 accumulators take 128.
 *
 * The code is built for `sm_90a` only (the `a` means architecture-specific: these
 * instructions exist on compute capability 9.0 — H100, H200 — and nowhere else), in a
 * library of its own; the launcher refuses other GPUs. Like v9, each result passes
 * through `epi(value, column)` before it is rounded to fp16, so stage 04 fuses bias
 * and GELU here too.
 * Contract: K and N multiples of 8 (TMA needs 16-byte row strides), 16-byte aligned
 * pointers, any M.
 */
#ifndef STAGE03_GEMM_HOPPER_CUH
/** @brief Include guard. */
#define STAGE03_GEMM_HOPPER_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_check.h"
#include "device.h"     /* wb_current_gpu, wb_device_reserve */
#include "hopper_ptx.cuh" /* mbarriers, TMA, wgmma, setmaxnreg; make_tensor_map */

/**
 * @brief v10's shape, in one place. BN is 256 (one m64n256k16 wgmma wide), or 128 for
 *        problems too small to give every SM a 128×256 tile (see launch_hgemm_wgmma).
 *        STAGES is 4 for v10; v11 gives one stage up for its own epilogue buffer.
 */
template <int BN_, int STAGES_ = 4, int CONSUMERS_ = 2>
struct HopperTile {
    static constexpr int CONSUMERS = CONSUMERS_; /**< warpgroups that multiply: 2, or 3 for v14's 192-row tile */
    static constexpr int BM = 64 * CONSUMERS;    /**< rows of C per block: 64 per consumer warpgroup */
    static constexpr int BN = BN_;       /**< columns of C per block: one wgmma wide */
    static constexpr int BK = 64;        /**< K per stage: 64 halves = 128 bytes, the swizzle's span */
    static constexpr int STAGES = STAGES_; /**< tiles in flight */
    static constexpr int THREADS = 128 * (1 + CONSUMERS); /**< plus one producer warpgroup */
    /** Registers per consumer thread once the producer (40 a thread) has given its own back: the 64K of
     *  the SM shared out, a multiple of 8 (setmaxnreg's unit): 232 for 2 consumers, 152 for 3 */
    static constexpr int CONSUMER_REGS = (65536 - 128 * 40) / (128 * CONSUMERS) / 8 * 8;
    static constexpr int B_BOX_N = 64;   /**< columns of B per TMA box: 128 bytes, the swizzle's span */
    static constexpr int A_BYTES = BM * BK * 2;             /**< one stage of A: 16 KB */
    static constexpr int B_BOX_BYTES = BK * B_BOX_N * 2;    /**< one box of B: 8 KB */
    static constexpr int B_BYTES = BK * BN * 2;             /**< one stage of B: 32 KB (BN 256) */
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;   /**< what one stage's full barrier waits for */
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024; /**< + room to align to 1024 bytes */
    static constexpr int ACC = BN / 2;   /**< fp32 accumulators per consumer thread: 64×BN over 128 threads */
};

/* ---------------------------------------------------------------------------
 * One stage of the pipeline, from each side (v10 and v11).
 * ------------------------------------------------------------------------- */

/**
 * @brief The producer's stage: announce its bytes on `full`, then ask TMA for A's
 *        128×64 tile at (tile_row, k0) and B's 64×BN tile at (k0, tile_col), as boxes
 *        of 64 columns. The copies land in `stage` and complete `full`.
 */
template <typename T>
static __device__ __forceinline__ void produce_stage(unsigned char *stage, const CUtensorMap *map_a,
                                                     const CUtensorMap *map_b, int tile_row, int tile_col, int k0,
                                                     uint64_t *full)
{
    unsigned char *a = stage, *b = stage + T::A_BYTES;
    mbar_arrive_expect_bytes(full, T::STAGE_BYTES);
    tma_load_2d(a, map_a, k0, tile_row, full); /* A: column k, row m */
#pragma unroll
    for (int j = 0; j < T::BN / T::B_BOX_N; ++j) /* B: column n, row k */
        tma_load_2d(b + j * T::B_BOX_BYTES, map_b, tile_col + j * T::B_BOX_N, k0, full);
}

/**
 * @brief A consumer warpgroup's stage: acc (its 64 rows × BN) += A·B over the stage's
 *        64 of K, as 4 wgmma of K = 16, committed as one group (not waited for).
 */
template <typename T>
static __device__ __forceinline__ void consume_stage(float (&acc)[T::ACC], const unsigned char *stage, int half)
{
    const unsigned char *a = stage + half * 64 * 128, *b = stage + T::A_BYTES;
    /* A, K-major: 8-row core-matrix groups 1024 bytes apart (the leading offset is unused);
     * B, N-major: 8-row (k) groups 1024 bytes apart, 64-column boxes 8 KB apart */
    uint64_t desc_a = wgmma_desc(a, 16, 1024), desc_b = wgmma_desc(b, T::B_BOX_BYTES, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::BK / 16; ++kk) { /* next 16 of K: A 32 bytes along its rows, B 16 rows (2048 bytes) down */
        uint64_t da = desc_a + (uint64_t)(kk * 32 >> 4), db = desc_b + (uint64_t)(kk * 2048 >> 4);
        if constexpr (T::BN == 256)
            wgmma_m64n256k16(acc, da, db);
        else
            wgmma_m64n128k16(acc, da, db);
    }
    wgmma_commit();
}

/**
 * @brief Make the ring's barriers (v10–v13), then let the whole block see them: stage s
 *        is full after the producer's arrive plus the stage's TMA bytes, empty after
 *        every consumer thread's arrive.
 */
template <typename T>
static __device__ __forceinline__ void init_stage_barriers(uint64_t *full, uint64_t *empty)
{
    if (threadIdx.x == 0) {
        for (int s = 0; s < T::STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], T::CONSUMERS * 128);
        }
        mbar_fence_init();
    }
    __syncthreads();
}

/* ---------------------------------------------------------------------------
 * v10 — the kernel.
 * ------------------------------------------------------------------------- */

/**
 * @brief v10 — C = epi(A·B) with TMA, mbarriers, warp specialisation and wgmma (sm_90a).
 *
 * Shared memory holds 4 stages; a stage is A's 128×64 tile (16 KB, rows of 64
 * halves = 128 bytes) and B's 64×256 tile as four 64×64 boxes (8 KB each, rows of
 * 64 halves along N). TMA writes both with the 128-byte swizzle: within each 1024-byte
 * group of 8 rows, the 16-byte chunk j of row r lands at chunk j XOR r, so the 8 rows
 * of a tensor-core read hit all 32 banks — the job v9's padding did.
 *
 * Per stage the producer thread waits for `empty[s]`, announces 48 KB on `full[s]`
 * and issues 5 TMA copies. Each consumer warpgroup waits for `full[s]`, issues 4
 * wgmma (K = 4 × 16), and once that group has finished — checked one stage later,
 * so the tensor cores always have the next group queued — arrives on `empty[s]`.
 */
template <int BN, typename Epilogue>
__global__ void __launch_bounds__(HopperTile<BN>::THREADS, 1)
    hgemm_wgmma_tma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, __half *C,
                    int M, int N, int K, Epilogue epi)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using T = HopperTile<BN>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* the 128-byte swizzle pattern repeats every 1024 bytes, counted from address 0 */
    unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    __shared__ __align__(8) uint64_t full[T::STAGES], empty[T::STAGES];
    int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128; /* t: the thread within its warpgroup */
    int tile_row = blockIdx.y * T::BM, tile_col = blockIdx.x * T::BN;
    int k_tiles = (K + T::BK - 1) / T::BK;

    init_stage_barriers<T>(full, empty);

    if (warpgroup == 0) { /* the producer: one thread issues every copy */
        warpgroup_release_registers<40>();
        if (t == 0) {
            for (int kt = 0; kt < k_tiles; ++kt) {
                int s = kt % T::STAGES;
                mbar_wait(&empty[s], ((kt / T::STAGES) & 1) ^ 1);
                produce_stage<T>(smem + s * T::STAGE_BYTES, &map_a, &map_b, tile_row, tile_col, kt * T::BK, &full[s]);
            }
        }
        return;
    }

    /* the consumers: warpgroup 1 computes rows 0–63 of the tile, warpgroup 2 rows 64–127 */
    warpgroup_claim_registers<232>();
    int half = warpgroup - 1;
    float acc[T::ACC];
#pragma unroll
    for (int i = 0; i < T::ACC; ++i) acc[i] = 0.0f;
    for (int kt = 0; kt < k_tiles; ++kt) {
        int s = kt % T::STAGES;
        mbar_wait(&full[s], (kt / T::STAGES) & 1);
        consume_stage<T>(acc, smem + s * T::STAGE_BYTES, half);
        wgmma_wait<1>(); /* the previous stage's group is done: its buffer can be refilled */
        if (kt > 0) mbar_arrive(&empty[(kt - 1) % T::STAGES]);
    }
    wgmma_wait<0>();

    /* Epilogue, in two steps. (1) Stage the fp32 tile in shared memory (the pipeline
     * buffers are free once both consumer warpgroups have finished reading them: a
     * barrier for the 256 consumer threads only, as the producer has left). Accumulator
     * layout (mma.sync's m16n8, repeated along N): warp w of the warpgroup holds rows
     * 16w + lane/4 and 16w + lane/4 + 8; registers 4j + {0,1} are columns
     * 8j + 2·(lane%4) + {0,1} of the first row, 4j + {2,3} the same columns of the second. */
    constexpr int OUT_STRIDE = T::BN + 8; /* floats: rows 1056 bytes apart, so a warp's 8 rows fill all 32 banks twice */
    static_assert(T::BM * OUT_STRIDE * 4 <= T::STAGES * T::STAGE_BYTES, "the staged tile fits in the pipeline buffers");
    float *out = reinterpret_cast<float *>(smem);
    int warp = t / 32, lane = t % 32;
    int row = half * 64 + warp * 16 + lane / 4; /* within the tile */
    asm volatile("bar.sync 1, %0;\n" ::"n"(T::CONSUMERS * 128) : "memory");
#pragma unroll
    for (int j = 0; j < T::BN / 8; ++j) {
        int c = j * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2 *>(out + row * OUT_STRIDE + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
        *reinterpret_cast<float2 *>(out + (row + 8) * OUT_STRIDE + c) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(T::CONSUMERS * 128) : "memory");
    /* (2) Each consumer thread now owns 4 columns per 128 of the tile in 16 rows: columns
     * 128h + 4l..+3 for lane l, so that a warp reads 512 contiguous bytes per instruction
     * (no bank conflicts) and covers one whole row of the tile per pass. It finishes all
     * its values first — with no store in between, each column's bias is loaded once, not
     * 16 times — then stores them 8 bytes at a time: a warp writes 256 contiguous bytes
     * per instruction. Straight from the accumulators, a warp would write 8 rows × 16 bytes. */
    constexpr int ROWS_PER_THREAD = T::BM / 8, GROUPS = T::BN / 128;
    static_assert(T::CONSUMERS * 128 == 8 * 32, "8 warps: 8 rows of the tile per pass of the consumers");
    int ct = threadIdx.x - 128, first_row = ct / 32, col = (ct % 32) * 4;
    float v[ROWS_PER_THREAD][4 * GROUPS]; /* [row][4h + e]: column 128h + col + e */
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; ++i)
#pragma unroll
        for (int h = 0; h < GROUPS; ++h) {
            float4 q = *reinterpret_cast<const float4 *>(out + (first_row + 8 * i) * OUT_STRIDE + 128 * h + col);
            v[i][4 * h] = q.x, v[i][4 * h + 1] = q.y, v[i][4 * h + 2] = q.z, v[i][4 * h + 3] = q.w;
        }
#pragma unroll
    for (int h = 0; h < GROUPS; ++h) {
        int gc = tile_col + 128 * h + col;
        if (gc >= N) continue; /* N is a multiple of 8: all 4 columns are in, or none */
#pragma unroll
        for (int i = 0; i < ROWS_PER_THREAD; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) v[i][4 * h + e] = epi(v[i][4 * h + e], gc + e);
    }
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; ++i) {
        int gr = tile_row + first_row + 8 * i;
        if (gr >= M) break; /* rows only grow with i */
#pragma unroll
        for (int h = 0; h < GROUPS; ++h) {
            int gc = tile_col + 128 * h + col;
            if (gc >= N) continue;
            __half2 pair[2] = {__floats2half2_rn(v[i][4 * h], v[i][4 * h + 1]),
                               __floats2half2_rn(v[i][4 * h + 2], v[i][4 * h + 3])};
            *reinterpret_cast<uint2 *>(C + (long long)gr * N + gc) = *reinterpret_cast<const uint2 *>(pair);
        }
    }
#endif
}

/* ---------------------------------------------------------------------------
 * Host side: the launcher.
 * ------------------------------------------------------------------------- */

/** @brief Launch v10 with tiles BN wide (the tensor maps' boxes do not depend on BN). */
template <int BN, typename Epilogue>
static void launch_hgemm_wgmma_tiles(const CUtensorMap &map_a, const CUtensorMap &map_b, __half *C, int M, int N, int K,
                                     Epilogue epi)
{
    using T = HopperTile<BN>;
    dim3 grid((N + T::BN - 1) / T::BN, (M + T::BM - 1) / T::BM);
    hgemm_wgmma_tma<BN><<<grid, T::THREADS, T::SMEM_BYTES>>>(map_a, map_b, C, M, N, K, epi);
    WB_CHECK_LAUNCH("hgemm_wgmma_tma");
}

/**
 * @brief What v10–v14 do before launching: check the contract and the GPU,
 *        describe A (in boxes a_box_rows tall) and B to TMA, and pick v10's and
 *        v11's tile width (see launch_hgemm_wgmma).
 * @param a_box_rows the tile's rows (128; v14's tall tile 192)
 * @param bn  receives 128 or 256
 * @param sms receives the GPU's SM count
 * @return NULL, or why the shape or the GPU cannot be taken
 */
static const char *hopper_gemm_setup(const __half *A, const __half *B, const __half *C, int M, int N, int K,
                                     CUtensorMap *map_a, CUtensorMap *map_b, int *bn, int *sms,
                                     int a_box_rows = HopperTile<256>::BM)
{
    using Wide = HopperTile<256>;
    if (M < 1 || N < 1 || K < 1) return "needs M, N, K >= 1";
    if (K % 8 || N % 8) return "needs K and N multiples of 8 (TMA needs 16-byte row strides)";
    if ((((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15u) != 0) return "needs 16-byte aligned A, B, C";
    int cc;
    wb_current_gpu(&cc, sms);
    const char *why = hopper_gpu_refusal(cc);
    if (!why) why = make_tensor_map(map_a, A, M, K, a_box_rows, Wide::BK);
    if (!why) why = make_tensor_map(map_b, B, K, N, Wide::BK, Wide::B_BOX_N);
    if (why) return why;
    long long rows = (M + Wide::BM - 1) / Wide::BM;
    long long waves_wide = (rows * ((N + 255) / 256) + *sms - 1) / *sms;
    long long waves_narrow = (rows * ((N + 127) / 128) + *sms - 1) / *sms;
#ifdef WB_HOPPER_FORCE_BN
    waves_narrow = WB_HOPPER_FORCE_BN == 128 ? 0 : 1LL << 40;
#endif
    *bn = waves_narrow < 2 * waves_wide ? 128 : 256;
    return NULL;
}

/**
 * @brief Launch v10 with an epilogue (fp16 A, B, C; K and N multiples of 8; an sm_90 GPU).
 *
 * One block per SM at a time, so the tile width decides how many waves of blocks the
 * GPU runs. 128×256 tiles do the most work per byte loaded; but 1024×768 has only 24
 * of them for 132 SMs. The launcher takes 128×128 tiles when they need fewer waves'
 * worth of work: waves(BN 128) · ½ < waves(BN 256), a 128-wide tile being half the work.
 * Build with -DWB_HOPPER_FORCE_BN=128 (or 256) to measure one width everywhere.
 * @return NULL, or why it cannot take the shape or the GPU
 */
template <typename Epilogue>
static const char *launch_hgemm_wgmma(const __half *A, const __half *B, __half *C, int M, int N, int K, Epilogue epi)
{
    if ((M + HopperTile<256>::BM - 1) / HopperTile<256>::BM > 65535) return "needs M <= 65535 * 128 (grid y limit)";
    CUtensorMap map_a, map_b;
    int bn, sms;
    if (const char *why = hopper_gemm_setup(A, B, C, M, N, K, &map_a, &map_b, &bn, &sms)) return why;
    static bool configured = false; /* one per epilogue type; both widths at once, so that a first launch
                                       inside a CUDA graph capture (stage 10) never has to configure */
    if (!configured) { /* more than 48 KB of dynamic shared memory must be asked for */
        WB_CUDA_CHECK(cudaFuncSetAttribute(hgemm_wgmma_tma<256, Epilogue>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           HopperTile<256>::SMEM_BYTES));
        WB_CUDA_CHECK(cudaFuncSetAttribute(hgemm_wgmma_tma<128, Epilogue>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           HopperTile<128>::SMEM_BYTES));
        configured = true;
    }
    if (bn == 128)
        launch_hgemm_wgmma_tiles<128>(map_a, map_b, C, M, N, K, epi);
    else
        launch_hgemm_wgmma_tiles<256>(map_a, map_b, C, M, N, K, epi);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v11 — persistent: one block per SM walks the tiles, and the producer runs
 * ahead into the next tile while the consumers finish the last.
 * ------------------------------------------------------------------------- */

/** @brief v11's pipeline depth: 3 stages of 48 KB at BN 256 leave room for its epilogue buffer; 4 at BN 128. */
template <int BN>
struct PersistentStages {
    static constexpr int value = BN == 256 ? 3 : 4; /**< stages */
};

/** @brief v11's shape: v10's tile with PersistentStages<BN> stages. */
template <int BN>
using PersistentTile = HopperTile<BN, PersistentStages<BN>::value>;

/** @brief v11's epilogue buffer: 128 columns of the fp32 tile at a time, rows padded by 8 floats (as v10's). */
constexpr int PERSISTENT_OUT_COLS = 128;
/** @brief Its row stride in floats. */
constexpr int PERSISTENT_OUT_STRIDE = PERSISTENT_OUT_COLS + 8;

/** @brief v11's dynamic shared memory: the stages, the epilogue buffer, and 1024 bytes to align to 1024. */
template <int BN>
constexpr int persistent_smem_bytes()
{
    return PersistentTile<BN>::STAGES * PersistentTile<BN>::STAGE_BYTES +
           PersistentTile<BN>::BM * PERSISTENT_OUT_STRIDE * 4 + 1024;
}

/**
 * @brief mbar_wait, but a barrier that never completes (a bug in the phases) stops
 *        the kernel with a trap after 2^36 cycles (about 40 s: room for the sanitizers'
 *        slowdown) instead of hanging the GPU.
 */
[[maybe_unused]] static __device__ __forceinline__ void mbar_wait_or_trap(uint64_t *bar, int parity)
{
    unsigned done = 0;
    long long start = clock64();
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
        if (!done && clock64() - start > (1ll << 36)) __trap();
    }
}

/**
 * @brief The persistent producers' inner loop (v11–v13): k-tiles [k_begin, k_end) of
 *        the tile at (tile_row, tile_col), each into ring stage it % STAGES once the
 *        consumers have emptied it (phase (it / STAGES) & 1); `it` counts across tiles.
 */
template <typename T>
static __device__ __forceinline__ void produce_tile(unsigned char *smem, const CUtensorMap *map_a,
                                                    const CUtensorMap *map_b, int tile_row, int tile_col, int k_begin,
                                                    int k_end, uint64_t *full, uint64_t *empty, int &it)
{
    for (int kt = k_begin; kt < k_end; ++kt, ++it) {
        int s = it % T::STAGES;
        mbar_wait_or_trap(&empty[s], ((it / T::STAGES) & 1) ^ 1);
        produce_stage<T>(smem + s * T::STAGE_BYTES, map_a, map_b, tile_row, tile_col, kt * T::BK, &full[s]);
    }
}

/**
 * @brief v11 — v10 made persistent (sm_90a): a grid of one block per SM, each
 *        block taking tiles blockIdx.x, blockIdx.x + gridDim.x, …
 *
 * In v10 every tile is a block: its pipeline starts empty (the consumers wait for
 * the first TMA copies), and while its consumers run the epilogue the tensor cores
 * of the SM have nothing queued. Here the producer's loop runs over every k-tile of
 * every tile of the block, one ring of stages for all of them: as soon as the
 * consumers release the last stages of a tile, the producer fills them with the
 * next tile's first ones, so the epilogue of tile i overlaps the loads of tile i+1
 * and the consumers start tile i+1 with its stages already full. Stage s of the
 * block's it-th k-tile overall is it % STAGES, its phase (it / STAGES) & 1: the
 * same rule as v10, with `it` counting across tiles.
 *
 * The epilogue cannot stage the tile in the pipeline's buffers any more (the
 * producer is filling them), so it has its own: 128 columns of the fp32 tile at a
 * time (68 KB), then v10's "finish, then store" per column group. At BN 256 that
 * costs a stage: 3 × 48 KB + 68 KB.
 */
template <int BN, typename Epilogue>
__global__ void __launch_bounds__(PersistentTile<BN>::THREADS, 1)
    hgemm_wgmma_persistent(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                           __half *C, int M, int N, int K, Epilogue epi)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using T = PersistentTile<BN>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    float *out = reinterpret_cast<float *>(smem + T::STAGES * T::STAGE_BYTES); /* the epilogue buffer */
    __shared__ __align__(8) uint64_t full[T::STAGES], empty[T::STAGES];
    int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;
    int tiles_n = (N + T::BN - 1) / T::BN, tiles = tiles_n * ((M + T::BM - 1) / T::BM);
    int k_tiles = (K + T::BK - 1) / T::BK;

    init_stage_barriers<T>(full, empty);

    if (warpgroup == 0) { /* the producer: every k-tile of every tile of this block, through one ring */
        warpgroup_release_registers<40>();
        if (t == 0) {
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tile_row = tile / tiles_n * T::BM, tile_col = tile % tiles_n * T::BN;
                produce_tile<T>(smem, &map_a, &map_b, tile_row, tile_col, 0, k_tiles, full, empty, it);
            }
        }
        return;
    }

    warpgroup_claim_registers<232>();
    int half = warpgroup - 1, warp = t / 32, lane = t % 32, it = 0;
    int row = half * 64 + warp * 16 + lane / 4;                        /* accumulator rows row, row + 8 */
    int ct = threadIdx.x - 128, first_row = ct / 32, col = (ct % 32) * 4; /* epilogue: rows first_row + 8i */
    constexpr int ROWS_PER_THREAD = T::BM / 8;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tile_row = tile / tiles_n * T::BM, tile_col = tile % tiles_n * T::BN;
        float acc[T::ACC];
#pragma unroll
        for (int i = 0; i < T::ACC; ++i) acc[i] = 0.0f;
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
            int s = it % T::STAGES;
            mbar_wait_or_trap(&full[s], (it / T::STAGES) & 1);
            consume_stage<T>(acc, smem + s * T::STAGE_BYTES, half);
            wgmma_wait<1>();
            if (kt > 0) mbar_arrive(&empty[(it - 1) % T::STAGES]);
        }
        wgmma_wait<0>();
        mbar_arrive(&empty[(it - 1) % T::STAGES]); /* the tile's last stage: the producer may refill it now */

        /* the epilogue, 128 columns at a time: accumulators → buffer (v10's layout), then each thread finishes
         * 4 columns in 16 rows and stores them 8 bytes at a time */
#pragma unroll
        for (int g = 0; g < T::BN / PERSISTENT_OUT_COLS; ++g) {
            asm volatile("bar.sync 1, %0;\n" ::"n"(T::CONSUMERS * 128) : "memory"); /* the buffer's readers are done */
#pragma unroll
            for (int jj = 0; jj < PERSISTENT_OUT_COLS / 8; ++jj) {
                int j = g * (PERSISTENT_OUT_COLS / 8) + jj, c = jj * 8 + (lane % 4) * 2;
                *reinterpret_cast<float2 *>(out + row * PERSISTENT_OUT_STRIDE + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
                *reinterpret_cast<float2 *>(out + (row + 8) * PERSISTENT_OUT_STRIDE + c) =
                    make_float2(acc[4 * j + 2], acc[4 * j + 3]);
            }
            asm volatile("bar.sync 1, %0;\n" ::"n"(T::CONSUMERS * 128) : "memory");
            int gc = tile_col + g * PERSISTENT_OUT_COLS + col;
            float v[ROWS_PER_THREAD][4];
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; ++i) {
                float4 q = *reinterpret_cast<const float4 *>(out + (first_row + 8 * i) * PERSISTENT_OUT_STRIDE + col);
                v[i][0] = q.x, v[i][1] = q.y, v[i][2] = q.z, v[i][3] = q.w;
            }
            if (gc >= N) continue; /* N is a multiple of 8: all 4 columns are in, or none */
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) v[i][e] = epi(v[i][e], gc + e);
#pragma unroll
            for (int i = 0; i < ROWS_PER_THREAD; ++i) {
                int gr = tile_row + first_row + 8 * i;
                if (gr >= M) break;
                __half2 pair[2] = {__floats2half2_rn(v[i][0], v[i][1]), __floats2half2_rn(v[i][2], v[i][3])};
                *reinterpret_cast<uint2 *>(C + (long long)gr * N + gc) = *reinterpret_cast<const uint2 *>(pair);
            }
        }
    }
#endif
}

/**
 * @brief Launch v11 with an epilogue: the same contract, tile widths and choice
 *        between them as v10 (launch_hgemm_wgmma), and min(tiles, SMs) blocks.
 * @return NULL, or why it cannot take the shape or the GPU
 */
template <typename Epilogue>
static const char *launch_hgemm_wgmma_persistent(const __half *A, const __half *B, __half *C, int M, int N, int K,
                                                 Epilogue epi)
{
    long long rows = (M + HopperTile<256>::BM - 1) / HopperTile<256>::BM, tiles_narrow = rows * ((N + 127) / 128);
    if (tiles_narrow > 0x7fffffff) return "needs fewer than 2^31 tiles";
    CUtensorMap map_a, map_b;
    int bn, sms;
    if (const char *why = hopper_gemm_setup(A, B, C, M, N, K, &map_a, &map_b, &bn, &sms)) return why;
    static bool configured = false; /* one per epilogue type, both widths at once (a graph capture never configures) */
    if (!configured) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(hgemm_wgmma_persistent<256, Epilogue>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, persistent_smem_bytes<256>()));
        WB_CUDA_CHECK(cudaFuncSetAttribute(hgemm_wgmma_persistent<128, Epilogue>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, persistent_smem_bytes<128>()));
        configured = true;
    }
    long long tiles = rows * ((N + bn - 1) / bn);
    int blocks = (int)(tiles < sms ? tiles : sms);
    if (bn == 128) {
        hgemm_wgmma_persistent<128><<<blocks, PersistentTile<128>::THREADS, persistent_smem_bytes<128>()>>>(
            map_a, map_b, C, M, N, K, epi);
    } else {
        hgemm_wgmma_persistent<256><<<blocks, PersistentTile<256>::THREADS, persistent_smem_bytes<256>()>>>(
            map_a, map_b, C, M, N, K, epi);
    }
    WB_CHECK_LAUNCH("hgemm_wgmma_persistent");
    return NULL;
}

/* ---------------------------------------------------------------------------
 * v12 — v11 with its epilogue finished in registers and written by TMA; v13 —
 * v12 with the last, partial wave of tiles split along K.
 * ------------------------------------------------------------------------- */

/** @brief TMA store: the box at (column c0, row c1) of `map` from shared memory, tracked as a bulk group. */
[[maybe_unused]] static __device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, const void *src, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"((uint64_t)map),
                 "r"(c0), "r"(c1), "r"(smem_addr(src))
                 : "memory");
}

/**
 * @brief atomicAdd with acquire-release semantics at GPU scope: the pattern "write, barrier,
 *        one thread counts" (and "one thread counts, barrier, read") without a full fence.
 *        `__threadfence()` here compiles to a sequentially consistent fence (`MEMBAR.SC.GPU`).
 */
[[maybe_unused]] static __device__ __forceinline__ int atomic_add_acq_rel_gpu(int *address, int value)
{
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(address), "r"(value) : "memory");
    return old;
}

/** @brief v12's shape: v11's 128×256 tile and 3 stages. */
using StoreTile = HopperTile<256, 3>;
/** @brief v14's other shape: 192×128, three consumer warpgroups of 64×128, 4 stages of 40 KB. */
using TallTile = HopperTile<128, 4, 3>;
/** @brief The output tile as TMA stores it: boxes of BM rows × 64 halves (128 bytes, the swizzle's span). */
constexpr int STORE_BOX_COLS = 64;
/** @brief Bytes of one output box (16 KB for v12's 128 rows). */
template <typename T>
__host__ __device__ constexpr int store_box_bytes()
{
    return T::BM * STORE_BOX_COLS * 2;
}
/** @brief v12's dynamic shared memory: 3 stages (144 KB), the fp16 output tile (64 KB), 1024 to align
 *         (v14's tall tile: 4 × 40 KB + 48 KB + 1024). */
template <typename T = StoreTile>
constexpr int tma_store_smem_bytes()
{
    return T::STAGES * T::STAGE_BYTES + T::BN / STORE_BOX_COLS * store_box_bytes<T>() + 1024;
}

/** @brief Most parts v13 cuts a tile of the last wave into. */
constexpr int TAIL_SPLIT_MAX = 4;

/**
 * @brief The work of v12/v13 as units: `full_tiles` whole tiles, then each of the
 *        remaining tiles as `parts` pieces of K (parts = 1: v12, every tile whole).
 */
struct TileUnits {
    int tiles_n;    /**< tiles along N */
    int tiles;      /**< tiles in all */
    int full_tiles; /**< tiles done whole */
    int parts;      /**< pieces per remaining tile */
    int k_tiles;    /**< 64-wide steps of K of a whole tile */
    /** @brief Units in all. */
    __host__ __device__ int count() const { return full_tiles + (tiles - full_tiles) * parts; }
    /** @brief Unit u: its tile, which part it is (0 for a whole tile) and its k-tiles [k_begin, k_end). */
    __device__ void unit(int u, int *tile, int *part, int *k_begin, int *k_end) const
    {
        if (u < full_tiles) {
            *tile = u, *part = 0, *k_begin = 0, *k_end = k_tiles;
            return;
        }
        int v = u - full_tiles;
        *tile = full_tiles + v / parts, *part = v % parts;
        *k_begin = *part * k_tiles / parts, *k_end = (*part + 1) * k_tiles / parts;
    }
};

/**
 * @brief v12 (parts = 1) and v13 — v11 with a cheaper epilogue, and optionally
 *        the last wave's tiles split along K (sm_90a).
 *
 * **The epilogue (v12).** v11 stages the fp32 tile through shared memory (128 KB
 * written and read per tile, in two passes with four barriers), finishes it, then
 * stores it with ordinary instructions; the consumers run all of that while the
 * tensor cores wait. Here each consumer finishes its 128 accumulators where they
 * are (bias and GELU per column, in registers), rounds them to fp16 and writes
 * them once into a 64 KB tile laid out as TMA reads it: four 128×64 boxes in the
 * 128-byte swizzle (the 16-byte chunk j of row r at chunk j XOR r % 8, so a warp's
 * 8 rows hit all 32 banks). One thread then hands the four boxes to TMA
 * (`cp.async.bulk.tensor` store, which clips rows and columns past the matrix) and
 * the consumers go straight to the next tile's mainloop: the stores drain while
 * they multiply. Before the buffer is written again, that thread waits for TMA to
 * have *read* it (`cp.async.bulk.wait_group.read 0`).
 *
 * **The last wave (v13).** With `tiles` on `SMs` blocks, the last wave holds
 * tiles mod SMs tiles, and the other SMs idle while they run (8192×768 at 128×256:
 * 192 tiles, 132 + 60). v13 cuts each of the last wave's tiles into `parts` pieces
 * of K, one block each, so that wave takes 1/parts of the time. Each piece writes
 * its fp32 partial tile to a workspace (in the accumulators' own order, 16 bytes
 * per access: coalesced, no shuffling), then counts itself done on the tile's
 * counter; the last piece to finish adds the others' partials to its accumulators
 * and runs the epilogue, and resets the counter for the next launch — stage 09's
 * "last block merges".
 *
 * **Staged column terms (STAGE_COLUMNS, stage 04's v9).** In the accumulator
 * layout a thread owns 64 of the tile's 256 columns, so an epilogue that loads
 * something per column (a bias) makes 64 loads per tile, and with 128 registers
 * holding accumulators the compiler cannot issue them ahead: each waits on L1/L2
 * in turn. With STAGE_COLUMNS each consumer thread loads one column's term
 * (`epi.column_term(column)`) before the tile's mainloop, keeps it in a register
 * while the wgmma run, and writes it to shared memory just before the epilogue,
 * which then reads two terms per shared-memory load and calls
 * `epi.finish(value, term)` instead of `epi(value, column)`.
 */
template <typename T, bool STAGE_COLUMNS, typename Epilogue>
__global__ void __launch_bounds__(T::THREADS, 1)
    hgemm_wgmma_tma_store(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          const __grid_constant__ CUtensorMap map_c, TileUnits work, float *partials, int *counters,
                          int M, int N, Epilogue epi)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BOX_BYTES = store_box_bytes<T>(), CONSUMER_THREADS = T::CONSUMERS * 128;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    /* aligned up to 1024 by an offset, not through an integer, so the compiler still knows it is shared memory
     * (STS, not generic stores with 64-bit addresses, in the epilogue) */
    unsigned char *smem = smem_raw + (1024u - smem_addr(smem_raw) % 1024u) % 1024u;
    unsigned char *out = smem + T::STAGES * T::STAGE_BYTES; /* the fp16 output tile, 1024-aligned */
    __shared__ __align__(8) uint64_t full[T::STAGES], empty[T::STAGES];
    __shared__ int last_part; /* the counter's verdict, for the whole block */
    __shared__ __align__(8) float column_terms[STAGE_COLUMNS ? T::BN : 2]; /* the tile's per-column terms (bias) */
    int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128, units = work.count();

    init_stage_barriers<T>(full, empty);

    if (warpgroup == 0) { /* the producer: v11's, over each unit's k-tiles */
        warpgroup_release_registers<40>();
        if (t == 0) {
            int it = 0;
            for (int u = blockIdx.x; u < units; u += gridDim.x) {
                int tile, part, k_begin, k_end;
                work.unit(u, &tile, &part, &k_begin, &k_end);
                int tile_row = tile / work.tiles_n * T::BM, tile_col = tile % work.tiles_n * T::BN;
                produce_tile<T>(smem, &map_a, &map_b, tile_row, tile_col, k_begin, k_end, full, empty, it);
            }
        }
        return;
    }

    warpgroup_claim_registers<T::CONSUMER_REGS>();
    int half = warpgroup - 1, warp = t / 32, lane = t % 32, it = 0, ct = threadIdx.x - 128;
    int row = half * 64 + warp * 16 + lane / 4; /* accumulator rows row and row + 8 of the tile */
    bool column_owner = T::BN >= CONSUMER_THREADS || ct < T::BN; /* one consumer thread per column stages its term */
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
        int tile, part, k_begin, k_end;
        work.unit(u, &tile, &part, &k_begin, &k_end);
        int tile_row = tile / work.tiles_n * T::BM, tile_col = tile % work.tiles_n * T::BN;
        float column_term = 0.0f; /* stage 04's v9: column tile_col + ct's bias, loaded while the mainloop runs */
        if constexpr (STAGE_COLUMNS)
            if (column_owner && tile_col + ct < N) column_term = epi.column_term(tile_col + ct);
        float acc[T::ACC];
#pragma unroll
        for (int i = 0; i < T::ACC; ++i) acc[i] = 0.0f;
        for (int kt = k_begin; kt < k_end; ++kt, ++it) {
            int s = it % T::STAGES;
            mbar_wait_or_trap(&full[s], (it / T::STAGES) & 1);
            consume_stage<T>(acc, smem + s * T::STAGE_BYTES, half);
            wgmma_wait<1>();
            if (kt > k_begin) mbar_arrive(&empty[(it - 1) % T::STAGES]);
        }
        wgmma_wait<0>();
        if (k_end > k_begin) mbar_arrive(&empty[(it - 1) % T::STAGES]);

        if (tile >= work.full_tiles && work.parts > 1) { /* v13: a piece of a last-wave tile */
            int slot = tile - work.full_tiles;
            /* 16 bytes per access: a quarter of the instructions of 4-byte ones, here and in the merge below
             * (measured: within 1–3% of scalar accesses; the merge waits on L2 latency either way) */
            float4 *mine = reinterpret_cast<float4 *>(partials) + ((long long)slot * work.parts + part) * T::ACC * CONSUMER_THREADS / 4;
#pragma unroll
            for (int i = 0; i < T::ACC / 4; ++i) /* to L2 (another SM reads it), coalesced: 512 bytes per warp */
                __stcg(mine + i * CONSUMER_THREADS + ct, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
            asm volatile("bar.sync 1, %0;\n" ::"n"(T::CONSUMERS * 128) : "memory"); /* all our partial is written */
            if (ct == 0) { /* one acq_rel atomic: releases the whole partial (the barrier orders the other threads'
                              stores before it) and acquires the partials of the pieces that counted before us */
                last_part = atomic_add_acq_rel_gpu(&counters[slot], 1) == work.parts - 1;
                if (last_part) counters[slot] = 0; /* ready for the next launch */
            }
            asm volatile("bar.sync 1, %0;\n" ::"n"(T::CONSUMERS * 128) : "memory"); /* … and the barrier passes that on */
            if (!last_part) continue;
            for (int p = 0; p < work.parts; ++p) {
                if (p == part) continue;
                const float4 *theirs = reinterpret_cast<const float4 *>(partials) + ((long long)slot * work.parts + p) * T::ACC * CONSUMER_THREADS / 4;
#pragma unroll
                for (int i = 0; i < T::ACC / 4; ++i) {
                    float4 q = __ldcg(theirs + i * CONSUMER_THREADS + ct);
                    acc[4 * i] += q.x, acc[4 * i + 1] += q.y, acc[4 * i + 2] += q.z, acc[4 * i + 3] += q.w;
                }
            }
        }

        /* the epilogue: TMA must have read the last tile out of the buffer before it is overwritten */
        if (ct == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        if constexpr (STAGE_COLUMNS)
            if (column_owner) column_terms[ct] = column_term; /* the last tile's epilogue read its copy before the
                                                               barrier that preceded its store */
        asm volatile("bar.sync 1, %0;\n" ::"n"(T::CONSUMERS * 128) : "memory");
#pragma unroll
        for (int j = 0; j < T::BN / 8; ++j) { /* columns 8j + 2·(lane % 4) + {0, 1} of rows row and row + 8 */
            int c = j * 8 + (lane % 4) * 2, gc = tile_col + c;
            float v0 = acc[4 * j], v1 = acc[4 * j + 1], v2 = acc[4 * j + 2], v3 = acc[4 * j + 3];
            if constexpr (STAGE_COLUMNS) { /* one shared-memory load (4 addresses per warp: broadcasts) per 2 columns,
                                              and no bounds test: past N the terms are 0 and TMA clips the columns,
                                              so the 128 elements are one straight line of independent work */
                float2 term = *reinterpret_cast<const float2 *>(column_terms + c);
                v0 = epi.finish(v0, term.x), v1 = epi.finish(v1, term.y);
                v2 = epi.finish(v2, term.x), v3 = epi.finish(v3, term.y);
            } else if (tile_col + j * 8 < N) { /* N is a multiple of 8: these 8 columns are all in, or all out */
                v0 = epi(v0, gc), v1 = epi(v1, gc + 1), v2 = epi(v2, gc), v3 = epi(v3, gc + 1);
            }
            unsigned char *box = out + (j / 8) * BOX_BYTES; /* 8 chunks of 8 columns per box */
            int chunk = j % 8, byte = (lane % 4) * 4;
            *reinterpret_cast<__half2 *>(box + row * 128 + ((chunk ^ (row % 8)) * 16) + byte) = __floats2half2_rn(v0, v1);
            *reinterpret_cast<__half2 *>(box + (row + 8) * 128 + ((chunk ^ ((row + 8) % 8)) * 16) + byte) =
                __floats2half2_rn(v2, v3);
        }
        fence_shared_for_tma();
        asm volatile("bar.sync 1, %0;\n" ::"n"(T::CONSUMERS * 128) : "memory");
        if (ct == 0) {
#pragma unroll
            for (int b = 0; b < T::BN / STORE_BOX_COLS; ++b)
                if (tile_col + b * STORE_BOX_COLS < N) tma_store_2d(&map_c, out + b * BOX_BYTES, tile_col + b * STORE_BOX_COLS, tile_row);
            asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        }
    }
    if (ct == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); /* the last stores, before the block ends */
#endif
}

/** @brief v13's workspace: fp32 partial tiles and a counter per split tile, grown as shapes need. */
static float *tail_partials = NULL;
static int *tail_counters = NULL;
static size_t tail_partials_bytes = 0, tail_counters_bytes = 0;

/** @brief Free v13's workspace (the program's release step calls it once at the end). */
[[maybe_unused]] static void hopper_tail_release(void)
{
    if (tail_partials) WB_CUDA_CHECK(cudaFree(tail_partials));
    if (tail_counters) WB_CUDA_CHECK(cudaFree(tail_counters));
    tail_partials = NULL, tail_counters = NULL, tail_partials_bytes = 0, tail_counters_bytes = 0;
}

/**
 * @brief Launch v12 (split_tail false) or v13 with an epilogue: v10's contract,
 *        T's tiles (v12's and v13's 128×256; v14 may take TallTile's 192×128),
 *        min(units, SMs) blocks.
 *
 * v13 splits the last wave when it is at most half full: with r tiles left over
 * after the whole waves, each is cut into min(4, SMs / r, k-tiles) parts.
 * STAGE_COLUMNS (stage 04's v9) stages the epilogue's per-column terms in shared
 * memory; the epilogue must then have `column_term(column)` and `finish(value, term)`.
 * @return NULL, or why it cannot take the shape or the GPU
 */
template <bool STAGE_COLUMNS = false, typename T = StoreTile, typename Epilogue>
static const char *launch_hgemm_wgmma_tma_store(const __half *A, const __half *B, __half *C, int M, int N, int K,
                                                Epilogue epi, bool split_tail)
{
    long long tiles = (long long)((M + T::BM - 1) / T::BM) * ((N + T::BN - 1) / T::BN);
    if (tiles * TAIL_SPLIT_MAX > 0x7fffffff) return "needs fewer than 2^29 tiles";
    CUtensorMap map_a, map_b, map_c;
    int bn, sms;
    if (const char *why = hopper_gemm_setup(A, B, C, M, N, K, &map_a, &map_b, &bn, &sms, T::BM)) return why;
    if (const char *why = make_tensor_map(&map_c, C, M, N, T::BM, STORE_BOX_COLS)) return why;
    static bool configured = false; /* one per tile and epilogue type (a graph capture never configures) */
    if (!configured) {
        WB_CUDA_CHECK(cudaFuncSetAttribute(hgemm_wgmma_tma_store<T, STAGE_COLUMNS, Epilogue>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, tma_store_smem_bytes<T>()));
        configured = true;
    }
    TileUnits work = {(N + T::BN - 1) / T::BN, (int)tiles, (int)tiles, 1, (K + T::BK - 1) / T::BK};
    long long left = tiles % sms;
    if (split_tail && left > 0 && 2 * left <= sms) {
        int parts = (int)(sms / left);
        parts = parts < TAIL_SPLIT_MAX ? parts : TAIL_SPLIT_MAX;
        parts = parts < work.k_tiles ? parts : work.k_tiles;
        if (parts > 1) {
            work.full_tiles = (int)(tiles - left), work.parts = parts;
            /* grown before the timed runs (the first call of a shape) */
            wb_device_reserve((void **)&tail_partials, &tail_partials_bytes,
                              (size_t)left * parts * T::BM * T::BN * sizeof(float), "v13's partial tiles");
            if (wb_device_reserve((void **)&tail_counters, &tail_counters_bytes, sizeof(int) * (size_t)left,
                                  "v13's tile counters")) /* zero once: the last part of each tile resets its counter */
                WB_CUDA_CHECK(cudaMemset(tail_counters, 0, tail_counters_bytes));
        }
    }
    int units = work.count(), blocks = units < sms ? units : sms;
    hgemm_wgmma_tma_store<T, STAGE_COLUMNS><<<blocks, T::THREADS, tma_store_smem_bytes<T>()>>>(
        map_a, map_b, map_c, work, tail_partials, tail_counters, M, N, epi);
    WB_CHECK_LAUNCH("hgemm_wgmma_tma_store");
    return NULL;
}

/**
 * @brief Which tile v14 takes for an M×N output on `sms` SMs: true for TallTile
 *        (192×128), false for v13's 128×256.
 *
 * One block per SM, so a launch takes ⌈tiles / SMs⌉ waves, each as long as one
 * tile. A 192×128 tile is 3/4 of a 128×256 one's work, so (at the same rate) its
 * wave takes 3/4 of the time: the tall tile wins when 3·waves(tall) < 4·waves(wide).
 * At 8192×768 on 132 SMs: 192 wide tiles are 2 waves (the second 45% full), 258 tall
 * ones 1.95 → 2 waves of 3/4, 1.5 in all. Ties go to the wide tile, which loads
 * fewer bytes per FLOP (85 against 77 FLOP per byte of A and B).
 */
static bool hopper_tall_tile_wins(int M, int N, int sms)
{
    long long wide = (long long)((M + StoreTile::BM - 1) / StoreTile::BM) * ((N + StoreTile::BN - 1) / StoreTile::BN);
    long long tall = (long long)((M + TallTile::BM - 1) / TallTile::BM) * ((N + TallTile::BN - 1) / TallTile::BN);
    long long waves_wide = (wide + sms - 1) / sms, waves_tall = (tall + sms - 1) / sms;
#ifdef WB_HOPPER_FORCE_TILE /* 192 or 256: measure one tile everywhere */
    return WB_HOPPER_FORCE_TILE == 192;
#endif
    return 3 * waves_tall < 4 * waves_wide;
}

/**
 * @brief Launch v14 with an epilogue: v13 with the tile shape chosen from the waves
 *        it makes (hopper_tall_tile_wins); the last wave is split along K as v13's.
 * @return NULL, or why it cannot take the shape or the GPU
 */
template <bool STAGE_COLUMNS = false, typename Epilogue>
static const char *launch_hgemm_wgmma_tile_from_waves(const __half *A, const __half *B, __half *C, int M, int N, int K,
                                                      Epilogue epi)
{
    int cc, sms;
    wb_current_gpu(&cc, &sms);
    if (M >= 1 && N >= 1 && hopper_tall_tile_wins(M, N, sms))
        return launch_hgemm_wgmma_tma_store<STAGE_COLUMNS, TallTile>(A, B, C, M, N, K, epi, true);
    return launch_hgemm_wgmma_tma_store<STAGE_COLUMNS, StoreTile>(A, B, C, M, N, K, epi, true);
}

#endif /* STAGE03_GEMM_HOPPER_CUH */
