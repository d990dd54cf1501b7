#!/usr/bin/env bash
# One call on a GPU machine: configure, build, run every test (--check, the
# argument tests, the sanitizers), then every stage's default run with --csv
# (stage 10: --bench). Logs go to $OUT (default ./gpu-out): build.log,
# ctest.log, bench.log; the CSVs (stageNN.csv) are packed into csv.tar.gz, so
# that a tool which brings back only a few files brings them all (unpack, then
# `python3 plots/plot.py ingest <dir>`).
# Usage: scripts/gpu_run.sh [ctest -R regex]
# Environment:
#   STAGES="stage03 stage04"   run only those stages' default runs (STAGES=none: none)
#   TARGETS="stage03_gemm ..." build only those targets (faster on a fresh machine)
#   RECORD_T4=1                also record the T4 path's launches (scripts/record_t4_launches.sh)
#                              into launches_sm75.csv
#   EXERCISES=1                also grade the exercise slot's sample kernels (scripts/check_exercises.sh)
#                              into exercises.log
#   PROFILE="01 03"            also profile those stages' page variants under ncu (scripts/profile.sh),
#                              their ncu_stageNN.csv packed with the CSVs
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
TEST_REGEX=${1:-.}

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv; nvcc --version | tail -1; cmake --version | head -1; } > "$OUT/bench.log" 2>&1
if ! { cmake -B "$BUILD" -G Ninja && cmake --build "$BUILD" ${TARGETS:+--target $TARGETS}; } > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; exit 1
fi
ctest --test-dir "$BUILD" -R "$TEST_REGEX" --output-on-failure > "$OUT/ctest.log" 2>&1
ctest_rc=$?
for exe in "$BUILD"/bin/stage*; do
  name=$(basename "$exe"); short=${name%%_*}
  if [[ -n "${STAGES:-}" && ! " $STAGES " =~ " $short " ]]; then continue; fi
  args=""
  [[ $short == stage10 ]] && args="--bench" # its default run generates text; --bench measures
  echo "=== $name $args" >> "$OUT/bench.log"
  "$exe" $args --csv "$OUT/$short.csv" >> "$OUT/bench.log" 2>&1 || echo "$name exited $?" >> "$OUT/bench.log"
done
if [[ "${RECORD_T4:-0}" == 1 ]]; then
  cmake --build "$BUILD" --target wb_launch_recorder >> "$OUT/build.log" 2>&1
  OUT="$OUT" scripts/record_t4_launches.sh "$BUILD" | tail -3
fi
if [[ "${EXERCISES:-0}" == 1 ]]; then
  OUT="$OUT" scripts/check_exercises.sh native | tail -12
fi
for s in ${PROFILE:-}; do
  log=$(BUILD="$BUILD" scripts/profile.sh "$s" 2>&1) || echo "profile of stage $s failed (see profile.log)"
  echo "$log" >> "$OUT/profile.log"
  dest=$(sed -n 's/.* kernels -> //p' <<< "$log" | tail -1) # profile.sh's last line names the CSV it wrote
  [[ -n $dest ]] && cp "$dest" "$OUT/"
done
if compgen -G "$OUT/stage*.csv" > /dev/null || compgen -G "$OUT/ncu_stage*.csv" > /dev/null; then
  tar czf "$OUT/csv.tar.gz" -C "$OUT" $(cd "$OUT" && ls stage*.csv ncu_stage*.csv 2>/dev/null) &&
    rm -f "$OUT"/stage*.csv "$OUT"/ncu_stage*.csv
fi
grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/ctest.log" | tail -20
cat "$OUT/bench.log"
exit $ctest_rc
