#!/usr/bin/env python3
"""Writes attention_golden.json: PyTorch's numbers for tests/ops/attention_test.cpp.

  * torch.nn.functional.scaled_dot_product_attention in float64 (causal and not, L == S and
    L != S, the default and an explicit scale, T = 1, head size 1): the output and the gradients
    of q, k and v for the loss sum(out * w);
  * torch.nn.functional.gelu(x, approximate='tanh') in float64 and float32: the output and the
    gradient of sum(out * w).

Values are written as JSON numbers (Python's repr of a double: exact). Run with PyTorch >= 2.0:
  /work/torch-venv/bin/python3 tests/data/attention/make_attention_golden.py
"""
import json
import os

import torch
import torch.nn.functional as F


def entry(t):
    return {"shape": list(t.shape), "data": [float(x) for x in t.detach().reshape(-1).tolist()]}


def attention_case(name, gen, qs, ks, vs, is_causal, scale=None):
    q = torch.randn(qs, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(ks, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(vs, generator=gen, dtype=torch.float64, requires_grad=True)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    w = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    (out * w).sum().backward()
    return {"name": name, "is_causal": is_causal, "scale": scale, "q": entry(q), "k": entry(k),
            "v": entry(v), "w": entry(w), "out": entry(out), "grad_q": entry(q.grad),
            "grad_k": entry(k.grad), "grad_v": entry(v.grad)}


def gelu_case(dtype, gen):
    base = torch.tensor([0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 1.0, -1.0, 2.5, -2.5, 4.0, -4.0,
                         10.0, -10.0, 30.0, -30.0], dtype=torch.float64)
    x = torch.cat([base, 3 * torch.randn(33, generator=gen, dtype=torch.float64)]).to(dtype)
    x.requires_grad_(True)
    out = F.gelu(x, approximate="tanh")
    w = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(dtype)
    (out * w).sum().backward()
    return {"dtype": str(dtype).replace("torch.", ""), "x": entry(x), "w": entry(w),
            "out": entry(out), "grad": entry(x.grad)}


def main():
    gen = torch.Generator().manual_seed(19)
    attention = [
        attention_case("bhte_causal", gen, (2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4), True),
        attention_case("bhte_full", gen, (2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4), False),
        attention_case("l3_s5_ev2_causal", gen, (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 2), True),
        attention_case("l5_s3_causal", gen, (2, 5, 3), (2, 3, 3), (2, 3, 3), True),
        attention_case("scale_0.7_causal", gen, (1, 1, 4, 6), (1, 1, 4, 6), (1, 1, 4, 6), True,
                       0.7),
        attention_case("t1", gen, (2, 2, 1, 3), (2, 2, 1, 3), (2, 2, 1, 3), True),
        attention_case("head_size_1", gen, (1, 2, 6, 1), (1, 2, 6, 1), (1, 2, 6, 1), True),
        attention_case("2d", gen, (4, 3), (4, 3), (4, 2), False),
    ]
    gelu = [gelu_case(torch.float64, gen), gelu_case(torch.float32, gen)]
    doc = {"torch_version": torch.__version__, "attention": attention, "gelu_tanh": gelu}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_golden.json")
    with open(path, "w") as f:
        json.dump(doc, f)
        f.write("\n")


if __name__ == "__main__":
    main()
