#!/usr/bin/env python3
"""nanoGPT's GPT forward, backward and five AdamW steps made by PyTorch (tests/data/gpt/README.md).

Two tiny configs, n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=20, dropout=0.0:
"nobias" (bias=False) and "bias" (bias=True). For each, on CPU in float32, train mode:

  * torch.manual_seed(0); model = GPT(config). Its state_dict is the initial state.
  * Data (generated once, shared by both configs): torch.manual_seed(1); for each of 5 steps
    idx = randint(0, 20, (4, 16)), targets = randint(0, 20, (4, 16)); then every step's
    targets[3, -5:] = -1 (nanoGPT's ignore_index), so ignored targets are only in batch row 3.
  * First forward: logits, loss = model(idx_0, targets_0) (logits [4, 16, 20]: nanoGPT returns
    every position when targets are given), loss.backward(); logits, loss and every
    parameter's gradient (named_parameters names: the tied embedding/lm_head weight once, as
    transformer.wte.weight).
  * Training from a freshly built initial model: optimizer = model.configure_optimizers(
    weight_decay=0.1, learning_rate=1e-2, betas=(0.9, 0.95), device_type='cpu') (AdamW, eps
    1e-8); for it in 0..4: lr = get_lr(it) (train.py's warmup + cosine, warmup_iters=2,
    lr_decay_iters=3, min_lr=1e-3) set on every param group; forward, backward,
    clip_grad_norm_(model.parameters(), 1.0), optimizer.step(), zero_grad(set_to_none=True).
    Recorded per step: lr, loss (before the step) and the total grad norm clip_grad_norm_
    returned (before clipping).

Outputs, per config C: gpt_C.json, gpt_C_init.safetensors, gpt_C_grads.safetensors,
gpt_C_final.safetensors; for nobias also gpt_nobias_init_save_model.safetensors (written by
safetensors.torch.save_model, which keeps only one of the two tied keys).

Run from the repository root with PyTorch 2.x, numpy and safetensors:
    python3 tests/data/gpt/make_gpt_golden.py
It is deterministic (same bytes on every run with the same torch/safetensors).
"""
import inspect
import json
import math
import os
from dataclasses import dataclass, asdict

import safetensors
import safetensors.torch
import torch
import torch.nn as nn
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------------------------
# BEGIN copied from nanoGPT, model.py at commit 3adf61e154c3fe3fca428ad6bc3818b27a3b8291
# (https://github.com/karpathy/nanoGPT), MIT License, Copyright (c) 2022 Andrej Karpathy.
# Verbatim, except: the print() calls (and the "# report number of parameters" comment above
# one of them) are removed, and GPT.crop_block_size, from_pretrained, estimate_mfu and generate
# are left out.
#
# MIT License
#
# Copyright (c) 2022 Andrej Karpathy
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all
# copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.
# ---------------------------------------------------------------------------------------------

class LayerNorm(nn.Module):
    """ LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False """

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        # output projection
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        # regularization
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        # flash attention make GPU go brrrrr but support is only in PyTorch >= 2.0
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            # causal mask to ensure that attention is only applied to the left in the input sequence
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                        .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size() # batch size, sequence length, embedding dimensionality (n_embd)

        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)

        # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        if self.flash:
            # efficient attention using Flash Attention CUDA kernels
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            # manual implementation of attention
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C) # re-assemble all head outputs side by side

        # output projection
        y = self.resid_dropout(self.c_proj(y))
        return y

class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc    = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu    = nn.GELU()
        self.c_proj  = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x

class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x

@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304 # GPT-2 vocab_size of 50257, padded up to nearest multiple of 64 for efficiency
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True # True: bias in Linears and LayerNorms, like GPT-2. False: a bit better and faster

class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config

        self.transformer = nn.ModuleDict(dict(
            wte = nn.Embedding(config.vocab_size, config.n_embd),
            wpe = nn.Embedding(config.block_size, config.n_embd),
            drop = nn.Dropout(config.dropout),
            h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f = LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # with weight tying when using torch.compile() some warnings get generated:
        # "UserWarning: functional_call was passed multiple values for tied weights.
        # This behavior is deprecated and will be an error in future versions"
        # not 100% sure what this is, so far seems to be harmless. TODO investigate
        self.transformer.wte.weight = self.lm_head.weight # https://paperswithcode.com/method/weight-tying

        # init all weights
        self.apply(self._init_weights)
        # apply special scaled init to the residual projections, per GPT-2 paper
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * config.n_layer))

    def get_num_params(self, non_embedding=True):
        """
        Return the number of parameters in the model.
        For non-embedding count (default), the position embeddings get subtracted.
        The token embeddings would too, except due to the parameter sharing these
        params are actually used as weights in the final layer, so we include them.
        """
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device) # shape (t)

        # forward the GPT model itself
        tok_emb = self.transformer.wte(idx) # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos) # position embeddings of shape (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            # if we are given some desired targets also calculate the loss
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            # inference-time mini-optimization: only forward the lm_head on the very last position
            logits = self.lm_head(x[:, [-1], :]) # note: using list [-1] to preserve the time dim
            loss = None

        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        # start with all of the candidate parameters
        param_dict = {pn: p for pn, p in self.named_parameters()}
        # filter out those that do not require grad
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        # create optim groups. Any parameters that is 2D will be weight decayed, otherwise no.
        # i.e. all weight tensors in matmuls + embeddings decay, all biases and layernorms don't.
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0}
        ]
        num_decay_params = sum(p.numel() for p in decay_params)
        num_nodecay_params = sum(p.numel() for p in nodecay_params)
        # Create AdamW optimizer and use the fused version if it is available
        fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == 'cuda'
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)

        return optimizer

# END copied from nanoGPT model.py
# ---------------------------------------------------------------------------------------------

# Learning-rate schedule settings, as module globals the way train.py has them.
learning_rate = 1e-2
warmup_iters = 2
lr_decay_iters = 3
min_lr = 1e-3

# ---------------------------------------------------------------------------------------------
# BEGIN copied verbatim from nanoGPT, train.py at commit 3adf61e1 (MIT License, Copyright (c)
# 2022 Andrej Karpathy; licence text above)
# learning rate decay scheduler (cosine with warmup)
def get_lr(it):
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)
# END copied from nanoGPT train.py
# ---------------------------------------------------------------------------------------------

STEPS = 5
BATCH = 4
IGNORED_ROW = 3
IGNORED_TAIL = 5
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
EPS = 1e-8  # torch.optim.AdamW's default; configure_optimizers does not set it
GRAD_CLIP = 1.0
CONFIGS = {
    "nobias": dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=20, dropout=0.0,
                   bias=False),
    "bias": dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=20, dropout=0.0,
                 bias=True),
}


def enc(t):
    t = t.detach()
    return {"shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


def cloned(sd):
    """A dict safetensors.torch.save_file accepts: no shared storage, contiguous, same order."""
    return {k: v.detach().clone().contiguous() for k, v in sd.items()}


def make_data(config):
    torch.manual_seed(1)
    idx, targets = [], []
    for _ in range(STEPS):
        idx.append(torch.randint(0, config.vocab_size, (BATCH, config.block_size)))
        targets.append(torch.randint(0, config.vocab_size, (BATCH, config.block_size)))
    for t in targets:
        t[IGNORED_ROW, -IGNORED_TAIL:] = -1
    return idx, targets


def build(config):
    torch.manual_seed(0)
    model = GPT(config)
    model.train()
    return model


def same_state(a, b):
    return list(a.keys()) == list(b.keys()) and all(torch.equal(a[k], b[k]) for k in a)


def run_config(name, config, idx, targets):
    model = build(config)
    assert model.transformer.wte.weight is model.lm_head.weight
    assert model.transformer.h[0].attn.flash
    init_state = cloned(model.state_dict())
    state_keys = list(init_state.keys())
    param_names = [n for n, _ in model.named_parameters()]
    assert "lm_head.weight" in state_keys and "lm_head.weight" not in param_names
    parameter_count = sum(p.numel() for p in model.parameters())

    # First forward + backward on step 0's batch.
    logits, loss = model(idx[0], targets[0])
    assert list(logits.shape) == [BATCH, config.block_size, config.vocab_size]
    loss.backward()
    first_logits = logits.detach().clone()
    first_loss = loss.item()
    grads = {n: p.grad.detach().clone().contiguous() for n, p in model.named_parameters()}
    assert list(grads.keys()) == param_names
    model.zero_grad(set_to_none=True)

    # Round trip: the saved initial state into a differently initialised GPT, strict.
    init_path = os.path.join(HERE, f"gpt_{name}_init.safetensors")
    safetensors.torch.save_file(init_state, init_path)
    loaded = safetensors.torch.load_file(init_path)
    assert set(loaded.keys()) == set(state_keys)
    torch.manual_seed(12345)
    other = GPT(config)
    other.train()
    assert not torch.equal(other.lm_head.weight, init_state["lm_head.weight"])
    other.load_state_dict(loaded, strict=True)
    assert other.transformer.wte.weight is other.lm_head.weight
    other_logits, other_loss = other(idx[0], targets[0])
    assert torch.equal(other_logits, first_logits) and other_loss.item() == first_loss

    save_model_info = None
    if name == "nobias":
        sm_path = os.path.join(HERE, f"gpt_{name}_init_save_model.safetensors")
        safetensors.torch.save_model(build(config), sm_path)
        with safetensors.safe_open(sm_path, framework="pt") as f:
            sm_keys = list(f.keys())
            sm_meta = f.metadata()
        dropped = sorted(set(state_keys) - set(sm_keys))
        kept = [k for k in ("transformer.wte.weight", "lm_head.weight") if k in sm_keys]
        assert len(dropped) == 1 and len(kept) == 1, (dropped, kept)
        print(f"[{name}] save_model kept {kept[0]!r}, dropped {dropped[0]!r}, "
              f"__metadata__ = {sm_meta!r}")
        torch.manual_seed(54321)
        other = GPT(config)
        other.train()
        missing, unexpected = safetensors.torch.load_model(other, sm_path, strict=True)
        assert not missing and not unexpected, (missing, unexpected)
        assert other.transformer.wte.weight is other.lm_head.weight
        assert same_state(cloned(other.state_dict()), init_state)
        other_logits, _ = other(idx[0], targets[0])
        assert torch.equal(other_logits, first_logits)
        save_model_info = {"file": os.path.basename(sm_path), "kept": kept[0],
                           "dropped": dropped[0], "metadata": sm_meta}

    # Training: five steps from the same initial model, rebuilt.
    model = build(config)
    assert same_state(cloned(model.state_dict()), init_state)
    optimizer = model.configure_optimizers(weight_decay=WEIGHT_DECAY,
                                           learning_rate=learning_rate, betas=BETAS,
                                           device_type="cpu")
    ids = {id(p): n for n, p in model.named_parameters()}
    decay_names = [ids[id(p)] for p in optimizer.param_groups[0]["params"]]
    nodecay_names = [ids[id(p)] for p in optimizer.param_groups[1]["params"]]
    assert optimizer.param_groups[0]["weight_decay"] == WEIGHT_DECAY
    assert optimizer.param_groups[1]["weight_decay"] == 0.0
    assert all(g["eps"] == EPS and tuple(g["betas"]) == BETAS for g in optimizer.param_groups)
    assert all(not g["amsgrad"] and not g["maximize"] for g in optimizer.param_groups)
    steps = []
    for it in range(STEPS):
        lr = get_lr(it)
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
        logits, loss = model(idx[it], targets[it])
        loss.backward()
        if it == 0:
            assert torch.equal(logits, first_logits) and loss.item() == first_loss
            for n, p in model.named_parameters():
                assert torch.equal(p.grad, grads[n]), n
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps.append({"it": it, "lr": lr, "loss": loss.item(), "grad_norm": float(norm)})
        print(f"[{name}] it {it}: lr {lr!r} loss {loss.item()!r} grad_norm {float(norm)!r}")
    final_state = cloned(model.state_dict())
    assert list(final_state.keys()) == state_keys
    assert torch.equal(final_state["lm_head.weight"], final_state["transformer.wte.weight"])

    safetensors.torch.save_file(grads, os.path.join(HERE, f"gpt_{name}_grads.safetensors"))
    safetensors.torch.save_file(final_state, os.path.join(HERE, f"gpt_{name}_final.safetensors"))

    out = {
        "torch_version": torch.__version__,
        "safetensors_version": safetensors.__version__,
        "config": asdict(config),
        "optimizer": {"kind": "adamw", "weight_decay": WEIGHT_DECAY,
                      "learning_rate": learning_rate, "betas": list(BETAS), "eps": EPS,
                      "warmup_iters": warmup_iters, "lr_decay_iters": lr_decay_iters,
                      "min_lr": min_lr, "grad_clip": GRAD_CLIP},
        "parameter_count": parameter_count,
        "num_params_non_embedding": model.get_num_params(),
        "state_dict_keys": state_keys,
        "parameter_names": param_names,
        "decay": decay_names,
        "nodecay": nodecay_names,
        "ignore_index": -1,
        "idx": [t.tolist() for t in idx],
        "targets": [t.tolist() for t in targets],
        "first_loss": first_loss,
        "first_logits": enc(first_logits),
        "steps": steps,
    }
    if save_model_info is not None:
        out["save_model"] = save_model_info
    path = os.path.join(HERE, f"gpt_{name}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"[{name}] parameter_count {parameter_count}, first_loss {first_loss!r}")
    print(f"[{name}] decay {decay_names}")
    print(f"[{name}] nodecay {nodecay_names}")
    print("wrote", path)


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    configs = {name: GPTConfig(**kw) for name, kw in CONFIGS.items()}
    first = next(iter(configs.values()))
    assert all(c.vocab_size == first.vocab_size and c.block_size == first.block_size
               for c in configs.values())
    idx, targets = make_data(first)  # the same batches for both configs
    for name, config in configs.items():
        run_config(name, config, idx, targets)


if __name__ == "__main__":
    main()
