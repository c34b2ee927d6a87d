#!/usr/bin/env python3
"""PyTorch's numbers for layer_norm and embedding (tests/ops/layer_norm_embedding_values_test.cpp).

Each case: inputs drawn from torch.randn under torch.manual_seed(case seed), in float32 (float64
for the cases named *_f64); the op's forward, then backward with a random output gradient dy;
written as the forward output and every input's gradient. Tensors are {"shape": [...], "data":
[...]} with the values as JSON numbers (each float32 printed exactly as a double), or null
where an optional input is absent.

  layer_norm: torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps)
  embedding:  torch.nn.functional.embedding(indices, weight) (repeated indices included)

Run from the repository root with PyTorch 2.x:
    python3 tests/data/gpt_ops/make_gpt_ops_golden.py
It rewrites tests/data/gpt_ops/gpt_ops.json.
"""
import json
import os

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def enc(t):
    if t is None:
        return None
    return {"shape": list(t.shape), "data": [float(v) for v in t.detach().reshape(-1).tolist()]}


def leaf(shape, dtype):
    return torch.randn(*shape, dtype=dtype).requires_grad_(True)


def layer_norm_case(name, seed, x_shape, normalized_shape, weight, bias, eps=1e-5, scale=1.0,
                    shift=0.0, dtype=torch.float32):
    torch.manual_seed(seed)
    x = (torch.randn(*x_shape, dtype=dtype) * scale + shift).requires_grad_(True)
    w = leaf(normalized_shape, dtype) if weight else None
    b = leaf(normalized_shape, dtype) if bias else None
    y = F.layer_norm(x, normalized_shape, w, b, eps)
    dy = torch.randn(*y.shape, dtype=dtype)
    y.backward(dy)
    return {
        "name": name, "dtype": str(dtype).replace("torch.", ""),
        "normalized_shape": list(normalized_shape), "eps": eps,
        "x": enc(x), "weight": enc(w), "bias": enc(b), "dy": enc(dy), "y": enc(y),
        "dx": enc(x.grad), "dweight": enc(w.grad if w is not None else None),
        "dbias": enc(b.grad if b is not None else None),
    }


def embedding_case(name, seed, vocab, dim, indices, dtype=torch.float32):
    torch.manual_seed(seed)
    w = leaf((vocab, dim), dtype)
    idx = torch.tensor(indices, dtype=torch.int64)
    y = F.embedding(idx, w)
    dy = torch.randn(*y.shape, dtype=dtype)
    y.backward(dy)
    return {
        "name": name, "dtype": str(dtype).replace("torch.", ""),
        "weight": enc(w), "indices": {"shape": list(idx.shape), "data": idx.reshape(-1).tolist()},
        "dy": enc(dy), "y": enc(y), "dweight": enc(w.grad),
    }


def main():
    out = {
        "torch_version": torch.__version__,
        "layer_norm": [
            layer_norm_case("3d_over_last_two_affine", 1, (2, 3, 4), (3, 4), True, True),
            layer_norm_case("rows_weight_only", 2, (3, 5), (5,), True, False),
            layer_norm_case("no_affine_eps_1e-3", 3, (4, 7), (7,), False, False, eps=1e-3),
            layer_norm_case("large_offset", 4, (2, 6), (6,), True, True, scale=10.0, shift=1000.0),
            layer_norm_case("3d_affine_f64", 5, (2, 3, 4), (4,), True, True, dtype=torch.float64),
        ],
        "embedding": [
            embedding_case("repeated_2d", 11, 6, 3, [[0, 2, 2], [5, 0, 2]]),
            embedding_case("1d_f64", 12, 4, 5, [3, 3, 1, 3], dtype=torch.float64),
        ],
    }
    path = os.path.join(HERE, "gpt_ops.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
