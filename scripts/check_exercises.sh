#!/usr/bin/env bash
# On a GPU machine: prove the exercise slot's grader. Each sample kernel in
# tests/exercises/ is built into its stage's slot (-DWB_EXERCISE_NN=...), in two
# build directories: the right samples together, the wrong ones together. Then
# `--check --variant ex` must pass for a right one and fail, naming the first bad
# element, for a wrong one; the race sample must also fail under racecheck (its
# check may pass by luck: that is the point of racecheck).
# Usage: scripts/check_exercises.sh [architectures, default native]
# Writes $OUT/exercises.log (default ./gpu-out) and exits 1 if any sample is graded wrongly.
set -uo pipefail
ARCH=${1:-native}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
log="$OUT/exercises.log"
: > "$log"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
declare -A program=([01]=stage01_vector_add [02]=stage02_reduction [05]=stage05_softmax [09]=stage09_paged_attention)
right=(01:stage01_right.cu 02:stage02_right.cu 05:stage05_right.cu 09:stage09_right.cu)
wrong=(01:stage01_missing_tail.cu 02:stage02_race.cu 05:stage05_wrong_scale.cu 09:stage09_unwritten.cu)
status=0

build() { # build directory, then NN:file pairs
  local dir=$1; shift
  local defs=() targets=()
  for pair in "$@"; do defs+=("-DWB_EXERCISE_${pair%%:*}=tests/exercises/${pair#*:}"); targets+=("${program[${pair%%:*}]}"); done
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${defs[@]}" >> "$log" 2>&1 &&
    cmake --build "$dir" --target "${targets[@]}" >> "$log" 2>&1 || { echo "build of $dir failed (see $log)"; exit 1; }
}

grade() { # build directory, NN:file, expected: pass | fail | race
  local dir=$1 pair=$2 expect=$3 nn=${2%%:*} file=${2#*:}
  local exe="$dir/bin/${program[$nn]}" out rc verdict
  out=$("$exe" --check --variant ex 2>&1); rc=$?
  { echo "=== $file: --check --variant ex exited $rc"; grep -E "FAIL|mismatch|worst|first|\[[0-9]+\]|checks" <<< "$out" | head -8; } >> "$log"
  case $expect in
    pass) [[ $rc == 0 ]] && verdict=ok || verdict=WRONG ;;
    fail) [[ $rc == 1 ]] && verdict=ok || verdict=WRONG ;;
    race)
      out=$("$sanitizer" --tool racecheck --racecheck-report all --error-exitcode 1 "$exe" --check --variant ex --check-max 65537 2>&1); rc=$?
      { echo "--- racecheck exited $rc"; grep -E "Race|hazard|ERROR SUMMARY" <<< "$out" | head -4; } >> "$log"
      [[ $rc == 1 ]] && verdict=ok || verdict=WRONG ;;
  esac
  echo "$file: expected $expect, graded $verdict" | tee -a "$log"
  [[ $verdict == ok ]] || status=1
}

build build-ex-right "${right[@]}"
build build-ex-wrong "${wrong[@]}"
for pair in "${right[@]}"; do grade build-ex-right "$pair" pass; done
for pair in "${wrong[@]}"; do
  if [[ $pair == *race* ]]; then grade build-ex-wrong "$pair" race; else grade build-ex-wrong "$pair" fail; fi
done
exit $status
