#!/usr/bin/python3
"""Side-by-side table of bench_core (Lockstep) and pytorch_core.py (PyTorch) results.

  compare_report.py RUN_DIR [RUN_DIR ...]

Each RUN_DIR (written by bench/compare_core.sh, one per repetition of the whole measurement)
holds lockstep_t<threads>_ob<OPENBLAS_NUM_THREADS>.json (bench_core --benchmark_out with
repetitions) and pytorch.txt (pytorch_core.py's stdout).

Reduction, the same on both sides: within a run, the best of the timed repetitions (least time
per step, most FLOP/s); across runs (separate processes: address layout, other load), the median,
shown with the [min–max] range when there are several runs. PyTorch's "fastest configuration" is
the one with the best median. Ratios are Lockstep speed / PyTorch speed (> 1: Lockstep faster),
Lockstep at its faster thread count. Prints Markdown.
"""
import json
import os
import statistics
import sys

# Workloads whose thread settings do not change the code either side runs (see main()).
POOLED = {"ref_step"}

# workload -> (bench_core name, kind, goal text, goal ratio or None)
WORKLOADS = [
    ("ref_step", "BM_ReferenceStep/real_time", "step", "≥ 50× faster per step", 50.0),
    ("mlp_step", "BM_MLPStep/real_time", "step", "≥ 1.5× PyTorch's samples/s", 1.5),
    ("matmul_256", "BM_Matmul/256/real_time", "flops", "reported", None),
    ("matmul_512", "BM_Matmul/512/real_time", "flops", "reported", None),
    ("matmul_1024", "BM_Matmul/1024/real_time", "flops", "reported", None),
]
BATCH = {"ref_step": 32, "mlp_step": 128}
# (bench_core --threads, OPENBLAS_NUM_THREADS) runs written by compare_core.sh
LOCKSTEP_CONFIGS = [(1, "unset"), (2, "unset"), (2, "1"), (2, "2")]


def lockstep_run(path):
    """bench name -> best seconds per iteration over the repetitions; plus the JSON context."""
    with open(path) as f:
        data = json.load(f)
    best = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = b.get("run_name", b["name"])
        mult = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
        sec = b["real_time"] * mult
        best[name] = min(sec, best.get(name, float("inf")))
    return best, data.get("context", {})


def pytorch_run(path):
    """(openblas, torch_threads) -> workload -> value (µs/step or GFLOP/s); plus INFO and seen."""
    res, info, seen = {}, {}, {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0] not in ("RESULT", "INFO"):
                continue
            kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            if parts[0] == "RESULT":
                cfg = (kv["openblas"], kv["torch_threads"])
                res.setdefault(cfg, {})[kv["workload"]] = float(kv["value"])
                seen[cfg] = kv["openblas_threads_seen"]
            else:
                info.update(kv)
    return res, info, seen


def flops(w, sec):
    n = int(w.split("_")[1])
    return 2 * n**3 / sec / 1e9


def to_speed(w, kind, sec):
    """A 'higher is better' number: steps per second or GFLOP/s."""
    return 1.0 / sec if kind == "step" else flops(w, sec)


def cell(w, kind, speeds):
    """Median [min–max] of speeds, shown as µs/step + samples/s or GFLOP/s."""
    if not speeds:
        return "–"
    med = statistics.median(speeds)
    if kind == "step":
        s = f"{1e6 / med:,.1f} µs ({BATCH[w] * med:,.0f} samples/s)"
        if len(speeds) > 1:
            s += f" [{1e6 / max(speeds):,.1f}–{1e6 / min(speeds):,.1f}]"
    else:
        s = f"{med:.1f} GFLOP/s"
        if len(speeds) > 1:
            s += f" [{min(speeds):.1f}–{max(speeds):.1f}]"
    return s


def main():
    dirs = sys.argv[1:]
    ls = {c: {w: [] for w, *_ in WORKLOADS} for c in LOCKSTEP_CONFIGS}
    ls_ctx = {}
    pt, pt_seen, pt_info = {}, {}, {}
    for d in dirs:
        for t, ob in LOCKSTEP_CONFIGS:
            p = os.path.join(d, f"lockstep_t{t}_ob{ob}.json")
            if not os.path.exists(p):
                continue
            best, ls_ctx[(t, ob)] = lockstep_run(p)
            for w, bname, kind, *_ in WORKLOADS:
                if bname in best:
                    ls[(t, ob)][w].append(to_speed(w, kind, best[bname]))
        p = os.path.join(d, "pytorch.txt")
        if os.path.exists(p):
            res, pt_info, seen = pytorch_run(p)
            pt_seen.update(seen)
            for cfg, vals in res.items():
                for w, kind in ((w, k) for w, _, k, *_ in WORKLOADS):
                    if w in vals:
                        v = vals[w]
                        pt.setdefault(cfg, {}).setdefault(w, []).append(
                            1e6 / v if kind == "step" else v)

    print(f"{len(dirs)} run(s); PyTorch {pt_info.get('torch_version', '?')} "
          f"({pt_info.get('python', '?')}): default torch threads "
          f"{pt_info.get('default_torch_threads', '?')}, OpenBLAS threads by default "
          f"{pt_info.get('openblas_threads_default', '?')}. Lockstep's OpenBLAS threads after the "
          "first matmul: "
          + ", ".join(f"--threads={t} OPENBLAS_NUM_THREADS={ob}: {c.get('openblas_threads', '?')}"
                      for (t, ob), c in sorted(ls_ctx.items())) + ".")
    cont = []
    for i, d in enumerate(dirs, 1):
        p = os.path.join(d, "contention.txt")
        if os.path.exists(p):
            with open(p) as f:
                kv = dict(x.split("=", 1) for x in f.read().split() if "=" in x)
            cont.append(f"run {i}: {float(kv['other_cores']):.2f} cores over {kv['wall_s']} s")
    if cont:
        print()
        print("CPU used by other processes during each run (0 = quiet machine; anything above ~0.1 "
              "of a core spoils the 2-thread numbers): " + "; ".join(cont) + ".")
    print()
    print("Each cell: median over runs of the best repetition within a run, [min–max] over runs "
          "(µs per step; samples/s at the median). Ratio = Lockstep speed / PyTorch speed at the "
          "medians (> 1: Lockstep faster), Lockstep at its faster thread count "
          "(OPENBLAS_NUM_THREADS unset), PyTorch at its fastest configuration.")
    print()
    print("| workload | Lockstep 1 thread | Lockstep 2 threads | PyTorch fastest (config) | ratio | goal | met |")
    print("|---|---|---|---|---|---|---|")
    for w, bname, kind, goal, goal_ratio in WORKLOADS:
        l1, l2 = ls[(1, "unset")][w], ls[(2, "unset")][w]
        meds = {t: statistics.median(v) for t, v in ((1, l1), (2, l2)) if v}
        cands = {cfg: statistics.median(v[w]) for cfg, v in pt.items() if v.get(w)}
        if not meds or not cands:
            print(f"| {w} | {cell(w, kind, l1)} | {cell(w, kind, l2)} | – | – | {goal} | – |")
            continue
        best_t = max(meds, key=meds.get)
        cfg = max(cands, key=cands.get)
        ratio = meds[best_t] / cands[cfg]
        cfg_s = f"OPENBLAS_NUM_THREADS={cfg[0]}, torch threads {cfg[1]}"
        met = "–" if goal_ratio is None else ("yes" if ratio >= goal_ratio else "**no**")
        print(f"| {w} | {cell(w, kind, l1)} | {cell(w, kind, l2)} | "
              f"{cell(w, kind, pt[cfg][w])} ({cfg_s}) | {ratio:.2f}× ({best_t} thr) | {goal} | {met} |")

    # The reference step is too small for either side to split over threads, so its thread
    # settings only reshuffle process-to-process noise (Lockstep's step time depends on the
    # process's address layout, see RESULTS.md); picking PyTorch's best-of-6 configuration
    # median against one Lockstep setting then mostly measures that noise. Also report every
    # process of each side pooled.
    for w, bname, kind, goal, goal_ratio in WORKLOADS:
        if w not in POOLED:
            continue
        lp = [v for c in ls.values() for v in c[w]]
        pp = [v for c in pt.values() for v in c.get(w, [])]
        if not lp or not pp:
            continue
        ratio = statistics.median(lp) / statistics.median(pp)
        met = "–" if goal_ratio is None else ("yes" if ratio >= goal_ratio else "no")
        print()
        print(f"{w}, every process pooled (all thread settings): Lockstep {len(lp)} processes "
              f"{cell(w, kind, lp)}, PyTorch {len(pp)} processes {cell(w, kind, pp)}: "
              f"{ratio:.2f}× at the medians (goal {goal}: {met}).")

    print()
    print("Does OpenBLAS's thread setting matter to Lockstep? (bench_core --threads=2)")
    print()
    print("| workload | OPENBLAS_NUM_THREADS=1 | OPENBLAS_NUM_THREADS=2 | unset |")
    print("|---|---|---|---|")
    for w, bname, kind, *_ in WORKLOADS:
        print(f"| {w} | " + " | ".join(cell(w, kind, ls[(2, ob)][w]) for ob in ("1", "2", "unset"))
              + " |")

    print()
    print("All PyTorch configurations:")
    print()
    print("| OPENBLAS_NUM_THREADS | torch threads | OpenBLAS threads seen | "
          + " | ".join(w for w, *_ in WORKLOADS) + " |")
    print("|---|---|---|" + "---|" * len(WORKLOADS))
    for cfg in sorted(pt):
        cells = []
        for w, _, kind, *_ in WORKLOADS:
            cells.append(cell(w, kind, pt[cfg].get(w, [])).replace(" samples/s", "/s"))
        print(f"| {cfg[0]} | {cfg[1]} | {pt_seen.get(cfg, '?')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
