/**
 * @file tests/exercises/stage05_wrong_scale.cu
 * @brief A sample for stage 05's exercise slot: the running sum not rescaled when the max grows (the check fails on the uniform set: every row's sum too large, each y too small).
 *
 * stage05_right.cu with SAMPLE_SUM_NOT_RESCALED defined: the one mistake, everything else the right
 * kernel. Built into the slot with -DWB_EXERCISE_05=tests/exercises/stage05_wrong_scale.cu
 * (scripts/check_exercises.sh proves the grader with it).
 */
#define SAMPLE_SUM_NOT_RESCALED
#include "stage05_right.cu"
