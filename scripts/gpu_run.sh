#!/usr/bin/env bash
# One call on a GPU machine: configure, build, run every test (--check, the
# argument tests, memcheck and racecheck), then every stage's default run with
# --csv. Logs and CSVs go to $OUT (default ./gpu-out): build.log, ctest.log,
# bench.log and stageNN.csv. Usage: scripts/gpu_run.sh [ctest -R regex]
# Environment: STAGES="stage03 stage04" runs only those stages' default runs;
# TARGETS="stage03_gemm ..." builds only those targets (faster on a fresh machine).
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
  echo "=== $name" >> "$OUT/bench.log"
  "$exe" --csv "$OUT/$short.csv" >> "$OUT/bench.log" 2>&1 || echo "$name exited $?" >> "$OUT/bench.log"
done
grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/ctest.log" | tail -20
cat "$OUT/bench.log"
exit $ctest_rc
