"""A Fashion-MNIST CNN written as a PyTorch user writes it, run on Lockstep (the CLI's main-job
model: `lockstep train --model cnn`). Only the imports name lockstep; the IDX files are read with
gzip + numpy, as torchvision's FashionMNIST would hand them over.

    PYTHONPATH=build/python .venv/bin/python examples/cnn.py --epochs 1
    PYTHONPATH=build/python .venv/bin/python examples/cnn.py --limit 2048 --epochs 1   # quick
"""
import argparse
import gzip
import os
import time

import numpy as np

import lockstep as torch
import lockstep.nn as nn
import lockstep.nn.functional as F
import lockstep.optim as optim
from lockstep.utils.data import DataLoader, TensorDataset


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root, split, limit):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))[:limit]
    labels = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))[:limit]
    x = torch.from_numpy((images.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28))
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--limit", type=int, default=None, help="use only the first N images of each split")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    train = load(args.data, "train", args.limit)
    test = load(args.data, "test", args.limit)
    train_loader = DataLoader(train, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test, batch_size=1000)

    model = nn.DataParallel(Net())  # every CPU core a replica; BatchNorm synchronised across them
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(1, args.epochs + 1):
        model.train()
        start, seen = time.perf_counter(), 0
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            seen += x.size(0)
        elapsed = time.perf_counter() - start
        scheduler.step()

        model.eval()
        correct, total, test_loss = 0, 0, 0.0
        with torch.no_grad():
            for x, y in test_loader:
                out = model(x)
                test_loss += criterion(out, y).item() * x.size(0)
                correct += (out.argmax(1) == y).sum().item()
                total += x.size(0)
        print(f"epoch {epoch}: loss {loss.item():.4f}, test loss {test_loss / total:.4f}, "
              f"test accuracy {correct / total:.4f}, {seen / elapsed:.0f} samples/s")


if __name__ == "__main__":
    main()
