# PyTorch's side of bench/bench_cnn.cpp: the same CNN, batch, Adam(lr 1e-3) step on a fixed
# random batch, medians over rounds; torch.set_num_threads(THREADS) (PyTorch's default here is
# the core count, 2).
#   python3 bench/pytorch_cnn.py [THREADS] [BATCH] [STEPS] [WARMUP] [REPS]
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 128
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
warmup = int(sys.argv[4]) if len(sys.argv) > 4 else 3
reps = int(sys.argv[5]) if len(sys.argv) > 5 else 5
torch.set_num_threads(threads)
torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(1568, 128), nn.ReLU(), nn.Linear(128, 10))
x = torch.randn(batch, 1, 28, 28)
y = torch.randint(0, 10, (batch,))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def step():
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()


for _ in range(warmup):
    step()
ms = []
for _ in range(reps):
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    ms.append((time.perf_counter() - t0) * 1000 / steps)
ms.sort()
median = ms[len(ms) // 2]
print(f"RESULT framework=pytorch-{torch.__version__} devices=1 threads={threads} batch={batch} "
      f"ms_per_step={median:.3f} samples_per_s={1000 * batch / median:.1f} "
      f"min_ms={ms[0]:.3f} max_ms={ms[-1]:.3f}")
