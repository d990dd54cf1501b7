/**
 * @file tests/exercises/stage01_missing_tail.cu
 * @brief A sample for stage 01's exercise slot: the tail forgotten (the check fails at n = 1, 2, 3, 5, ...: the first bad element is the poison, NaN).
 *
 * stage01_right.cu with SAMPLE_MISSING_TAIL defined: the one mistake, everything else the right
 * kernel. Built into the slot with -DWB_EXERCISE_01=tests/exercises/stage01_missing_tail.cu
 * (scripts/check_exercises.sh proves the grader with it).
 */
#define SAMPLE_MISSING_TAIL
#include "stage01_right.cu"
