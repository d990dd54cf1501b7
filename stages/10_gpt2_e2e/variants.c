/**
 * @file stages/10_gpt2_e2e/variants.c
 * @brief Stage 10's decode variants: their ids, what each adds (the tables' line), what each needs (the --help line),
 *        and the (variant, precision) cases a run chooses. The program (main.c) and the bench (bench.c) read them;
 *        engine_init() says whether this GPU and precision take one.
 */
#include "stage10.h"

const char *const variant_ids[] = {"v1", "v2", "v3", "v4", "v5", "v6", "v7", "ex", NULL};
const char *const variant_what[] = {"layer by layer: stages 03-09's kernels",
                                    "v1 + the fused decode linear (LayerNorm, epilogue in the GEMV)",
                                    "v2's step as one persistent kernel (grid barriers)",
                                    "v3 + the weights by the copy engine into a ring in smem",
                                    "v4 + the LM head through the ring, weights evict-first in L2",
                                    "v5 + attention and proj in one phase at batch 1",
                                    "v6 + no grid barriers: the rows tagged with the step",
                                    "your decode linear (exercise.cu)"};
/** One line each for --help: the idea, the hardware, the problems it takes. */
const char *const variant_help[] = {
    "layer by layer from stages 03-09's kernels; a small-M linear at decode (sm_75)",
    "v1 + the fused decode linear: LayerNorm, bias, GELU, residual, K/V append, argmax in the GEMV (sm_75)",
    "v2's decode step as one persistent kernel, its blocks meeting at grid barriers (sm_75; 1-8 sequences)",
    "v3 + the weights brought by the copy engine into a ring in shared memory (sm_90)",
    "v4 + the LM head through the ring, the weights evict-first in L2; fp16 tensor cores at 4-8 sequences (sm_90)",
    "v5 + attention and proj in one phase at batch 1 (fp16, sm_90; other steps run v5's kernel)",
    "v6 + no grid barriers: each output tagged with the step, each phase polls its rows (fp16, sm_90)",
    "your kernel: the decode linear with its LayerNorm, in exercise.cu; --check and --bench only (fp32, sm_75)"};

int chosen_cases(int variant, int dtype_choice, run_case *cases)
{
    int n = 0;
    for (int v = 0; v < N_VARIANTS; ++v)
        for (int f = 0; f < 2; ++f)
            if ((variant < 0 || variant == v) && (dtype_choice == 0 || dtype_choice == 1 + f))
                cases[n++] = (run_case){v, f ? WB_F16 : WB_F32};
    return n;
}
