#!/usr/bin/env python3
"""PyTorch's side of bench/bench_gpt.cpp: nanoGPT's training step, the same configuration, flags,
FLOP count and output line.

    python3 bench/pytorch_gpt.py [--threads 2] [--device cpu] [--batch 12] [--block 64]
        [--layers 4] [--heads 4] [--embd 128] [--vocab 65] [--steps 20] [--warmup 3] [--reps 5]
        [--peak-gflops P]

The model is nanoGPT's own GPT (model.py at commit 3adf61e, imported from
tests/data/gpt/make_gpt_golden.py, which holds it verbatim; importing it runs nothing), with
bias=False, dropout=0.0; the optimizer model.configure_optimizers(0.1, 1e-3, (0.9, 0.99),
device_type) (AdamW, weight decay on the >= 2-dim tensors; nanoGPT picks fused=True on CUDA).
One step, on a fixed random batch made before timing (torch.manual_seed(0), then the model,
then idx and targets uniform in [0, vocab)):
    optimizer.zero_grad(set_to_none=True); logits, loss = model(idx, targets); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); optimizer.step()
torch.set_num_threads(--threads) (PyTorch's default here is the core count, 2). On CUDA
(--device cuda or cuda:K) float32 matmuls stay IEEE float32 (torch.set_float32_matmul_precision
("highest"), no TF32, as Lockstep's float32), eager (no torch.compile), and each round ends with
torch.cuda.synchronize().

FLOPs per token: nanoGPT's estimate_mfu, 6*N + 12*L*H*Q*T (N = get_num_params()); peak: the
machine's, as bench_gpt.cpp computes it (CPU: usable cores x /proc/cpuinfo's cpu MHz x 32 FLOP per
cycle, 64 on an Intel CPU with avx512f; Hopper GPU: SMs x 128 x 2 x 1.98 GHz; else 0 ->
pct_peak=nan).
Output: "RESULT framework=pytorch-<version> model=gpt device=D devices=1 threads=T batch=B ...
ms_per_step=M tokens_per_s=S gflops=G peak_gflops=P pct_peak=X min_ms=m max_ms=x loss=l", the
median (and range) over --reps rounds of --steps steps, after --warmup steps.
"""
import argparse
import math
import os
import sys
import time
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "data", "gpt"))
try:
    import safetensors.torch  # noqa: F401 (make_gpt_golden imports it; the model needs none)
except ImportError:  # e.g. the GPU machine's python3: stand-ins, so that the import succeeds
    print("pytorch_gpt.py: no safetensors; make_gpt_golden imported with a stand-in for it",
          file=sys.stderr)
    sys.modules["safetensors"] = types.ModuleType("safetensors")
    sys.modules["safetensors.torch"] = types.ModuleType("safetensors.torch")
    sys.modules["safetensors"].torch = sys.modules["safetensors.torch"]
from make_gpt_golden import GPT, GPTConfig  # noqa: E402 (main() runs only as a script)


def cpu_peak_gflops():
    mhz, avx512, intel = 0.0, False, False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not mhz and line.startswith("cpu MHz"):
                    mhz = float(line.split(":", 1)[1])
                if line.startswith("vendor_id") and "GenuineIntel" in line:
                    intel = True
                if line.startswith("flags") and " avx512f" in line:
                    avx512 = True
    except OSError:
        return 0.0
    # 32 FLOP/cycle/core: two 8-wide FMA units (AVX2; AMD's AVX-512 through Zen 4 is two 256-bit
    # halves); 64: an Intel CPU with avx512f (two 16-wide FMA units).
    return len(os.sched_getaffinity(0)) * mhz / 1000 * (64 if avx512 and intel else 32)


def gpu_peak_gflops(device):
    p = torch.cuda.get_device_properties(device)
    return p.multi_processor_count * 128 * 2 * 1.98 if p.major == 9 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=65)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--peak-gflops", type=float, default=None)
    a = ap.parse_args()
    if min(a.batch, a.threads, a.steps, a.reps) < 1 or a.warmup < 0:
        sys.exit("pytorch_gpt.py: batch, threads, steps, reps must be >= 1")
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        torch.set_float32_matmul_precision("highest")

    config = GPTConfig(block_size=a.block, vocab_size=a.vocab, n_layer=a.layers, n_head=a.heads,
                       n_embd=a.embd, dropout=0.0, bias=False)
    torch.manual_seed(0)
    model = GPT(config).to(device)
    model.train()
    idx = torch.randint(0, a.vocab, (a.batch, a.block)).to(device)
    targets = torch.randint(0, a.vocab, (a.batch, a.block)).to(device)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), device.type)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    for _ in range(a.warmup):
        step()
    sync()
    ms = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        sync()
        ms.append((time.perf_counter() - t0) * 1000 / a.steps)
    ms.sort()
    median = ms[len(ms) // 2]

    # nanoGPT's estimate_mfu (model.py): flops_per_token = 6*N + 12*L*H*Q*T.
    n_params = model.get_num_params()
    L, H, Q, T = config.n_layer, config.n_head, config.n_embd // config.n_head, config.block_size
    flops_per_token = 6 * n_params + 12 * L * H * Q * T
    tokens_per_s = 1000 * a.batch * T / median
    gflops = tokens_per_s * flops_per_token * 1e-9
    if a.peak_gflops is not None:
        peak = a.peak_gflops
    else:
        peak = gpu_peak_gflops(device) if device.type == "cuda" else cpu_peak_gflops()
    pct = 100 * gflops / peak if peak > 0 else math.nan
    dev = f"{device.type}:{device.index or 0}"
    print(f"RESULT framework=pytorch-{torch.__version__.split('+')[0]} model=gpt device={dev} "
          f"devices=1 threads={a.threads} batch={a.batch} block={a.block} layers={a.layers} "
          f"heads={a.heads} embd={a.embd} vocab={a.vocab} params={n_params} "
          f"ms_per_step={median:.3f} tokens_per_s={tokens_per_s:.1f} gflops={gflops:.2f} "
          f"peak_gflops={peak:.1f} pct_peak={pct:.2f} min_ms={ms[0]:.3f} max_ms={ms[-1]:.3f} "
          f"loss={loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
