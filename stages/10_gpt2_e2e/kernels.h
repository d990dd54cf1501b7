/**
 * @file stages/10_gpt2_e2e/kernels.h
 * @brief Stage 10's own kernels: the glue between the earlier stages' kernels
 *        (embedding, residual add, splitting Q, K, V into the layouts stages 06,
 *        08 and 09 take, merging heads, argmax). Everything heavy comes from the
 *        earlier stages through their headers.
 */
#ifndef STAGE10_KERNELS_H
#define STAGE10_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief x[r] = wte[tokens[r]] + wpe[positions[r]] for r < rows (C wide; wte,
 *        wpe and x in `dtype`).
 */
const char *gpt2_embed(wb_dtype dtype, const int *tokens, const int *positions, const void *wte, const void *wpe,
                       void *x, int rows, int C);

/** @brief x += y, n elements (the residual connection). */
const char *gpt2_residual_add(wb_dtype dtype, void *x, const void *y, long long n);

/**
 * @brief Split qkv rows [rows][3C] (q, k, v side by side, heads of d = C/H in each).
 *        Any output may be NULL. Heads layout ([H][rows][d], one sequence: what
 *        stage 06 takes with B = 1): q_heads, k_heads, v_heads. Rows layout
 *        ([rows][C], what stage 08's append and stage 09's q take): q_rows,
 *        k_rows, v_rows.
 */
const char *gpt2_split_qkv(wb_dtype dtype, const void *qkv, int rows, int C, int H, void *q_heads, void *k_heads,
                           void *v_heads, void *q_rows, void *k_rows, void *v_rows);

/** @brief out[rows][C] = heads [H][rows][d] with the heads side by side again (stage 06's O back to rows). */
const char *gpt2_merge_heads(wb_dtype dtype, const void *heads, void *out, int rows, int C, int H);

/**
 * @brief next[r] = argmax of the first V entries of logits row r (rows `ld`
 *        apart); ties go to the lowest id (as a CPU loop would). A block per
 *        row: stage 02's tree reduction, with the index carried along.
 */
const char *gpt2_argmax(wb_dtype dtype, const void *logits, int rows, int V, int ld, int *next);

/**
 * @brief A queued step's inputs, `words` 4-byte words, copied from `src` to `dst`, where the step's CUDA graph
 *        reads them; then `tokens` (inside dst) and `fed` [n] take the tokens the step before chose: those its
 *        argmax keys name (`keys`, argmax_key.h: v2's head), or v1's argmax (`next`); with neither, dst's own.
 */
const char *gpt2_queued_step_inputs(void *dst, const void *src, size_t words, const unsigned long long *keys,
                                    const int *next, int *tokens, int *fed, int n, int V);

/**
 * @brief Y = act(X·W + bias) for a few rows (1 <= M <= 8): the linear layer of
 *        a decode step. At M = 1 a tiled GEMM computes 127 padding rows of its
 *        128-row tile and reads W with a handful of blocks; here each element of
 *        W is read once, by one thread, and K is split across blocks so that
 *        the whole GPU streams W (partial sums in `workspace`, then a pass that
 *        adds them with the bias and the activation).
 * @param dtype storage of X, W and Y
 * @param X     [M][K], device
 * @param W     [K][N], device
 * @param bias  [N] fp32, or NULL
 * @param Y     [M][N], device
 * @param M     rows (1..8)
 * @param N     columns of W and Y
 * @param K     columns of X, rows of W
 * @param gelu 1: GELU (tanh form) after the bias; 0: none
 * @param workspace fp32 scratch of at least gpt2_small_m_workspace_floats(N, K)
 * @param workspace_floats its size
 */
const char *gpt2_linear_small_m(wb_dtype dtype, const void *X, const void *W, const float *bias, void *Y, int M, int N,
                                int K, int gelu, float *workspace, size_t workspace_floats);

/** @brief Scratch gpt2_linear_small_m needs for an N-column layer, in floats. */
size_t gpt2_small_m_workspace_floats(int N, int K);

/** @brief Most rows the skinny linear takes: one 64-row tile holds them. */
#define SKINNY_MAX_ROWS 64

/**
 * @brief Y = act(X·W + bias) for a decode batch of 1-64 rows, fp16 (sm_80+): stage 03's v9 GEMM in a 64×64 tile
 *        that holds the whole batch, K split over blocks until about two run per SM, then the small-M linear's
 *        second pass. Arguments as gpt2_linear_small_m's; 1 <= M <= 64, K and N multiples of 8.
 */
const char *gpt2_linear_skinny(const void *X, const void *W, const float *bias, void *Y, int M, int N, int K, int gelu,
                               float *workspace, size_t workspace_floats);

/**
 * @brief The skinny linear's first pass alone: each (tile of 64 outputs, chunk of K) block leaves its fp32 partial
 *        sums of X·W in workspace, [splits][M][N], for a second pass of the caller's (v2's epilogues at 3-64 rows).
 *        *splits gets the chunks. Arguments and limits as gpt2_linear_skinny's.
 */
const char *gpt2_skinny_partials(const void *X, const void *W, int M, int N, int K, float *workspace,
                                 size_t workspace_floats, int *splits);

/** @brief Scratch gpt2_linear_skinny needs for an N-column layer at 64 rows, in floats. */
size_t gpt2_skinny_workspace_floats(int N, int K);

/* ------------------------------------------------------------------------ */
/* v2: the fused decode step (decode_fused.cu)                               */
/* ------------------------------------------------------------------------ */

/** @brief Most rows (sequences) the fused decode linear's own dot products take. */
#define DECODE_MAX_ROWS 8
/** @brief Fewest rows v2 gives its batch path (fp16, sm_80): from 3 rows tensor cores beat the warps' dot products,
 *         whose instructions grow with the rows while one mma.sync takes 16 rows at the same cost (the page's
 *         measured crossover). */
#define DECODE_BATCH_MIN_ROWS 3
/** @brief Most inputs (K) the batch linear takes: every block holds all 64 rows of K = C = 768 fp16 values (96 KB) in
 *         shared memory, and each warp its A fragments in registers. */
#define DECODE_BATCH_MAX_K 768

/** @brief What the fused decode linear does with each output y[m][n] = Σ_k x[m][k]·W[k][n] + bias[n]. */
typedef enum {
    DECODE_QKV_APPEND,    /**< q → y ([M][C] rows for stage 09); k and v → their slots in stage 08's page pools */
    DECODE_RESIDUAL,      /**< y[m][n] += result: y is the residual stream */
    DECODE_GELU,          /**< y[m][n] = GELU(result) (tanh form, as stage 04) */
    DECODE_LOGITS_ARGMAX  /**< y[m][n] = result (rows ldy apart), and best[m] keeps the largest (value, lowest n) */
} decode_epilogue;

/**
 * @brief One fused decode linear: [LayerNorm →] matrix–vector products → epilogue.
 *
 * W is given transposed, [N][K]: the K weights of each output are contiguous,
 * so one warp reads them with 16-byte loads and reduces its dot product with
 * shuffles (stage 02), and the warp that finishes an output can apply the
 * whole epilogue to it.
 */
typedef struct {
    decode_epilogue epilogue; /**< what happens to each output */
    const void *x;            /**< [M][K] input rows, device */
    const float *ln_w;        /**< LayerNorm gain [K]: normalise each row of x first (the prologue); NULL: none */
    const float *ln_b;        /**< LayerNorm shift [K] (with ln_w) */
    const void *w_t;          /**< [N][K] the weights, transposed; device */
    const float *bias;        /**< [N] fp32, or NULL (ln_folded: [2][N]) */
    void *y;                  /**< the output (see the epilogue) */
    int ldy;                  /**< DECODE_LOGITS_ARGMAX: row pitch of y in elements (>= N); else unused (N) */
    int M;                    /**< rows, 1..DECODE_MAX_ROWS */
    int N;                    /**< outputs per row */
    int K;                    /**< inputs per row: a multiple of 16 bytes of the storage type (8 in fp16, 4 in fp32) */
    void *k_pool;             /**< DECODE_QKV_APPEND: stage 08's K pool [num_pages][H][block_size][d] */
    void *v_pool;             /**< the same for V */
    const int64_t *slots;     /**< [M] each row's slot in the pools */
    int H;                    /**< heads (N = 3·C, d = C / H) */
    int block_size;           /**< tokens per page */
    unsigned long long *best; /**< DECODE_LOGITS_ARGMAX: [M] argmax keys (argmax_key.h), zero before the launch */
    int dependent_launch;     /**< 1: launched as a programmatic dependent of the kernel before (sm_90) */
    int ln_folded;            /**< batch path: x's LayerNorm is folded into w_t, and bias is [2][N], the shifts
                                   folded in, then each output's folded weights' sum (gpt2_fold_layernorm): the
                                   kernel works out each row's mean and 1/σ and applies them in its epilogue */
} decode_linear_args;

/** @brief What the fused decode linear's batch path needs (fp16, sm_80; 3-64 rows in the engine) where it runs the
 *         skinny linear (past DECODE_BATCH_MAX_K inputs, or a residual add that ends with a LayerNorm): its weights
 *         and room, and that LayerNorm (of the rows the linear after reads, which takes no ln_w). */
typedef struct {
    const void *w;            /**< [K][N] the weights as the skinny linear reads them (the head: [K][ldy]) */
    float *partials;          /**< its fp32 partial sums, gpt2_skinny_workspace_floats(N, K) */
    size_t partials_floats;   /**< their room */
    const float *ln_next_w;   /**< DECODE_RESIDUAL: the gain of the LayerNorm that reads the new rows, or NULL */
    const float *ln_next_b;   /**< its shift */
    void *ln_next;            /**< [M][N]: the new rows, normalised */
} decode_batch_args;

/** @brief Launch one fused decode linear; NULL, or why it cannot take these arguments. With batch NULL, up to
 *         DECODE_MAX_ROWS rows, the warps' dot products with the LayerNorm as prologue; with batch (fp16, sm_80, up
 *         to 64 rows, no ln_w), up to DECODE_BATCH_MAX_K inputs the batch linear on tensor cores (a LayerNorm
 *         folded into W with ln_folded; a residual add only without ln_next, or past DECODE_BATCH_MAX_K inputs
 *         in slices with the epilogue in a second pass), else the skinny linear with the epilogue in the second
 *         pass (batch's weights, room, the LayerNorm after). */
const char *gpt2_decode_linear(wb_dtype dtype, const decode_linear_args *a, const decode_batch_args *batch);

/** @brief The exercise slot (exercise.cu), the variant `ex`: your decode linear with its LayerNorm, fp32, GELU epilogue. */
const char *gpt2_decode_linear_exercise(wb_dtype dtype, const decode_linear_args *a);

/**
 * @brief Cap the shared memory per block the fused decode linear plans with
 *        (0: the GPU's own limit). Rows that do not fit go in groups, one
 *        launch each; the check sets the T4's 64 KB to take that path here.
 */
void gpt2_decode_linear_smem_cap(size_t bytes);

/* ------------------------------------------------------------------------ */
/* v3-v5: the whole decode step in one persistent kernel                     */
/* ------------------------------------------------------------------------ */

/** @brief Head size the persistent decode step is written for (every GPT-2 size has 64). */
#define DECODE_STEP_HEAD_DIM 64

/** @brief One block's weights and KV cache as the persistent decode step reads them. */
typedef struct {
    const void *qkv_wt;     /**< [3C][C] (transposed: each output's weights contiguous; v5: ln_1's gains folded in) */
    const void *proj_wt;    /**< [C][C] */
    const void *fc_wt;      /**< [4C][C] (v5: ln_2's gains folded in) */
    const void *fcproj_wt;  /**< [C][4C] */
    const float *qkv_b;     /**< [3C] (v5: [2][3C], the bias with ln_1's shifts folded in, then the sums of each
                                 output's folded weights) */
    const float *proj_b;    /**< [C] */
    const float *fc_b;      /**< [4C] (v5: [2][4C], as qkv_b) */
    const float *fcproj_b;  /**< [C] */
    const float *ln1_w;     /**< [C] */
    const float *ln1_b;     /**< [C] */
    const float *ln2_w;     /**< [C] */
    const float *ln2_b;     /**< [C] */
    void *k_pool;           /**< stage 08's K pool of this block, [num_pages][H][block_size][d] */
    void *v_pool;           /**< the same for V */
    const void *proj_heads; /**< v5: proj_wt laid out by head, [H][C][64] (head h's 64 inputs of every output
                                 contiguous) */
    const void *padding;    /**< unused: the table stays a multiple of 16 bytes in shared memory, where the rows
                                 after it are read 16 bytes at a time */
} decode_layer_weights;

/**
 * @brief Everything one decode step reads and writes. Each persistent
 *        variant's kernel runs the embedding, every block (LayerNorm, QKV
 *        with the K/V append, attention through the paged cache, proj,
 *        LayerNorm, fc + GELU, fc-proj, each with its residual add) and the
 *        LM head with the argmax; the fields a variant does not read are
 *        marked with the variants that do.
 */
typedef struct {
    const decode_layer_weights *layers; /**< [L], device */
    int L;                     /**< blocks */
    int C;                     /**< width: H·64 */
    int H;                     /**< heads */
    int V;                     /**< vocabulary (outputs of the LM head) */
    int M;                     /**< sequences, 1..DECODE_MAX_ROWS */
    const void *wte;           /**< [V][C] token embedding (also the LM head, already [N][K]) */
    const void *wpe;           /**< [max_T][C] position embedding */
    const float *lnf_w;        /**< final LayerNorm gain [C] */
    const float *lnf_b;        /**< final LayerNorm shift [C] */
    const int *tokens;         /**< [M] each sequence's token (unused with prev_best) */
    unsigned long long *prev_best; /**< NULL, or [M] the step before's argmax keys: the tokens are read from them on
                                        the GPU (steps queued ahead, engine_generate). v5 zeroes them as it ends: they
                                        are the keys the step after writes */
    int *fed_tokens;           /**< NULL, or [M]: block 0 writes there the tokens the step was fed */
    const int *positions;      /**< [M] its position */
    const int64_t *slots;      /**< [M] its slot in the page pools */
    const int *tables;         /**< [M][max_pages] block tables */
    const int *lens;           /**< [M] context lengths, the new token included */
    int max_pages;             /**< columns of tables */
    int block_size;            /**< tokens per page (v5: a power of 2) */
    void *x;                   /**< [M][C] the residual stream (scratch) */
    void *q;                   /**< [M][C] queries (scratch) */
    void *att;                 /**< [M][C] attention output (scratch; v5: x + proj, fc-proj's residual) */
    void *hidden;              /**< [M][4C] the MLP's hidden layer (scratch) */
    void *logits;              /**< [M][ldy] */
    int ldy;                   /**< row pitch of logits (>= V) */
    unsigned long long *best;  /**< [M] argmax keys (argmax_key.h); the kernel zeroes them (v5: the launcher, with a
                                    memset, unless best_zeroed) */
    int best_zeroed;           /**< v5: best is zero already (engine_generate: the queued v5 step before zeroed it
                                    as it ended) */
    unsigned *barrier;         /**< v3, v4: one counter for the grid barriers; the launcher zeroes it, unless... */
    int barrier_zeroed;        /**< ... the caller did (engine_generate: the queued steps' counters, in one memset) */
    unsigned ring_chunks;      /**< v4, v5: the ring's capacity in 16-byte chunks (the launcher sets it) */
    unsigned long long *trace; /**< NULL, or [blocks][5·L + 1][4]: when each block starts each phase, ends it, has
                                    its rows ready and its dot products done (globaltimer, ns) */
    float *att_parts;          /**< v4: the split attention's parts, decode_att_parts_floats(H) floats */
    unsigned *tagged;          /**< v5: [DECODE_TAGGED_WORDS(L, C)] the tagged rows, zeroed once (tag 0 is never a
                                    step's) */
    long long *tagged_acc;     /**< v5: [2][L][C] proj's sums with their counts, zeroed once: a step uses half
                                    epoch & 1 and zeroes the other half for the step after */
    unsigned *epoch;           /**< v5: the steps so far (one counter; the step's block 0 adds 1 as it ends) */
} decode_step_args;

/** @brief v4: most blocks that share one (sequence, head) pair's attention. */
#define ATT_MAX_SPLITS 4
/** @brief v4: most rows at which attention is split (at 5-8 the pairs already keep 60-96 blocks busy). */
#define ATT_SPLIT_MAX_ROWS 4
/** @brief v4: floats of one head's part of a split: its 64 unnormalised outputs, its running max and sum, and 2 of
 *         padding (16-byte rows). */
#define ATT_PART_FLOATS (DECODE_STEP_HEAD_DIM + 4)
/** @brief v4: the floats of decode_step_args.att_parts for H heads: [rows][splits][H][ATT_PART_FLOATS]. */
static inline long long decode_att_parts_floats(int H)
{
    return (long long)ATT_SPLIT_MAX_ROWS * ATT_MAX_SPLITS * H * ATT_PART_FLOATS;
}

/** @brief v5: 1.0 in proj's fixed point (2^32). */
#define DECODE_PROJ_FIXED_ONE 4294967296.0f
/** @brief v5: the most heads (fc's rows hold a part of each in registers; the sums' count has 4 bits). */
#define DECODE_MERGED_MAX_HEADS 12

/** @brief v5: words of decode_step_args.tagged: x before each layer and after the last, [L + 1][C]; each layer's
 *         q/k/v, [L][3C]; and its hidden layer, [L][4C]. Every buffer is written once a step, so no word is written
 *         twice between two steps' reads. */
#define DECODE_TAGGED_WORDS(L, C) ((long long)(8 * (L) + 1) * (C))
/** @brief v5: int64 of decode_step_args.tagged_acc: two halves of [L][C]. */
#define DECODE_TAGGED_ACC(L, C) (2LL * (L) * (C))
/** @brief v5: the largest part tagged_acc takes (2^18): a part times 2^32, shifted left past the 8 bits of the count,
 *         is under 2^58, and H <= 12 of them under 2^62. */
#define DECODE_PROJ_TAGGED_PART_MOST 262144.0f

/**
 * @brief The persistent step's variants, each a kernel of its own (its file
 *        says what it adds). For each: the dynamic shared memory one block
 *        needs for a->M rows, or 0 when it cannot take these sizes (compare
 *        with the GPU's limit); and the launch (one cooperative kernel, after
 *        a memset of its barrier counter or, in v5, of its argmax keys),
 *        NULL or why not.
 */
size_t gpt2_step_persistent_smem(wb_dtype dtype, const decode_step_args *a);
/** @brief v3 (decode_persistent.cu): the step as one kernel, its blocks meeting at grid barriers. */
const char *gpt2_step_persistent(wb_dtype dtype, const decode_step_args *a);
/** @brief v4's dynamic shared memory for a->M rows (the ring's smallest size included), or 0. */
size_t gpt2_step_ring_smem(wb_dtype dtype, const decode_step_args *a);
/** @brief v4 (decode_ring.cu): v3 with every weight, the LM head's too, brought by the copy engine into a ring in
 *         shared memory, evict-first in L2 (sm_90). */
const char *gpt2_step_ring(wb_dtype dtype, const decode_step_args *a);
/** @brief v5's dynamic shared memory (1 row, fp16), or 0 where it cannot take the step. */
size_t gpt2_step_tagged_smem(wb_dtype dtype, const decode_step_args *a);
/** @brief v5 (decode_tagged.cu): v4 at 1 row with attention and proj in one phase by head and no grid barriers, the
 *         rows tagged with the step (fp16, sm_90). */
const char *gpt2_step_tagged(wb_dtype dtype, const decode_step_args *a);

/** @brief The fewest rows (1, 2, 4 or 8) a kernel instantiated for a number of rows must take to hold M. */
static inline int decode_rows_for(int M) { return M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8; }

#ifdef __cplusplus
}
#endif

#endif /* STAGE10_KERNELS_H */
