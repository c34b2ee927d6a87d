"""lockstep.manual_seed gives PyTorch's streams: factories, initial weights, DataLoader orders,
and the reference program's ten losses (values from torch 2.15, tests/data/python/generate.py)."""
import os
import subprocess
import sys

import lockstep as torch
from conftest import close
from test_nn import Net
from lockstep.utils.data import DataLoader

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def bits(t):
    return t.detach().numpy().tobytes()


def test_factories_draw_torchs_numbers(golden):
    g = torch.manual_seed(0)
    assert g is torch.default_generator and torch.initial_seed() == 0
    assert bits(torch.randn(5)) == bits(golden["rng.randn"])
    assert bits(torch.rand(3, dtype=torch.float64)) == bits(golden["rng.rand_f64"])
    assert torch.randint(0, 10, (4,)).tolist() == golden["rng.randint"].tolist()
    assert torch.randperm(6).tolist() == golden["rng.randperm"].tolist()
    assert bits(torch.randn(40)) == bits(golden["rng.randn_big"])


def test_initial_weights_are_torchs(golden):
    torch.manual_seed(0)
    for k, v in Net().state_dict().items():
        assert bits(v) == bits(golden[f"rng.net.{k}"]), k


def test_dataloader_orders_are_torchs(golden):
    torch.manual_seed(0)
    ds = list(range(10))
    got = [i for _ in range(2) for b in DataLoader(ds, batch_size=3, shuffle=True) for i in b.tolist()]
    assert got == golden["rng.loader_default"].tolist()
    g = torch.Generator().manual_seed(1)
    got = [i for _ in range(2) for b in DataLoader(ds, batch_size=3, shuffle=True, generator=g)
           for i in b.tolist()]
    assert got == golden["rng.loader_generator"].tolist()
    assert bits(torch.randn(2)) == bits(golden["rng.after_loaders"])


def test_generator_state_round_trips():
    g = torch.Generator()
    assert g.initial_seed() == 67280421310721
    s = g.get_state()
    assert s.shape == (5056,)
    a = torch.randn(4, generator=g)
    g.set_state(s)
    assert bits(torch.randn(4, generator=g)) == bits(a)


def test_reference_program_with_manual_seed_prints_torchs_losses(golden):
    src = open(os.path.join(ROOT, "examples", "reference_program.py")).read()
    anchor = "import numpy as np\n"
    assert anchor in src
    seeded = src.replace(anchor, anchor + "torch.manual_seed(0)\n", 1)
    proc = subprocess.run([sys.executable, "-c", seeded], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    losses = [float(line.rsplit(" ", 1)[1]) for line in proc.stdout.splitlines()]
    expected = golden["refprog.val_losses_f64"].tolist()
    assert len(losses) == 10
    for got, want in zip(losses, expected):
        assert abs(got - round(want, 4)) <= 1e-4, (losses, expected)
