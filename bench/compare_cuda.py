#!/usr/bin/env python3
"""Side by side: bench_cuda's JSON lines next to bench/pytorch_cuda.py's (issue 6).

    python3 bench/compare_cuda.py LOCKSTEP.jsonl PYTORCH.jsonl

Prints a Markdown table for bench/RESULTS.md: per section the Lockstep figure, each PyTorch
configuration's, and the ratio (> 1: Lockstep faster). Sections that failed are listed with
their error. Standard library only (runs wherever gpu-check.sh runs).
"""
import json
import sys


def load(path):
    records = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    records.append(json.loads(line))
    except OSError as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
    return records


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ours, theirs = load(sys.argv[1]), load(sys.argv[2])
    rows = []
    errors = [(r["section"], "lockstep", r["error"]) for r in ours if "error" in r]
    errors += [(r["section"], "pytorch", r["error"]) for r in theirs if "error" in r]
    ours = [r for r in ours if "error" not in r]
    theirs = [r for r in theirs if "error" not in r]
    for r in ours + theirs:
        if r["section"] == "device":
            rows.append(f"| device | {r.get('impl', 'lockstep' if r in ours else 'pytorch')} | "
                        f"{r.get('name')} x{r.get('count')} "
                        f"{'torch ' + r['torch'] if 'torch' in r else ''} | |")

    def find(section, impl, **match):
        for r in ours + theirs:
            if r["section"] == section and r.get("impl") == impl and all(
                    r.get(k) == v for k, v in match.items()):
                return r
        return None

    # large_mlp is paired by dtype: Lockstep fp32 with PyTorch fp32 (TF32 off), Lockstep
    # --precision bf16 (autocast) with PyTorch's bf16 autocast row.
    # Each row pairs one Lockstep figure (its impl) with PyTorch's: the eager step with PyTorch's
    # eager and DataParallel rows, Lockstep's DataParallel step eager ("lockstep-dp") with
    # PyTorch eager, and the CUDA-graph step ("lockstep-graph", --cuda-graphs) with PyTorch's
    # CUDA graph ("pytorch-graph").
    pairs = (("reference", {}, "us_per_step", "lower", "lockstep",
              ("pytorch", "pytorch-dataparallel")),
             ("reference", {}, "us_per_step", "lower", "lockstep-dp", ("pytorch",)),
             ("reference", {}, "us_per_step", "lower", "lockstep-graph", ("pytorch-graph",)),
             ("mlp", {}, "us_per_step", "lower", "lockstep",
              ("pytorch", "pytorch-dataparallel")),
             ("mlp", {}, "us_per_step", "lower", "lockstep-dp", ("pytorch",)),
             ("mlp", {}, "us_per_step", "lower", "lockstep-graph", ("pytorch-graph",)),
             ("large_mlp", {"dtype": "float32"}, "tflops", "higher", "lockstep", ("pytorch",)),
             ("large_mlp", {"dtype": "bfloat16"}, "tflops", "higher", "lockstep",
              ("pytorch-bf16",)))
    for section, match, key, better, own, impls in pairs:
        label = section + (" " + match["dtype"] if match else "")
        mine = find(section, own, **match)
        for impl in impls:
            other = find(section, impl, **match)
            if not other:
                continue
            if mine:
                a, b = mine[key], other[key]
                ratio = (b / a) if better == "lower" else (a / b)
                rows.append(f"| {label} {key} | {own} {a:.4g} vs {impl} {b:.4g} | "
                            f"**{ratio:.2f}x** | {'>1: Lockstep faster'} |")
            else:
                rows.append(f"| {label} {key} | {impl} {other[key]:.4g} | (no {own} figure) | |")
        if section == "large_mlp" and mine:
            alone = "cuBLAS GEMMs" if match["dtype"] == "float32" else "cublasGemmEx bf16 GEMMs"
            rows.append(f"| {label} {alone} alone | {mine['cublas_tflops']:.4g} TFLOP/s | "
                        f"Lockstep step at {mine['tflops'] / mine['cublas_tflops']:.0%} of it | |")
    for r in ours:
        if r["section"] == "allreduce":
            what = (f"{r['algbw_gbps']:.4g} GB/s algbw" if r["gpus"] > 1 else
                    "1 GPU: size-1 group, no bandwidth")
            rows.append(f"| all_reduce {r['mbytes']} MB, {r['gpus']} GPU(s), NCCL {r['nccl']} | "
                        f"{r['us_per_call']:.4g} us/call | {what} | |")
        if r["section"] == "linear_epilogue":
            shape = (f"linear {r['rows']}x{r['in']} -> {r['out']}"
                     f"{' + ReLU' if r['relu'] else ''}")
            if r.get("epilogue_us") is None:
                rows.append(f"| {shape}: cuBLASLt epilogue | unfused {r['unfused_us']:.4g} us | "
                            f"| {r.get('note', '')} |")
            else:
                rows.append(f"| {shape}: cuBLASLt epilogue vs bias+GEMM{'+ReLU' if r['relu'] else ''}"
                            f" | {r['epilogue_us']:.4g} us vs {r['unfused_us']:.4g} us | "
                            f"{r['speedup']:.2f}x | Lockstep only |")
    print("| what | figures | ratio | note |")
    print("|---|---|---|---|")
    for row in rows:
        print(row)
    if errors:
        print()
        print("Failed sections:")
        for section, who, err in errors:
            print(f"- {who} {section}: {err}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
