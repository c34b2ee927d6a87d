#!/usr/bin/env python3
"""PyTorch's side of bench/compare_gpt_cli.sh: nanoGPT's train.py loop on a text file, the
configuration `lockstep train --data text:FILE --model gpt:...` is given there.

    python3 bench/pytorch_gpt_train.py --text FILE [--threads 2] [--max-iters 2000]
        [--batch 12] [--block 64] [--layers 4] [--heads 4] [--embd 128] [--lr 1e-3]
        [--min-lr 1e-4] [--warmup-iters 100] [--lr-decay-iters MAX_ITERS] [--eval-iters 200]
        [--seed 1337]

Data as shakespeare_char/prepare.py: vocabulary sorted(set(text)), the first 90 % trains, the
rest validates. Model: nanoGPT's GPT (model.py, from tests/data/gpt/make_gpt_golden.py, which
holds it verbatim, through bench/pytorch_gpt.py), bias=False, dropout=0.0. Optimizer: model.configure_optimizers(0.1, lr,
(0.9, 0.99), 'cpu'). Each iteration as train.py (gradient_accumulation_steps 1): lr = get_lr(it)
(warmup, cosine to min_lr at lr_decay_iters) set on every group; X, Y = get_batch('train')
(torch.randint offsets, windows of block + 1 tokens); logits, loss = model(X, Y); backward;
clip_grad_norm_(1.0); step; zero_grad(set_to_none=True). Evaluation only after the last step:
estimate_loss (eval_iters batches of each part, model.eval()).
Output: "RESULT framework=pytorch-<version> threads=T iters=N tokens_per_s=S seconds=s
train_loss=a val_loss=b" (tokens/s: batch x block x iters over the training loop's wall time).
"""
import argparse
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# nanoGPT's model classes as bench/pytorch_gpt.py imports them (from make_gpt_golden.py).
from pytorch_gpt import GPT, GPTConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-iters", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup-iters", type=int, default=100)
    ap.add_argument("--lr-decay-iters", type=int, default=None)
    ap.add_argument("--eval-iters", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    decay_iters = a.lr_decay_iters or a.max_iters
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(len(data) * 0.9)
    parts = {"train": data[:n], "val": data[n:]}

    def get_batch(split):
        d = parts[split]
        ix = torch.randint(len(d) - a.block, (a.batch,))
        x = torch.stack([d[i:i + a.block] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + a.block] for i in ix])
        return x, y

    def get_lr(it):  # nanoGPT train.py's
        if it < a.warmup_iters:
            return a.lr * (it + 1) / (a.warmup_iters + 1)
        if it > decay_iters:
            return a.min_lr
        ratio = (it - a.warmup_iters) / (decay_iters - a.warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
        return a.min_lr + coeff * (a.lr - a.min_lr)

    model = GPT(GPTConfig(n_layer=a.layers, n_head=a.heads, n_embd=a.embd, block_size=a.block,
                          bias=False, dropout=0.0, vocab_size=len(chars)))
    opt = model.configure_optimizers(0.1, a.lr, (0.9, 0.99), "cpu")
    start = time.perf_counter()
    for it in range(a.max_iters):
        for g in opt.param_groups:
            g["lr"] = get_lr(it)
        x, y = get_batch("train")
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    model.eval()
    out = {}
    with torch.no_grad():
        for split in ("train", "val"):
            losses = torch.zeros(a.eval_iters)
            for k in range(a.eval_iters):
                x, y = get_batch(split)
                losses[k] = model(x, y)[1].item()
            out[split] = losses.mean().item()
    print(f"RESULT framework=pytorch-{torch.__version__} threads={a.threads} iters={a.max_iters} "
          f"tokens_per_s={a.batch * a.block * a.max_iters / seconds:.1f} seconds={seconds:.2f} "
          f"train_loss={out['train']:.4f} val_loss={out['val']:.4f}")


if __name__ == "__main__":
    main()
