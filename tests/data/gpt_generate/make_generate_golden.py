#!/usr/bin/env python3
"""Greedy generation of nanoGPT's model trained by PyTorch, for `lockstep generate` (issue 20).

The model is nanoGPT's (tests/data/gpt/make_gpt_golden.py holds model.py's definitions, copied
verbatim); `generate` below is nanoGPT's GPT.generate copied verbatim from model.py at commit
3adf61e1 (https://github.com/karpathy/nanoGPT, MIT License, Copyright (c) 2022 Andrej Karpathy;
the licence text is in make_gpt_golden.py).

  * Text: text.txt (four short lines repeated, written by this script; the model learns it well,
    so greedy choices are clear),
    character vocabulary as shakespeare_char/prepare.py (sorted(set(text))), 90 % training part.
  * torch.manual_seed(0); GPT(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=False,
    dropout=0.0, vocab_size=len(chars)); 300 steps of AdamW (configure_optimizers, weight decay
    0.1, lr 1e-2, betas (0.9, 0.99)) on batches of 16 random windows (train.py's get_batch).
  * weights.safetensors: the state_dict (both tied keys, as separate copies since
    safetensors.torch.save_file refuses shared memory) with lockstep's metadata: tokenizer
    "char", vocab (the characters concatenated), model
    "gpt:layers=2,heads=2,embd=32,block=16,bias=false,dropout=0", vocab_size.
  * generate.json: for each prompt, model.generate(idx, 40, temperature=1.0, top_k=1) (greedy:
    top_k=1 leaves one token, which multinomial must pick), the new token ids, their text, and
    the smallest gap between the best and the second-best logit over the steps (so float32
    differences in another implementation cannot flip a choice).

Run from the repository root with PyTorch 2.x and safetensors:
    python3 tests/data/gpt_generate/make_generate_golden.py
Deterministic (the same bytes on every run with the same torch).
"""
import json
import os
import sys

import torch
from torch.nn import functional as F
import safetensors.torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpt"))
from make_gpt_golden import GPT, GPTConfig  # noqa: E402  (nanoGPT's model.py)


# ---------------------------------------------------------------------------------------------
# BEGIN copied verbatim from nanoGPT, model.py at commit 3adf61e1 (GPT.generate; MIT License,
# Copyright (c) 2022 Andrej Karpathy), as a function of the model.
@torch.no_grad()
def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
    """
    Take a conditioning sequence of indices idx (LongTensor of shape (b,t)) and complete
    the sequence max_new_tokens times, feeding the predictions back into the model each time.
    Most likely you'll want to make sure to be in model.eval() mode of operation for this.
    """
    for _ in range(max_new_tokens):
        # if the sequence context is growing too long we must crop it at block_size
        idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
        # forward the model to get the logits for the index in the sequence
        logits, _ = self(idx_cond)
        # pluck the logits at the final step and scale by desired temperature
        logits = logits[:, -1, :] / temperature
        # optionally crop the logits to only the top k options
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float('Inf')
        # apply softmax to convert logits to (normalized) probabilities
        probs = F.softmax(logits, dim=-1)
        # sample from the distribution
        idx_next = torch.multinomial(probs, num_samples=1)
        # append sampled index to the running sequence and continue
        idx = torch.cat((idx, idx_next), dim=1)

    return idx
# END copied from nanoGPT model.py
# ---------------------------------------------------------------------------------------------


def make_text():
    lines = ["the cat sat on the mat.", "a dog ran to its bed.", "my hen laid an egg!",
             "we fed the old fox?"]
    return "".join(lines[i % 4] + "\n" for i in range(160))


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    text = make_text()
    with open(os.path.join(HERE, "text.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    train = data[: int(len(data) * 0.9)]
    config = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=False, dropout=0.0,
                       vocab_size=len(chars))
    torch.manual_seed(0)
    model = GPT(config)
    opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.99), "cpu")
    for _ in range(300):
        ix = torch.randint(len(train) - config.block_size, (16,))
        x = torch.stack([train[i:i + config.block_size] for i in ix])
        y = torch.stack([train[i + 1:i + 1 + config.block_size] for i in ix])
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    metadata = {"tokenizer": "char", "vocab": "".join(chars),
                "model": "gpt:layers=2,heads=2,embd=32,block=16,bias=false,dropout=0",
                "vocab_size": str(len(chars))}
    safetensors.torch.save_file(state, os.path.join(HERE, "weights.safetensors"), metadata)

    cases = []
    for prompt in ["the cat", "\n", "a dog ran to its", "fox?\nthe"]:
        idx = torch.tensor([[stoi[c] for c in prompt]], dtype=torch.long)
        out = generate(model, idx, 40, temperature=1.0, top_k=1)
        new = out[0, idx.size(1):].tolist()
        # The smallest top-1/top-2 logit gap along the way.
        gap = float("inf")
        with torch.no_grad():
            for t in range(idx.size(1), out.size(1)):
                cond = out[:, max(0, t - config.block_size):t]
                logits, _ = model(cond)
                top2 = torch.topk(logits[0, -1], 2).values
                gap = min(gap, float(top2[0] - top2[1]))
        assert gap > 1e-3, (prompt, gap)
        cases.append({"prompt": prompt, "max_new_tokens": 40, "tokens": new,
                      "text": "".join(chars[i] for i in new), "min_logit_gap": gap})
    with open(os.path.join(HERE, "generate.json"), "w", encoding="utf-8") as f:
        json.dump({"final_train_loss": float(loss.detach()), "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
