/**
 * @file test_util.h
 * @brief A minimal test harness for the CPU tests: EXPECT(cond) records a failure
 *        with file:line and goes on; each test program runs the group named by argv[1].
 */
#ifndef WB_TEST_UTIL_H
#define WB_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

static int wb_test_failures = 0;

/** @brief Record a failure (with the condition's text and file:line) when cond is false. */
#define EXPECT(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);     \
            wb_test_failures++;                                                      \
        }                                                                            \
    } while (0)

/** @brief One named group of checks. */
typedef struct {
    const char *name;
    void (*run)(void);
} wb_test_group;

/** @brief Run the group named argv[1]; exit 0 only when it ran and nothing failed. */
static inline int wb_test_main(int argc, char **argv, const wb_test_group *groups, int n)
{
    for (int i = 0; argc > 1 && i < n; ++i) {
        if (strcmp(argv[1], groups[i].name) != 0) continue;
        groups[i].run();
        printf("%s: %s\n", groups[i].name, wb_test_failures ? "FAILED" : "passed");
        return wb_test_failures ? 1 : 0;
    }
    fprintf(stderr, "usage: %s GROUP (groups:", argv[0]);
    for (int i = 0; i < n; ++i) fprintf(stderr, " %s", groups[i].name);
    fprintf(stderr, ")\n");
    return 2;
}

#endif /* WB_TEST_UTIL_H */
