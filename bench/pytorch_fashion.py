#!/usr/bin/python3
"""The main job of issue 4 in PyTorch, for bench/compare_fashion.sh.

Trains nn.Sequential(Linear(784,256), ReLU(), Linear(256,10)) on Fashion-MNIST (Debian's
dataset-fashion-mnist, /usr/share/datasets/fashion-mnist) with Adam lr 0.001, batch 64,
10 epochs, shuffled every epoch (DataLoader(shuffle=True), last partial batch kept) — what
`lockstep train --data fashion-mnist --model mlp:784,256,10 --optimizer adam --lr 0.001
--batch-size 64 --epochs 10` does — and evaluates on the 10,000 test images after each epoch.
Pixels are scaled to [0, 1] and flattened, as Lockstep's IDX reader does.

Run: /usr/bin/python3 bench/pytorch_fashion.py [--epochs 10] [--threads N] [--seed 0] [--dir D]
                                                [--model mlp|cnn] [--cosine]

--model cnn trains the main job of issue 17 instead: Conv2d(1,16,3,padding=1) BatchNorm2d(16)
ReLU MaxPool2d(2) Conv2d(16,32,3,padding=1) BatchNorm2d(32) ReLU MaxPool2d(2) Flatten
Linear(1568,128) ReLU Linear(128,10) on the images as [N, 1, 28, 28] (`lockstep train --model
cnn`); --cosine steps CosineAnnealingLR(T_max = epochs) once per epoch (`--lr-schedule cosine`).

--threads sets torch.set_num_threads (default: not called, PyTorch's default). Prints one line
per epoch in Lockstep's format (`epoch k/E train_loss ... val_loss ... val_acc ... samples/s ...`)
and a final `done:` line with the total training+evaluation wall time.
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
from torch import nn


def read_idx(path):
    """An IDX file (gzipped or not) as a numpy uint8 array with its declared dimensions."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(directory, prefix):
    def find(name):
        for candidate in (name + ".gz", name):
            p = os.path.join(directory, candidate)
            if os.path.exists(p):
                return p
        raise FileNotFoundError(os.path.join(directory, name))

    images = read_idx(find(f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find(f"{prefix}-labels-idx1-ubyte"))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--cosine", action="store_true")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"INFO torch={torch.__version__} torch_threads={torch.get_num_threads()} "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}", flush=True)

    x_train, y_train = load(args.dir, "train")
    x_test, y_test = load(args.dir, "t10k")
    if args.model == "cnn":
        x_train, x_test = x_train.reshape(-1, 1, 28, 28), x_test.reshape(-1, 1, 28, 28)
        model = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1568, 128), nn.ReLU(), nn.Linear(128, 10))
    else:
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.epochs) if args.cosine else None
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train),
                                         batch_size=args.batch_size, shuffle=True)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        total, n = 0.0, 0
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(yb)
            n += len(yb)
        train_s = time.perf_counter() - t0
        if sched:
            sched.step()
        model.eval()
        with torch.no_grad():
            out = model(x_test)
            val_loss = loss_fn(out, y_test).item()
            val_acc = (out.argmax(1) == y_test).float().mean().item()
        print(f"epoch {epoch}/{args.epochs} train_loss {total / n:.4f} val_loss {val_loss:.4f} "
              f"val_acc {val_acc:.4f} samples/s {n / train_s:.0f}", flush=True)
    print(f"done: {args.epochs} epochs, val_loss {val_loss:.4f} val_acc {val_acc:.4f}, "
          f"{time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
