/**
 * @file stages/10_gpt2_e2e/engine_internal.h
 * @brief What the engine's three files (engine.c, engine_forward.c,
 *        engine_decode.c) share and nothing else includes: the error
 *        propagation and the forward pass's pieces.
 */
#ifndef STAGE10_ENGINE_INTERNAL_H
#define STAGE10_ENGINE_INTERNAL_H

#include "04_fused_gelu_linear/kernels.h" /* gelu_kind */
#include "engine.h"

/** Propagate a launcher's refusal. */
#define TRY(call)                         \
    do {                                  \
        const char *why_ = (call);        \
        if (why_) return why_;            \
    } while (0)

/** With profiling on: wait for the GPU and charge the time since the last mark to `bucket`. */
void engine_charge(gpt2_engine *e, double *bucket, double *mark);
/** Y = X·W + b (and GELU) for M rows: this stage's small-M kernel up to 8 rows, its skinny linear up to 64 (fp16,
 *  sm_80+), stage 04's linear above. */
const char *engine_linear(gpt2_engine *e, const void *X, const void *W, const float *b, void *Y, int M, int N, int K,
                          gelu_kind g);
/** Stage 05's LayerNorm of `rows` rows of x into y. */
const char *engine_layernorm(gpt2_engine *e, const void *x, const float *w, const float *b, void *y, int rows);
/** Block l before attention, for `rows` rows (kernel by kernel): LayerNorm, then QKV. */
const char *engine_block_head(gpt2_engine *e, int l, int rows, double *mark);
/** The rest of block l after attention, for `rows` rows (kernel by kernel): proj, residual, LayerNorm, MLP. */
const char *engine_block_tail(gpt2_engine *e, int l, int rows, double *mark);
/** `rows` rows of the logits buffer to the host as fp32, [rows][V]. */
void engine_logits_to_host(const gpt2_engine *e, const void *src, int rows, float *dst);

#endif /* STAGE10_ENGINE_INTERNAL_H */
