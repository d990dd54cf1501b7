#!/usr/bin/env bash
# On a GPU machine: one stage's variants under Nsight Compute, a short fixed set of
# counters a learner can read, written as plots/results/<gpu>/ncu_stageNN.csv.
#
#   scripts/profile.sh STAGE [VARIANT ...]     e.g. scripts/profile.sh 01 v1 v3
#
# Each variant's default run (its timed launch, one timed run, no warm-up) goes
# under `ncu --clock-control none`; every kernel the variant launches is kept
# (the timer's own kernels, wb_*, are dropped), one row per kernel name, the
# median of its launches. With no VARIANT, the variants the stage's page turns on
# (PROFILED below). The counters (docs/method.md, "Profiling one variant"):
#   dram_pct          DRAM throughput, % of its peak
#   occupancy_pct     achieved occupancy: active warps, % of the SM's maximum
#   sectors_per_req   32-byte sectors per global load request (4 = coalesced fp32)
#   smem_conflicts    shared-memory bank conflicts (loads + stores), all launches' sum over launches
#   tensor_pct        tensor pipe busy, % of peak (mma.sync: hmma; wgmma: gmma), where the GPU counts it
#   stall_1..3        the three largest warp-stall reasons, cycles per issued instruction
# Environment: BUILD (default build), NCU (default ncu).
set -uo pipefail
stage=${1:?usage: scripts/profile.sh STAGE [VARIANT ...]}
shift
BUILD=${BUILD:-build}
NCU=${NCU:-ncu}
declare -A PROFILED=([01]="v1 v2 v3 v4" [02]="v2 v3 v4 v6" [03]="v3 v4 v5 v7 v8 v9" [04]="v1 v3" [05]="v2 v3 v4 v5"
                     [06]="v1 v3 v4 v7" [07]="v1 v2 v3" [08]="v1 v2" [09]="v2 v3 v5 v6 v7" [10]="v1 v2")
exe=$(ls "$BUILD"/bin/stage"${stage}"_* 2>/dev/null | head -1)
[[ -x $exe ]] || { echo "no $BUILD/bin/stage${stage}_*: build it first"; exit 2; }
variants=("$@")
[[ ${#variants[@]} -gt 0 ]] || read -ra variants <<< "${PROFILED[$stage]:-v1}"
metrics=(gpu__time_duration.sum dram__throughput.avg.pct_of_peak_sustained_elapsed sm__warps_active.avg.pct_of_peak_sustained_active
         l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
         l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
         sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
         sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active)
for reason in long_scoreboard short_scoreboard barrier mio_throttle lg_throttle math_pipe_throttle wait not_selected \
              membar no_instruction dispatch_stall tex_throttle drain sleeping branch_resolving imc_miss; do
  metrics+=("smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio")
done
# only the counters this GPU and ncu know (ncu refuses the whole run for one unknown name)
known=$("$NCU" --query-metrics --csv 2>/dev/null | cut -d, -f1 | tr -d '"')
keep=()
for m in "${metrics[@]}"; do grep -qx "${m%%.*}" <<< "$known" && keep+=("$m"); done
[[ ${#keep[@]} -gt 0 ]] || { echo "ncu knows none of the counters (is ncu the CUDA 12+ Nsight Compute?)"; exit 1; }
list=$(IFS=,; echo "${keep[*]}")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
raw=$(mktemp)
for v in "${variants[@]}"; do
  echo "stage $stage $v: profiling ($exe --variant $v --iters 1 --warmup 0)"
  args=(--variant "$v" --iters 1 --warmup 0)
  limit=()
  # stage 10: the decode linear alone, which --bench times first (the rest of the bench is thousands of launches)
  [[ $stage == 10 ]] && args+=(--bench --dtype fp16) && limit=(--launch-count 24)
  # stage 06: the first problem (fp16 d64), since v1 at every size takes minutes under replay
  [[ $stage == 06 ]] && limit=(--launch-count 8)
  timeout "${NCU_TIMEOUT_S:-180}" "$NCU" --clock-control none "${limit[@]}" --metrics "$list" --csv --page raw "$exe" "${args[@]}" 2>/dev/null \
    | sed -n '/^"ID"/,$p' | sed "s/^/$v,/" >> "$raw" || echo "ncu failed on $v"
done
python3 - "$raw" "$gpu" "$stage" <<'PY'
import csv, io, os, re, statistics, sys
raw, gpu, stage = sys.argv[1:4]
rows, header = [], None
for line in open(raw):
    variant, rest = line.split(",", 1)
    rec = next(csv.reader(io.StringIO(rest)))
    if rec[0] == "ID":
        header = rec
        continue
    if header and len(rec) == len(header) and rec[0].isdigit():
        rows.append((variant, dict(zip(header, rec))))
def num(d, k):
    try: return float(d.get(k, "").replace(",", ""))
    except ValueError: return float("nan")
# the timer's own kernels (wb_*: the L2 sweep, the hold) and the library peer's (cuBLAS, cuBLASLt,
# cuDNN), which the program times beside every variant
not_ours = re.compile(r"^(void )?(wb_|nvjet|sm\d+_xmma|cutlass|cublas|cudnn|gemv|gemmk|splitKreduce|ampere_|sm90_)")
by = {}
for variant, d in rows:
    name = d.get("Kernel Name", "?")
    if not not_ours.match(name):
        by.setdefault((variant, re.sub(r"\(.*", "", name)), []).append(d)
# a kernel's main launches: a reduction's second pass, or a check-sized problem, is the same kernel on
# a few hundred elements; the row describes the launches that take the time
for key, ds in by.items():
    longest = max(num(d, "gpu__time_duration.sum") for d in ds)
    if longest == longest:
        by[key] = [d for d in ds if num(d, "gpu__time_duration.sum") >= 0.5 * longest]
def med(ds, k):
    v = [num(d, k) for d in ds if num(d, k) == num(d, k)]
    return statistics.median(v) if v else float("nan")
out = []
for (variant, kernel), ds in by.items():
    stalls = sorted(((med(ds, k), re.search(r"stalled_(.*)_per_issue", k).group(1)) for k in ds[0]
                     if "issue_stalled" in k and med(ds, k) == med(ds, k)), reverse=True)[:3]
    sectors, requests = med(ds, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"), med(ds, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    tensor = max((med(ds, k) for k in ds[0] if k.startswith("sm__pipe_tensor_op")), default=float("nan"))
    f = lambda x, p=1: "" if x != x else f"{x:.{p}f}"
    out.append({"gpu": gpu, "stage": f"stage{stage}", "variant": variant, "kernel": kernel, "launches": len(ds),
                "dram_pct": f(med(ds, "dram__throughput.avg.pct_of_peak_sustained_elapsed")),
                "occupancy_pct": f(med(ds, "sm__warps_active.avg.pct_of_peak_sustained_active")),
                "sectors_per_req": f(sectors / requests if requests else float("nan"), 2),
                "smem_conflicts": f(med(ds, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum")
                                    + med(ds, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"), 0),
                "tensor_pct": f(tensor),
                **{f"stall_{i + 1}": f"{s[1]} {s[0]:.2f}" for i, s in enumerate(stalls)}})
slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
dest = os.path.join("plots", "results", slug, f"ncu_stage{stage}.csv")
os.makedirs(os.path.dirname(dest), exist_ok=True)
fields = ["gpu", "stage", "variant", "kernel", "launches", "dram_pct", "occupancy_pct", "sectors_per_req",
          "smem_conflicts", "tensor_pct", "stall_1", "stall_2", "stall_3"]
kept = []
if os.path.exists(dest):  # the other variants' rows stay
    done = {r["variant"] for r in out}
    kept = [r for r in csv.DictReader(open(dest)) if r["variant"] not in done]
with open(dest, "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in kept + out:
        w.writerow({k: r.get(k, "") for k in fields})
print(f"{len(out)} kernels -> {dest}")
PY
rm -f "$raw"
