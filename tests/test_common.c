/** @file test_common.c @brief CPU tests of common/: arguments, comparison, RNG, fp16, median, CSV. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "args.h"
#include "compare.h"
#include "fp16.h"
#include "report.h"
#include "rng.h"
#include "test_util.h"
#include "timing.h"

static const char *const ids[] = {"v1", "v2", "v3", "cub", NULL};
static const wb_program prog = {"prog", "a test program", ids, NULL, NULL};

static int parse(int argc, char **argv, wb_common_opts *c, long long *n, int *choice, long long size3[3],
                 char *err)
{
    static const char *const choices[] = {"all", "sum", "max", NULL};
    wb_option extra[] = {
        {"--n", "N", "size", WB_OPT_INT, n, 1, 1, INT_MAX, NULL},
        {"--op", "OP", "op", WB_OPT_CHOICE, choice, 0, 0, 0, choices},
        {"--size", "M N K", "shape", WB_OPT_INT, size3, 3, 1, 65536, NULL},
    };
    return wb_parse_args(argc, argv, &prog, c, extra, 3, err, 256);
}

static void test_args(void)
{
    wb_common_opts c;
    long long n = 7, size3[3] = {0, 0, 0};
    int choice = 0;
    char err[256];

    char *none[] = {"prog"};
    EXPECT(parse(1, none, &c, &n, &choice, size3, err) == WB_ARGS_OK);
    EXPECT(c.check == 0 && c.variant == -1 && c.iters == 50 && c.csv == NULL && n == 7);

    char *good[] = {"prog", "--check", "--n", "1000", "--variant", "cub", "--op=max", "--size", "1", "2", "3",
                    "--csv", "out.csv", "--seed=99"};
    EXPECT(parse(14, good, &c, &n, &choice, size3, err) == WB_ARGS_OK);
    EXPECT(c.check == 1 && n == 1000 && c.variant == 3 && choice == 2 && c.seed == 99);
    EXPECT(size3[0] == 1 && size3[1] == 2 && size3[2] == 3);
    EXPECT(c.csv && strcmp(c.csv, "out.csv") == 0);

    char *by_number[] = {"prog", "--variant", "2"};
    EXPECT(parse(3, by_number, &c, &n, &choice, size3, err) == WB_ARGS_OK && c.variant == 1);

    char *help[] = {"prog", "--n", "5", "--help"};
    EXPECT(parse(4, help, &c, &n, &choice, size3, err) == WB_ARGS_HELP);

    struct {
        int argc;
        char *argv[4];
        const char *message;
    } bad[] = {
        {2, {"prog", "--bogus"}, "unknown option '--bogus' (allowed: --check"},
        {2, {"prog", "n"}, "unknown option 'n'"},
        {3, {"prog", "--n", "0"}, "--n wants an integer in 1..2147483647, got '0'"},
        {3, {"prog", "--n", "-3"}, "got '-3'"},
        {3, {"prog", "--n", "12x"}, "got '12x'"},
        {3, {"prog", "--n", "99999999999999999999"}, "got '99999999999999999999'"},
        {3, {"prog", "--n", ""}, "got ''"},
        {2, {"prog", "--n"}, "--n needs 1 value"},
        {4, {"prog", "--size", "1", "2"}, "--size needs 3 values"},
        {3, {"prog", "--variant", "v9"}, "unknown variant 'v9' (allowed: v1 v2 v3 cub, or a number 1..4)"},
        {3, {"prog", "--variant", "5"}, "unknown variant '5'"},
        {3, {"prog", "--op", "min"}, "--op wants one of all, sum, max, got 'min'"},
        {2, {"prog", "--check=1"}, "--check takes no value"},
        {3, {"prog", "--iters", "0"}, "--iters wants an integer in 1..100000, got '0'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        err[0] = '\0';
        int rc = parse(bad[i].argc, bad[i].argv, &c, &n, &choice, size3, err);
        EXPECT(rc == WB_ARGS_ERROR);
        if (!strstr(err, bad[i].message)) {
            fprintf(stderr, "case %zu: message '%s' lacks '%s'\n", i, err, bad[i].message);
            wb_test_failures++;
        }
    }
}

static void test_compare(void)
{
    float ref[5] = {1.0f, -2.0f, 0.0f, 1e6f, 3.0f};
    float got[5] = {1.0f, -2.0f, 0.0f, 1e6f, 3.0f};
    wb_tolerance exact = {0.0, 0.0};
    EXPECT(wb_compare_f32(got, ref, 5, exact, "same", 0).ok);

    got[3] = 1e6f + 0.0625f; /* one ulp at 1e6 */
    wb_compare_result r = wb_compare_f32(got, ref, 5, exact, "ulp", 0);
    EXPECT(!r.ok && r.n_bad == 1 && r.worst_index == 3 && isinf(r.worst_frac));
    wb_tolerance rel = {0.0, 1e-7};
    r = wb_compare_f32(got, ref, 5, rel, "ulp within rtol", 0);
    EXPECT(r.ok && r.worst_index == 3 && r.worst_frac > 0.5 && r.worst_frac <= 1.0);
    EXPECT(fabs(r.max_abs_err - 0.0625) < 1e-12);

    got[3] = ref[3];
    got[2] = NAN; /* an unwritten (poisoned) element */
    wb_tolerance loose = {1e30, 1.0};
    r = wb_compare_f32(got, ref, 5, loose, "nan", 0);
    EXPECT(!r.ok && r.n_bad == 1 && r.worst_index == 2);
    got[2] = INFINITY;
    EXPECT(!wb_compare_f32(got, ref, 5, loose, "inf", 0).ok);
    got[2] = 0.0f;

    wb_tolerance abs_tol = {0.5, 0.0};
    EXPECT(wb_compare_scalar(10.5, 10.0, abs_tol, "edge", 0).ok);
    EXPECT(!wb_compare_scalar(10.5000001, 10.0, abs_tol, "past edge", 0).ok);
    EXPECT(!wb_compare_scalar(NAN, NAN, abs_tol, "nan both", 0).ok);
}

static void test_rows(void)
{
    int *rows = NULL;
    int n = wb_rows_to_check(10, 1000, 1000, 4, 1, &rows); /* small: every row */
    EXPECT(n == 10);
    for (int i = 0; i < n; ++i) EXPECT(rows[i] == i);
    free(rows);
    n = wb_rows_to_check(5000, 1LL << 40, 1000, 64, 7, &rows); /* large: a sorted sample with both ends */
    EXPECT(n == 64 && rows[0] == 0 && rows[n - 1] == 4999);
    for (int i = 1; i < n; ++i) EXPECT(rows[i] >= rows[i - 1] && rows[i] < 5000);
    free(rows);

    enum { R = 6, C = 5 };
    float ref[R * C], got[R * C];
    for (int i = 0; i < R * C; ++i) ref[i] = got[i] = (float)i;
    int checked[2] = {1, 4};
    wb_tolerance exact = {0.0, 0.0};
    EXPECT(wb_compare_rows(got, ref, R, C, checked, 2, exact, "same").ok);
    got[2 * C + 3] = NAN; /* a row not checked, never written */
    wb_compare_result r = wb_compare_rows(got, ref, R, C, checked, 2, exact, "unwritten");
    EXPECT(!r.ok && r.n_bad == 1);
    got[2 * C + 3] = ref[2 * C + 3];
    got[4 * C + 2] += 1.0f; /* a checked row, wrong */
    r = wb_compare_rows(got, ref, R, C, checked, 2, exact, "wrong");
    EXPECT(!r.ok && r.n_bad == 1 && r.worst_index == 4 * C + 2 && r.max_abs_err == 1.0);
}

static void test_rng(void)
{
    enum { N = 100000 };
    static float a[N], b[N], c[N];
    wb_fill_uniform_f32(a, N, -1.0f, 1.0f, 42);
    wb_fill_uniform_f32(b, N, -1.0f, 1.0f, 42);
    wb_fill_uniform_f32(c, N, -1.0f, 1.0f, 43);
    EXPECT(memcmp(a, b, sizeof a) == 0);  /* same seed, same data */
    EXPECT(memcmp(a, c, sizeof a) != 0);  /* another seed, other data */
    double sum = 0, lo = 1, hi = -1;
    int distinct = 0;
    for (int i = 0; i < N; ++i) {
        sum += a[i];
        lo = fmin(lo, a[i]);
        hi = fmax(hi, a[i]);
        distinct += i > 0 && a[i] != a[i - 1];
    }
    EXPECT(lo >= -1.0 && hi < 1.0 && lo < -0.99 && hi > 0.99);
    EXPECT(fabs(sum / N) < 0.01);  /* mean 0 within ~5 sigma (sigma = 0.0018) */
    EXPECT(distinct > N - 10);     /* never constant */
    wb_fill_int_f32(a, N, -8, 8, 7);
    int seen[17] = {0};
    for (int i = 0; i < N; ++i) {
        EXPECT(a[i] == floorf(a[i]) && a[i] >= -8 && a[i] <= 8);
        if (a[i] >= -8 && a[i] <= 8) seen[(int)a[i] + 8] = 1;
    }
    for (int k = 0; k < 17; ++k) EXPECT(seen[k]); /* both ends included */
    EXPECT(wb_seed_for(1, 2, 3) != wb_seed_for(1, 3, 2));
}

static void test_fp16(void)
{
    EXPECT(wb_float_to_half(1.0f) == 0x3C00);
    EXPECT(wb_float_to_half(-2.0f) == 0xC000);
    EXPECT(wb_float_to_half(65504.0f) == 0x7BFF);          /* largest finite */
    EXPECT(wb_float_to_half(65520.0f) == 0x7C00);          /* rounds to +inf */
    EXPECT(wb_float_to_half(ldexpf(1.0f, -24)) == 0x0001); /* smallest subnormal */
    EXPECT(wb_float_to_half(1.0f + ldexpf(1.0f, -11)) == 0x3C00);     /* tie to even (down) */
    EXPECT(wb_float_to_half(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3C02); /* tie to even (up) */
    EXPECT(wb_half_to_float(0x3555) == 0.333251953125f);
    int mismatches = 0;
    for (unsigned h = 0; h < 65536; ++h) { /* every non-NaN half survives the round trip */
        float f = wb_half_to_float((uint16_t)h);
        if (!isnan(f) && wb_float_to_half(f) != h) mismatches++;
    }
    EXPECT(mismatches == 0);
    uint16_t hs[3];
    float fs[3] = {0.5f, -0.25f, 3.0f}, back[3];
    wb_floats_to_halves(fs, hs, 3);
    wb_halves_to_floats(hs, back, 3);
    EXPECT(memcmp(fs, back, sizeof fs) == 0);
}

static void test_median(void)
{
    double odd[5] = {5, 1, 4, 2, 3};
    EXPECT(wb_median(odd, 5) == 3.0 && odd[0] == 1.0 && odd[4] == 5.0);
    double even[4] = {4, 1, 3, 2};
    EXPECT(wb_median(even, 4) == 2.5);
    double one[1] = {7};
    EXPECT(wb_median(one, 1) == 7.0);
}

static void test_csv(void)
{
    static wb_report rep;
    FILE *sink = tmpfile();
    wb_report_begin(&rep, "stage99", "Test \"GPU\", 1", sink);
    char problem[32] = "c = a + b";
    wb_row row = {.problem = problem, .size = "n=10", .variant = "v1", .what = "one, per thread"};
    row.time.median_ms = 2.0;
    row.throughput = 100.0;
    row.unit = "GB/s";
    row.roof = 200.0;
    row.ok = 1;
    wb_report_add(&rep, &row);
    strcpy(problem, "overwritten"); /* the report keeps its own copy */
    EXPECT(strcmp(rep.rows[0].problem, "c = a + b") == 0);
    strcpy(problem, "c = a + b");
    row.variant = "v2";
    row.time.median_ms = 1.0;
    row.throughput = 200.0;
    row.peer = 100.0, row.bytes = 8e6, row.flops = 1e6; /* x peer 2; the roofline's coordinates */
    wb_report_add(&rep, &row);
    row.peer = 0, row.bytes = 0, row.flops = 0;
    row.variant = "v3";
    row.status = WB_ROW_SKIPPED;
    row.note = "skipped: needs sm_80";
    wb_report_add(&rep, &row);
    fclose(sink);
    EXPECT(rep.n_rows == 3 && strcmp(rep.rows[0].problem, "c = a + b") == 0);
    EXPECT(wb_report_all_ok(&rep));

    const char *path = "test_common_report.csv";
    EXPECT(wb_report_write_csv(&rep, path) == 0);
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL);
    if (!f) return;
    char line[512];
    int lines = 0;
    char second[512] = "", third[512] = "";
    while (fgets(line, sizeof line, f)) {
        if (lines == 1) strcpy(second, line);
        if (lines == 2) strcpy(third, line);
        lines++;
    }
    fclose(f);
    remove(path);
    EXPECT(lines == 3); /* header + the two rows that ran */
    EXPECT(strstr(second, "\"Test \"\"GPU\"\", 1\",stage99,\"c = a + b\",n=10,v1,\"one, per thread\",0,2.000000") == second);
    EXPECT(strstr(third, ",100.00,2.0000,") != NULL); /* 100% of roof, 2x vs v1 */
    EXPECT(strstr(third, ",1,2.0000,8e+06,1e+06\n") != NULL); /* ok, x peer, bytes, flops */
    EXPECT(strstr(second, ",1,,,\n") != NULL);                 /* no peer, no work counted: empty fields */
    rep.rows[1].ok = 0;
    EXPECT(!wb_report_all_ok(&rep));
}

/* A peer row is the table's yardstick: one that did not run (its launcher said "not written yet", say) fails the
 * run, as a failed check does; a lesson variant skipped on this GPU does not. */
static void test_peer(void)
{
    static wb_report rep;
    FILE *sink = tmpfile();
    EXPECT(sink != NULL);
    if (!sink) return;
    wb_report_begin(&rep, "stage99", "Test GPU", sink);
    wb_row row = {.problem = "attention", .size = "N4096", .variant = "v1", .what = "naive", .unit = "TFLOP/s"};
    row.time.median_ms = 2.0, row.throughput = 1.0, row.ok = 1;
    wb_report_add(&rep, &row);
    row.variant = "v7", row.status = WB_ROW_SKIPPED, row.note = "skipped: needs sm_90";
    wb_report_add(&rep, &row);
    EXPECT(wb_report_all_ok(&rep)); /* a lesson variant this GPU lacks */
    row.variant = "cublas", row.is_peer = 1, row.status = WB_ROW_RAN;
    wb_report_add(&rep, &row);
    EXPECT(wb_report_all_ok(&rep)); /* the peer ran */
    row.size = "N8192", row.status = WB_ROW_REJECTED, row.note = "not written yet - see exercise.cu";
    wb_report_add(&rep, &row);
    EXPECT(!wb_report_all_ok(&rep)); /* the peer of the second table printed a message instead of a time */
    fclose(sink);
}

/** Reads a whole (small) file into `buf`; returns its length. */
static size_t slurp(FILE *f, char *buf, size_t cap)
{
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    return n;
}

/** Counts the occurrences of `needle` in `hay`. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static void test_report(void)
{
    static wb_report rep;
    FILE *sink = tmpfile();
    EXPECT(sink != NULL);
    if (!sink) return;
    wb_report_begin(&rep, "stage99", "Test GPU", sink);
    /* The same problem at two sizes: each size gets its own title line and its own v1. */
    wb_row row = {.problem = "softmax, fp32", .size = "8192x8192", .variant = "v1", .what = "naive", .unit = "GB/s"};
    row.time.median_ms = 4.0;
    row.throughput = 100.0;
    row.roof = 0;      /* no roof: the % column has no value */
    row.ok = 1;
    wb_report_add(&rep, &row);
    row.variant = "v2";
    row.time.median_ms = 2.0;
    wb_report_add(&rep, &row);
    row.size = "32768x1024";
    row.variant = "v2"; /* no v1 at this size: "vs v1" has no value */
    row.max_err = NAN;  /* and no error was measured */
    row.err_over_tol = NAN;
    wb_report_add(&rep, &row);
    row.variant = "v3";
    row.status = WB_ROW_SKIPPED;
    row.note = "skipped: needs sm_80";
    wb_report_add(&rep, &row);
    static char text[8192];
    slurp(sink, text, sizeof text);
    fclose(sink);
    EXPECT(strstr(text, "\nsoftmax, fp32, 8192x8192\n") != NULL);
    EXPECT(strstr(text, "\nsoftmax, fp32, 32768x1024\n") != NULL);
    EXPECT(count_of(text, "variant   | what it does") == 2); /* a header under each title */
    /* the 32768x1024 title comes before its rows, after the 8192x8192 rows */
    const char *second_title = strstr(text, "softmax, fp32, 32768x1024");
    EXPECT(second_title && strstr(text, "2.00x") && strstr(text, "2.00x") < second_title);
    EXPECT(strstr(text, "nan") == NULL && strstr(text, "NAN") == NULL);
    EXPECT(strstr(text, "|         - |") != NULL); /* the % of roof column */
    EXPECT(strstr(text, "|       - |") != NULL);   /* vs v1 at the second size */

    const char *path = "test_common_report_nan.csv";
    EXPECT(wb_report_write_csv(&rep, path) == 0);
    FILE *f = fopen(path, "r");
    EXPECT(f != NULL);
    if (!f) return;
    slurp(f, text, sizeof text);
    fclose(f);
    remove(path);
    EXPECT(strstr(text, "nan") == NULL);
    /* v2 at the second size: no roof, no % of roof, no speedup, no error: empty fields */
    EXPECT(strstr(text, "32768x1024,v2,\"naive\",0,2.000000,0.000000,0.000000,100.0000,GB/s,,,,,,1,,,\n") != NULL);
    /* v2 at the first size: 2x its own v1 */
    EXPECT(strstr(text, "8192x8192,v2,\"naive\",0,2.000000,0.000000,0.000000,100.0000,GB/s,,,2.0000,0,0.0000,1,,,\n") != NULL);
}

int main(int argc, char **argv)
{
    const wb_test_group groups[] = {
        {"args", test_args}, {"compare", test_compare}, {"rows", test_rows}, {"rng", test_rng},
        {"fp16", test_fp16}, {"median", test_median},   {"csv", test_csv}, {"report", test_report},
        {"peer", test_peer},
    };
    return wb_test_main(argc, argv, groups, sizeof groups / sizeof groups[0]);
}
