# PyTorch's side of bench/bench_cnn.cpp: the same model, batch, Adam(lr 1e-3) step on a fixed
# random batch, medians over rounds; torch.set_num_threads(THREADS) (PyTorch's default here is
# the core count, 2). MODEL: cnn (the main job's CNN, default) or resnet20 (the CIFAR ResNet-20
# of tests/data/resnet/make_resnet_golden.py, imported from there: lockstep::nn::resnet20(1, 10)).
#   python3 bench/pytorch_cnn.py [THREADS] [BATCH] [STEPS] [WARMUP] [REPS] [MODEL]
import os
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
model_name = sys.argv[6] if len(sys.argv) > 6 else "cnn"
torch.set_num_threads(threads)
torch.manual_seed(0)
if model_name == "cnn":
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1568, 128), nn.ReLU(), nn.Linear(128, 10))
elif model_name == "resnet20":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "data", "resnet"))
    from make_resnet_golden import CifarResNet  # noqa: E402 (no side effects on import)
    model = CifarResNet(layers=(3, 3, 3), in_channels=1, num_classes=10)
else:
    sys.exit(f"pytorch_cnn.py: MODEL must be cnn or resnet20, got {model_name!r}")
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
print(f"RESULT framework=pytorch-{torch.__version__} model={model_name} devices=1 ranks=1 "
      f"threads={threads} sync_bn=0 batch={batch} "
      f"ms_per_step={median:.3f} samples_per_s={1000 * batch / median:.1f} "
      f"min_ms={ms[0]:.3f} max_ms={ms[-1]:.3f}")
