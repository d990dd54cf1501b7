/**
 * @file report.h
 * @brief The results table every stage prints, and the CSV the plots read.
 *
 * Rows are printed as they are added, in teaching order (v1, v2, …, then the
 * peer): the progression is the lesson, so rows are never sorted by speed. Each
 * table is one problem at one size and starts with a title line naming both; a
 * column with no value (no roof, no v1 to compare with) prints `-`, never
 * `nan`, and is left empty in the CSV. One CSV schema serves all stages:
 *
 *     gpu,stage,problem,size,variant,name,peer,time_ms,time_ms_min,time_ms_max,
 *     throughput,unit,roof,pct_roof,speedup_vs_v1,max_err,err_over_tol,ok,
 *     x_peer,bytes,flops
 *
 * Two ratios, never mixed: `pct_roof` is the throughput as a percentage of a
 * physical roof (the copy bandwidth measured at start, a decode step's bytes at
 * that bandwidth), and `x_peer` the throughput over the library peer's, measured
 * in the same run ("× peer": stages 03, 04, 06 and stage 10's prefill). `bytes`
 * and `flops` are the work the variant must do by the stage's model (the bytes
 * it must move, read plus written, and the arithmetic): the two coordinates of
 * its point on a roofline chart.
 */
#ifndef WB_REPORT_H
#define WB_REPORT_H

#include <stdio.h>

#include "timing.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief How a row ended. */
typedef enum {
    WB_ROW_RAN,      /**< checked and timed */
    WB_ROW_SKIPPED,  /**< the GPU lacks what the variant needs ("skipped: needs sm_80") */
    WB_ROW_REJECTED  /**< the variant's contract excludes this problem (its launcher said why) */
} wb_row_status;

/** @brief One variant on one problem. */
typedef struct {
    const char *problem;  /**< groups rows: "sum, fp32 input" */
    const char *size;     /**< "n=134217728" */
    const char *variant;  /**< "v3", or the peer's id */
    const char *what;     /**< one line: what it does */
    int is_peer;          /**< a library, shown as the peer */
    wb_row_status status; /**< ran, skipped or rejected */
    const char *note;     /**< why skipped or rejected */
    wb_timing time;       /**< median, min, max */
    double throughput;    /**< in `unit` */
    const char *unit;     /**< "GB/s" or "TFLOP/s" */
    double roof;          /**< a physical roof in `unit` (the copy bandwidth; 0: none) */
    double peer;          /**< the library peer's throughput in `unit`, this run (0: none): the "× peer" column */
    double bytes;         /**< bytes the variant must move, read + written, by the stage's model (0: not counted) */
    double flops;         /**< floating-point operations it must do (0: none, a copy) */
    double max_err;       /**< worst |got - ref| */
    double err_over_tol;  /**< worst error as a fraction of its tolerance */
    int ok;               /**< both checks (before and after timing) passed */
} wb_row;

/** @brief A table in progress (at most 256 rows). */
typedef struct {
    const char *stage;     /**< "stage01" */
    const char *gpu;       /**< device name */
    FILE *out;             /**< where the table is printed */
    int n_rows;            /**< rows so far */
    wb_row rows[256];      /**< the rows; problem, size and note point into `text` */
    char text[256][3][96]; /**< copies of each row's problem, size and note */
    char speedup_base[256]; /**< the current table (problem and size), whose v1 is `v1_ms` */
    double v1_ms;          /**< time of v1 of the current problem */
} wb_report;

/** @brief Start a report; rows will be printed to `out`. */
void wb_report_begin(wb_report *r, const char *stage, const char *gpu, FILE *out);
/** @brief Add a row (its strings are copied) and print it, under a header when the problem changes. */
void wb_report_add(wb_report *r, const wb_row *row);
/**
 * @brief Write all rows as CSV to `path` (NULL: nothing).
 * @return 0, or -1 when the file cannot be written (a message is printed)
 */
int wb_report_write_csv(const wb_report *r, const char *path);
/**
 * @brief End of a stage's timed run: write the CSV (if `csv_path`), print whether
 *        every variant matched its reference, and name a peer row that did not run.
 * @return 1 when wb_report_all_ok() and the CSV was written
 */
int wb_report_finish(const wb_report *r, const char *csv_path);
/** @brief 1 when every row that ran passed its checks and every peer row ran (a peer row that prints a skip
 *         message instead of a time fails the run: the table's "x peer" would be empty). */
int wb_report_all_ok(const wb_report *r);

#ifdef __cplusplus
}
#endif

#endif /* WB_REPORT_H */
