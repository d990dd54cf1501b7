#!/usr/bin/env python3
"""Plots and results tables of the workbook, from the stage programs' CSVs.

    plot.py draw   [--results DIR] [--out DIR]   one image per stage and GPU
    plot.py ingest DIR                           file DIR/stageNN.csv under results/<gpu>/
    plot.py tables [--check]                     rewrite (or, with --check, verify) the
                                                 measured tables in README.md and the stage pages
    plot.py splice RUN.csv [--results DIR]       put one --variant run's rows into the committed
                                                 CSV of its stage and GPU, in teaching order

Uses matplotlib and the standard library only. The tables sit between marker
comments (<!-- results:stage01 --> ... <!-- /results:stage01 -->, and
<!-- stages --> ... <!-- /stages --> in README.md), and so do the figures the
prose states (<!-- m stage=.. gpu=.. problem=".." variant=.. q=.. -->93.8%<!-- /m -->),
so the text and the measurements never drift apart: CI runs `tables --check`.
"""
import argparse
import csv
import functools
import glob
import io
import math
import os
import re
import shutil
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
IMAGES = os.path.join(HERE, "images")

# The ten stages (DESIGN.md): number, folder, the idea it teaches.
STAGES = [
    ("01", "01_vector_add", "threads, blocks, grids; coalescing; vector loads; the bandwidth roof"),
    ("02", "02_reduction", "shared-memory trees, warp shuffles, deterministic two-pass, CUB as peer"),
    ("03", "03_gemm", "naive to tensor cores; cuBLAS as peer"),
    ("04", "04_fused_gelu_linear", "kernel fusion: bias + GELU in the GEMM epilogue"),
    ("05", "05_softmax", "row reductions, online softmax, LayerNorm with Welford"),
    ("06", "06_flash_attention", "naive attention to FlashAttention-2 on tensor cores, FA3-style on Hopper"),
    ("07", "07_rope", "rotary embeddings: memory-bound elementwise work"),
    ("08", "08_paged_kv_cache", "paged KV cache: block manager, append and gather"),
    ("09", "09_paged_attention", "decode attention through the page table; split-K"),
    ("10", "10_gpt2_e2e", "GPT-2 124M end to end from the stages' kernels"),
]


# cuDNN attention through PyTorch 2.11 SDPA, B4 H12 N4096, TFLOP/s, measured apart (scripts/peers.py attention):
# the peer of stage 06's README line on a GPU whose run has no in-table peer.
CUDNN_SDPA_TFLOPS = {"H200": {"fp16 d64 non-causal": 454.0, "fp16 d64 causal": 376.0,
                              "fp16 d128 non-causal": 647.0, "fp16 d128 causal": 531.0}}
_CUDNN_H200 = CUDNN_SDPA_TFLOPS["H200"]

# What "roof" means in a stage's tables, where it is neither the copy bandwidth
# nor an in-table library peer.
# Per GPU (a substring of its name): the peers measured apart, through PyTorch (scripts/peers.py).
# PyTorch 2.11's fp16 GPT-2 decode step in plain PyTorch, static KV cache, torch.compile(mode="reduce-overhead"), at
# the serving table's contexts, measured apart on each GPU (scripts/peers.py gpt2-compiled): tokens/s by batch. Drawn
# beside stage 10's serving lines and quoted under its tables.
SERVING_PEERS = {"H100": {1: 1926, 8: 13626, 32: 34174, 64: 46855},
                 "H200": {1: 1996, 8: 14145, 32: 38002, 64: 55927}}


def serving_peer_text(gpu):
    """The note's sentence on PyTorch's compiled decode step measured on `gpu` ("H100", "H200")."""
    t = SERVING_PEERS[gpu]
    return (f"PyTorch 2.11's fp16 decode step of the same shape on the {gpu}, in plain PyTorch with a static KV cache "
            "and torch.compile(mode=\"reduce-overhead\"), at the serving table's contexts (scripts/peers.py "
            f"gpt2-compiled): {t[1]} tok/s at batch 1, {t[8]} at batch 8, {t[32]} at 32, {t[64]} at 64")


ROOF_NOTES = {
    "06": {"H100": "× peer = over the unfused library peer (cuBLAS strided-batched GEMMs for QK^T and PV, stage 05's "
                   "softmax), measured in the same run; for comparison, PyTorch 2.11 SDPA (FlashAttention-2 backend) "
                   "measured on the same H100 at B4 H12 N4096 fp16: 290 / 339 TFLOP/s non-causal d64 / d128, "
                   "243 / 279 causal",
           "H200": "× peer = over the unfused library peer (cuBLAS strided-batched GEMMs for QK^T and PV, stage 05's "
                   "softmax), measured in the same run; for comparison, PyTorch 2.11 SDPA on the same H200 at B4 H12 "
                   f"N4096 fp16 (scripts/peers.py): cuDNN {_CUDNN_H200['fp16 d64 non-causal']:.0f} / "
                   f"{_CUDNN_H200['fp16 d128 non-causal']:.0f} TFLOP/s non-causal d64 / d128, "
                   f"{_CUDNN_H200['fp16 d64 causal']:.0f} / {_CUDNN_H200['fp16 d128 causal']:.0f} causal; "
                   "FlashAttention-2 292 / 348 and 243 / 286"},
    "10": {"H100": "prefill: × peer = over Hugging Face transformers (eager, PyTorch 2.11) measured on an H100, B8 x "
                   "T1024 138k tok/s fp32 and 492k fp16; decode and serving: roof = the tokens per second if a step "
                   "took only the time to read what it must, every weight once (495 MB fp32, 247 MB fp16) and each "
                   "sequence's K and V at its mean context, at the copy bandwidth measured in the run (HF's batch-1 "
                   "fp32 decode on the H100: 112 tok/s). " + serving_peer_text("H100"),
           "H200": "prefill: × peer = over Hugging Face transformers (eager, PyTorch 2.11) measured on an H200, B8 x "
                   "T1024 143k tok/s fp32 and 471k fp16 (scripts/peers.py); decode and serving: roof = the tokens per "
                   "second if a step took only the time to read what it must, every weight once (495 MB fp32, 247 MB "
                   "fp16) and each sequence's K and V at its mean context, at the copy bandwidth measured in the run "
                   "(HF's batch-1 fp32 decode on the H200: 111 tok/s). " + serving_peer_text("H200")},
}


def roof_note(stage, gpu):
    """The note on a stage's peers measured apart, for this GPU (empty where none was measured on it)."""
    return next((text for name, text in ROOF_NOTES.get(stage, {}).items() if name in gpu), "")


# PyTorch 2.11 SDPA (FlashAttention-2 backend), fp16 d64 non-causal, B4 H12 N4096, on the H100 (stage 06's note).
PYTORCH_SDPA_D64_TFLOPS = 290.0


def finite(x):
    return x == x and x not in (float("inf"), float("-inf"))


def slug(gpu):
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'"""
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")


def is_exercise_line(line):
    """A CSV line of the exercise slot (variant `ex`, the learner's own kernel): never committed."""
    r = next(csv.reader([line]), [])
    return len(r) > 4 and r[4] == "ex"


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("time_ms", "throughput", "roof", "pct_roof", "speedup_vs_v1", "max_err", "x_peer", "bytes", "flops"):
            v = r.get(k)
            r[k] = float(v) if v not in (None, "", "-") else float("nan")  # empty: no value
        r["peer"] = r.get("peer") == "1"
        r["ok"] = r.get("ok") == "1"
    return rows


def group_by_problem(rows):
    groups = {}
    for r in rows:  # dicts keep insertion order: teaching order survives
        groups.setdefault((r["problem"], r["size"]), []).append(r)
    return groups


def result_sets(results_dir):
    """(gpu slug, stage number, csv path) for every committed CSV."""
    out = []
    if not os.path.isdir(results_dir):
        return out
    for gpu in sorted(os.listdir(results_dir)):
        d = os.path.join(results_dir, gpu)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            m = re.fullmatch(r"stage(\d\d)\.csv", name)
            if m:
                out.append((gpu, m.group(1), os.path.join(d, name)))
    return out


def image_name(stage, gpu_slug):
    return f"stage{stage}_{gpu_slug}.png"


def draw(results_dir, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    sets = result_sets(results_dir)
    if not sets:
        sys.exit(f"no results under {results_dir}")
    for gpu_slug, stage, path in sets:
        all_rows = rows = read_csv(path)
        if stage == "10":  # the serving rows have a plot of their own (draw_serving)
            rows = [r for r in rows if not r["problem"].startswith("serving")]
        groups = group_by_problem(rows)
        # each panel as tall as its rows, plus room for its title and axis
        heights = [0.28 * len(rs) + 0.95 for rs in groups.values()]
        fig, axes = plt.subplots(len(groups), 1, figsize=(10, sum(heights) + 0.6), squeeze=False,
                                 gridspec_kw={"height_ratios": heights})
        for ax, ((problem, size), rs) in zip(axes[:, 0], groups.items()):
            labels = [f"{r['variant']}: {r['name']}" for r in rs]
            has_roof = all(finite(r["pct_roof"]) for r in rs)
            has_peer = not has_roof and all(finite(r["x_peer"]) for r in rs)
            colors = ["#999999" if r["peer"] else "#2a6ebb" for r in rs]
            y = range(len(rs))
            if has_peer:  # bars in × the library peer, the peer a dashed line at 1 (log scale: 0.01× to 30×)
                bars = ax.barh(list(y), [r["x_peer"] for r in rs], color=colors)
                for bar, r in zip(bars, rs):
                    ax.text(bar.get_width() * 1.05, bar.get_y() + bar.get_height() / 2,
                            f"{r['throughput']:.1f} {r['unit']} ({r['x_peer']:.2f}×)", va="center", fontsize=8)
                ax.axvline(1.0, color="#c0392b", linestyle="--", linewidth=1)
                ax.set_xscale("log")
                ax.set_xlim(min(0.5, 0.5 * min(r["x_peer"] for r in rs)), 4 * max(1.0, max(r["x_peer"] for r in rs)))
                ax.xaxis.set_minor_formatter(plt.NullFormatter())  # a narrow range labels its minor ticks: they collide
                ax.set_xlabel("× the library peer, same run (log scale; dashed line: the peer)", fontsize=8)
            elif has_roof:  # bars in % of the roof, the roof a dashed line at 100
                bars = ax.barh(list(y), [r["pct_roof"] for r in rs], color=colors)
                for bar, r in zip(bars, rs):
                    ax.text(bar.get_width() + 1, bar.get_y() + bar.get_height() / 2,
                            f"{r['throughput']:.0f} {r['unit']} ({r['pct_roof']:.1f}%)", va="center", fontsize=8)
                ax.axvline(100, color="#c0392b", linestyle="--", linewidth=1)
                ax.set_xlim(0, max(125, 1.35 * max(r["pct_roof"] for r in rs)))
                ax.set_xlabel("% of roof (dashed line; grey bars: library peer)", fontsize=8)
            else:  # no roof for this problem: plain throughput
                top = max(r["throughput"] for r in rs)
                bars = ax.barh(list(y), [r["throughput"] for r in rs], color=colors)
                for bar, r in zip(bars, rs):
                    ax.text(bar.get_width() + top * 0.01, bar.get_y() + bar.get_height() / 2,
                            f"{r['throughput']:.1f} {r['unit']}", va="center", fontsize=8)
                ax.set_xlim(0, top * 1.3)
                ax.set_xlabel(f"{rs[0]['unit']} (no roof for this problem)", fontsize=8)
            ax.set_yticks(list(y))
            ax.set_yticklabels(labels, fontsize=8)
            ax.invert_yaxis()  # v1 on top: teaching order, never sorted by speed
            ax.set_title(textwrap.fill(f"{problem}, {size}", 110), fontsize=9, loc="left")
        roof = rows[0]["roof"]
        if stage == "10":
            what = "decode: % of the bytes a step must read at the copy bandwidth; prefill: × HF transformers"
        elif rows[0]["unit"] == "GB/s":
            what = f"roof {roof:.0f} {rows[0]['unit']}"
        elif stage == "06":
            what = "× the unfused cuBLAS + softmax peer, same run"
        elif stage == "04":
            what = "× cuBLASLt with its GELU_BIAS epilogue, same run"
        else:
            what = "× the cuBLAS peer, same run"
        height = sum(heights) + 0.6
        fig.suptitle(f"Stage {stage} on {rows[0]['gpu']} — {what}", fontsize=10, y=1 - 0.1 / height)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / height))  # room for the title line, no blank band under it
        target = os.path.join(out_dir, image_name(stage, gpu_slug))
        fig.savefig(target, dpi=110)
        plt.close(fig)
        print(f"drew {os.path.relpath(target, ROOT)}")
        if stage == "10":
            draw_serving(plt, all_rows, gpu_slug, out_dir)
        draw_roofline(plt, all_rows, stage, gpu_slug, results_dir, out_dir)
    draw_attention_memory(plt, out_dir)


def roofline_name(stage, gpu_slug):
    return f"stage{stage}_roofline_{gpu_slug}.png"


# How many of a stage's problems its roofline chart shows (its first ones, the page's main tables).
ROOFLINE_PROBLEMS = 4


@functools.lru_cache(maxsize=None)  # once per GPU: every stage's chart uses them
def gpu_ceilings(results_dir, gpu_slug):
    """The measured ceilings of one GPU from its committed results: the copy roof (GB/s, any memory-bound stage's
    roof column) and the compute peaks the in-run peers reached (stage 03's cuBLAS SGEMM and HGEMM, TFLOP/s)."""
    copy, peaks = float("nan"), ()
    for slug_, stage, path in result_sets(results_dir):
        if slug_ != gpu_slug:
            continue
        rows = read_csv(path)
        if not finite(copy):
            copy = next((r["roof"] for r in rows if r["unit"] == "GB/s" and finite(r["roof"])), copy)
        if stage == "03":
            for vid, label in (("cublas", "FMA peak (cuBLAS SGEMM, measured)"),
                               ("cublas-h", "tensor-core peak (cuBLAS HGEMM, measured)")):
                r = next((r for r in rows if r["variant"] == vid), None)
                if r:
                    peaks += ((r["throughput"], label),)
    return copy, peaks  # a tuple: the cache hands the same value to every caller


def draw_roofline(plt, rows, stage, gpu_slug, results_dir, out_dir):
    """A stage's roofline: each variant a point at (FLOPs per byte it must move, FLOP/s it reached), by the CSV's
    bytes and flops columns, joined in teaching order per problem; the GPU's measured copy roof and compute peaks
    as the ceilings. Stages that do no arithmetic (a copy) have none."""
    pts = [r for r in rows if finite(r["bytes"]) and finite(r["flops"]) and r["flops"] > 0 and r["bytes"] > 0
           and finite(r["time_ms"]) and r["time_ms"] > 0]
    if not pts:
        return
    copy, peaks = gpu_ceilings(results_dir, gpu_slug)
    groups = list(group_by_problem(pts).items())[:ROOFLINE_PROBLEMS]
    fig, ax = plt.subplots(figsize=(10, 6))
    xs = [r["flops"] / r["bytes"] for _, rs in groups for r in rs]
    ys = [r["flops"] / (r["time_ms"] * 1e-3) / 1e12 for _, rs in groups for r in rs]
    ridges = [p / (copy / 1e3) for p, _ in peaks] if finite(copy) else []  # where each peak meets the copy roof
    lo, hi = min(xs + ridges) / 4, max(xs + ridges) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    if finite(copy):
        top = max([p for p, _ in peaks] + [max(ys) * 2])
        ax.plot(grid, [min(copy * x / 1e3, top) for x in grid], "--", color="#c0392b", linewidth=1,
                label=f"copy roof {copy:.0f} GB/s (measured)")
    for (peak, label), style in zip(peaks, (":", "-.")):
        ax.plot(grid, [min(peak, copy * x / 1e3) if finite(copy) else peak for x in grid], style, color="#555555",
                linewidth=1, label=f"{label}: {peak:.0f} TFLOP/s")
    for ((problem, size), rs), color in zip(groups, ("#2a6ebb", "#e67e22", "#27ae60", "#8e44ad")):
        x = [r["flops"] / r["bytes"] for r in rs]
        y = [r["flops"] / (r["time_ms"] * 1e-3) / 1e12 for r in rs]
        ax.plot(x, y, "-", color=color, linewidth=0.8, alpha=0.5)
        ax.scatter(x, y, color=[("#999999" if r["peer"] else color) for r in rs], s=22, zorder=3,
                   label=textwrap.shorten(f"{problem}, {size}", 70))
        # points closer than 12% in FLOP/s share one label ("v10-v14, cublas-h"): their labels would overprint
        clusters = []
        for r, xi, yi in sorted(zip(rs, x, y), key=lambda t: t[2]):
            if clusters and yi < clusters[-1][2] * 1.12 and abs(math.log10(xi / clusters[-1][1])) < 0.05:
                clusters[-1][0].append(r["variant"])
                clusters[-1][2] = yi
            else:
                clusters.append([[r["variant"]], xi, yi])
        for names, xi, yi in clusters:
            ax.annotate(", ".join(names), (xi, yi), textcoords="offset points", xytext=(4, 3), fontsize=7, color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity: FLOPs per byte the variant must move (the stage's model)", fontsize=9)
    ax.set_ylabel("TFLOP/s reached", fontsize=9)
    ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"Stage {stage} on {rows[0]['gpu']}: roofline (grey points: library peers)", fontsize=10)
    fig.tight_layout()
    target = os.path.join(out_dir, roofline_name(stage, gpu_slug))
    fig.savefig(target, dpi=110)
    plt.close(fig)
    print(f"drew {os.path.relpath(target, ROOT)}")


def draw_serving(plt, rows, gpu_slug, out_dir):
    """Stage 10's serving table as lines: tokens/s against the batch, one line per variant and precision, and the
    decode roof of each precision (dashed: fp32; dotted: fp16). Nothing when the CSV has no serving rows."""
    serving = [r for r in rows if r["problem"].startswith("serving, batch ") and finite(r["throughput"])]
    if not serving:
        return
    batch = lambda r: int(re.match(r"serving, batch (\d+)", r["problem"]).group(1))
    fig, ax = plt.subplots(figsize=(9, 4.6))
    colors = plt.get_cmap("tab20").colors  # 20 distinct colours: the default cycle repeats after 10 lines
    lines = list(dict.fromkeys((precision(r), r["variant"]) for r in serving))
    for i, (dtype, v) in enumerate(lines):
        rs = sorted((r for r in serving if r["variant"] == v and precision(r) == dtype), key=batch)
        ax.plot([batch(r) for r in rs], [r["throughput"] for r in rs], "o-" if dtype == "fp16" else "s--",
                color=colors[i % len(colors)], label=f"{v} {dtype}: {rs[0]['name']}")
    for dtype, style in (("fp32", "--"), ("fp16", ":")):
        rs = sorted({batch(r): r for r in serving if precision(r) == dtype}.values(), key=batch)
        if rs:
            ax.plot([batch(r) for r in rs], [r["roof"] for r in rs], style, color="#555555", linewidth=1,
                    label=f"the decode roof ({dtype}): the bytes a step must read at the copy bandwidth")
    peer = next((t for name, t in SERVING_PEERS.items() if name in serving[0]["gpu"]), None)
    if peer:
        ax.plot(sorted(peer), [peer[b] for b in sorted(peer)], "x-", color="black", linewidth=1,
                label="PyTorch 2.11 fp16, torch.compile (reduce-overhead), measured apart on the same GPU")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    batches = sorted({batch(r) for r in serving})
    ax.set_xticks(batches)
    ax.set_xticklabels([str(b) for b in batches])
    ax.set_xlabel("sequences decoded together (batch)")
    ax.set_ylabel("tokens/s (all sequences)")
    ax.set_title(f"Stage 10: serving, mixed prompt lengths, on {serving[0]['gpu']}", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # below the axes, not over the lines
    ax.grid(True, which="both", alpha=0.3)
    target = os.path.join(out_dir, f"stage10_serving_{gpu_slug}.png")
    fig.savefig(target, dpi=110, bbox_inches="tight")  # the legend outside the axes included
    plt.close(fig)
    print(f"drew {os.path.relpath(target, ROOT)}")


def precision(r):
    """The storage of a row whose problem names it last ("..., fp16"), else fp32."""
    return "fp16" if r["problem"].endswith("fp16") else "fp32"


def draw_attention_memory(plt, out_dir):
    """Stage 06: memory of naive attention (the B·H·N² fp32 score matrix), of the
    unfused peer (S and an fp16 P), of v6 (the same for 256 query rows of every head)
    and of the tiled variants (Q, K, V, O and L only), by N, at B4 H12 d64 fp16. The
    same formulas as attention_naive_workspace_bytes(), attention_unfused_workspace_bytes()
    and attention_chunked_workspace_bytes() in stages/06_flash_attention."""
    B, H, d, chunk = 4, 12, 64, 256
    ns = [512 * 2 ** i for i in range(7)]
    io = [4 * B * H * n * d * 2 + B * H * n * 4 for n in ns]
    naive = [x + B * H * n * n * 4 for x, n in zip(io, ns)]
    peer = [x + B * H * n * n * 6 for x, n in zip(io, ns)]
    chunked = [x + B * H * min(n, chunk) * n * 6 for x, n in zip(io, ns)]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.loglog(ns, [x / 1e9 for x in naive], "o-", label="v1 naive: Q, K, V, O + the N×N scores (fp32)")
    ax.loglog(ns, [x / 1e9 for x in peer], "v-", label="unfused peer: + S (fp32) and P (fp16)")
    ax.loglog(ns, [x / 1e9 for x in chunked], "d-", label="v6: the peer's S and P for 256 query rows at a time")
    ax.loglog(ns, [x / 1e9 for x in io], "s-", label="v2–v5 tiled: Q, K, V, O + L")
    ax.axhline(80, color="#c0392b", linestyle="--", linewidth=1, label="80 GB (an H100's memory)")
    ax.axhline(16, color="#999999", linestyle=":", linewidth=1, label="16 GB (a T4's memory)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("GB on the GPU")
    ax.set_title("Stage 06: attention memory, B4 H12 d64 fp16 (computed, not measured)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    target = os.path.join(out_dir, "stage06_memory.png")
    fig.savefig(target, dpi=110)
    plt.close(fig)
    print(f"drew {os.path.relpath(target, ROOT)}")


def ingest(src_dir):
    n = 0
    for name in sorted(os.listdir(src_dir)):
        if not re.fullmatch(r"(ncu_)?stage\d\d\.csv", name):  # a stage's results, or its ncu counters
            continue
        path = os.path.join(src_dir, name)
        rows = read_csv(path)
        if not rows:
            print(f"skipped {path}: no rows")
            continue
        dest = os.path.join(RESULTS, slug(rows[0]["gpu"]))
        os.makedirs(dest, exist_ok=True)
        with open(path, newline="") as f:  # every row but the exercise slot's (`ex`: the learner's kernel)
            lines = f.read().splitlines(keepends=True)
        with open(os.path.join(dest, name), "w", newline="") as f:
            f.write("".join(l for i, l in enumerate(lines) if i == 0 or not is_exercise_line(l)))
        print(f"{path} -> {os.path.relpath(os.path.join(dest, name), ROOT)}")
        n += 1
    if n == 0:
        sys.exit(f"no stageNN.csv in {src_dir}")


def splice(path, results=RESULTS):
    """Put one run's rows (the CSV of a `--variant vN` run) into the committed CSV of its stage and GPU, keeping the
    other rows' text as it is: a row replaces the row of the same problem, size and variant, or goes after the last
    row of its problem whose variant comes before it in teaching order (a new problem goes at the end)."""
    def parse(line):
        return next(csv.DictReader(io.StringIO(header + line)))
    def key_and_order(line):
        r = parse(line)
        m = re.fullmatch(r"v(\d+)", r["variant"])
        return (r["problem"], r["size"]), r["variant"], int(m.group(1)) if m else 10 ** 9
    def lines_of(file):
        with open(file, newline="") as f:
            return [l if l.endswith("\n") else l + "\n" for l in f.read().splitlines(keepends=True)]
    header, *new_lines = lines_of(path)
    new_lines = [l for l in new_lines if not is_exercise_line(l)]  # never the exercise slot's rows
    if not new_lines:
        sys.exit(f"no rows in {path}")
    first = parse(new_lines[0])
    dest = os.path.join(results, slug(first["gpu"]), f"{first['stage']}.csv")
    dest_header, *lines = lines_of(dest)
    if dest_header != header:
        sys.exit(f"{path}: its columns differ from {dest}'s")
    for line in new_lines:
        key, variant, order = key_and_order(line)
        rows = [key_and_order(l) for l in lines]
        same = [i for i, (k, v, _) in enumerate(rows) if k == key and v == variant]
        if same:
            lines[same[0]] = line
            continue
        group = [i for i, (k, _, _) in enumerate(rows) if k == key]
        before = [i for i in group if rows[i][2] < order]
        at = (before[-1] if before else group[0] - 1) + 1 if group else len(lines)
        lines.insert(at, line)
    with open(dest, "w", newline="") as f:
        f.write(dest_header + "".join(lines))
    print(f"{path}: {len(new_lines)} rows -> {dest}")


def fmt_ms(ms):
    return f"{ms * 1000:.1f} µs" if ms < 1 else f"{ms:.3f} ms"


def variant_label(r):
    """A row's name in the pages' tables: the variant, marked when it is the peer."""
    return f"{r['variant']} (peer)" if r["peer"] and "peer" not in r["name"] else r["variant"]


def markdown_tables(rows, header, align, cells):
    """One markdown table per problem (a bold title, then `header`), each row's cells from `cells(r)`."""
    out = []
    for (problem, size), rs in group_by_problem(rows).items():
        out += [f"**{problem}, {size}**", "", "| " + " | ".join(header(rs)) + " |", align]
        out += ["| " + " | ".join(cells(r)) + " |" for r in rs]
        out.append("")
    return out


def stage_table(rows):
    """The markdown table of one stage's results (all problems)."""
    gpu = rows[0]["gpu"]
    if rows[0]["unit"] == "GB/s":
        roof = (f"roof = {rows[0]['roof']:.0f} GB/s (device-to-device copy measured in the same run)")
    else:
        roof = (roof_note(rows[0]["stage"][-2:], gpu) or
                "× peer = the throughput over the library peer's in each table, measured in the same run")
    by_peer = rows[0]["unit"] != "GB/s"  # compute-bound: the ratio to the library peer, "× peer"
    def cells(r):
        vs_v1 = f"{r['speedup_vs_v1']:.2f}×" if r["speedup_vs_v1"] > 0 else "–"
        tp = f"{r['throughput']:.0f}" if r["throughput"] >= 100 else f"{r['throughput']:.1f}"
        if by_peer:
            ratio = f"{r['x_peer']:.2f}×" if finite(r["x_peer"]) else "–"
        else:
            ratio = f"{r['pct_roof']:.1f}%" if finite(r["pct_roof"]) else "–"
        return [variant_label(r), r["name"], fmt_ms(r["time_ms"]), tp, ratio, vs_v1]

    out = [f"Measured on {gpu}; {roof}. Median of the timed runs.", ""]
    out += markdown_tables(rows, lambda rs: ["variant", "what it does", "time", rs[0]["unit"],
                                             "× peer" if by_peer else "% of roof", "vs v1"],
                           "|---|---|---:|---:|---:|---:|", cells)
    return "\n".join(out).rstrip()


# ---- stage 10's tables ------------------------------------------------------
# Stage 10 measures seven variants in two precisions on a dozen problems: one
# table a problem would fill its page, so its tables put the problems in columns.

STAGE10_DECODE = [("greedy decode, batch 1, kernel by kernel", "batch 1, kernel by kernel"),
                  ("greedy decode, batch 1, CUDA graph", "batch 1, CUDA graph"),
                  ("greedy decode, batch 1, steps queued on the GPU", "batch 1, steps queued"),
                  ("greedy decode, batch 8, CUDA graph", "batch 8, CUDA graph"),
                  ("greedy decode, batch 8, steps queued on the GPU", "batch 8, steps queued")]


def stage10_rows(rows):
    """(problem, variant) -> row, and the variants in teaching order."""
    return {(r["problem"], r["variant"]): r for r in rows}, list(dict.fromkeys(r["variant"] for r in rows))


def stage10_best_batch1(by, v, dtype):
    """The variant's fastest batch-1 decode row in `dtype` (whichever way its steps are launched), or None."""
    rs = [by.get((f"{p}, {dtype}", v)) for p, _ in STAGE10_DECODE if "batch 1" in p]
    rs = [r for r in rs if r and finite(r["throughput"])]
    return max(rs, key=lambda r: r["throughput"]) if rs else None


def stage10_table(rows):
    """Stage 10's measured tables: decode (a row a variant, the ways of launching in columns), prefill, serving
    and the decode linear alone."""
    by, variants = stage10_rows(rows)
    note = roof_note("10", rows[0]["gpu"]) or ("prefill: Hugging Face transformers not measured on this GPU; decode and "
                                               "serving: roof = the bytes a step must read at the copy bandwidth")
    out = [f"Measured on {rows[0]['gpu']}; {note}.", ""]
    for dtype in ("fp32", "fp16"):
        present = [v for v in variants if any((f"{p}, {dtype}", v) in by for p, _ in STAGE10_DECODE)]
        if not present:
            continue
        roof = {b: next((r["roof"] for (p, _), r in by.items() if p.startswith(f"greedy decode, batch {b},")
                         and p.endswith(dtype)), float("nan")) for b in (1, 8)}
        out += [f"**Greedy decode, {dtype}: time per step** (prompt 128, 128 steps; the roof {roof[1]:.0f} tok/s at "
                f"batch 1, {roof[8]:.0f} at batch 8)", "",
                "| variant | what it adds | " + " | ".join(h for _, h in STAGE10_DECODE) +
                " | best batch 1 | % of roof | vs v1 |", "|---|---|" + "---:|" * (len(STAGE10_DECODE) + 3)]
        base = stage10_best_batch1(by, present[0], dtype)
        for v in present:
            cells = [v, next(r["name"] for (p, vv), r in by.items() if vv == v and p.startswith("greedy"))]
            for p, _ in STAGE10_DECODE:
                r = by.get((f"{p}, {dtype}", v))
                cells.append(fmt_ms(r["time_ms"]) if r and finite(r["time_ms"]) else "–")
            best = stage10_best_batch1(by, v, dtype)
            cells += [f"{best['throughput']:.0f} tok/s", f"{best['pct_roof']:.1f}%",
                      f"{best['throughput'] / base['throughput']:.2f}×"] if best else ["–"] * 3
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    prefill = [r for r in rows if r["problem"].startswith("prefill")]
    if prefill:
        out += ["**Prefill, B8 × T1024** (v1's kernels in every variant)", "",
                "| precision | time | tok/s | × HF transformers |", "|---|---:|---:|---:|"]
        out += [f"| {precision(r)} | {fmt_ms(r['time_ms'])} | {r['throughput']:.0f} | "
                + (f"{r['x_peer']:.2f}× |" if finite(r["x_peer"]) else "– (not measured on this GPU) |")
                for r in prefill]
        out.append("")
    batches = sorted({int(re.match(r"serving, batch (\d+)", r["problem"]).group(1)) for r in rows
                      if r["problem"].startswith("serving")})
    for dtype in ("fp32", "fp16"):
        present = [v for v in variants if (f"serving, batch 1, mixed prompt lengths, {dtype}", v) in by]
        if not present:
            continue
        out += [f"**Serving, {dtype}: tokens per second** (prompts of 16-512 tokens, 32 steps; % of the roof)", "",
                "| variant | " + " | ".join(f"batch {b}" for b in batches) + " |", "|---|" + "---:|" * len(batches)]
        for v in present:
            cells = [v]
            for b in batches:
                r = by.get((f"serving, batch {b}, mixed prompt lengths, {dtype}", v))
                cells.append(f"{r['throughput']:.0f} ({r['pct_roof']:.0f}%)" if r and finite(r["throughput"]) else "–")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    alone = [r for r in rows if r["problem"].startswith("decode linear alone")]
    if alone:
        layers = list(dict.fromkeys((re.match(r"decode linear alone \((.*?)\)", r["problem"]).group(1), r["size"])
                                    for r in alone))
        cols = list(dict.fromkeys((r["variant"], precision(r)) for r in alone))
        out += [f"**The decode linear alone, M = 1: GB/s** (% of the copy roof, {alone[0]['roof']:.0f} GB/s)", "",
                "| layer | K × N | " + " | ".join(f"{v} {d}" for v, d in cols) + " |", "|---|---|" + "---:|" * len(cols)]
        for layer, size in layers:
            cells = [layer, size.replace("K", "").replace(" x N", " × ")]
            for v, d in cols:
                r = next((r for r in alone if r["variant"] == v and precision(r) == d and f"({layer})" in r["problem"]), None)
                cells.append(f"{r['throughput']:.0f} ({r['pct_roof']:.0f}%)" if r and finite(r["throughput"]) else "–")
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out).rstrip()


def stage10_t4_table(rows):
    """Stage 10's predicted-T4 table: the T4 estimate of each decode row of the variants that run on one."""
    by, variants = stage10_rows(rows)
    out = ["**Predicted, not measured.** A decode step reads every weight once; on a T4 (320 GB/s) that alone takes "
           "1.55 ms in fp32, 0.78 ms in fp16. Batch 1-8 steps are bound by launches and latency beside it: the estimate "
           f"is the T4's weight streaming plus the time the {rows[0]['gpu']} step took beyond its own streaming. v1-v3 "
           "run on a T4 in both precisions (fp16's prefill on stage 04's v5, the WMMA linear); v4 and v5 need sm_90 (the "
           "copy engine).", "",
           "| variant | precision | " + " | ".join(h for _, h in STAGE10_DECODE) + " |",
           "|---|---|" + "---:|" * len(STAGE10_DECODE)]
    for dtype in ("fp32", "fp16"):
        for v in variants:
            rs = [by.get((f"{p}, {dtype}", v)) for p, _ in STAGE10_DECODE]
            if not any(rs) or needs_newer(next(r for r in rs if r)):
                continue
            cells = []
            for r in rs:
                pred = t4_prediction(r) if r else None
                cells.append(f"{fmt_ms(pred[1])} ({r['throughput'] * r['time_ms'] / pred[1]:.0f} tok/s)"
                             if pred and finite(pred[1]) else "–")
            out.append(f"| {v} | {dtype} | " + " | ".join(cells) + " |")
    return "\n".join(out)


# ---- predicted T4 numbers ---------------------------------------------------
# No T4 has run the course yet, so each stage page carries a *prediction* for
# it, computed from datasheet roofs and the work each variant did on the GPU that
# measured it. Datasheets: T4 (TU104, 70 W): 320 GB/s GDDR6, 8.1 TFLOP/s fp32,
# 65 TFLOP/s fp16 tensor. H100 SXM5 ("NVIDIA H100 80GB HBM3"): 3.35 TB/s HBM3,
# 67 TFLOP/s fp32, 989 TFLOP/s fp16 dense tensor. H200 SXM: the H100's arithmetic
# with 4.8 TB/s HBM3e.
T4_ROOF = {"GB/s": 320.0, "fp32": 8.1, "tensor": 65.0}
MEASURING_GPU_ROOF = {"NVIDIA H100 80GB HBM3": {"GB/s": 3350.0, "fp32": 67.0, "tensor": 989.0},
                      "NVIDIA H200": {"GB/s": 4800.0, "fp32": 67.0, "tensor": 989.0}}
# Variants that need more than sm_75 (each stage's table of variants says so:
# min_cc): they do not run on a T4 at all.
NEEDS_NEWER = {"03": {"v9": "sm_80", "v10": "sm_90", "v11": "sm_90", "v12": "sm_90", "v13": "sm_90", "v14": "sm_90"},
               "04": {"v6": "sm_80", "v7": "sm_90", "v8": "sm_90", "v9": "sm_90", "v10": "sm_90", "v11": "sm_90"},
               "06": {"v5": "sm_80", "v7": "sm_90"}, "10": {"v4": "sm_90", "v5": "sm_90"}}
# GPT-2 124M (stage 10): parameters, all streamed once per decode step.
GPT2_124M_PARAMS = 124_439_808


def compute_unit(stage, problem, variant):
    """Which T4 roof a TFLOP/s row runs against: tensor cores or fp32 CUDA cores."""
    if "fp16" not in problem:
        return "fp32"
    if stage == "06" and variant not in ("v4", "v5", "v6"):  # v1-v3 compute in fp32 on CUDA cores (v6: cuBLAS)
        return "fp32"
    return "tensor"


def needs_newer(r):
    """What a row's variant needs beyond sm_75, or None: the stage's table of variants (stage 10's fp16 prefill
    takes stage 04's v5, the WMMA linear, on a T4)."""
    stage = r["stage"][-2:]
    if stage == "10" and r["problem"].startswith("decode linear alone"):
        return None
    return NEEDS_NEWER.get(stage, {}).get(r["variant"])


def is_decode(r):
    """Stage 10's decode steps (greedy decode and the serving table): bound by streaming the weights."""
    return r["problem"].startswith(("greedy decode", "serving"))


def t4_prediction(r):
    """(floor ms, estimate ms, what limits it) on a T4 for one measured row; None where it cannot run."""
    stage = r["stage"][-2:]
    if needs_newer(r):
        return None
    roofs = MEASURING_GPU_ROOF.get(r["gpu"])
    ms = r["time_ms"]
    if r["unit"] == "GB/s":
        key, work = "GB/s", r["throughput"] * ms / 1e3         # GB moved
    elif r["unit"] == "TFLOP/s":
        key, work = compute_unit(stage, r["problem"], r["variant"]), r["throughput"] * ms / 1e3  # TFLOP done
    elif stage == "10" and is_decode(r):  # every weight once per step, at any batch
        key, work = "GB/s", GPT2_124M_PARAMS * (2 if precision(r) == "fp16" else 4) / 1e9
    elif stage == "10":  # prefill: the linear layers, fp32 on CUDA cores, fp16 on tensor cores
        key = "tensor" if precision(r) == "fp16" else "fp32"
        work = 2 * GPT2_124M_PARAMS * r["throughput"] * ms / 1e3 / 1e12
    else:
        return None
    floor = work / T4_ROOF[key] * 1e3
    if not roofs or not ms > 0:
        return floor, float("nan"), key
    if stage == "10" and is_decode(r):
        # decode at batch 1-8 is bound by launches and latency, not bytes: that time does not shrink or
        # grow with bandwidth, so the T4 pays its own weight streaming plus the measured rest
        return floor, floor + max(0.0, ms - work / roofs[key] * 1e3), key
    efficiency = min(1.0, work / (ms / 1e3) / roofs[key])  # the fraction of the datasheet roof it reached
    return floor, max(ms, floor / efficiency), key


def t4_table(rows):
    """The predicted-T4 markdown table of one stage (every problem)."""
    unit_name = {"GB/s": "320 GB/s", "fp32": "8.1 TFLOP/s fp32", "tensor": "65 TFLOP/s fp16 tensor"}
    out = ["**Predicted, not measured.** Work per variant (bytes or FLOPs) from the "
           f"{rows[0]['gpu']} run above; *floor* = that work at the T4's datasheet roof; *estimate* = the "
           "same fraction of the T4's roof that the variant reached of the measuring GPU's datasheet roof "
           "(never faster than it measured there). Variants that need sm_80 or sm_90 do not run on a T4." +
           (" Decode steps are bound by launches and latency: their estimate is the T4's weight streaming "
            "plus the measured time beyond the measuring GPU's own streaming." if rows[0]["stage"] == "stage10"
            else ""), ""]
    def cells(r):
        pred = t4_prediction(r)
        if pred is None:
            need = needs_newer(r) or "newer hardware"
            return [variant_label(r), fmt_ms(r["time_ms"]), "–", "–", "–", f"does not run (needs {need})"]
        floor, est, key = pred
        tp = r["throughput"] * r["time_ms"] / est if finite(est) else float("nan")
        tp_s = "–" if not finite(tp) else f"{tp:.0f}" if tp >= 100 else f"{tp:.2f}" if tp < 10 else f"{tp:.1f}"
        est_s = fmt_ms(est) if finite(est) else "–"
        return [variant_label(r), fmt_ms(r["time_ms"]), unit_name[key], fmt_ms(floor), est_s, tp_s]

    groups = group_by_problem(rows)
    if len(groups) > T4_COMPACT_PROBLEMS:  # one line per problem, the variants across: the page stays short
        return "\n".join(out + t4_compact(groups)).rstrip()
    measured = f"measured ({rows[0]['gpu'].split(' ')[1]})"
    out += markdown_tables(rows, lambda rs: ["variant", measured, "T4 roof", "T4 floor", "T4 estimate",
                                             f"T4 {rs[0]['unit']} (estimate)"], "|---|---:|---|---:|---:|---:|", cells)
    return "\n".join(out).rstrip()


# A stage with more problems than this gets its T4 prediction as one table: a line per problem.
T4_COMPACT_PROBLEMS = 4


def t4_compact(groups):
    """The T4 estimates of many problems in one table per family of problems (those whose variants are the same
    kernels: stage 05's softmax and LayerNorm are two): a line per problem, a column per variant (the time each is
    estimated to take on a T4, "–" where it does not run), and the problem's floor at the T4's roof."""
    families = []  # [{variant label: its name}, [(problem, size, rows)]]
    for (problem, size), rs in groups.items():
        names = {variant_label(r): r["name"] for r in rs}
        for fam in families:
            if all(fam[0].get(v, n) == n for v, n in names.items()):
                fam[0].update(names)
                fam[1].append((problem, size, rs))
                break
        else:
            families.append([dict(names), [(problem, size, rs)]])
    out = ["Estimated time on a T4 for each problem and variant (the floor: the problem's work at the T4's roof):"]
    for names, problems in families:
        variants = sorted(names, key=lambda v: (0, int(v[1:])) if re.fullmatch(r"v\d+", v) else (1, 0))
        out += ["", "| problem | T4 floor | " + " | ".join(variants) + " |",
                "|---|---:|" + "---:|" * len(variants)]
        for problem, size, rs in problems:
            preds = {variant_label(r): t4_prediction(r) for r in rs}
            floors = [p[0] for p in preds.values() if p]
            cells = ["–" if not preds.get(v) or not finite(preds[v][1]) else fmt_ms(preds[v][1]) for v in variants]
            floor = fmt_ms(min(floors)) if floors else "–"
            out.append(f"| {problem}, {size} | {floor} | " + " | ".join(cells) + " |")
    return out


# Stages whose README line names the best of more than the first problem: the
# GEMM stages have an fp32 table and a tensor-core fp16 table.
SUMMARY_PROBLEMS = {"03": 2, "04": 2}


def best_summary(rows):
    """One line for the README's stage table: the best variant and the peer, on the first problem(s)."""
    stage = rows[0]["stage"][-2:]
    if stage == "10":  # the fastest batch-1 decode, fp16 (whichever way its steps are launched), against its roof
        by, variants = stage10_rows(rows)
        best = max((b for v in variants for b in [stage10_best_batch1(by, v, "fp16")] if b),
                   key=lambda r: r["throughput"], default=None)
        if not best:
            return "no decode rows"
        how = "steps queued on the GPU" if "queued" in best["problem"] else best["problem"].split(", ")[2]
        return (f"{best['variant']}: {best['pct_roof']:.0f}% of the decode roof ({best['throughput']:.0f} tok/s, "
                f"batch-1 greedy decode, fp16, {how})")
    by_peer = rows[0]["unit"] != "GB/s"
    key = "x_peer" if by_peer else "pct_roof"
    def ratio(r):
        return f"{r['x_peer']:.2f}× the peer" if by_peer else f"{r['pct_roof']:.0f}% of roof"
    parts = []
    cudnn = next((t for name, t in CUDNN_SDPA_TFLOPS.items() if name in rows[0]["gpu"]), None)
    if stage == "06" and cudnn:  # no in-table peer: the fastest variant against cuDNN, measured apart
        for (problem, _), rs in group_by_problem(rows).items():
            if problem in ("fp16 d64 non-causal", "fp16 d128 non-causal"):
                ours = max((r for r in rs if not r["peer"]), key=lambda r: r["throughput"])
                parts.append(f"{ours['variant']}: {ours['throughput'] / cudnn[problem]:.2f}× cuDNN "
                             f"({ours['throughput']:.0f} TFLOP/s, {problem}; cuDNN through PyTorch, measured apart)")
        return "; ".join(parts)
    for i, ((problem, _), rs) in enumerate(group_by_problem(rows).items()):
        if i >= SUMMARY_PROBLEMS.get(stage, 1):
            continue
        ours = max((r for r in rs if not r["peer"]), key=lambda r: r[key] if finite(r[key]) else -1)
        text = f"{ours['variant']}: {ratio(ours)} ({ours['throughput']:.0f} {ours['unit']}, {problem})"
        if stage == "06" and problem == "fp16 d64 non-causal" and ours["x_peer"] > 1:
            text = (f"{ours['variant']}: {ours['x_peer']:.1f}× the unfused cuBLAS peer ({ours['throughput']:.0f} "
                    f"{ours['unit']}, {problem}; {100 * ours['throughput'] / PYTORCH_SDPA_D64_TFLOPS:.0f}% of "
                    f"PyTorch's FlashAttention-2, measured apart)")
            parts.append(text)
            continue
        peers = [r for r in rs if r["peer"]]
        if peers and i == 0 and SUMMARY_PROBLEMS.get(stage, 1) == 1 and not by_peer:
            text += f"; {peers[0]['variant']}: {peers[0]['pct_roof']:.0f}%"
        parts.append(text)
    return "; ".join(parts)


# The GPU whose results the pages show where it has a stage's (the one we measure on now), then the others.
PREFERRED_GPU = "nvidia-h200"


def newest_results():
    """stage -> (gpu slug, rows): one GPU's results per stage (PREFERRED_GPU's where it has them, else the first GPU
    folder that has the stage)."""
    chosen = {}
    for gpu, stage, path in sorted(result_sets(RESULTS), key=lambda s: s[0] != PREFERRED_GPU):
        chosen.setdefault(stage, (gpu, read_csv(path)))
    return chosen


def readme_stage_table(results):
    out = ["| stage | idea | best variant vs roof or peer | measured on |", "|---|---|---|---|"]
    for num, folder, idea in STAGES:
        if num in results:
            gpu, rows = results[num]
            link = f"[{num} {folder[3:]}](stages/{folder}/README.md)"
            out.append(f"| {link} | {idea} | {best_summary(rows)} | {rows[0]['gpu']} |")
        else:
            out.append(f"| {num} {folder[3:]} | {idea} | not built yet | |")
    return "\n".join(out)


def replace_between(text, tag, body, path, opening=None):
    """The text between <!-- tag --> (or the given opening marker's text) and <!-- /tag --> becomes body."""
    pattern = re.compile(rf"(<!-- {re.escape(opening or tag)} -->\n)(.*?)(<!-- /{re.escape(tag)} -->)", re.S)
    if not pattern.search(text):
        sys.exit(f"{path}: markers <!-- {tag} --> ... <!-- /{tag} --> not found")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(3), text)


def ncu_table(num, kernels=None):
    """A stage's Nsight Compute table (scripts/profile.sh's ncu_stageNN.csv, PREFERRED_GPU's where it has one): the
    counters behind the page's central claim, one row per kernel of each profiled variant; `kernels`, a regular
    expression from the page's marker, keeps the rows the lesson turns on. A column that is zero or empty in every
    row it keeps (bank conflicts in a kernel with no shared memory, the tensor pipe in a copy) is left out."""
    paths = sorted(glob.glob(os.path.join(RESULTS, "*", f"ncu_stage{num}.csv")),
                   key=lambda p: os.path.basename(os.path.dirname(p)) != PREFERRED_GPU)
    if not paths:
        return "Not profiled yet: `scripts/profile.sh " + num + "` on a GPU writes the table this place shows."
    with open(paths[0], newline="") as f:
        rows = [r for r in csv.DictReader(f) if not kernels or re.search(kernels, r["kernel"])]
    if not rows:
        sys.exit(f"ncu_stage{num}.csv: no kernel matches {kernels!r}")
    columns = [("DRAM %", "dram_pct"), ("occupancy %", "occupancy_pct"), ("sectors / request", "sectors_per_req"),
               ("bank conflicts", "smem_conflicts"), ("tensor %", "tensor_pct")]
    def shown(key):  # tensor % under 8 is counter noise on kernels with no mma (seen up to 7 on softmax)
        return any(r[key] and float(r[key]) >= (8 if key == "tensor_pct" else 0.05) for r in rows)
    columns = [(title, key) for title, key in columns if shown(key)]
    def count(text):  # 17585641 -> 17.6 M
        if not text:
            return "–"
        v = float(text)
        return f"{v / 1e6:.1f} M" if v >= 1e6 else f"{v / 1e3:.0f} k" if v >= 1e4 else f"{v:.0f}"
    out = [f"Nsight Compute on {rows[0]['gpu']} (`scripts/profile.sh {num}`; docs/method.md says how to read each "
           "column): DRAM busy as % of its peak (the copy roof is about 90% of it), achieved occupancy, 32-byte "
           "sectors per global load request, shared-memory bank conflicts, tensor pipe busy, and the three largest "
           "warp stalls (cycles per issued instruction).", "",
           "| variant | kernel | " + " | ".join(t for t, _ in columns) + " | top stalls |",
           "|---|---|" + "---:|" * len(columns) + "---|"]
    for r in rows:
        kernel = re.sub(r"^void ", "", r["kernel"]).split("::")[-1]
        kernel = re.sub(r"\b([A-Z][a-z]\w*)", r"%\1", kernel)  # %GemmIdentity: no Doxygen autolink to the struct
        stalls = ", ".join(s for s in (r.get("stall_1"), r.get("stall_2"), r.get("stall_3")) if s)
        out.append(f"| {r['variant']} | `{kernel}` | " + " | ".join(count(r[k]) if k == "smem_conflicts" else r[k] or "–"
                                                                  for _, k in columns) +
                   f" | {stalls or '–'} |")
    return "\n".join(out)


def gallery():
    """The gallery page's list: each stage's figures once, from the newest GPU that has its results (the preferred
    one where it has them), each captioned with what it shows; the other GPUs' images stay beside the CSVs."""
    out = []
    for num, folder, idea in STAGES:
        gpus = sorted({gpu for gpu, stage, _ in result_sets(RESULTS) if stage == num},
                      key=lambda g: g != PREFERRED_GPU)
        if not gpus:
            continue
        gpu = gpus[0]
        name = next((read_csv(path)[0]["gpu"] for g, stage, path in result_sets(RESULTS) if g == gpu and stage == num),
                    gpu)
        against = {"03": "each variant against cuBLAS", "04": "each variant against cuBLASLt",
                   "06": "each variant against the unfused cuBLAS + softmax peer",
                   "10": "tokens per second of each decode variant against the decode roof"}.get(
                       num, "each variant's bandwidth as a fraction of the copy roof")
        figures = [(image_name(num, gpu), f"Stage {num} on the {name}: {against}")]
        if num == "10":
            figures.append((f"stage10_serving_{gpu}.png",
                            f"Stage 10 on the {name}: serving 1 to 64 sequences, tokens per second against each roof"))
        figures.append((roofline_name(num, gpu), f"Stage {num} on the {name}: each variant on the roofline "
                                                  "(FLOPs per byte it must move, FLOP/s reached)"))
        out += [f"## Stage {num}: {idea}", "", f"[The stage's page](../stages/{folder}/README.md)", ""]
        for image, caption in figures:
            if os.path.exists(os.path.join(IMAGES, image)):
                out += [f"![{caption}](../plots/images/{image})", ""]
    return "\n".join(out).rstrip()


# Inline figures: a number a page's prose states as measured is filled in from the committed CSV between
#   <!-- m stage=09 gpu=nvidia-h200 problem="decode d64, context 4096, inputs rotated" variant=v5 q=pct -->…<!-- /m -->
# (size="…" picks one size where a problem has several). Quantities: pct (% of roof), xpeer (× peer), vs1 (× over
# v1), tput (throughput with its unit), time (the median), and over:vK (this variant's throughput over vK's, same
# problem and size). A marker that names a row the CSV lacks stops the tool: a re-measure cannot leave it behind.
INLINE = re.compile(r"(<!-- m ((?:[a-z]+=(?:\"[^\"]*\"|\S+)\s*)+)-->)(.*?)(<!-- /m -->)", re.S)
INLINE_FIELD = re.compile(r'([a-z]+)=(?:"([^"]*)"|(\S+))')


_CSV_CACHE = {}


def read_csv_once(path):
    """read_csv, once per file for all of a run's inline figures."""
    if path not in _CSV_CACHE:
        _CSV_CACHE[path] = read_csv(path)
    return _CSV_CACHE[path]


def fmt_tput(x):
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def inline_value(spec, where):
    f = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3) for m in INLINE_FIELD.finditer(spec)}
    missing = [k for k in ("stage", "gpu", "problem", "variant", "q") if k not in f]
    if missing:
        sys.exit(f"{where}: inline figure <!-- m {spec}--> lacks {', '.join(missing)}")
    path = os.path.join(RESULTS, f["gpu"], f"stage{f['stage']}.csv")
    if not os.path.exists(path):
        sys.exit(f"{where}: inline figure names {path}, which does not exist")
    rows = [r for r in read_csv_once(path) if r["problem"] == f["problem"] and ("size" not in f or r["size"] == f["size"])]

    def row(variant):
        hit = [r for r in rows if r["variant"] == variant]
        if len(hit) != 1:
            sys.exit(f"{where}: inline figure {f} matches {len(hit)} rows of {os.path.relpath(path, ROOT)} "
                     f"for variant {variant} (give size=\"...\" where a problem has several sizes)")
        return hit[0]

    r, q = row(f["variant"]), f["q"]
    if q == "pct":
        return f"{r['pct_roof']:.1f}%"
    if q == "xpeer":
        return f"{r['x_peer']:.2f}×"
    if q == "vs1":
        return f"{r['speedup_vs_v1']:.2f}×"
    if q == "tput":
        return f"{fmt_tput(r['throughput'])} {r['unit']}"
    if q == "time":
        return fmt_ms(r["time_ms"])
    if q.startswith("over:"):
        return f"{r['throughput'] / row(q[len('over:'):])['throughput']:.2f}×"
    sys.exit(f"{where}: inline figure quantity '{q}' unknown (pct, xpeer, vs1, tput, time, over:vK)")


def fill_inline(text, path):
    where = os.path.relpath(path, ROOT)
    return INLINE.sub(lambda m: m.group(1) + inline_value(m.group(2), where) + m.group(4), text)


def tables(check):
    committed = [os.path.join(d, f) for d, _, fs in os.walk(RESULTS) for f in fs if f.endswith(".csv")]
    with_exercise = [os.path.relpath(p, ROOT) for p in committed
                     if any(r.get("variant") == "ex" for r in csv.DictReader(open(p, newline="")))]
    if with_exercise:
        sys.exit("the exercise slot's rows (variant ex) are in: " + ", ".join(with_exercise) + "; they are never committed")
    results = newest_results()
    edits = {}
    edits[os.path.join(ROOT, "docs", "gallery.md")] = [("gallery", gallery())]
    readme = os.path.join(ROOT, "README.md")
    edits[readme] = [("stages", readme_stage_table(results))]
    for num, folder, _ in STAGES:
        page = os.path.join(ROOT, "stages", folder, "README.md")
        if num in results and os.path.exists(page):
            rows = results[num][1]
            edits[page] = [(f"results:stage{num}", stage10_table(rows) if num == "10" else stage_table(rows)),
                           (f"t4:stage{num}", stage10_t4_table(rows) if num == "10" else t4_table(rows)),
                           (f"ncu:stage{num}", None)]  # the profiler's table, where the page has its place
    for extra in ("docs/method.md", "docs/t4_notebook.md"):  # course-wide pages with inline figures
        edits.setdefault(os.path.join(ROOT, extra), [])
    stale = []
    for path, subs in edits.items():
        with open(path, encoding="utf-8") as f:
            old = f.read()
        new = old
        for tag, body in subs:
            if tag.startswith("ncu:"):  # <!-- ncu:stageNN --> or <!-- ncu:stageNN kernels=REGEX -->
                m = re.search(rf"<!-- {tag}(?: kernels=(.+?))? -->", new)
                if not m:
                    continue
                new = replace_between(new, tag, ncu_table(tag[len("ncu:stage"):], m.group(1)), path,
                                      m.group(0)[len("<!-- "):-len(" -->")])
                continue
            new = replace_between(new, tag, body, path)
        new = fill_inline(new, path)
        if new != old:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    if check and stale:
        sys.exit("results tables out of date with plots/results in: " + ", ".join(stale) +
                 "\nrun: python3 plots/plot.py tables")
    print(("checked" if check else "updated") + f" results tables in {len(edits)} pages" +
          (f" (rewrote {', '.join(stale)})" if stale and not check else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("draw", help="draw one image per stage and GPU")
    d.add_argument("--results", default=RESULTS)
    d.add_argument("--out", default=IMAGES)
    i = sub.add_parser("ingest", help="file stageNN.csv files under results/<gpu>/")
    i.add_argument("dir")
    sp = sub.add_parser("splice", help="put one run's rows (a --variant run's CSV) into the committed CSV")
    sp.add_argument("csv")
    sp.add_argument("--results", default=RESULTS)
    t = sub.add_parser("tables", help="rewrite the measured tables in the pages")
    t.add_argument("--check", action="store_true", help="only verify; exit 1 when out of date")
    a = ap.parse_args()
    if a.cmd == "draw":
        draw(a.results, a.out)
    elif a.cmd == "ingest":
        ingest(a.dir)
    elif a.cmd == "splice":
        splice(a.csv, a.results)
    else:
        tables(a.check)


if __name__ == "__main__":
    main()
