#!/usr/bin/env python3
"""The tables of bench/compare_overlap.sh from its RESULT lines.

    overlap_report.py RESULTS CNN_GLOBAL_BATCH GPT_GLOBAL_BATCH

Lockstep lines: RESULT side=lockstep model=M config=OVERLAP/COMPRESSION|compute rate=R
(samples/s of the global batch for cnn, tokens/s for gpt; compute: the local batch, the slower of
two processes run at once, one on each CPU, T_compute; compute-alone: one process alone).
PyTorch lines: RESULT side=pytorch config=ddp/HOOK framework=... model=M ... samples_per_s=R or
tokens_per_s=R. Per model: the median rate over the rounds (and its range), the step time it
implies (global batch / rate; T_compute: local batch / rate), the ratio to PyTorch DDP without a
hook (from the medians), the buckets (PyTorch: DDP's count after its rebuild; Lockstep:
GradientReducer's rule at the cap, computed by pytorch_ddp_overlap.py, since the CLI does not
print it), the bytes host1's link sent per step (the whole run's, start-up and evaluations
included), and per compression the fraction of communication hidden,
    1 - (T_on - T_compute) / (T_off - T_compute),
from the medians and from each configuration's best round (on a machine other jobs load, the best
round is the least disturbed one; the medians are what the loaded machine gave).
"""
import statistics
import sys

GPT_BLOCK = 64


def main():
    path, cnn_batch, gpt_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    runs = {}
    for line in open(path):
        if not line.startswith("RESULT "):
            continue
        f = dict(kv.split("=", 1) for kv in line.split()[1:])
        rate = f.get("rate") or f.get("samples_per_s") or f.get("tokens_per_s")
        key = (f["model"], f["side"], f["config"])
        runs.setdefault(key, []).append(float(rate))
        if "wire_kb_per_step" in f:
            runs.setdefault(key + ("wire",), []).append(float(f["wire_kb_per_step"]))
        if "buckets" in f:
            runs.setdefault(key + ("buckets",), []).append(f["buckets"])
        if "lockstep_buckets" in f:  # the CLI does not print its count: the rule's, at that cap
            runs.setdefault((f["model"], "lockstep_buckets"), []).append(f["lockstep_buckets"])
    for model, batch in (("cnn", cnn_batch), ("gpt", gpt_batch)):
        keys = [k for k in runs if k[0] == model and len(k) == 3]
        if not keys:
            continue
        unit = "samples/s" if model == "cnn" else "tokens/s"
        per_step = batch if model == "cnn" else batch * GPT_BLOCK  # samples or tokens per step
        med = {k[1:]: statistics.median(runs[k]) for k in keys}
        ref = med.get(("pytorch", "ddp/none"))
        step_ms = {}
        print(f"\n{model}: global batch {batch}, medians of {len(runs[keys[0]])} rounds")
        print(f"| side | configuration | {unit} | range | step ms | vs PyTorch DDP | buckets | "
              "host1 sent KB/step |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for k in keys:
            side, config = k[1:]
            rate = med[(side, config)]
            n = per_step // 2 if config.startswith("compute") else per_step  # the local batch
            step_ms[(side, config)] = 1000.0 * n / rate
            ratio = f"{rate / ref:.2f}x" if ref and not config.startswith("compute") else "-"
            b = ",".join(sorted(set(runs.get(k + ("buckets",), ["-"]))))
            if side == "lockstep" and config not in ("compute", "compute-alone", "default/none"):
                b = ",".join(sorted(set(runs.get((model, "lockstep_buckets"), ["?"])))) + " (rule)"
            w = runs.get(k + ("wire",))
            w = f"{statistics.median(w):,.0f}" if w else "-"
            print(f"| {side} | {config} | {rate:,.0f} | {min(runs[k]):,.0f}-{max(runs[k]):,.0f} | "
                  f"{step_ms[(side, config)]:.2f} | {ratio} | {b} | {w} |")
        # each configuration's fastest round: the least disturbed
        best = {k[1:]: 1000.0 * (per_step // 2 if k[2].startswith("compute") else per_step)
                / max(runs[k]) for k in keys}
        for label, ms in (("median", step_ms), ("best round", best)):
            tc = ms.get(("lockstep", "compute"))
            for comp in ("none", "bf16"):
                on, off = ms.get(("lockstep", f"on/{comp}")), ms.get(("lockstep", f"off/{comp}"))
                if tc is None or on is None or off is None:
                    continue
                head = f"{model} {comp} ({label}): T_compute {tc:.2f} ms, T_off {off:.2f} ms, T_on {on:.2f} ms"
                if off <= tc:
                    print(f"{head}: T_off <= T_compute, nothing to hide")
                    continue
                hidden = 1.0 - (on - tc) / (off - tc)
                print(f"{head}: communication {off - tc:.2f} ms, exposed with overlap {on - tc:.2f} ms, "
                      f"hidden {100 * hidden:.0f} %")

if __name__ == "__main__":
    main()
