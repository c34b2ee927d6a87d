#!/usr/bin/env python3
"""bench/bench_cuda.cpp's workloads in PyTorch on the GPU (issue 6), for bench/compare_cuda.py.

    python3 bench/pytorch_cuda.py [--seconds S] [--out FILE]

One JSON object per line (stdout, and FILE when given), with the sections of bench_cuda:
  reference  Linear(10,5)-ReLU-Linear(5,2), batch 32, CrossEntropyLoss, SGD lr 0.01: us per step,
             eager, then captured in a CUDA graph (torch.cuda.graphs, "whole-network capture"
             recipe of the PyTorch docs) as impl "pytorch-graph"
  mlp        784-256-256-10, batch 128: eager, nn.DataParallel over every visible GPU
             ("pytorch-dataparallel"; with one GPU it is DataParallel on one device), graph
  large_mlp  3 x Linear(8192,8192) with ReLU, batch 4096, CrossEntropyLoss, SGD: fp32 with TF32
             off (as Lockstep's fp32), and bf16 autocast ("pytorch-bf16"); TFLOP/s counts the
             step's 8 GEMMs of 2*B*8192^2 flops (as bench_cuda); "matmul_tflops": torch.mm of
             the forward GEMM's shape alone
A step is zero_grad(set_to_none=True) + forward + loss + backward + step on one pre-made batch,
timed over a block of steps between two torch.cuda.synchronize() calls, after a warm-up.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn


def timed(step, seconds, warmup):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < 5 or time.perf_counter() - t0 < 0.1 * seconds:
        step()
        n += 1
        if n % 16 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / n
    count = max(5, int(0.9 * seconds / max(per, 1e-9)))
    t0 = time.perf_counter()
    for _ in range(count):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / count


def make(sizes, batch, classes, seed=0):
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers).cuda()
    x = torch.randn(batch, sizes[0], device="cuda")
    y = torch.randint(0, classes, (batch,), device="cuda")
    return model, x, y


def eager_step(model, x, y, opt, autocast=None):
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        if autocast is None:
            loss = loss_fn(model(x), y)
        else:
            with torch.autocast("cuda", dtype=autocast):
                loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


def graph_step(model, x, y, opt):
    """The whole step captured once and replayed (PyTorch docs, CUDA Graphs, whole network)."""
    loss_fn = nn.CrossEntropyLoss()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return g.replay


def emit(out, record):
    line = json.dumps(record)
    print(line, flush=True)
    out.append(line)


def small(out, name, sizes, batch, classes, seconds):
    model, x, y = make(sizes, batch, classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = timed(eager_step(model, x, y, opt), seconds, 20)
    emit(out, {"section": name, "impl": "pytorch", "batch": batch, "us_per_step": s * 1e6,
               "samples_per_s": batch / s})
    if name == "mlp":
        dp = nn.DataParallel(model)
        s = timed(eager_step(dp, x, y, opt), seconds, 5)
        emit(out, {"section": name, "impl": "pytorch-dataparallel",
                   "gpus": torch.cuda.device_count(), "batch": batch, "us_per_step": s * 1e6,
                   "samples_per_s": batch / s})
    model, x, y = make(sizes, batch, classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = timed(graph_step(model, x, y, opt), seconds, 5)
    emit(out, {"section": name, "impl": "pytorch-graph", "batch": batch, "us_per_step": s * 1e6,
               "samples_per_s": batch / s})


def large(out, seconds):
    width, batch = 8192, 4096
    flops = 8 * 2.0 * batch * width * width
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    a = torch.randn(batch, width, device="cuda")
    w = torch.randn(width, width, device="cuda")
    mm = timed(lambda: torch.mm(a, w.t()), seconds, 3)
    del a, w
    for impl, autocast in (("pytorch", None), ("pytorch-bf16", torch.bfloat16)):
        model, x, y = make([width, width, width, width], batch, width)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        s = timed(eager_step(model, x, y, opt, autocast), seconds, 3)
        emit(out, {"section": "large_mlp", "impl": impl,
                   "dtype": "bfloat16" if autocast else "float32", "batch": batch,
                   "width": width, "ms_per_step": s * 1e3, "tflops": flops / s / 1e12,
                   "matmul_tflops": 2.0 * batch * width * width / mm / 1e12})
        del model, x, y, opt
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--out")
    args = p.parse_args()
    out = []
    failed = False
    if not torch.cuda.is_available():
        emit(out, {"section": "device", "error": "torch.cuda.is_available() is False"})
        failed = True
    else:
        emit(out, {"section": "device", "name": torch.cuda.get_device_name(0),
                   "count": torch.cuda.device_count(), "torch": torch.__version__,
                   "cuda": torch.version.cuda})
        for name, run in (
                ("reference", lambda: small(out, "reference", [10, 5, 2], 32, 2, args.seconds)),
                ("mlp", lambda: small(out, "mlp", [784, 256, 256, 10], 128, 10, args.seconds)),
                ("large_mlp", lambda: large(out, args.seconds))):
            try:
                run()
            except Exception as e:  # report and go on: one section must not hide the others
                emit(out, {"section": name, "error": repr(e)})
                failed = True
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(out) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
