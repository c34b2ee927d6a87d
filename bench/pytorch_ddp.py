#!/usr/bin/python3
"""PyTorch side of bench/bench_parallel.cpp (issue 3, "Speed it must measure").

Run with Debian's PyTorch: /usr/bin/python3 bench/pytorch_ddp.py [--min-time S] [--repeats R]

Workloads (the same as bench/workloads.h, synthetic data, one fixed batch per process):
  ref   Linear(10,5)-ReLU-Linear(5,2), global batch 32, CrossEntropyLoss, SGD lr 0.01
  mlp   Linear(784,256)-ReLU-Linear(256,256)-ReLU-Linear(256,10), global batch 128, same

Configurations, each in its own process(es), OPENBLAS_NUM_THREADS set before torch is imported:
  single/threads:1   one process, torch.set_num_threads(1), OPENBLAS_NUM_THREADS=1
  single/threads:2   one process, torch.set_num_threads(2), OPENBLAS_NUM_THREADS=1 (PyTorch's
                     fastest MLP configuration in bench/RESULTS.md, issue 2)
  single/openblas:2  one process, torch.set_num_threads(1), OPENBLAS_NUM_THREADS=2 (GEMMs on
                     both cores through OpenBLAS's threads)
  (torch threads 2 with OpenBLAS's default of 2 threads oversubscribes the 2 cores, 4 busy
  threads: ~9 ms per MLP step here, so it is not measured.)
  ddp2               torch.nn.parallel.DistributedDataParallel, gloo backend, 2 processes
                     started with torch.multiprocessing.spawn, MASTER_ADDR=127.0.0.1, each
                     torch.set_num_threads(1) with OPENBLAS_NUM_THREADS=1; the global batch is
                     split in halves (64/64 for the MLP, 16/16 for ref), so samples/s counts the
                     global batch per step. DDP defaults (bucket_cap_mb=25, broadcast_buffers).
A step is optimizer.zero_grad(set_to_none=True) + forward + loss + backward (DDP all-reduces the
gradients during backward) + optimizer.step(). Time per step is the best of --repeats timed
rounds of ~min_time/repeats seconds after a warm-up; for DDP every round starts after a barrier
and its time is the slower rank's (max over ranks, agreed with an all_reduce).

Output (stdout), one record per line:
  INFO key=value ...
  RESULT workload=W config=C us_per_step=T samples_per_s=S
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time

BATCH = {"ref": 32, "mlp": 128}
SIZES = {"ref": ([10, 5, 2], 2), "mlp": ([784, 256, 256, 10], 10)}


def build(torch, workload, batch, seed_data):
    import torch.nn as nn
    torch.manual_seed(0)  # the same initial model on every rank (DDP also broadcasts rank 0's)
    sizes, classes = SIZES[workload]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    torch.manual_seed(seed_data)
    x = torch.randn(batch, sizes[0])
    y = torch.randint(0, classes, (batch,))
    return model, x, y


def calibrated_iters(step, min_time, repeats, sync=None):
    """Steps per timed round so that a round lasts ~min_time/repeats s (agreed across ranks)."""
    for _ in range(5):
        step()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        t = time.perf_counter() - t0
        if sync is not None:
            t = sync(t)
        if t > 0.02 or n >= 1 << 20:
            break
        n *= 2
    return max(1, int(n * max(min_time / repeats, t) / t))


def single(args):
    import torch
    torch.set_num_threads(args.threads)
    for w in args.workloads:
        model, x, y = build(torch, w, BATCH[w], 1)
        crit = torch.nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            opt.zero_grad(set_to_none=True)
            crit(model(x), y).backward()
            opt.step()

        iters = calibrated_iters(step, args.min_time, args.repeats)
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(iters):
                step()
            best = min(best, (time.perf_counter() - t0) / iters)
        print(f"RESULT workload={w} config={args.label} "
              f"us_per_step={best * 1e6:.3f} samples_per_s={BATCH[w] / best:.1f} "
              f"torch_threads={torch.get_num_threads()} "
              f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}", flush=True)


def ddp_worker(rank, world, port, args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for w in args.workloads:
        local = BATCH[w] // world
        model, x, y = build(torch, w, local, 100 + rank)  # each rank its own half of the batch
        ddp = DDP(model)
        crit = torch.nn.CrossEntropyLoss()
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

        def step():
            opt.zero_grad(set_to_none=True)
            crit(ddp(x), y).backward()
            opt.step()

        def slowest(t):
            v = torch.tensor([t], dtype=torch.float64)
            dist.all_reduce(v, op=dist.ReduceOp.MAX)
            return v.item()

        iters = calibrated_iters(step, args.min_time, args.repeats, sync=slowest)
        best = float("inf")
        for _ in range(args.repeats):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                step()
            best = min(best, slowest((time.perf_counter() - t0) / iters))
        if rank == 0:
            print(f"RESULT workload={w} config=ddp{world} us_per_step={best * 1e6:.3f} "
                  f"samples_per_s={BATCH[w] / best:.1f} local_batch={local} "
                  f"torch_threads={torch.get_num_threads()} backend={dist.get_backend()}",
                  flush=True)
    dist.barrier()
    # Leave without running destructors: in PyTorch 1.13, ~ProcessGroupGloo (run when the last
    # DDP Reducer goes away) joins gloo's worker thread while holding the GIL, and that thread
    # may be freeing a tensor that needs the GIL: the process then hangs at exit (seen here).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def ddp(args):
    import torch.multiprocessing as mp
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(ddp_worker, args=(args.world, port, args), nprocs=args.world, join=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-time", type=float, default=0.6, help="seconds per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds; the best is kept")
    ap.add_argument("--workloads", default="ref,mlp")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per configuration")
    ap.add_argument("--mode", choices=["all", "single", "ddp"], default="all", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--label", default="single", help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.workloads = args.workloads.split(",")
    if args.mode == "single":
        single(args)
        return
    if args.mode == "ddp":
        ddp(args)
        return

    import torch
    print(f"INFO torch_version={torch.__version__} python={sys.executable} "
          f"gloo_available={torch.distributed.is_gloo_available()} "
          f"default_torch_threads={torch.get_num_threads()}", flush=True)
    common = [sys.executable, os.path.abspath(__file__), "--min-time", str(args.min_time),
              "--repeats", str(args.repeats), "--workloads", ",".join(args.workloads)]
    runs = [(["--mode", "single", "--threads", "1", "--label", "single/threads:1"], "1"),
            (["--mode", "single", "--threads", "2", "--label", "single/threads:2"], "1"),
            (["--mode", "single", "--threads", "1", "--label", "single/openblas:2"], "2"),
            (["--mode", "ddp", "--world", "2"], "1")]
    for extra, ob in runs:
        env = dict(os.environ)
        env.pop("OPENBLAS_NUM_THREADS", None)
        if ob is not None:
            env["OPENBLAS_NUM_THREADS"] = ob
        # Own session, so that a hang (DDP rendezvous, teardown) can be killed with its children.
        proc = subprocess.Popen(common + extra, env=env, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            print(f"ERROR {' '.join(extra)} did not finish in {args.timeout} s; killed", flush=True)
        if proc.returncode not in (0, -signal.SIGKILL):
            print(f"ERROR {' '.join(extra)} exited with status {proc.returncode}", flush=True)
        for line in out.splitlines():
            if line.startswith(("RESULT", "INFO")):
                print(line, flush=True)


if __name__ == "__main__":
    main()
