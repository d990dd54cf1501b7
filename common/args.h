/**
 * @file args.h
 * @brief Command-line parsing shared by every stage program: the common options
 *        (`--check`, `--variant`, `--iters`, `--seed`, `--csv`, …) plus a table of
 *        the stage's own, with one-line errors that say what is allowed (exit 2).
 *
 * Parsing never touches the GPU, so bad arguments are reported the same way on a
 * machine without one.
 */
#ifndef WB_ARGS_H
#define WB_ARGS_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Exit code for bad arguments. */
#define WB_EXIT_USAGE 2

/** @brief What kind of value an option takes. */
typedef enum {
    WB_OPT_FLAG,   /**< no value; dest is an int set to 1 */
    WB_OPT_INT,    /**< `count` integers in [min, max]; dest is long long[count] */
    WB_OPT_CHOICE, /**< one word of `choices`; dest is an int set to its index */
    WB_OPT_STRING  /**< any text; dest is a const char* */
} wb_opt_kind;

/** @brief One option of a stage's own table. */
typedef struct {
    const char *name;            /**< "--n" */
    const char *metavar;         /**< shown in --help: "N" */
    const char *help;            /**< one line for --help */
    wb_opt_kind kind;            /**< what it takes */
    void *dest;                  /**< where the value goes (see wb_opt_kind) */
    int count;                   /**< WB_OPT_INT: how many integers follow (1; 3 for --size M N K) */
    long long min;               /**< WB_OPT_INT: smallest allowed */
    long long max;               /**< WB_OPT_INT: largest allowed */
    const char *const *choices;  /**< WB_OPT_CHOICE: NULL-terminated words */
} wb_option;

/** @brief Who is parsing: the program's name, its one-line summary, its variants. */
typedef struct {
    const char *name;                /**< "stage01_vector_add" */
    const char *summary;             /**< "c = a + b, fp32 and fp16" */
    const char *const *variant_ids;  /**< NULL-terminated ids for --variant: "v1", …, "cub" */
    const char *const *variant_help; /**< NULL, or one line per id for --help: the variant's idea, the hardware it
                                          needs, the problems it takes */
    const char *no_options;          /**< NULL, or what the program does with no options, where it is not the
                                          stages' default (every variant checked and timed) */
} wb_program;

/** @brief The options every stage program takes. */
typedef struct {
    int check;            /**< --check: correctness only, over the sweep of sizes */
    int variant;          /**< --variant K: index into variant_ids; -1 = all */
    long long iters;      /**< --iters N: timed runs per variant (default 50) */
    long long warmup;     /**< --warmup N: untimed runs first (default 5) */
    long long seed;       /**< --seed S: the random inputs' seed */
    const char *csv;      /**< --csv FILE: results for the plots; NULL: none */
    long long check_max;  /**< --check-max N: leave sizes above N out of the --check sweep (sanitizer runs) */
} wb_common_opts;

/** @brief Results of wb_parse_args. */
enum { WB_ARGS_OK = 0, WB_ARGS_HELP = 1, WB_ARGS_ERROR = 2 };

/**
 * @brief Parse argv into `common` and the stage's `extra` options.
 * @param argc, argv the program's arguments
 * @param prog    the program (its variants, for --variant)
 * @param common  receives the common options (defaults for those not given)
 * @param extra   the stage's own options; their `dest` receive the values
 * @param n_extra how many
 * @param err     receives a one-line message on WB_ARGS_ERROR
 * @param err_len its size
 * @return WB_ARGS_OK, WB_ARGS_HELP (--help seen) or WB_ARGS_ERROR
 */
int wb_parse_args(int argc, char **argv, const wb_program *prog, wb_common_opts *common,
                  const wb_option *extra, int n_extra, char *err, size_t err_len);

/** @brief Print --help: the summary, the common options, the stage's, the variants, exit codes. */
void wb_print_usage(FILE *out, const wb_program *prog, const wb_option *extra, int n_extra);

/**
 * @brief wb_parse_args for main(): --help prints usage and exits 0; an error prints
 *        `<program>: <message>` and a hint, and exits WB_EXIT_USAGE (2).
 */
void wb_parse_args_or_exit(int argc, char **argv, const wb_program *prog, wb_common_opts *common,
                           const wb_option *extra, int n_extra);

/**
 * @brief A usage error a stage finds after parsing (sizes that do not fit together,
 *        options that need each other): print `<program>: <message>` and the hint to
 *        try --help, as the parser does, and exit WB_EXIT_USAGE (2).
 * @param prog the program
 * @param fmt  printf-style message, without the program name or a newline
 */
void wb_usage_error_exit(const wb_program *prog, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3), noreturn))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif /* WB_ARGS_H */
