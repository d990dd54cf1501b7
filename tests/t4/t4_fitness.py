#!/usr/bin/env python3
"""T4 fitness: does every kernel the T4's path launches fit a T4 (sm_75)?

For one stage program it joins two facts, neither of which needs a GPU here:

* what each kernel *needs*, read from the sm_75 cubin the build embedded in the
  program (`cuobjdump -res-usage -arch sm_75`): registers per thread, static
  shared memory, local memory (spills and stack);
* what each launcher *asks for* on the T4's path: threads per block and dynamic
  shared memory, recorded on a GPU with `WB_EMULATE_T4=1` and the CUPTI launch
  recorder over the stage's default run and its `--check` sweep
  (tests/t4/launches_sm75.csv, made by scripts/record_t4_launches.sh).

and fails when a launch needs more than a T4 gives: 1024 threads per block,
255 registers per thread, 64 KB of shared memory per block (static + dynamic),
64 K registers per SM for one block at its launch size, or a kernel the T4's
path launches that has no sm_75 code at all. It prints, per kernel, registers,
shared memory and the theoretical occupancy on a T4, then lists the kernels that
are built but never launched on the T4's path (guarded at run time: they need
sm_80 or sm_90) and those that have no sm_75 code (built for sm_90a only).

Standard library only. Exit 0: fits; 1: something does not fit; 2: usage.
"""
import argparse
import collections
import csv
import os
import re
import shutil
import subprocess
import sys

# The T4 (TU104, compute capability 7.5): CUDA C Programming Guide, "Compute
# Capabilities" table, and the T4 datasheet.
T4 = {
    "threads_per_block": 1024,
    "regs_per_thread": 255,
    "smem_per_block": 64 * 1024,   # with the opt-in above 48 KB
    "smem_default_block": 48 * 1024,  # without it
    "smem_per_sm": 64 * 1024,
    "regs_per_sm": 64 * 1024,
    "warps_per_sm": 32,
    "blocks_per_sm": 16,
    "reg_alloc_unit": 256,         # registers are given to a warp in units of 256
    "smem_alloc_unit": 256,        # bytes
}

Kernel = collections.namedtuple("Kernel", "regs shared local stack")


# CUB puts the architectures it was built for into its namespace (CUB_300001_SM_900
# on an sm_90-only build, CUB_300001_SM_750_800_900 here): the same kernel either way.
CUB_NAMESPACE = re.compile(r"\d+CUB_\d+_SM_[0-9_]+")
# Kernels of the libraries the stages call (cuBLAS, cuBLASLt): they ship their own
# code for every architecture and are not in the program's cubins. CUB's (the peer
# of stage 02) are in them, but named after the CUB that built them: a build with
# another CUDA Toolkit (12.4's CUB 2.3) has other names for them, and CUB sizes its
# launches per architecture itself.
LIBRARY_KERNEL = re.compile(r"cublas|cutlass|^nvjet_|^sm\d+_xmma_|^_ZN3cub")


def normalise(name):
    return CUB_NAMESPACE.sub("CUB", name)


def cuobjdump_path(given):
    for cand in (given, shutil.which("cuobjdump")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def resource_usage(cuobjdump, binary):
    """{arch: {mangled kernel name: Kernel}} for every ELF image in the binary."""
    out = subprocess.run([cuobjdump, "-res-usage", binary], check=True, capture_output=True, text=True).stdout
    images = collections.defaultdict(dict)
    arch, in_elf, name = None, False, None
    for line in out.splitlines():
        if line.startswith("Fatbin elf code"):
            in_elf = True
        elif line.startswith("Fatbin ptx code"):
            in_elf = False
        m = re.match(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function (\S+):", line)
        if m and in_elf:
            name = m.group(1)
            continue
        m = re.match(r"\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", line)
        if m and in_elf and name:
            reg, stack, shared, local = map(int, m.groups())
            images[arch][normalise(name)] = Kernel(reg, shared, local, stack)
            name = None
    return images


def demangle(names):
    """Readable names through c++filt where there is one (names unchanged otherwise)."""
    filt = shutil.which("c++filt") or shutil.which("cu++filt")
    if not filt or not names:
        return {n: n for n in names}
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def round_up(x, unit):
    return (x + unit - 1) // unit * unit


def t4_occupancy(regs, smem_bytes, threads):
    """Resident blocks per SM on a T4 and the fraction of its 32 warps they fill."""
    warps = (threads + 31) // 32
    regs_per_warp = round_up(max(regs, 1) * 32, T4["reg_alloc_unit"])
    limits = [T4["blocks_per_sm"], T4["warps_per_sm"] // warps, T4["regs_per_sm"] // (regs_per_warp * warps)]
    if smem_bytes > 0:
        limits.append(T4["smem_per_sm"] // round_up(smem_bytes, T4["smem_alloc_unit"]))
    blocks = max(0, min(limits))
    return blocks, blocks * warps / T4["warps_per_sm"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--program", required=True, help="the stage program's target name, e.g. stage06_flash_attention")
    ap.add_argument("--binary", required=True, help="path of the built stage program")
    ap.add_argument("--launches", required=True, help="the recorded launches (tests/t4/launches_sm75.csv)")
    ap.add_argument("--cuobjdump", help="cuobjdump to use (default: the one on PATH)")
    args = ap.parse_args()

    tool = cuobjdump_path(args.cuobjdump)
    if not tool:
        print("t4_fitness: cuobjdump not found (it comes with the CUDA Toolkit; or: pip install nvidia-cuda-cuobjdump)")
        return 2
    if not os.path.isfile(args.binary):
        print(f"t4_fitness: no such program '{args.binary}' (build it first)")
        return 2
    launches = collections.defaultdict(set)  # kernel -> {(threads, dynamic smem)}
    with open(args.launches, newline="") as f:
        for row in csv.reader(f):
            if not row or row[0].startswith("#") or row[0] != args.program:
                continue
            launches[normalise(row[1])].add((int(row[2]), int(row[3])))
    if not launches:
        print(f"t4_fitness: {args.launches} has no launches of {args.program}: record them on a GPU "
              "(scripts/record_t4_launches.sh) and commit the file")
        return 1

    images = resource_usage(tool, args.binary)
    sm75 = images.get("sm_75", {})
    if not sm75:
        print(f"t4_fitness: {args.binary} has no sm_75 code: build with CMAKE_CUDA_ARCHITECTURES including 75")
        return 1
    names = demangle(sorted(set(launches) | set().union(*[set(k) for k in images.values()])))
    short = {n: re.sub(r"\(.*", "", names[n]) if names[n] != n else n for n in names}

    failures, library = [], []
    print(f"{args.program}: the kernels the T4's path launches, as the sm_75 cubin builds them")
    print(f"{'kernel':<60} {'threads':>7} {'regs':>4} {'smem static+dyn':>16} {'local':>5} {'blocks/SM':>9} "
          f"{'occupancy':>9}  fits")
    for kernel in sorted(launches, key=lambda k: short.get(k, k)):
        if kernel not in sm75:
            if any(kernel in img for img in images.values()):
                failures.append(f"{short[kernel]}: launched on the T4's path but has no sm_75 code")
            elif LIBRARY_KERNEL.search(kernel):
                library.append(kernel)  # a library's kernel (cuBLAS): not in this program's cubins
            else:
                failures.append(f"{short[kernel]}: recorded as launched, but this program has no such kernel: "
                                "a launcher changed; re-record tests/t4/launches_sm75.csv "
                                "(scripts/record_t4_launches.sh on a GPU)")
            continue
        k = sm75[kernel]
        for threads, dyn in sorted(launches[kernel]):
            smem = k.shared + dyn
            why = []
            if threads > T4["threads_per_block"]:
                why.append(f"{threads} threads per block > {T4['threads_per_block']}")
            if k.regs > T4["regs_per_thread"]:
                why.append(f"{k.regs} registers per thread > {T4['regs_per_thread']}")
            if smem > T4["smem_per_block"]:
                why.append(f"{smem} B shared memory per block > {T4['smem_per_block']}")
            if round_up(k.regs * 32, T4["reg_alloc_unit"]) * ((threads + 31) // 32) > T4["regs_per_sm"]:
                why.append(f"{k.regs} registers x {threads} threads > {T4['regs_per_sm']} per SM")
            blocks, occ = t4_occupancy(k.regs, smem, threads)
            if blocks == 0 and not why:
                why.append("no block fits on an SM")
            label = short[kernel][:60]
            print(f"{label:<60} {threads:>7} {k.regs:>4} {k.shared:>7}+{dyn:<8} {k.local:>5} {blocks:>9} "
                  f"{100 * occ:>8.0f}%  {'yes' if not why else 'NO: ' + '; '.join(why)}")
            for w in why:
                failures.append(f"{short[kernel]} at {threads} threads, {dyn} B dynamic: {w}")

    not_launched = sorted(short[n] for n in sm75 if n not in launches)
    if not_launched:
        print(f"\nbuilt for sm_75 but not launched on the T4's path (guarded at run time, or peers' helpers):")
        for n in not_launched:
            print(f"  {n}")
    newer_only = sorted({short[n] for arch, img in images.items() if arch != "sm_75" for n in img if n not in sm75})
    if newer_only:
        print(f"\nno sm_75 code at all (newer architectures only; the program skips them on a T4):")
        for n in newer_only:
            arches = sorted(a for a, img in images.items() if any(short[m] == n for m in img))
            print(f"  {n}  [{', '.join(arches)}]")
    if library:
        print(f"\nlibrary kernels launched (cuBLAS ships its own sm_75 code; CUB's as this toolkit's CUB names them): "
              f"{len(library)}")
    if failures:
        print(f"\n{args.program}: {len(failures)} launch(es) do not fit a T4:")
        for f_ in failures:
            print(f"  {f_}")
        return 1
    print(f"\n{args.program}: every launch of the T4's path fits a T4 "
          f"({sum(len(v) for k, v in launches.items() if k in sm75)} launch shapes, {len(set(launches) & set(sm75))} kernels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
