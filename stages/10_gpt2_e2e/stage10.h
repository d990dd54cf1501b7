/**
 * @file stages/10_gpt2_e2e/stage10.h
 * @brief What stage 10's program files share: its variants (variants.c), the
 *        (variant, precision) cases a run chooses, the check (check.c) and
 *        the bench (bench.c).
 */
#ifndef STAGE10_H
#define STAGE10_H

#include "args.h"
#include "device.h"
#include "dtype.h"
#include "model.h"

/** @brief The decode variants (engine_init's variant is the index + 1), then the exercise slot's index: `--variant ex`
 *         is the decode linear alone of exercise.cu (its rows are among the linear checks and the bench's). */
enum { N_VARIANTS = 5, EXERCISE_VARIANT = N_VARIANTS };
/** @brief Their ids, "v1" … "v5", "ex", then NULL: decode_paths[]'s (engine.h, variants.c), for the argument parser. */
extern const char *variant_ids[];
/** @brief One line each for --help: the idea, the hardware, the problems it takes. */
extern const char *variant_help[];
/** @brief Fill the two lists above from decode_paths[]; main() calls it before parsing its arguments. */
void variants_init(void);

/** @brief One (variant, precision) pair the program runs. */
typedef struct {
    int v;          /**< variant index (v1 is 0) */
    wb_dtype dtype; /**< storage */
} run_case;

/** @brief The cases --variant (-1: all) and --dtype (0 all, 1 fp32, 2 fp16) choose, in teaching order, each
 *         variant's fp32 first, into cases[2·N_VARIANTS]; how many. */
int chosen_cases(int variant, int dtype_choice, run_case *cases);

/** @brief --check (check.c) for the cases --variant and --dtype choose: on tiny random models, the full-size random
 *         model with check_full, and `file_model` (the --weights file `weights`) where one is given; 1 when every check
 *         passed. */
int stage10_check(const gpt2_model *file_model, const char *weights, int check_full, const wb_common_opts *opt,
                  int dtype_choice);

/** @brief --bench for the cases chosen, the table printed and, with --csv, written; 1 when every row ran. */
int stage10_bench(const wb_device *dev, const gpt2_model *m, const wb_common_opts *opt, int dtype_choice);

#endif /* STAGE10_H */
