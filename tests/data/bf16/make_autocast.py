#!/usr/bin/env python3
"""Writes tests/data/bf16/autocast.json: short training trajectories under bf16 autocast, made
with PyTorch 1.13 on CPU from the golden files' data and initial parameters.

    /usr/bin/python3 tests/data/bf16/make_autocast.py   # from the repository root

For each golden file listed below, the first `steps` training steps of its run (batches in row
order, as the golden run) are replayed twice:
  * "autocast": the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16),
    backward outside it (PyTorch's recommended pattern), parameters and optimizer fp32.
  * "emulated": Lockstep's autocast contract (include/lockstep/ops/autocast.h) written out in
    fp32 PyTorch ops: each Linear rounds x, W, b to bf16, x·Wᵀ + b in fp32, result rounded; its
    backward rounds g, then gx = r(g̃ W̃), gW = r(g̃ᵀ x̃), gb = r(Σ g̃). These differ from the
    "autocast" run because PyTorch 1.13's CPU bf16 GEMM (without AVX-512) accumulates in bf16
    in every layout but linear's forward x·Wᵀ (see autocast.h).
Recorded: the per-step losses of both and the emulated run's final parameters.
"""
import json
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.dirname(HERE)  # tests/data: the golden files
RUNS = [("seed_mlp_sgd", 50), ("mlp_momentum_uneven", 15)]


def r(t):
    return t.bfloat16().float()


class EmulatedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        xr, wr = r(x), r(w)
        ctx.save_for_backward(xr, wr)
        return r(torch.addmm(r(b), xr, wr.t()))

    @staticmethod
    def backward(ctx, g):
        xr, wr = ctx.saved_tensors
        gr = r(g)
        return r(gr @ wr), r(gr.t() @ xr), r(gr.sum(0))


def build(g):
    sizes = g["sizes"]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append({"relu": torch.nn.ReLU(), "tanh": torch.nn.Tanh()}[g["activation"]])
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            init = g["initial_parameters"][name]
            p.copy_(torch.tensor(init["data"], dtype=torch.float32).reshape(init["shape"]))
    return model


def optimizer(g, params):
    o = g["optimizer"]
    assert o["kind"] == "sgd"
    return torch.optim.SGD(params, lr=o["lr"], momentum=o.get("momentum", 0),
                           dampening=o.get("dampening", 0), nesterov=o.get("nesterov", False),
                           weight_decay=o.get("weight_decay", 0))


def forward_emulated(model, x):
    for m in model:
        x = EmulatedLinear.apply(x, m.weight, m.bias) if isinstance(m, torch.nn.Linear) else m(x)
    return x


def run(g, steps, emulated):
    model = build(g)
    opt = optimizer(g, model.parameters())
    n_in = g["sizes"][0]
    x = torch.tensor(g["x"], dtype=torch.float32).reshape(-1, n_in)[: g["n_train"]]
    y = torch.tensor(g["y"], dtype=torch.int64)[: g["n_train"]]
    losses = []
    bs = g["batch_size"]
    start = 0
    while len(losses) < steps:
        bx, by = x[start:start + bs], y[start:start + bs]
        start = start + bs if start + bs < len(x) else 0
        opt.zero_grad()
        if emulated:
            loss = F.cross_entropy(forward_emulated(model, bx), by)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(bx), by)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = {n: {"shape": list(p.shape), "data": p.detach().reshape(-1).tolist()}
              for n, p in model.named_parameters()}
    return losses, params


def main():
    out = {"produced_by": "PyTorch %s on CPU (tests/data/bf16/make_autocast.py)" % torch.__version__,
           "runs": {}}
    for name, steps in RUNS:
        with open(os.path.join(DATA, name + ".json")) as f:
            g = json.load(f)
        autocast_losses, _ = run(g, steps, emulated=False)
        emulated_losses, emulated_params = run(g, steps, emulated=True)
        out["runs"][name] = {"steps": steps, "autocast_step_losses": autocast_losses,
                             "emulated_step_losses": emulated_losses,
                             "emulated_final_parameters": emulated_params}
    with open(os.path.join(HERE, "autocast.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
