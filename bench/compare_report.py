#!/usr/bin/python3
"""Side-by-side table of bench_core (Lockstep) and pytorch_core.py (PyTorch) results.

  compare_report.py RESULTS_DIR

RESULTS_DIR (written by bench/compare_core.sh) holds lockstep_t<threads>_ob<OPENBLAS_NUM_THREADS>.json
(bench_core --benchmark_out with repetitions) and pytorch.txt (pytorch_core.py's stdout). Both sides are reduced the same way: best of the timed
repetitions (least time per step, most FLOP/s). Prints a Markdown table; ratios are
"Lockstep speed / PyTorch speed" (> 1: Lockstep faster), Lockstep at its faster thread count,
PyTorch at its fastest configuration for that workload.
"""
import json
import os
import sys

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


def lockstep_best(path):
    """name -> (best seconds per iteration, best FLOP/s or None, context)."""
    with open(path) as f:
        data = json.load(f)
    best = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = b.get("run_name", b["name"])
        mult = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
        sec = b["real_time"] * mult
        flops = b.get("flop")
        old = best.get(name)
        if old is None or sec < old[0]:
            best[name] = (sec, flops)
    return best, data.get("context", {})


def pytorch_results(path):
    results, best, info = [], {}, {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0] not in ("RESULT", "BEST", "INFO") or "=" not in line:
                continue
            kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
            if parts[0] == "RESULT":
                results.append(kv)
            elif parts[0] == "BEST":
                best[kv["workload"]] = kv
            else:
                info.update(kv)
    return results, best, info


def fmt_step(sec, batch):
    return f"{sec * 1e6:,.1f} µs ({batch / sec:,.0f} samples/s)"


def fmt(w, kind, sec):
    if kind == "step":
        return fmt_step(sec, BATCH[w])
    n = int(w.split("_")[1])
    return f"{2 * n**3 / sec / 1e9:.1f} GFLOP/s"


def main():
    d = sys.argv[1]
    ls, ctx = {}, {}
    for t, ob in LOCKSTEP_CONFIGS:
        p = os.path.join(d, f"lockstep_t{t}_ob{ob}.json")
        if os.path.exists(p):
            ls[(t, ob)], ctx[(t, ob)] = lockstep_best(p)
    pt_all, pt_best, pt_info = pytorch_results(os.path.join(d, "pytorch.txt"))

    print(f"PyTorch {pt_info.get('torch_version', '?')} ({pt_info.get('python', '?')}): default "
          f"torch threads {pt_info.get('default_torch_threads', '?')}, OpenBLAS threads by default "
          f"{pt_info.get('openblas_threads_default', '?')}. Lockstep: "
          + "; ".join(f"--threads={t} OPENBLAS_NUM_THREADS={ob} -> OpenBLAS threads "
                      f"{c.get('openblas_threads', '?')}" for (t, ob), c in sorted(ctx.items())))
    print()
    print("Best of repetitions on both sides. Ratio = Lockstep speed / PyTorch speed (> 1: "
          "Lockstep faster), Lockstep at its faster thread count (OPENBLAS_NUM_THREADS unset), "
          "PyTorch at its fastest configuration for that workload. Steps in µs per step.")
    print()
    print("| workload | Lockstep 1 thread | Lockstep 2 threads | PyTorch fastest (config) | ratio | goal | met |")
    print("|---|---|---|---|---|---|---|")
    for w, bname, kind, goal, goal_ratio in WORKLOADS:
        cells, lsec = [], {}
        for t in (1, 2):
            r = ls.get((t, "unset"), {}).get(bname)
            if r is None:
                cells.append("–")
                continue
            lsec[t] = r[0]
            cells.append(fmt(w, kind, r[0]))
        pb = pt_best.get(w)
        if pb is None or not lsec:
            print(f"| {w} | {cells[0]} | {cells[1]} | – | – | {goal} | – |")
            continue
        cfg = f"OPENBLAS_NUM_THREADS={pb['openblas']}, torch threads {pb['torch_threads']}"
        best_t = min(lsec, key=lsec.get)
        if kind == "step":
            psec = float(pb["value"]) * 1e-6
            ratio = psec / lsec[best_t]
            pcell = f"{fmt_step(psec, BATCH[w])} ({cfg})"
        else:
            n = int(w.split("_")[1])
            pg = float(pb["value"])
            ratio = (2 * n**3 / lsec[best_t] / 1e9) / pg
            pcell = f"{pg:.1f} GFLOP/s ({cfg})"
        met = "–" if goal_ratio is None else ("yes" if ratio >= goal_ratio else "**no**")
        print(f"| {w} | {cells[0]} | {cells[1]} | {pcell} | {ratio:.2f}× ({best_t} thr) | {goal} | {met} |")

    print()
    print("Does OpenBLAS's thread setting matter to Lockstep? (bench_core --threads=2)")
    print()
    print("| workload | OPENBLAS_NUM_THREADS=1 | OPENBLAS_NUM_THREADS=2 | unset |")
    print("|---|---|---|---|")
    for w, bname, kind, _, _ in WORKLOADS:
        row = []
        for ob in ("1", "2", "unset"):
            r = ls.get((2, ob), {}).get(bname)
            row.append("–" if r is None else fmt(w, kind, r[0]))
        print(f"| {w} | " + " | ".join(row) + " |")

    print()
    print("All PyTorch configurations (value: µs/step or GFLOP/s):")
    print()
    print("| workload | OPENBLAS_NUM_THREADS | torch threads | OpenBLAS threads seen | value |")
    print("|---|---|---|---|---|")
    for r in pt_all:
        unit = "µs/step" if r["unit"] == "us_per_step" else "GFLOP/s"
        print(f"| {r['workload']} | {r['openblas']} | {r['torch_threads']} | "
              f"{r['openblas_threads_seen']} | {float(r['value']):,.1f} {unit} |")


if __name__ == "__main__":
    main()
