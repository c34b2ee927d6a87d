#!/usr/bin/env python3
"""safetensors interop with PyTorch, both directions (ctest io.safetensors_interop).

1. Runs `TEST_BINARY --gtest_filter=SafetensorsInterop.WriteForPyTorch`, which writes
   DIR/ours.safetensors from Lockstep's nn::Sequential(Linear(784,256), ReLU, Linear(256,10));
   loads it with safetensors.torch.load_file into torch.nn.Sequential(...) with
   load_state_dict(strict=True) and checks every value and the metadata.
2. Writes DIR/torch.safetensors with safetensors.torch.save_file and runs
   `TEST_BINARY --gtest_filter=SafetensorsInterop.ReadFromPyTorch`, which checks it.

Exits 77 (ctest SKIP_RETURN_CODE) with the reason when torch or safetensors is not importable.
Usage: safetensors_interop.py --test-binary PATH --dir DIR
"""
import argparse
import os
import subprocess
import sys

SKIP = 77


def ours_value(k, numel, torch):
    """((i * 37 + k * 11) % 201 - 100) / 64, as ours_value() in safetensors_interop_test.cpp."""
    i = torch.arange(numel, dtype=torch.int64)
    return ((i * 37 + k * 11) % 201 - 100).to(torch.float32) / 64


def torch_value(k, numel, torch):
    """((i * 13 + k * 7) % 97 - 48) / 32, as torch_value() in safetensors_interop_test.cpp."""
    i = torch.arange(numel, dtype=torch.int64)
    return ((i * 13 + k * 7) % 97 - 48).to(torch.float32) / 32


def run_gtest(binary, name, directory):
    env = dict(os.environ, LOCKSTEP_INTEROP_DIR=directory)
    proc = subprocess.run([binary, "--gtest_filter=SafetensorsInterop." + name],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout)
    if proc.returncode != 0 or "[  PASSED  ] 1 test" not in proc.stdout or "[  SKIPPED" in proc.stdout:
        sys.exit(f"FAIL: SafetensorsInterop.{name} did not pass (exit {proc.returncode})")


def mlp(torch):
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--test-binary", required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    try:
        import torch
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file
    except ImportError as e:
        print(f"SKIP: PyTorch/safetensors not importable by {sys.executable}: {e}")
        return SKIP

    os.makedirs(args.dir, exist_ok=True)
    ours = os.path.join(args.dir, "ours.safetensors")
    theirs = os.path.join(args.dir, "torch.safetensors")
    for path in (ours, theirs):
        if os.path.exists(path):
            os.remove(path)

    # 1. Lockstep -> PyTorch.
    run_gtest(args.test_binary, "WriteForPyTorch", args.dir)
    state = load_file(ours)
    model = mlp(torch)
    model.load_state_dict(state, strict=True)
    with safe_open(ours, framework="pt") as f:
        metadata = f.metadata()
    assert metadata == {"format": "pt", "writer": "lockstep"}, metadata
    for k, (name, t) in enumerate(model.state_dict().items()):
        assert t.dtype == torch.float32, (name, t.dtype)
        want = ours_value(k, t.numel(), torch).reshape(t.shape)
        assert torch.equal(t, want), f"{name}: values differ from Lockstep's"
    print(f"ok: torch loaded {ours} with load_state_dict(strict=True); "
          f"{sum(t.numel() for t in state.values())} values equal")

    # 2. PyTorch -> Lockstep.
    model = mlp(torch)
    with torch.no_grad():
        for k, t in enumerate(model.state_dict().values()):
            t.copy_(torch_value(k, t.numel(), torch).reshape(t.shape))
    tensors = dict(model.state_dict())
    tensors["step"] = torch.tensor(123456789012, dtype=torch.int64)
    tensors["f64"] = torch.tensor([0.1, -2.5, 1e300], dtype=torch.float64)
    tensors["empty"] = torch.zeros(0, 4)
    save_file(tensors, theirs + ".partial", metadata={"format": "pt", "writer": "pytorch"})
    os.replace(theirs + ".partial", theirs)
    run_gtest(args.test_binary, "ReadFromPyTorch", args.dir)
    print(f"ok: Lockstep loaded {theirs} written by safetensors.torch.save_file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
