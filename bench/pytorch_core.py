#!/usr/bin/python3
"""The workloads of bench/bench_core.cpp in PyTorch (issue 2, "Speed it must measure").

Run with Debian's PyTorch: /usr/bin/python3 bench/pytorch_core.py [--min-time S] [--repeats R]

  ref_step    Linear(10,5)-ReLU-Linear(5,2), batch 32, CrossEntropyLoss, SGD lr 0.01
  mlp_step    Linear(784,256)-ReLU-Linear(256,256)-ReLU-Linear(256,10), batch 128, same loss/optim
  matmul_N    torch.mm of two float32 N x N matrices, N = 256, 512, 1024 (2*N^3 FLOP)

A step is optimizer.zero_grad(set_to_none=True) + forward + loss + backward + optimizer.step()
on one fixed, pre-made batch (no data loading), as in bench_core. set_to_none=True matches
Lockstep's zero_grad (PyTorch 2.x default) and is the faster choice in 1.13.

Every workload is measured in several configurations, each in its own process so that
OPENBLAS_NUM_THREADS (read by OpenBLAS once, at load) takes effect:
  OPENBLAS_NUM_THREADS = unset (PyTorch's default), 1, 2
  torch.set_num_threads = default (not called), 2, 1 (1 and 2 skipped where equal to default)
Each measurement is the best of --repeats timed rounds of ~min_time/repeats seconds (the same
best-of policy compare_core.sh applies to bench_core), after a warm-up.

Output (stdout), one record per line, space-separated key=value, easy to grep/parse:
  INFO key=value ...
  RESULT workload=W openblas=B torch_threads=T openblas_threads_seen=K value=V unit=U
  BEST workload=W openblas=B torch_threads=T value=V unit=U
unit is us_per_step (lower is better; samples_per_s is also given for steps) or GFLOP_per_s.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

WORKLOADS = ["ref_step", "mlp_step", "matmul_256", "matmul_512", "matmul_1024"]


def openblas_threads():
    """Thread count of the OpenBLAS that this process loaded (via torch), or -1."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "openblas" in line and ".so" in line}
        for lib in sorted(libs):
            try:
                fn = ctypes.CDLL(lib).openblas_get_num_threads
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_int
            return fn()
    except OSError:
        pass
    return -1


def time_best(fn, min_time, repeats):
    """Best seconds per call of fn over `repeats` rounds, each ~min_time/repeats seconds."""
    for _ in range(3):  # warm-up
        fn()
    # calibrate the round length
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t > 0.02 or n >= 1 << 20:
            break
        n *= 2
    per_round = max(min_time / repeats, t)
    iters = max(1, int(n * per_round / t))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


def make_step(torch, batch, sizes, classes):
    import torch.nn as nn
    torch.manual_seed(0)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, sizes[0])
    y = torch.randint(0, classes, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()

    return step


def child(args):
    import torch
    default_threads = torch.get_num_threads()
    configs = ["default"] + [t for t in (2, 1) if t != default_threads]
    ob = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    for cfg in configs:
        if cfg != "default":
            torch.set_num_threads(cfg)
        tt = torch.get_num_threads()
        label = f"default({tt})" if cfg == "default" else str(cfg)
        seen = openblas_threads()
        for w in WORKLOADS:
            if w == "ref_step":
                fn, batch = make_step(torch, 32, [10, 5, 2], 2), 32
            elif w == "mlp_step":
                fn, batch = make_step(torch, 128, [784, 256, 256, 10], 10), 128
            else:
                n = int(w.split("_")[1])
                torch.manual_seed(0)
                a, b = torch.randn(n, n), torch.randn(n, n)
                fn, batch = (lambda a=a, b=b: torch.mm(a, b)), None
            with torch.no_grad() if batch is None else torch.enable_grad():
                sec = time_best(fn, args.min_time, args.repeats)
            common = f"workload={w} openblas={ob} torch_threads={label} openblas_threads_seen={seen}"
            if batch is None:
                n = int(w.split("_")[1])
                print(f"RESULT {common} value={2 * n**3 / sec / 1e9:.3f} unit=GFLOP_per_s", flush=True)
            else:
                print(f"RESULT {common} value={sec * 1e6:.3f} unit=us_per_step "
                      f"samples_per_s={batch / sec:.1f}", flush=True)


def parse(line):
    kind, *rest = line.split()
    return kind, dict(kv.split("=", 1) for kv in rest)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds; the best is kept")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write all results to this JSON file")
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    import torch
    cfg_lines = [l.strip() for l in torch.__config__.show().splitlines() if l.strip()]
    blas = next((l for l in cfg_lines if "BLAS_INFO" in l), "")
    blas = ",".join(p.strip() for p in blas.split(",") if "BLAS_INFO" in p or "LAPACK_INFO" in p)
    print(f"INFO torch_version={torch.__version__} python={sys.executable} "
          f"default_torch_threads={torch.get_num_threads()} "
          f"default_interop_threads={torch.get_num_interop_threads()} "
          f"openblas_threads_default={openblas_threads()} blas={blas.replace(' ', '')}")
    print("INFO torch.__config__.show():")
    for l in torch.__config__.show().splitlines():
        if l.strip() and "CXX_FLAGS" not in l:
            print("INFO |", l.strip()[:200])
    sys.stdout.flush()

    results = []
    for ob in (None, "1", "2"):
        env = dict(os.environ)
        env.pop("OPENBLAS_NUM_THREADS", None)
        if ob is not None:
            env["OPENBLAS_NUM_THREADS"] = ob
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                              "--min-time", str(args.min_time), "--repeats", str(args.repeats)],
                             env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
        for line in out.splitlines():
            print(line, flush=True)
            if line.startswith("RESULT"):
                results.append(parse(line)[1])

    for w in WORKLOADS:
        rs = [r for r in results if r["workload"] == w]
        lower = rs[0]["unit"] == "us_per_step"
        best = (min if lower else max)(rs, key=lambda r: float(r["value"]))
        print(f"BEST workload={w} openblas={best['openblas']} torch_threads={best['torch_threads']} "
              f"value={best['value']} unit={best['unit']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch_version": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
