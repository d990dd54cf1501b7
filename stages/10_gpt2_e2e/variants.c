/**
 * @file stages/10_gpt2_e2e/variants.c
 * @brief Stage 10's decode variants: their ids, what each adds (the tables' line), what each needs (the --help line),
 *        and the (variant, precision) cases a run chooses. The program (main.c, check.c) and the bench (bench.c)
 *        read them; engine_init() says whether this GPU and precision take one.
 */
#include "stage10.h"

#include "engine.h"

/** @brief Why v4 and v5 need sm_90 (the message where the GPU lacks it). */
#define RING_NEEDS "the weight ring (v4, v5) needs sm_90: the copy engine's bulk copies"

/* The variants in teaching order: each row is what the variant adds over the one before and what its engine sets
 * up; engine_init() reads the row, the program and the bench walk the table. */
const decode_path decode_paths[N_VARIANTS] = {
    {.id = "v1", .what = "layer by layer: stages 03-09's kernels",
     .help = "layer by layer from stages 03-09's kernels; a small-M linear at decode (sm_75); 1-64 sequences in fp16 "
             "from sm_80: the skinny linear (tensor cores)",
     .min_cc = 75},
    {.id = "v2", .what = "v1 + the fused decode linear (LayerNorm, epilogue in the GEMV)",
     .help = "v1 + the fused decode linear: LayerNorm, bias, GELU, residual, K/V append, argmax in the GEMV (sm_75); "
             "3-64 sequences in fp16 from sm_80: tensor cores, QKV, proj, fc and the head with these epilogues in the "
             "kernel (QKV's and fc's LayerNorm folded into their weights), fc-proj's in the skinny linear's second pass",
     .min_cc = 75, .fused_linears = 1},
    {.id = "v3", .what = "v2's step as one persistent kernel (grid barriers)",
     .help = "v2's decode step as one persistent kernel, its blocks meeting at grid barriers (sm_75; 1-8 sequences, "
             "more run v2's kernels)",
     .min_cc = 75, .fused_linears = 1, .step = gpt2_step_persistent, .step_smem = gpt2_step_persistent_smem},
    {.id = "v4", .what = "v3 + every weight by the copy engine into a ring in smem, evict-first in L2",
     .help = "v3 + every weight, the LM head's too, brought by the copy engine into a ring in shared memory, "
             "evict-first in L2; fp16 tensor cores at 4-8 sequences (sm_90)",
     .min_cc = 90, .min_cc_why = RING_NEEDS, .fused_linears = 1, .step = gpt2_step_ring,
     .step_smem = gpt2_step_ring_smem, .split_attention = 1},
    {.id = "v5", .what = "v4 + attention and proj in one phase, no grid barriers: rows tagged with the step",
     .help = "v4 + attention and proj in one phase by head, no grid barriers: each output tagged with the step, each "
             "phase polls its rows; a batch-1 variant: steps of 2-8 sequences run v4's kernel (fp16, sm_90)",
     .min_cc = 90, .min_cc_why = RING_NEEDS, .fp16_only = 1, .fused_linears = 1, .step = gpt2_step_ring,
     .step_smem = gpt2_step_ring_smem, .one_row_step = gpt2_step_tagged, .one_row_smem = gpt2_step_tagged_smem,
     .one_row_setup = gpt2_tagged_setup, .one_row_args = gpt2_tagged_args, .one_row_free = gpt2_tagged_free,
     .split_attention = 1, .tagged = 1},
};

/* The argument parser's lists (args.h wants arrays of strings): the table's ids and help lines, then the
 * exercise slot's, filled from decode_paths[] by variants_init(). */
const char *variant_ids[N_VARIANTS + 2];
const char *variant_help[N_VARIANTS + 1];

void variants_init(void)
{
    for (int v = 0; v < N_VARIANTS; ++v)
        variant_ids[v] = decode_paths[v].id, variant_help[v] = decode_paths[v].help;
    variant_ids[EXERCISE_VARIANT] = "ex";
    variant_help[EXERCISE_VARIANT] =
        "your kernel: the decode linear with its LayerNorm, in exercise.cu; --check and --bench only (fp32, sm_75)";
    variant_ids[EXERCISE_VARIANT + 1] = NULL;
}

int chosen_cases(int variant, int dtype_choice, run_case *cases)
{
    int n = 0;
    for (int v = 0; v < N_VARIANTS; ++v)
        for (int f = 0; f < 2; ++f)
            if ((variant < 0 || variant == v) && (dtype_choice == 0 || dtype_choice == 1 + f))
                cases[n++] = (run_case){v, f ? WB_F16 : WB_F32};
    return n;
}
