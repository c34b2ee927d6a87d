#!/usr/bin/python3
"""PyTorch side of bench/bench_ddp.cpp (issue 5, "Benchmarks").

Run with Debian's PyTorch: /usr/bin/python3 bench/pytorch_ddp_fashion.py [--data DIR]
    [--min-time S] [--repeats R] [--warmup N] [--bind 0|1]

The workload of bench_ddp: Linear(784,256)-ReLU-Linear(256,256)-ReLU-Linear(256,10) on the
Fashion-MNIST training images (the Debian IDX files, read here with gzip + struct + numpy, no
torchvision: pixels / 255 as float32, each image flattened row-major to 784 features, labels as
int64), CrossEntropyLoss, SGD lr 0.01, global batch 128. Step i takes global batch i in file
order (samples [128 i, 128 i + 128) modulo the 468 whole batches) and each of the 2 ranks trains
on its half (rank r: samples 64 r .. 64 r + 63 of the batch, as parallel::split_batch cuts it):
    opt.zero_grad(set_to_none=True); crit(ddp(x), y).backward(); opt.step()
torch.nn.parallel.DistributedDataParallel with its defaults (bucket_cap_mb=25; its first bucket
is capped at 1 MB, so the MLP's 1.08 MB of gradients form one bucket either way), gloo backend,
2 processes started with torch.multiprocessing.spawn, MASTER_ADDR=127.0.0.1,
torch.set_num_threads(1) and OPENBLAS_NUM_THREADS=1 in each (set here before torch is imported
in the children). Overlap is not a PyTorch knob: DDP always launches a bucket's all-reduce as
soon as it is ready, asynchronously on gloo's thread. --bind 1 (default) pins rank r to CPU r
(os.sched_setaffinity), as mpirun --bind-to core pins bench_ddp's ranks; --bind 0 leaves the
processes free.

Timing as bench_ddp: warm-up steps, a probe that sets the steps per round to ~min_time seconds
(the slower rank's time, the same count on every rank), then the best of --repeats rounds, each
starting after a barrier, a round's time being the slower rank's (all_reduce MAX).

Output (stdout), one record per line:
  INFO key=value ...
  RESULT framework=pytorch config=C us_per_step=T samples_per_s=S ...
"""
import argparse
import gzip
import os
import socket
import struct
import sys
import time

GLOBAL_BATCH = 128
WORLD = 2
DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (plain or gzipped) as a numpy uint8 array with its dimensions."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data, dimensions {dims}")
    return data.reshape(dims)


def find(dir_, name):
    for candidate in (os.path.join(dir_, name), os.path.join(dir_, name + ".gz")):
        if os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(f"{dir_}: no {name} or {name}.gz")


def load_train(dir_):
    import numpy as np
    images = read_idx(find(dir_, "train-images-idx3-ubyte"))
    labels = read_idx(find(dir_, "train-labels-idx1-ubyte"))
    x = (images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(255.0))
    y = labels.astype(np.int64)
    return x, y


def worker(rank, port, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if args.bind:
        os.sched_setaffinity(0, {rank % os.cpu_count()})
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)

    t0 = time.perf_counter()
    xs, ys = load_train(args.data)
    x_all, y_all = torch.from_numpy(xs), torch.from_numpy(ys)
    load_s = time.perf_counter() - t0

    torch.manual_seed(0)  # the same model on every rank (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    ddp = DDP(model)
    crit = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    local = GLOBAL_BATCH // WORLD
    batches = x_all.shape[0] // GLOBAL_BATCH
    cursor = [0]

    def step():
        first = (cursor[0] % batches) * GLOBAL_BATCH + rank * local
        cursor[0] += 1
        x, y = x_all[first:first + local], y_all[first:first + local]
        opt.zero_grad(set_to_none=True)
        loss = crit(ddp(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    def slowest(t):
        v = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        return v.item()

    first_loss = step()
    for _ in range(args.warmup - 1):
        step()
    dist.barrier()
    probe = max(args.warmup, 10)
    t0 = time.perf_counter()
    for _ in range(probe):
        step()
    per = slowest(time.perf_counter() - t0) / probe
    iters = min(max(int(args.min_time / max(per, 1e-7)), 10), 1_000_000)
    best = float("inf")
    last_loss = first_loss
    for _ in range(args.repeats):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            last_loss = step()
        best = min(best, slowest((time.perf_counter() - t0) / iters))

    if rank == 0:
        try:  # bucket sizes as DDP's logger records them (private API of 1.13)
            buckets = ddp._get_ddp_logging_data().get("bucket_sizes", "?")
        except Exception:  # noqa: BLE001 - informational only
            buckets = "?"
        nbuckets = len(str(buckets).split(",")) if buckets != "?" else "?"
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        print(f"INFO framework=pytorch torch_version={torch.__version__} "
              f"python={sys.executable} backend={dist.get_backend()} world={WORLD} "
              f"torch_threads={torch.get_num_threads()} "
              f"interop_threads={torch.get_num_interop_threads()} "
              f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')} "
              f"bind={'cpu:rank' if args.bind else 'none'} "
              f"affinity={sorted(os.sched_getaffinity(0))} images={x_all.shape[0]} "
              f"load_s={load_s:.2f} bucket_sizes={str(buckets).replace(' ', '')}", flush=True)
        print(f"RESULT framework=pytorch config=ddp/gloo/bind:{int(args.bind)} "
              f"us_per_step={best * 1e6:.1f} samples_per_s={GLOBAL_BATCH / best:.0f} "
              f"comm=all_reduce comm_bytes_per_step={grad_bytes} buckets={nbuckets} "
              f"steps_per_round={iters} "
              f"steps={cursor[0]} first_loss={first_loss:.4f} last_loss={last_loss:.4f}",
              flush=True)
    dist.barrier()
    # Leave without running destructors: in PyTorch 1.13, ~ProcessGroupGloo may hang at exit
    # (see bench/pytorch_ddp.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_DIR, help="Fashion-MNIST directory (IDX files)")
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds per timed round")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds; the best is kept")
    ap.add_argument("--warmup", type=int, default=30, help="steps before timing")
    ap.add_argument("--bind", type=int, choices=[0, 1], default=1,
                    help="pin rank r to CPU r (default 1)")
    args = ap.parse_args()
    # Before torch is imported here or in the spawned children (they inherit the environment).
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    import torch.multiprocessing as mp
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, args), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main()
