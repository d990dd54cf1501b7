/**
 * @file stages/10_gpt2_e2e/proj_heads.cuh
 * @brief v5: attention and proj in one phase, at 1 row (fp16). Each
 *        block computes one head's attention and multiplies it by its slice
 *        of proj's weights; the heads' parts of each output are added as
 *        they are stored, in 64-bit fixed point.
 *
 * In v4's step a layer is four barriers and a phase each for QKV,
 * attention, proj, fc and fc-proj. But proj (x += att·W_proj) is linear in
 * the heads: att·W_proj = Σ_h att_h·W_proj[h], where att_h is head h's 64
 * outputs and W_proj[h] their 64 rows of the weights. So the block that has
 * computed head h's attention can multiply it by W_proj[h] at once, with no
 * barrier between, and leave a part of every output; fc's rows, after the
 * next barrier, add the parts. With G = blocks / H blocks a head, each takes
 * a slice of proj's outputs (on the H100, 132 = 12 heads × 11 slices of
 * 69-70 outputs), so the attention of a head is computed by its G blocks
 * (the same work G times: 2-4 µs of K/V reads that were in L2 anyway).
 *
 * The heads' parts of an output would be added in fc's rows, 12 loads a
 * column. Instead each is added as it is stored, with an atomic into a
 * 64-bit integer, 2^32 to 1.0 (DECODE_PROJ_FIXED_ONE): integer addition is
 * associative, so the 12 parts sum to the same bits in whatever order their
 * atomics land (stage 02 fixes its sum's order with two passes; this is the
 * other way), and fc's rows read one sum a column.
 */
#ifndef STAGE10_PROJ_HEADS_CUH
/** @brief Include guard. */
#define STAGE10_PROJ_HEADS_CUH

#include "step_launch.cuh" /* step_args_refused */
#include "weight_ring.cuh"

/**
 * @brief This block's share of proj, by head: of G = blocks / H blocks a
 *        head, block b takes head b / G and outputs [s·C/G, (s+1)·C/G) for
 *        s = b % G. Each output's 64 inputs of that head are contiguous in
 *        proj_heads ([H][C][64]), so the share is one run, as the ring
 *        copies it. A block past G·H has no head (-1) and no outputs.
 */
static __device__ LinearShare proj_head_share(const decode_step_args &a, const void *proj_heads, int *head)
{
    const int G = (int)gridDim.x / a.H, b = (int)blockIdx.x, s = b % G;
    *head = b < G * a.H ? b / G : -1;
    LinearShare p;
    p.chunks = DECODE_STEP_HEAD_DIM * (int)sizeof(__half) / 16;
    p.n0 = s * a.C / G;
    p.outs = *head < 0 ? 0 : (s + 1) * a.C / G - p.n0;
    p.S = 1, p.log2S = 0, p.units = p.outs;
    p.w = reinterpret_cast<const uint4 *>(proj_heads) + ((long long)max(*head, 0) * a.C + p.n0) * p.chunks;
    return p;
}

/** @brief The ring's plan of the step's linears, proj's by head (proj_head_share), then the LM head's pieces. */
static __device__ void plan_ring_by_head(const decode_step_args &a, const decode_layer_weights *layers, WeightRing &ring,
                                         RingPlan *plan)
{
    for (int j = threadIdx.x; j < 4 * a.L; j += STEP_THREADS) {
        if (j % 4 == 1) {
            int head;
            const LinearShare share = proj_head_share(a, layers[j / 4].proj_heads, &head);
            plan[j] = {share.w, (unsigned)(share.outs * share.chunks)};
        } else {
            plan[j] = plan_linear<__half>(a, layers, j);
        }
    }
    ring.linears += plan_head_pieces<__half, 1>(a, layers, plan);
}

/**
 * @brief The head's part of proj's outputs: its 64 attention outputs (`att`,
 *        in shared memory) times the share's weights (from the ring), one
 *        float an output, handed to add(n, part) (the fixed-point atomic). A
 *        group of 8 lanes takes an output (one 16-byte chunk each), so a warp
 *        takes 4 at once.
 */
template <typename Add>
static __device__ __forceinline__ void proj_head_dots(const LinearShare &p, const WeightRing &ring, int j,
                                                      const __half *att, Add add)
{
    constexpr int VEC = Vec16<__half>::N, LANES = DECODE_STEP_HEAD_DIM / VEC, PER_WARP = 32 / LANES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % LANES;
    const unsigned from = ring.start[j % RING_LINEARS];
    float x[VEC];
    unpack16(reinterpret_cast<const uint4 *>(att)[c], x, __half());
    for (int o0 = warp * PER_WARP; o0 < p.outs; o0 += STEP_WARPS * PER_WARP) {
        const int o = o0 + lane / LANES;
        float w[VEC], sum = 0.0f;
        unpack16(o < p.outs ? ring.at(from, o * LANES + c) : make_uint4(0, 0, 0, 0), w, __half());
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum = fmaf(x[e], w[e], sum);
#pragma unroll
        for (int off = 1; off < LANES; off *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (c == 0 && o < p.outs) add(p.n0 + o, sum);
    }
}

/** @brief Why v5's kernel cannot take these arguments (one sequence of GPT-2 small's shape, fp16, sm_90, at
 *         least one block a head), or NULL. */
static const char *merged_step_refused(wb_dtype dtype, const decode_step_args *a, int cc, int sms)
{
    if (const char *why = step_args_refused(a)) return why;
    if (dtype != WB_F16 || a->M != 1) return "decode step with attention and proj in one phase: 1 sequence, fp16";
    if (cc < 90) return "persistent decode step with the weight ring: needs sm_90 (the copy engine)";
    if (a->H > DECODE_MERGED_MAX_HEADS || a->C > ROWS_ONE_PASS_MAX_K || sms < a->H)
        return "decode step with attention and proj in one phase: needs at most 12 heads, C <= 768 (fc's rows in one "
               "pass) and a block (SM) a head";
    return NULL;
}

/** @brief The shared memory before the ring (1 row, the plan of the linears and the LM head's pieces). */
static size_t merged_ring_offset(const decode_step_args *a, int sms)
{
    return step_ring_offset(2, 1, a->C, a->L, a->max_pages, sms, false, ring_plan_entries(a->L, a->V, sms, 2, 1));
}

#endif /* STAGE10_PROJ_HEADS_CUH */
