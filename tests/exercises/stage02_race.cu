/**
 * @file tests/exercises/stage02_race.cu
 * @brief A sample for stage 02's exercise slot: the barrier between the warps' writes and the first warp's reads forgotten (racecheck reports the hazard on warp_sums; the check itself may pass by luck).
 *
 * stage02_right.cu with SAMPLE_MISSING_BARRIER defined: the one mistake, everything else the right
 * kernel. Built into the slot with -DWB_EXERCISE_02=tests/exercises/stage02_race.cu
 * (scripts/check_exercises.sh proves the grader with it).
 */
#define SAMPLE_MISSING_BARRIER
#include "stage02_right.cu"
