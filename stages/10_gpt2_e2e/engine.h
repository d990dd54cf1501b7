/**
 * @file stages/10_gpt2_e2e/engine.h
 * @brief GPT-2 on the GPU, assembled from the earlier stages' kernels: prefill
 *        of several prompts, then batched greedy decode through the paged KV
 *        cache.
 *
 * One forward of a block, and where each step comes from:
 *
 *     ln   = LayerNorm(x)                      stage 05 (v3)
 *     qkv  = ln·W_qkv + b                      stage 04 (stage 03's GEMM + bias epilogue)
 *     q, k, v split by head                    this stage
 *     prefill: att = FlashAttention(q, k, v)   stage 06 (fp32: v3; fp16: v5, or v4 before sm_80)
 *     K, V appended to the paged cache         stage 08 (append v2)
 *     decode:  att = paged attention           stage 09 (v3, split-K)
 *     x   += att·W_proj + b                    stage 04
 *     ln   = LayerNorm(x)                      stage 05
 *     x   += GELU(ln·W_fc + b)·W_fcproj + b    stage 04 (bias + GELU fused), stage 04
 *
 * then a final LayerNorm, logits = x·wteᵀ (stage 04 on a transposed copy of
 * wte) and the argmax. A decode step has only a few rows: v1's linear layers
 * use this stage's small-M kernel instead of a tiled GEMM (see kernels.h);
 * v2 fuses each with its neighbours (LayerNorm before, bias, GELU, residual
 * add or the K/V append after, the argmax into the LM head), 4 kernels and
 * stage 09's attention per block; v3-v5 run the whole step as one persistent
 * kernel (kernels.h lists them). Activations and matrices are stored in the
 * chosen precision (fp32, or fp16 with fp32 accumulation); LayerNorm
 * parameters and biases stay fp32.
 */
#ifndef STAGE10_ENGINE_H
#define STAGE10_ENGINE_H

#include <stdint.h>

#include "block_manager.h"
#include "dtype.h"
#include "kernels.h" /* decode_step_args */
#include "gpt2.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Tokens per KV page. */
#define ENGINE_BLOCK_SIZE 16

/** @brief Time spent per kind of kernel (filled when profiling is on; milliseconds). */
typedef struct {
    double layernorm;  /**< stage 05 */
    double linear;     /**< stage 04: QKV, projection, MLP */
    double attention;  /**< stage 06 (prefill) or 09 (decode), with the Q/K/V split and head merge */
    double kv_append;  /**< stage 08 */
    double lm_head;    /**< logits GEMM and argmax */
    double other;      /**< embedding, residual adds */
    double whole_step; /**< v3-v5: the decode step's one persistent kernel (it cannot be split by kind) */
} engine_profile;

/** @brief A decode step's inputs: views of one block of memory, so that one copy uploads them all. */
typedef struct {
    int64_t *slots; /**< [max_seqs] each sequence's slot for its new token */
    int *tokens;    /**< [max_seqs] the tokens */
    int *positions; /**< [max_seqs] their positions */
    int *lens;      /**< [max_seqs] context lengths, the new token included */
    int *tables;    /**< [max_seqs][max_pages_per_seq] block tables (the last field: a step uploads up to its n rows) */
} engine_step_inputs;

/** @brief Steps engine_generate queues on the GPU before it waits for them: the inputs of this many steps are
 *         worked out and uploaded together. */
#define ENGINE_QUEUE_STEPS 32

/** @brief A persistent step's launcher (kernels.h: gpt2_step_*): NULL, or why it cannot take the step. */
typedef const char *(*decode_step_fn)(wb_dtype dtype, const decode_step_args *a);
/** @brief A persistent step's dynamic shared memory (0: it cannot take the step). */
typedef size_t (*decode_step_smem_fn)(wb_dtype dtype, const decode_step_args *a);

struct gpt2_engine;

/**
 * @brief One decode variant: what it adds and what its engine sets up. The table of them, decode_paths[] (v1 …
 *        v5, in teaching order), is in variants.c; the program and the bench walk it, and engine_init() reads the
 *        row it is given, never a variant number.
 */
typedef struct {
    const char *id;                  /**< "v1" … "v5" */
    const char *what;                /**< one line for the tables: what it adds */
    const char *help;                /**< one line for --help: the idea, the hardware, the problems it takes */
    int min_cc;                      /**< compute capability it needs, 10·major + minor (75: a T4) */
    const char *min_cc_why;          /**< what of that GPU it needs, for the message when the GPU lacks it */
    int fp16_only;                   /**< 1: fp16 storage only */
    int fused_linears;               /**< 1: v2's fused decode linears take the steps no persistent kernel takes */
    decode_step_fn step;             /**< the persistent kernel of every step of 1-8 sequences, or NULL (v1, v2) */
    decode_step_smem_fn step_smem;   /**< its shared memory */
    decode_step_fn one_row_step;     /**< the kernel of the steps of 1 sequence (v5), or NULL: `step` takes them */
    decode_step_smem_fn one_row_smem; /**< its shared memory */
    const char *(*one_row_setup)(struct gpt2_engine *e, const gpt2_model *m); /**< the one-row step's own weights and
                                          buffers, beside its kernel (v5: decode_tagged.cu), into e->one_row_state */
    void (*one_row_args)(const struct gpt2_engine *e, decode_step_args *a); /**< its arguments beyond the shared ones */
    void (*one_row_free)(struct gpt2_engine *e); /**< frees e->one_row_state */
    int split_attention;             /**< 1: attention split over the idle blocks at 1-4 rows (v4, v5) */
    int tagged;                      /**< 1: its one-row steps zero the argmax keys of the step after them (v5) */
} decode_path;

/** @brief The decode variants, v1 … v5 in teaching order (variants.c). */
extern const decode_path decode_paths[];

/** @brief The model on the GPU, its KV cache and its scratch buffers. */
typedef struct gpt2_engine {
    gpt2_config cfg;        /**< sizes */
    wb_dtype dtype;         /**< storage of matrices, activations and the KV cache */
    int max_seqs;           /**< sequences served at once */
    int max_tokens;         /**< most rows one forward takes (Σ prompt lengths of a prefill) */
    int vocab_padded;       /**< V rounded up to a multiple of 8: the LM head's columns (stage 03's tensor-core GEMM needs it) */
    void *wte;                /**< [V][C] token embedding */
    void *wpe;                /**< [max_T][C] position embedding */
    void *wte_t;              /**< [C][vocab_padded] wte transposed for the LM head (zero columns past V) */
    void **qkv_w;             /**< per layer: [C][3C] */
    void **proj_w;            /**< per layer: [C][C] */
    void **fc_w;              /**< per layer: [C][4C] */
    void **fcproj_w;          /**< per layer: [4C][C] */
    float **qkv_b;            /**< per layer, fp32 */
    float **proj_b;           /**< per layer, fp32 */
    float **fc_b;             /**< per layer, fp32 */
    float **fcproj_b;         /**< per layer, fp32 */
    float **ln1_w;            /**< per layer, fp32 */
    float **ln1_b;            /**< per layer, fp32 */
    float **ln2_w;            /**< per layer, fp32 */
    float **ln2_b;            /**< per layer, fp32 */
    float *lnf_w;             /**< final LayerNorm gain, fp32 */
    float *lnf_b;             /**< final LayerNorm shift, fp32 */
    kv_block_manager kv;      /**< stage 08's block manager: pages, tables, lengths (one for all layers) */
    void **k_pool;            /**< per layer: [num_pages][H][block_size][d] */
    void **v_pool;            /**< per layer: the same for V */
    void *x;                  /**< [rows][C] the residual stream */
    void *ln;                 /**< [rows][C] LayerNorm output */
    void *qkv;                /**< [rows][3C] */
    void *att;                /**< [rows][C] attention output */
    void *tmp;                /**< [rows][C] a linear layer's output before the residual add */
    void *hidden;             /**< [rows][4C] the MLP's hidden layer */
    void *logits;             /**< [rows][vocab_padded] */
    void *q_heads;            /**< [B][H][T][d] for stage 06 */
    void *k_heads;            /**< the same for K */
    void *v_heads;            /**< the same for V */
    void *o_heads;            /**< stage 06's output */
    void *q_rows;             /**< [rows][C] q for stage 09 */
    void *k_rows;             /**< [rows][C] new K rows for stage 08's append */
    void *v_rows;             /**< the same for V */
    float *lse;               /**< stage 06's log-sum-exp: its kernels write it (training keeps it), the engine never reads it */
    float *mean;              /**< stage 05's row means: written, as lse, never read here */
    float *rstd;              /**< stage 05's row 1/σ: the same */
    float *small_m_workspace; /**< the decode-time linear's partial sums */
    size_t small_m_floats;    /**< its size */
    void *decode_workspace;   /**< stage 09's partitions */
    size_t decode_workspace_bytes; /**< its size */
    int *decode_counters;     /**< stage 09's per-row counters (zero between launches) */
    int *d_tokens;            /**< device: the forward's tokens */
    int *d_positions;         /**< device: their positions */
    int *d_next;              /**< device: argmax per row */
    int64_t *d_slots;         /**< device: the slot mapping of a forward */
    int64_t *h_slots;         /**< host staging of a prefill's slots */
    engine_step_inputs step_h; /**< a decode step's inputs, pinned host memory */
    engine_step_inputs step_d; /**< the same on the device: uploaded with one copy per step */
    engine_step_inputs queue_h[2][ENGINE_QUEUE_STEPS]; /**< engine_generate: two queues' steps' inputs, pinned host
                                                            (one is worked out while the GPU runs the other) */
    engine_step_inputs queue_d[ENGINE_QUEUE_STEPS]; /**< a queue's steps' inputs on the device (one copy uploads them) */
    size_t queue_step_bytes;  /**< the bytes of one step's inputs in the queue (a multiple of 16) */
    int queue_steps;          /**< steps in one queue (1..ENGINE_QUEUE_STEPS; --check makes it small) */
    unsigned long long *d_queue_best; /**< [2][max_seqs] argmax keys: a queued step reads one, writes the other */
    int *d_fed;               /**< [ENGINE_QUEUE_STEPS][n] the tokens each queued step was fed */
    int *h_fed;               /**< [2][ENGINE_QUEUE_STEPS][max_seqs] pinned: two queues' d_fed, copied back */
    void *queue_done[2];      /**< cudaEvent_t: each queue's tokens are on the host */
    int linear_variant;       /**< index into stage 04's linear_variants */
    int skinny_linear;        /**< fp16 on sm_80+: 1-64 rows take this stage's skinny linear (a decode batch) */
    int layernorm_variant;    /**< index into stage 05's layernorm_variants */
    int attention_variant;    /**< index into stage 06's attention_variants */
    int decode_variant;       /**< index into stage 09's decode_variants */
    int kv_variant;           /**< index into stage 08's kv_variants (the K/V append) */
    engine_profile *profile;  /**< when not NULL: synchronise after each kind of kernel and add its time */
    int use_graphs;           /**< 1 (default): a decode step replays a CUDA graph of its kernels */
    const decode_path *path;  /**< the decode variant (engine_init): a row of decode_paths[] */
    int fused_decode;         /**< v2-v5: decode steps that no persistent kernel takes run v2's fused kernels (up to
                                   DECODE_MAX_ROWS sequences; up to 64 with skinny_linear) */
    int dependent_launch;     /**< v2 on sm_90: its kernels start as programmatic dependents of the one before */
    void **qkv_wt;            /**< v2-v5, per layer: qkv_w transposed, [3C][C] (each output's weights contiguous) */
    void **proj_wt;           /**< v2-v5, per layer: [C][C] */
    void **fc_wt;             /**< v2-v5, per layer: [4C][C] */
    void **fcproj_wt;         /**< v2-v5, per layer: [C][4C] */
    void **qkv_wt_folded;     /**< v2-v5 in fp16 on sm_80+ (v2's batch path, v5), per layer: qkv_wt with ln_1's gains
                                   folded in (gpt2_fold_layernorm); NULL past C = DECODE_BATCH_MAX_K */
    float **qkv_b_folded;     /**< the same: [2][3C], the bias with ln_1's shifts folded in, then each output's folded
                                   weights' sum */
    void **fc_wt_folded;      /**< the same for fc and ln_2: [4C][C] */
    float **fc_b_folded;      /**< [2][4C] */
    unsigned long long *d_best; /**< v2-v5: the LM head's argmax key per sequence */
    float *d_att_parts;       /**< v4, v5: the split attention's partial outputs (decode_step_args.att_parts) */
    void *one_row_state;      /**< the one-row step's own state (its row's one_row_setup), or NULL */
    int queued_step_tagged;   /**< v5: whether the last step engine_generate queued was v5's (which zeroes the keys
                                   of the step after it) */
    void *d_layers;           /**< v3-v5: the blocks' weights as the persistent step reads them (decode_layer_weights[L]) */
    unsigned *d_barrier;      /**< v3, v4: the grid barrier's counters: [0] engine_decode's, [1 + j] queued step j's */
    unsigned long long *d_trace; /**< v3-v5: when not NULL, steps launched outside a graph write their trace here
                                      (decode_step_args.trace: [SMs][5·L + 1][4]) */
    void *graph_exec;         /**< the instantiated graph (cudaGraphExec_t), for graph_n sequences */
    int graph_n;              /**< the batch size it was captured for */
} gpt2_engine;

/**
 * @brief Upload a model and allocate the cache for max_seqs sequences of up to
 *        max_T tokens and forwards of up to max_tokens rows.
 * @param e        the engine to fill
 * @param m        the model (host, fp32)
 * @param dtype    storage of matrices, activations and the KV cache
 * @param path     the decode variant, a row of decode_paths[] (variants.c: v1 the earlier stages' kernels … v5
 *        no grid barriers). Prefill is v1's in every variant.
 * @param max_seqs   sequences served at once (at most 64)
 * @param max_tokens most rows one forward takes (Σ prompt lengths of a prefill)
 * @return NULL, or why not (a variant this GPU lacks, out of memory)
 */
const char *engine_init(gpt2_engine *e, const gpt2_model *m, wb_dtype dtype, const decode_path *path, int max_seqs,
                        int max_tokens);

/** @brief Free everything. */
void engine_free(gpt2_engine *e);

/** @brief v5's own set-up, arguments and tear-down (decode_tagged.cu): its layer table with the LayerNorms folded
 *         into QKV's and fc's weights and proj's weights by head, the tagged rows, proj's counted sums, the steps'
 *         counter. */
const char *gpt2_tagged_setup(gpt2_engine *e, const gpt2_model *m);
/** @brief v5's step arguments: its layer table and buffers. */
void gpt2_tagged_args(const gpt2_engine *e, decode_step_args *a);
/** @brief Frees what gpt2_tagged_setup made. */
void gpt2_tagged_free(gpt2_engine *e);

/**
 * @brief Prefill: start sequences `seqs` with their prompts (concatenated in
 *        `tokens`, lengths in `lens`), fill their KV cache, and return the
 *        greedy next token of each in `next`.
 * @param e      the engine
 * @param n      sequences
 * @param seqs   their ids (new)
 * @param tokens the prompts, one after another
 * @param lens   their lengths
 * @param next   receives n tokens
 * @param all_logits when not NULL, receives the logits of every prompt position ([Σ lens][V], host, fp32)
 * @return NULL, or why not (too many tokens, a full pool, an unknown sequence)
 */
const char *engine_prefill(gpt2_engine *e, int n, const int *seqs, const int *tokens, const int *lens, int *next,
                           float *all_logits);

/**
 * @brief One decode step: each sequence in `seqs` takes its token from
 *        `tokens` (at the next position), attends through the paged cache, and
 *        gets its greedy next token in `next`.
 * @param e      the engine
 * @param n      sequences
 * @param seqs   their ids (live)
 * @param tokens one token each
 * @param next   receives n tokens
 * @param logits when not NULL, receives the step's logits ([n][V], host, fp32)
 */
const char *engine_decode(gpt2_engine *e, int n, const int *seqs, const int *tokens, int *next, float *logits);

/**
 * @brief Greedy decode of `steps` steps, each step's tokens fed from the step
 *        before on the GPU. With the persistent step (v3-v5) or a step's CUDA
 *        graph, the host works out and uploads the inputs of up to
 *        queue_steps steps (slots, block tables: they do not depend on the
 *        tokens) and queues their kernels; it works out and queues the next
 *        queue before it waits for this one's tokens, so the GPU runs all the
 *        steps back to back. Otherwise (kernel by kernel, or profiled) it is a
 *        loop of engine_decode.
 * @param e      the engine (queue_steps 1..ENGINE_QUEUE_STEPS)
 * @param n      sequences
 * @param seqs   their ids (live, each with room for `steps` more tokens in the context)
 * @param tokens one token each, fed to the first step
 * @param steps  steps to decode
 * @param out    receives [steps][n] tokens: the token each step chose for each sequence
 * @return NULL, or why not; after an error (a full page pool) the sequences may have pages for steps that did not
 *         run: release them
 */
const char *engine_generate(gpt2_engine *e, int n, const int *seqs, const int *tokens, int steps, int *out);

/** @brief Whether a decode step of n sequences runs as one persistent kernel (v3-v5, and its rows fit in a block's
 *         shared memory; otherwise v2's kernels take it). */
int engine_persistent_step(const gpt2_engine *e, int n);

/** @brief The variant whose kernels run a decode step of n sequences on this engine: its own, or v1's (v2-v5 over 8
 *         sequences where the skinny linear does not run: fp32, or before sm_80), v2's (rows a persistent step cannot
 *         hold), v4's (v5's steps of 2-8 sequences). A row of a table names the kernel that ran. */
const decode_path *engine_step_path(const gpt2_engine *e, int n);

/** @brief End a sequence: its pages go back to the pool. */
void engine_release(gpt2_engine *e, int seq);

#ifdef __cplusplus
}
#endif

#endif /* STAGE10_ENGINE_H */
