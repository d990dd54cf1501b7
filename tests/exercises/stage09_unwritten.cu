/**
 * @file tests/exercises/stage09_unwritten.cu
 * @brief A sample for stage 09's exercise slot: only the first 32 dimensions of each output row written (the check fails: the first bad element is o[0][0][32], still the poison, NaN).
 *
 * stage09_right.cu with SAMPLE_HALF_UNWRITTEN defined: the one mistake, everything else the right
 * kernel. Built into the slot with -DWB_EXERCISE_09=tests/exercises/stage09_unwritten.cu
 * (scripts/check_exercises.sh proves the grader with it).
 */
#define SAMPLE_HALF_UNWRITTEN
#include "stage09_right.cu"
