#!/usr/bin/env python3
"""PyTorch's side of bench/compare_overlap.sh (issue 22): one rank of DistributedDataParallel
with gloo, started by the script inside a namespace host (TCP init_method on the hosts' own
addresses), training the workload `lockstep train` trains there.

    python bench/pytorch_ddp_overlap.py --rank R --world 2 --init tcp://10.231.7.1:29522
        --model cnn --images FILE --labels FILE --batch 128 --epochs 2 --bucket-cap-mb MB
        [--hook none|bf16] [--threads 1]
    python bench/pytorch_ddp_overlap.py ... --model gpt --text FILE --batch 12 --warm 10 --iters 40

cnn: the main job's CNN (`lockstep train --model cnn`: Conv2d(1,16,3,p1) BatchNorm2d ReLU
MaxPool2d(2) Conv2d(16,32,3,p1) BatchNorm2d ReLU MaxPool2d(2) Flatten Linear(1568,128) ReLU
Linear(128,10)), PyTorch's per-rank BatchNorm (as `lockstep train --no-sync-bn`),
CrossEntropyLoss, SGD lr 0.01 (the CLI's default optimizer); the images of an uncompressed IDX
file (pixels / 255), each epoch shuffled by a permutation every rank draws alike (seed + epoch),
global batches of --batch, rank r training on rows [r*b/W, (r+1)*b/W) of each. samples/s counts
the global batch over the last epoch's step loop (the slower rank's time).
gpt: nanoGPT's GPT (bench/pytorch_gpt.py's classes), block 64, 4 layers, 4 heads, 128 wide,
bias False, dropout 0; configure_optimizers(0.1, 1e-3, (0.9, 0.99)) (AdamW), clip_grad_norm_
1.0, constant lr; each rank draws its --batch / W windows (torch.randint, seed + rank) of the
first 90 % of the text; --warm untimed iterations, then tokens/s = batch x block x --iters over
their time (the slower rank's), as compare_overlap.sh reads the CLI's iteration lines.
--hook bf16 registers torch.distributed.algorithms.ddp_comm_hooks.default_hooks
.bf16_compress_hook. The DDP bucket count is read from DDP's logging data (num_buckets_reduced).
Output (rank 0): RESULT framework=pytorch-<version> model=M hook=H ... step_ms=T
samples_per_s=S (cnn) or tokens_per_s=S (gpt) buckets=K threads=N
"""
import argparse
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1568, 128), nn.ReLU(), nn.Linear(128, 10))


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def buckets(ddp):
    """Buckets DDP reduced in a logged iteration (after its rebuild in the gradients' order;
    the construction-time "bucket_sizes" is the initial single bucket)."""
    try:
        data = ddp._get_ddp_logging_data()
        return f"{data.get('num_buckets_reduced', '?')}(rebuilt:{data.get('has_rebuilt_buckets', '?')})"
    except Exception:  # noqa: BLE001 (private API: a missing field only loses the count)
        return "?"


def lockstep_buckets(model, cap_mb):
    """How many buckets `lockstep train --bucket-cap-mb cap_mb` makes of this model's gradients
    (the same parameters in the same order): GradientReducer's rule (src/parallel/
    gradient_reducer.cpp), parameters in reverse order, a bucket closed before the parameter
    that would take it past the cap (a parameter larger than the cap is a bucket alone)."""
    cap, count, size = cap_mb * 2**20, 0, None
    for p in reversed([p for p in model.parameters()]):  # tied weights are listed once
        b = p.numel() * p.element_size()
        if size is None or size + b > cap:
            count, size = count + 1, 0
        size += b
    return count


def run_cnn(a, rank, world):
    x_all = read_idx(a.images).unsqueeze(1).float().div_(255.0)
    y_all = read_idx(a.labels).long()
    torch.manual_seed(0)
    ddp = DDP(cnn(), bucket_cap_mb=a.bucket_cap_mb)
    hook(ddp, a.hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    n = x_all.size(0)
    steps = n // a.batch
    lo, hi = rank * a.batch // world, (rank + 1) * a.batch // world
    seconds = 0.0
    for epoch in range(a.epochs):
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(1000 + epoch))
        dist.barrier()
        t0 = time.perf_counter()
        for s in range(steps):
            idx = perm[s * a.batch + lo:s * a.batch + hi]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x_all[idx]), y_all[idx]).backward()
            opt.step()
        seconds = slowest(time.perf_counter() - t0)
    sps = steps * a.batch / seconds
    return (f"model=cnn batch={a.batch} local_batch={hi - lo} steps_per_epoch={steps} "
            f"epochs={a.epochs} step_ms={1000 * seconds / steps:.3f} samples_per_s={sps:.1f} "
            f"buckets={buckets(ddp)} lockstep_buckets={lockstep_buckets(ddp.module, a.bucket_cap_mb)}")


def run_gpt(a, rank, world):
    sys.path.insert(0, HERE)
    from pytorch_gpt import GPT, GPTConfig  # noqa: E402 (nanoGPT's model.py classes)
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    train = data[:int(len(data) * 0.9)]
    block, local = 64, a.batch // world
    torch.manual_seed(1337)
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=block, bias=False,
                          dropout=0.0, vocab_size=len(chars)))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb)
    hook(ddp, a.hook)
    gen = torch.Generator().manual_seed(1337 + rank)

    def step():
        ix = torch.randint(len(train) - block, (local,), generator=gen)
        x = torch.stack([train[i:i + block] for i in ix])
        y = torch.stack([train[i + 1:i + 1 + block] for i in ix])
        _, loss = ddp(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a.warm):  # untimed, as the CLI's first interval (DDP rebuilds its buckets)
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        step()
    seconds = slowest(time.perf_counter() - t0)
    return (f"model=gpt batch={a.batch} local_batch={local} iters={a.iters} "
            f"step_ms={1000 * seconds / a.iters:.3f} "
            f"tokens_per_s={a.batch * block * a.iters / seconds:.1f} buckets={buckets(ddp)} "
            f"lockstep_buckets={lockstep_buckets(model, a.bucket_cap_mb)}")


def hook(ddp, name):
    if name == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--init", required=True, help="TCP init_method, tcp://ADDR:PORT")
    ap.add_argument("--model", choices=["cnn", "gpt"], required=True)
    ap.add_argument("--images")
    ap.add_argument("--labels")
    ap.add_argument("--text")
    ap.add_argument("--batch", type=int, required=True, help="global batch")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--iters", type=int, default=40, help="gpt: timed iterations")
    ap.add_argument("--warm", type=int, default=10, help="gpt: untimed iterations before")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--hook", choices=["none", "bf16"], default="none")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=a.init, rank=a.rank, world_size=a.world)
    line = (run_cnn if a.model == "cnn" else run_gpt)(a, a.rank, a.world)
    if a.rank == 0:
        print(f"RESULT framework=pytorch-{torch.__version__} {line} hook={a.hook} "
              f"bucket_cap_mb={a.bucket_cap_mb} threads={torch.get_num_threads()} "
              f"interop={torch.get_num_interop_threads()} backend={dist.get_backend()}",
              flush=True)
    dist.barrier()
    sys.stdout.flush()
    # Leave without destructors (gloo's teardown can hang at exit, see bench/pytorch_ddp.py).
    os._exit(0)


if __name__ == "__main__":
    main()
