#!/usr/bin/env python3
"""Golden trajectories of a small CNN with BatchNorm, made by PyTorch (tests/data/cnn/README.md).

The model is the main job's CNN at a small size (the same layer indices, so the same state_dict
keys: 0.*, 1.*, 4.*, 5.*, 9.*, 11.*), trained on 16 random 1x12x12 images in batches of 8 for 4
steps (batches 0, 1, 0, 1), once on one device and, for N = 2 and 3, the way Lockstep's
DataParallel runs a step: the batch cut by torch.tensor_split into N chunks; chunk 0 runs on the
model itself (its BatchNorm updates the model's running statistics and num_batches_tracked);
chunks k > 0 run on copies made before the step (the model's buffers as the step found them,
their updates dropped); each chunk's mean cross-entropy is weighted by its share of the batch
and the gradients are summed into the model's before the optimizer step.

Run from the repository root with PyTorch 2.x:
    python3 tests/data/cnn/make_cnn_golden.py
"""
import copy
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model(conv_bias):
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=conv_bias), nn.BatchNorm2d(4), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(4, 8, 3, padding=1, bias=conv_bias), nn.BatchNorm2d(8),
        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 3 * 3, 16), nn.ReLU(),
        nn.Linear(16, 10))


def layers(conv_bias):
    b = "" if conv_bias else ", bias=False"
    return [f"Conv2d(1, 4, 3, padding=1{b})", "BatchNorm2d(4)", "ReLU", "MaxPool2d(2)",
            f"Conv2d(4, 8, 3, padding=1{b})", "BatchNorm2d(8)", "ReLU", "MaxPool2d(2)",
            "Flatten", "Linear(72, 16)", "ReLU", "Linear(16, 10)"]


# A conv bias right before a BatchNorm gets an exactly zero gradient in exact arithmetic (the
# normalization removes it), so its float32 gradient is rounding noise, which Adam turns into
# full-size steps that no two implementations share: the Adam file's convs have no bias (as
# such layers usually have), the SGD file's keep theirs (SGD scales the noise by lr).
CONV_BIAS = {"sgd_momentum": True, "adam": False}


def state(model):
    out = {}
    for k, v in model.state_dict().items():
        out[k] = {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""),
                  "data": v.detach().flatten().tolist()}
    return out


def optimizer_for(kind, params):
    if kind == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9), {"kind": "sgd", "lr": 0.05,
                                                                "momentum": 0.9}
    return torch.optim.Adam(params, lr=0.01), {"kind": "adam", "lr": 0.01}


def smallest_gradient(model):
    """The smallest non-zero |gradient| of any parameter (inf when all are zero)."""
    g = torch.cat([p.grad.flatten().abs() for p in model.parameters() if p.grad is not None])
    g = g[g > 0]
    return g.min().item() if len(g) else float("inf")


def step_data_parallel(model, x, y, devices):
    """One DataParallel step as Lockstep runs it; returns the batch's mean loss."""
    replicas = [model] + [copy.deepcopy(model) for _ in range(devices - 1)]
    total = 0.0
    for r, (xc, yc) in zip(replicas, zip(torch.tensor_split(x, devices),
                                         torch.tensor_split(y, devices))):
        weight = xc.shape[0] / x.shape[0]
        loss = F.cross_entropy(r(xc), yc)
        (loss * weight).backward()
        total += loss.item() * weight
    for r in replicas[1:]:
        for p, q in zip(model.parameters(), r.parameters()):
            p.grad = q.grad if p.grad is None else p.grad + q.grad
    return total


def run(kind, devices, x, y, init):
    model = make_model(CONV_BIAS[kind])
    model.load_state_dict(init)
    opt, spec = optimizer_for(kind, model.parameters())
    losses, buffers, smallest = [], [], float("inf")
    for step in range(4):
        b = step % 2
        xb, yb = x[8 * b:8 * b + 8], y[8 * b:8 * b + 8]
        opt.zero_grad(set_to_none=True)
        if devices == 1:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            losses.append(loss.item())
        else:
            losses.append(step_data_parallel(model, xb, yb, devices))
        smallest = min(smallest, smallest_gradient(model))
        opt.step()
        buffers.append(model[1].running_mean.tolist())
    model.eval()
    with torch.no_grad():
        eval_out = model(x[:8]).flatten().tolist()
    return spec, smallest, {"step_losses": losses, "running_mean_1_per_step": buffers,
                            "final_state": state(model), "eval_output": eval_out}


def main():
    torch.manual_seed(0)
    x = torch.randn(16, 1, 12, 12)
    y = torch.randint(0, 10, (16,))
    for kind in ["sgd_momentum", "adam"]:
        # Adam's step lr·m/(√v + eps) turns a gradient near eps = 1e-8 into an O(lr) step that
        # depends on the gradient's last bits, which no two implementations share: the Adam
        # file's initial parameters are the first seed from 1 whose gradients, on every device
        # count and step, are 0 or at least 1e-5 in magnitude (SGD's seed is 1).
        for seed in range(1, 100):
            torch.manual_seed(seed)
            model = make_model(CONV_BIAS[kind])
            init = copy.deepcopy(model.state_dict())
            runs = {d: run(kind, d, x, y, init) for d in [1, 2, 3]}
            if kind != "adam" or min(r[1] for r in runs.values()) >= 1e-5:
                break
        doc = {"name": "cnn_" + kind, "layers": layers(CONV_BIAS[kind]), "init_seed": seed,
               "conv_bias": CONV_BIAS[kind], "x_shape": list(x.shape),
               "x": x.flatten().tolist(), "y": y.tolist(), "batch_size": 8, "steps": 4,
               "batches": "step s trains on rows [8·(s mod 2), 8·(s mod 2) + 8)",
               "initial_state": state(model), "expected": {},
               "produced_by": "tests/data/cnn/make_cnn_golden.py, torch " + torch.__version__}
        for devices, (spec, smallest, expected) in runs.items():
            doc["expected"][str(devices)] = expected
            doc["optimizer"] = spec
            print(kind, "seed", seed, "devices", devices, "smallest |grad|", smallest)
        with open(os.path.join(HERE, "cnn_" + kind + ".json"), "w") as f:
            json.dump(doc, f)
        print("wrote", "cnn_" + kind + ".json")


if __name__ == "__main__":
    main()
