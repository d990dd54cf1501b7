#!/usr/bin/env bash
# Stage 10 on a GPU machine in one call: build this tree's stage 10 (and, with
# AB_BASE=DIR, a second tree in DIR, in parallel: the committed code, made
# with `git archive REV | tar -x -C DIR`), run --check of the variants in
# CHECKS, compute-sanitizer's memcheck and racecheck of those in SANITIZE
# (tiny models), then --bench of each TREE:VARIANT argument in the order
# given (give them in turns: new:v22 base:v21 new:v22 base:v21), printing the
# decode and serving rows and the batch-1 trace of each run. Each run's CSV
# and log go to $OUT, packed into stage10_ab.tar.gz.
#
# Timings compare only within one call: on one day the same build measured
# 250-264 µs a step on different H100s. A variant that changes a kernel the
# others share is measured against the base tree, not against its own tree's
# other variants.
#
# The base tree travels to the GPU machine only if carried: make it where the
# build folders are ignored (git archive HEAD | tar -x -C build-ab-src) and
# name build-ab-src in the call's carry.
#
# With AB_NEW_BIN=FILE, this tree's binary is that file, built here for
# sm_90 and carried (cmake -B build90 -DCMAKE_CUDA_ARCHITECTURES=90; carry
# build90/bin), and the GPU machine builds nothing of this tree; AB_BASE_BIN
# the same for the base tree (git archive REV into a folder, cmake -S there
# -B build90base; carry build90base/bin). Two binaries fit in the carry.
#
# NEW_ARGS and BASE_ARGS are added to each tree's --bench (NEW_ARGS="--dtype fp16": this tree's variants run in
# both precisions unless told).
#
# Usage: [AB_BASE=DIR | AB_BASE_BIN=FILE] [AB_NEW_BIN=FILE] [CHECKS="v5 v4"] [SANITIZE="v5"] [NEW_ARGS=...]
#        scripts/stage10_ab.sh new:v5 base:v4 ...
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/ab"
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }
nvidia-smi --query-gpu=name --format=csv,noheader
build() { # tree dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/ab/configure_$(basename "$2").log" 2>&1 &&
    cmake --build "$2" --target stage10_gpt2_e2e > "$OUT/ab/build_$(basename "$2").log" 2>&1
}
NEW=${AB_NEW_BIN:-build-ab-new/bin/stage10_gpt2_e2e} BASE=${AB_BASE_BIN:-build-ab-base/bin/stage10_gpt2_e2e}
[[ -n "${AB_NEW_BIN:-}" ]] || { build . build-ab-new & new_pid=$!; }
[[ -n "${AB_BASE:-}" ]] && { build "$AB_BASE" build-ab-base & base_pid=$!; }
[[ -n "${AB_NEW_BIN:-}" ]] || wait $new_pid || { echo "build of this tree failed"; tail -20 "$OUT/ab/build_build-ab-new.log"; exit 1; }
[[ -x "$NEW" ]] || { echo "no binary at $NEW"; exit 1; }
[[ -n "${AB_BASE:-}" ]] && { wait $base_pid || { echo "build of $AB_BASE failed"; exit 1; }; }
echo "built, $(elapsed)"
failed=0 # a check or a sanitizer that did not pass: the script's exit code
for v in ${CHECKS:-}; do
  timeout 120 $NEW --check --variant "$v" > "$OUT/ab/check_$v.log" 2>&1
  rc=$?; [[ $rc == 0 ]] || failed=1
  echo "check $v: exit $rc ($(tail -1 "$OUT/ab/check_$v.log")), $(elapsed)"
  grep FAIL "$OUT/ab/check_$v.log" | head -5
done
for v in ${SANITIZE:-}; do
  for tool in memcheck racecheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 $NEW --check --variant "$v" --check-max 1000 \
      > "$OUT/ab/${tool}_$v.log" 2>&1
    rc=$?; [[ $rc == 0 ]] || failed=1
    echo "$tool $v: exit $rc ($(tail -1 "$OUT/ab/${tool}_$v.log")), $(elapsed)"
  done
done
run=0
for spec in "$@"; do
  tree=${spec%%:*} v=${spec#*:} run=$((run + 1))
  [[ $tree == base ]] && bin=$BASE extra=${BASE_ARGS:-} || bin=$NEW extra=${NEW_ARGS:-}
  name=$(printf '%02d_%s_%s' $run "$tree" "$v")
  timeout 120 $bin --bench --variant "$v" $extra --csv "$OUT/ab/$name.csv" > "$OUT/ab/$name.log" 2>&1
  echo "== $spec: exit $?, $(elapsed)"
  [[ -s "$OUT/ab/$name.csv" ]] || { tail -1 "$OUT/ab/$name.log"; continue; }
  python3 - "$OUT/ab/$name.csv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    p = r["problem"]
    if p.startswith(("greedy decode", "serving, batch 1,", "serving, batch 8,")):
        print(f"   {p[:62]:62s} {float(r['time_ms']) * 1000:8.1f} µs")
PY
  grep -A8 "inside one step, batch 1, context 130" "$OUT/ab/$name.log" | grep -v "^ *phase" | cut -c1-100
done
tar czf "$OUT/stage10_ab.tar.gz" -C "$OUT" ab && rm -rf "$OUT/ab"
exit $failed
