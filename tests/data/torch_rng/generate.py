#!/usr/bin/env python3
"""PyTorch's CPU random streams after torch.manual_seed, for tests/core/torch_generator_test.cpp,
tests/nn/torch_init_test.cpp and tests/data/torch_sampler_test.cpp (issue 36).

Writes torch_rng.json beside this script:
  meta      torch version, torch.backends.cpu.get_cpu_capability(), the CPU vendor (bernoulli_
            with a scalar p goes through MKL on Intel CPUs and through the generator elsewhere),
            MKL availability.
  samplers  one entry per draw, each after its own torch.manual_seed(seed): op, arguments, dtype,
            size, and the values (float32/float64 as hex bit patterns, int64 as integers), or
            for more than 100 values the FNV-1a 64 hash of their bytes.
  chain     several draws from ONE seed in a row (the Box-Muller cache carries between them),
            then torch.get_rng_state() as hex (5056 bytes).
  modules   torch.manual_seed(0), then a module is built: every state_dict entry as shape, dtype
            and the FNV-1a 64 hash of its little-endian bytes (the bits, compactly), plus the first
            values as hex; small modules also list every value.
  cli_mlp   torch.manual_seed(3); nn.Sequential(Linear(10, 16), ReLU(), Linear(16, 2)), as modules.
  orders    DataLoader / RandomSampler / DistributedSampler visiting orders after a seed, and a
            randint(0, 1000, (3,)) drawn afterwards (which shows what iterating consumed).

Run from the repository root with PyTorch 2.x (CPU): python3 tests/data/torch_rng/generate.py
The GPT and ResNet-20 definitions are those of tests/data/gpt/make_gpt_golden.py and
tests/data/resnet/make_resnet_golden.py.
"""
import importlib.util
import json
import os
import struct

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def values(t):
    t = t.detach().contiguous()
    if t.dtype == torch.float32:
        return ["%08x" % v for v in t.view(torch.int32).numpy().view(np.uint32).reshape(-1)]
    if t.dtype == torch.float64:
        return ["%016x" % v for v in t.view(torch.int64).numpy().view(np.uint64).reshape(-1)]
    return [int(v) for v in t.reshape(-1).tolist()]


def fnv1a64(t):
    h = 0xCBF29CE484222325
    for b in t.detach().contiguous().reshape(-1).numpy().tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


DT = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}


def draw(op, dtype, size, args):
    d = DT[dtype]
    if op == "randn":
        return torch.randn(size, dtype=d)
    if op == "rand":
        return torch.rand(size, dtype=d)
    if op == "randint":
        return torch.randint(args[0], args[1], (size,), dtype=d)
    if op == "randperm":
        return torch.randperm(size)
    if op == "dropout":  # the mask times 1: F.dropout of ones in training mode
        return torch.nn.functional.dropout(torch.ones(size, dtype=d), args[0], training=True)
    t = torch.empty(size, dtype=d)
    if op == "normal_":
        return t.normal_(args[0], args[1])
    if op == "uniform_":
        return t.uniform_(args[0], args[1])
    if op == "random_":
        return t.random_(*args)
    if op == "bernoulli_":
        return t.bernoulli_(args[0])
    raise ValueError(op)


SAMPLERS = []
for dtype in ("float32", "float64"):
    for size in (1, 5, 15, 16, 37, 64):
        SAMPLERS.append(("randn", dtype, size, []))
    for size in (5, 37):
        SAMPLERS += [("rand", dtype, size, []), ("normal_", dtype, size, [0.5, 2.0]),
                     ("uniform_", dtype, size, [-0.3, 0.7]),
                     ("uniform_", dtype, size, [-7.3, 2.9]), ("random_", dtype, size, []),
                     ("random_", dtype, size, [3, 17]), ("bernoulli_", dtype, size, [0.3]),
                     ("randint", dtype, size, [0, 10])]
for size in (5, 37):
    SAMPLERS += [("randint", "int64", size, [-3, 1000]), ("randint", "int64", size, [0, 2**40]),
                 ("random_", "int64", size, []), ("random_", "int64", size, [3, 17]),
                 ("bernoulli_", "int64", size, [0.6])]
SAMPLERS += [("randperm", "int64", n, []) for n in (1, 2, 10, 100)]
# Dropout's mask (bernoulli_(1 - p) without MKL, then / (1 - p) in the dtype; p = 1 draws nothing).
SAMPLERS += [("dropout", "float32", 40, [0.0355310621242485]), ("dropout", "float32", 40, [0.5]),
             ("dropout", "float64", 17, [0.3]), ("dropout", "float32", 5, [1.0])]
# Large draws, stored as hashes: the vectorised normal of every lane and tail, the 64-bit
# threshold of randint (2^28), a long permutation.
for dtype in ("float32", "float64"):
    SAMPLERS += [("randn", dtype, 4099, []), ("normal_", dtype, 4099, [0.3, 0.02]),
                 ("uniform_", dtype, 4099, [-0.31622776601683794, 0.31622776601683794])]
SAMPLERS += [("randint", "int64", 5, [0, 2**28 - 1]), ("randint", "int64", 5, [0, 2**28]),
             ("randint", "int64", 5, [-5, 2**28 - 5]), ("randperm", "int64", 5000, [])]

CHAIN = [("dropout", "float32", 3, [1.0]), ("randn", "float64", 3, []), ("randn", "float32", 3, []), ("randn", "float32", 20, []),
         ("rand", "float32", 2, []), ("randn", "float64", 1, []), ("randn", "float64", 1, []),
         ("randn", "float64", 1, [])]


def modules():
    gpt = load("gpt/make_gpt_golden.py", "make_gpt_golden")
    resnet = load("resnet/make_resnet_golden.py", "make_resnet_golden")
    gpt_config = dict(block_size=16, vocab_size=65, n_layer=2, n_head=2, n_embd=32, dropout=0.0,
                      bias=True)
    return {
        "linear_10_5": lambda: nn.Linear(10, 5),
        "linear_7_3_nobias": lambda: nn.Linear(7, 3, bias=False),
        "conv2d_3_4_k3": lambda: nn.Conv2d(3, 4, 3),
        "conv2d_2_6_k5_s2_p1": lambda: nn.Conv2d(2, 6, 5, stride=2, padding=1),
        "embedding_11_6": lambda: nn.Embedding(11, 6),
        "embedding_2_3": lambda: nn.Embedding(2, 3),
        "layer_norm_8": lambda: nn.LayerNorm(8),
        "batch_norm2d_4": lambda: nn.BatchNorm2d(4),
        "sequential_mlp": lambda: nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)),
        "gpt_small": lambda: gpt.GPT(gpt.GPTConfig(**gpt_config)),
        "resnet20": lambda: resnet.CifarResNet(),
    }, gpt_config


def module_entry(make, seed=0):
    torch.manual_seed(seed)
    m = make()
    out = {}
    for k, v in m.state_dict(keep_vars=False).items():
        e = {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", ""),
             "fnv1a64": fnv1a64(v), "first": values(v.reshape(-1)[:4])}
        if v.numel() <= 64:
            e["values"] = values(v)
        out[k] = e
    # What construction consumed: the next draw.
    out["__next_randint"] = torch.randint(0, 1 << 30, (2,)).tolist()
    return out


def order_entries():
    out = []
    for seed in (0, 3):
        for n, shuffle in ((10, True), (7, False), (33, True)):
            torch.manual_seed(seed)
            dl = DataLoader(list(range(n)), batch_size=4, shuffle=shuffle)
            epochs = [[int(i) for b in dl for i in b] for _ in range(2)]
            out.append({"kind": "dataloader", "seed": seed, "n": n, "shuffle": shuffle,
                        "epochs": epochs, "next_randint": torch.randint(0, 1000, (3,)).tolist()})
        torch.manual_seed(seed)
        s = RandomSampler(range(12))
        epochs = [list(s) for _ in range(2)]
        out.append({"kind": "random_sampler", "seed": seed, "n": 12, "epochs": epochs,
                    "next_randint": torch.randint(0, 1000, (3,)).tolist()})
    for n, replicas, drop_last, seed in ((10, 3, False, 0), (11, 4, True, 5), (25, 2, False, 9)):
        ranks = []
        for rank in range(replicas):
            s = DistributedSampler(list(range(n)), num_replicas=replicas, rank=rank, shuffle=True,
                                   seed=seed, drop_last=drop_last)
            eps = []
            for e in range(2):
                s.set_epoch(e)
                eps.append(list(s))
            ranks.append(eps)
        out.append({"kind": "distributed_sampler", "n": n, "num_replicas": replicas,
                    "drop_last": drop_last, "seed": seed, "ranks": ranks})
    return out


def main():
    vendor = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    vendor = line.split(":")[1].strip()
                    break
    except OSError:
        pass
    meta = {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_vendor": vendor, "mkl": torch.backends.mkl.is_available()}
    samplers = []
    for seed in (0, 1234):
        for op, dtype, size, args in SAMPLERS:
            torch.manual_seed(seed)
            t = draw(op, dtype, size, args)
            e = {"seed": seed, "op": op, "dtype": dtype, "size": size, "args": args}
            if size > 100:
                e["fnv1a64"] = fnv1a64(t)
            else:
                e["values"] = values(t)
            samplers.append(e)
    torch.manual_seed(42)
    chain = {"seed": 42, "steps": []}
    for op, dtype, size, args in CHAIN:
        chain["steps"].append({"op": op, "dtype": dtype, "size": size, "args": args,
                               "values": values(draw(op, dtype, size, args))})
    chain["state"] = torch.get_rng_state().numpy().tobytes().hex()
    makers, gpt_config = modules()
    mods = {name: module_entry(make) for name, make in makers.items()}
    # `lockstep train --torch-init --seed 3 --model mlp:10,16,2` (tests/e2e/cli_torch_init_test.cpp)
    cli = {"seed": 3, "model": "mlp:10,16,2", "state": module_entry(
        lambda: nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2)), seed=3)}
    doc = {"meta": meta, "samplers": samplers, "chain": chain, "modules": mods, "cli_mlp": cli,
           "gpt_config": gpt_config, "orders": order_entries()}
    with open(os.path.join(HERE, "torch_rng.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
