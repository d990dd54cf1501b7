#!/usr/bin/env bash
# On a GPU machine: record what every stage launches on the T4's path, for the
# T4 fitness test. Each stage program runs its default problem (one timed run)
# and its --check sweep with WB_EMULATE_T4=1 (it takes every decision a T4
# would: compute capability 7.5, 40 SMs) and the CUPTI launch recorder injected;
# the distinct (kernel, threads per block, dynamic shared memory) go to
# $OUT/launches_sm75.csv. Commit that file as tests/t4/launches_sm75.csv. Programs
# not in the build directory keep their rows from the committed file, so a partial
# build records only what it rebuilt.
# Usage: scripts/record_t4_launches.sh [build dir, default build]
set -uo pipefail
BUILD=${1:-build}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
recorder="$BUILD/tests/libwb_launch_recorder.so"
[ -f "$recorder" ] || { echo "no $recorder: build the target wb_launch_recorder first"; exit 2; }
log="$OUT/launches_sm75.csv"
raw=$(mktemp)
: > "$OUT/t4_path.log"
for exe in "$BUILD"/bin/stage*; do
  name=$(basename "$exe")
  for args in "--iters 1 --warmup 0" "--check"; do
    CUDA_INJECTION64_PATH="$PWD/$recorder" WB_LAUNCH_LOG="$raw" WB_LAUNCH_PROGRAM="$name" WB_EMULATE_T4=1 \
      "$exe" $args >> "$OUT/t4_path.log" 2>&1 || echo "$name $args exited $? (see t4_path.log)"
  done
done
# programs that were not built (TARGETS=… in gpu_run.sh) keep their rows from the committed file
recorded=$(cut -d, -f1 "$raw" | sort -u)
kept=$(mktemp)
if [ -f tests/t4/launches_sm75.csv ]; then
  grep -v '^#' tests/t4/launches_sm75.csv | while IFS= read -r line; do
    grep -qx "${line%%,*}" <<< "$recorded" || echo "$line"
  done > "$kept"
fi
{ echo "# program,kernel,threads_per_block,dynamic_smem_bytes: launches on the T4's path (WB_EMULATE_T4=1),"
  echo "# recorded by scripts/record_t4_launches.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  sort -u "$raw" "$kept"; } > "$log"
rm -f "$kept"
rm -f "$raw"
echo "$(grep -vc '^#' "$log") launch shapes recorded in $log"
