/** @file report.c @brief Table printing and the CSV writer. */
#include "report.h"

#include <math.h>
#include <string.h>

void wb_report_begin(wb_report *r, const char *stage, const char *gpu, FILE *out)
{
    memset(r, 0, sizeof *r);
    r->stage = stage;
    r->gpu = gpu;
    r->out = out;
}

static double speedup_of(const wb_report *r, const wb_row *row)
{
    return row->status == WB_ROW_RAN && r->v1_ms > 0 ? r->v1_ms / row->time.median_ms : NAN;
}

static double pct_of_roof(const wb_row *row)
{
    return row->status == WB_ROW_RAN && row->roof > 0 && isfinite(row->roof) ? 100.0 * row->throughput / row->roof
                                                                              : NAN;
}

static double times_peer(const wb_row *row)
{
    return row->status == WB_ROW_RAN && row->peer > 0 && isfinite(row->peer) ? row->throughput / row->peer : NAN;
}

/** The table a row belongs to: its problem and its size. */
static void table_key(char *key, size_t cap, const wb_row *row)
{
    snprintf(key, cap, "%s\x1f%s", row->problem ? row->problem : "", row->size ? row->size : "");
}

/** A number for the table, or "-" where the column has no value (never "nan"). */
static void cell(char *out, size_t cap, const char *fmt, double x)
{
    if (isfinite(x))
        snprintf(out, cap, fmt, x);
    else
        snprintf(out, cap, "-");
}

void wb_report_add(wb_report *r, const wb_row *row)
{
    if (r->n_rows >= (int)(sizeof r->rows / sizeof r->rows[0])) {
        fprintf(stderr, "wb_report: more than %d rows; row %s dropped\n", r->n_rows, row->variant);
        return;
    }
    /* A table is one problem at one size: a new title (and a new v1 to compare
     * against) whenever either changes, so no rows ever sit under another size's title. */
    char key[sizeof r->speedup_base];
    table_key(key, sizeof key, row);
    if (r->n_rows == 0 || strcmp(r->speedup_base, key) != 0) {
        snprintf(r->speedup_base, sizeof r->speedup_base, "%s", key);
        r->v1_ms = 0;
        fprintf(r->out, "\n%s, %s\n", row->problem, row->size ? row->size : "-");
        fprintf(r->out, "%-9s | %-48s | %13s | %9s | %9s | %7s | %7s | %-22s | %s\n", "variant", "what it does",
                "time (median)", row->unit, "% of roof", "x peer", "vs v1", "max error (of tol)", "ok");
        fprintf(r->out, "----------+--------------------------------------------------+---------------+-----------+"
                        "-----------+---------+---------+------------------------+-----\n");
    }
    if (row->status == WB_ROW_RAN && strcmp(row->variant, "v1") == 0) r->v1_ms = row->time.median_ms;
    wb_row *kept = &r->rows[r->n_rows];
    *kept = *row;
    const char **fields[3] = {&kept->problem, &kept->size, &kept->note};
    for (int k = 0; k < 3; ++k) {
        if (!*fields[k]) continue;
        snprintf(r->text[r->n_rows][k], sizeof r->text[0][0], "%s", *fields[k]);
        *fields[k] = r->text[r->n_rows][k];
    }
    r->n_rows++;
    char name[64];
    snprintf(name, sizeof name, "%s%s", row->variant, row->is_peer ? "*" : "");
    if (row->status != WB_ROW_RAN) {
        fprintf(r->out, "%-9s | %-48.48s | %s\n", name, row->what, row->note ? row->note : "");
        return;
    }
    char err[40] = "-", err_val[16], err_frac[16], time[24], tput[16], pct[16], x_peer[16], vs_v1[16];
    cell(err_val, sizeof err_val, "%.2g", row->max_err);
    cell(err_frac, sizeof err_frac, "%.2f", row->err_over_tol);
    if (isfinite(row->max_err) || isfinite(row->err_over_tol))
        snprintf(err, sizeof err, "%s (%s)", err_val, err_frac);
    cell(time, sizeof time, "%10.4f ms", row->time.median_ms);
    cell(tput, sizeof tput, "%9.1f", row->throughput);
    cell(pct, sizeof pct, "%8.1f%%", pct_of_roof(row));
    cell(x_peer, sizeof x_peer, "%6.2fx", times_peer(row));
    cell(vs_v1, sizeof vs_v1, "%6.2fx", speedup_of(r, row));
    fprintf(r->out, "%-9s | %-48.48s | %13s | %9s | %9s | %7s | %7s | %-22s | %s\n", name, row->what, time, tput, pct,
            x_peer, vs_v1, err, row->ok ? "ok" : "FAIL");
}

/* CSV fields are ours (no commas or quotes) except the GPU name and free text: quote those. */
static void csv_text(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; ++s) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/** A CSV field: as is, or quoted when it holds a comma or a quote. */
static void csv_field(FILE *f, const char *s)
{
    if (s && (strchr(s, ',') || strchr(s, '"')))
        csv_text(f, s);
    else
        fputs(s ? s : "", f);
}

/** ",<number>", or "," alone where the field has no value (no roof, no v1): never "nan". */
static void csv_number(FILE *f, const char *fmt, double x)
{
    fputc(',', f);
    if (isfinite(x)) fprintf(f, fmt, x);
}

int wb_report_write_csv(const wb_report *r, const char *path)
{
    if (!path) return 0;
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    fprintf(f, "gpu,stage,problem,size,variant,name,peer,time_ms,time_ms_min,time_ms_max,"
               "throughput,unit,roof,pct_roof,speedup_vs_v1,max_err,err_over_tol,ok,x_peer,bytes,flops\n");
    double v1_ms = 0;
    char table[sizeof r->speedup_base] = "", key[sizeof r->speedup_base];
    for (int i = 0; i < r->n_rows; ++i) {
        const wb_row *row = &r->rows[i];
        table_key(key, sizeof key, row);
        if (i == 0 || strcmp(table, key) != 0) snprintf(table, sizeof table, "%s", key), v1_ms = 0;
        if (row->status == WB_ROW_RAN && strcmp(row->variant, "v1") == 0) v1_ms = row->time.median_ms;
        if (row->status != WB_ROW_RAN) continue;
        csv_text(f, r->gpu);
        fprintf(f, ",%s,", r->stage);
        csv_text(f, row->problem);
        fputc(',', f);
        csv_field(f, row->size);
        fprintf(f, ",%s,", row->variant);
        csv_text(f, row->what);
        fprintf(f, ",%d", row->is_peer);
        csv_number(f, "%.6f", row->time.median_ms);
        csv_number(f, "%.6f", row->time.min_ms);
        csv_number(f, "%.6f", row->time.max_ms);
        csv_number(f, "%.4f", row->throughput);
        fprintf(f, ",%s", row->unit);
        csv_number(f, "%.4f", row->roof > 0 ? row->roof : NAN);
        csv_number(f, "%.2f", pct_of_roof(row));
        csv_number(f, "%.4f", v1_ms > 0 ? v1_ms / row->time.median_ms : NAN);
        csv_number(f, "%.3g", row->max_err);
        csv_number(f, "%.4f", row->err_over_tol);
        fprintf(f, ",%d", row->ok);
        csv_number(f, "%.4f", times_peer(row));
        csv_number(f, "%.6g", row->bytes > 0 ? row->bytes : NAN);
        csv_number(f, "%.6g", row->flops > 0 ? row->flops : NAN);
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        perror(path);
        return -1;
    }
    printf("\nresults written to %s\n", path);
    return 0;
}

/** The first peer row that did not run (a peer is the tables' yardstick: it always runs), or NULL. */
static const wb_row *peer_not_run(const wb_report *r)
{
    for (int i = 0; i < r->n_rows; ++i)
        if (r->rows[i].is_peer && r->rows[i].status != WB_ROW_RAN) return &r->rows[i];
    return NULL;
}

int wb_report_all_ok(const wb_report *r)
{
    for (int i = 0; i < r->n_rows; ++i)
        if (r->rows[i].status == WB_ROW_RAN && !r->rows[i].ok) return 0;
    return peer_not_run(r) == NULL;
}

int wb_report_finish(const wb_report *r, const char *csv_path)
{
    int ok = wb_report_all_ok(r);
    if (wb_report_write_csv(r, csv_path) != 0) ok = 0;
    const wb_row *peer = peer_not_run(r);
    if (peer)
        printf("\nthe peer %s did not run on %s, %s (%s): every table needs its time\n", peer->variant, peer->problem,
               peer->size ? peer->size : "-", peer->note ? peer->note : "no reason given");
    printf("\n%s\n", wb_report_all_ok(r) ? "all variants match the CPU reference" : "SOME VARIANTS FAILED their check");
    return ok;
}
