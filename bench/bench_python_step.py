"""The reference program's training step and a small op's per-call cost, in lockstep or in torch.

    PYTHONPATH=build/python .venv/bin/python bench/bench_python_step.py lockstep
    ../torch-venv/bin/python bench/bench_python_step.py torch
bench/compare_python.sh alternates the two and prints medians. Prints one line per measure:
    <framework> <measure> <microseconds per call (median of ROUNDS rounds)>
The step is the reference program's (nn.DataParallel over the default devices, batch 32 of
Linear(10,5)-ReLU-Linear(5,2), CrossEntropyLoss, SGD lr 0.01); `--no-dp` times the bare module.
"""
import argparse
import importlib
import statistics
import time

parser = argparse.ArgumentParser()
parser.add_argument("framework", choices=["lockstep", "torch"])
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--no-dp", action="store_true")
args = parser.parse_args()

torch = importlib.import_module(args.framework)
nn = importlib.import_module(args.framework + ".nn")
F = importlib.import_module(args.framework + ".nn.functional")


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 5)
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        return self.fc2(x)


torch.manual_seed(0)
model = NeuralNetwork()
if not args.no_dp:
    model = nn.DataParallel(model)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
X = torch.randn(32, 10)
y = torch.randint(0, 2, (32,))


def step():
    optimizer.zero_grad()
    loss = criterion(model(X), y)
    loss.backward()
    optimizer.step()


a, b = torch.randn(10), torch.randn(10)


def add():
    return a + b


def timed(fn, n):
    for _ in range(n // 10):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


for name, fn, n in (("step", step, args.steps), ("add10", add, args.steps * 20)):
    us = statistics.median(timed(fn, n) for _ in range(args.rounds))
    print(f"{args.framework} {name}{'_nodp' if args.no_dp else ''} {us:.2f}")
