"""lockstep.models: the models the C++ library ships, with the Python signatures their users know.

* ``GPTConfig`` and ``GPT``: nanoGPT's (karpathy/nanoGPT, model.py) — ``from model import GPTConfig,
  GPT`` becomes ``from lockstep.models import GPTConfig, GPT``. The network is the C++ nn::GPT
  (include/lockstep/nn/gpt.h): nanoGPT's module names, so state_dict keys are nanoGPT's
  (``transformer.wte.weight`` ... ``lm_head.weight``, the two tied) and a nanoGPT checkpoint's
  tensors load with ``strict=True``; ``lockstep.manual_seed(s)`` then ``GPT(config)`` gives
  ``torch.manual_seed(s)``'s nanoGPT weights.
* ``resnet20``: He et al. 2016's CIFAR ResNet-20 (section 4.2) with torchvision's module names
  (include/lockstep/nn/resnet.h), in the place torchvision keeps its ResNets
  (``torchvision.models.resnet18`` -> ``lockstep.models.resnet20``).

Both are ordinary lockstep.nn.Modules: parameters(), state_dict(), train()/eval(), to(), and
nn.DataParallel, which runs their C++ forward on every replica.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import _C
from ._C import ResNet, BasicBlock, Block, CausalSelfAttention, MLP  # noqa: F401

__all__ = ["GPTConfig", "GPT", "resnet20", "ResNet", "BasicBlock"]


@dataclass
class GPTConfig:
    """nanoGPT's GPTConfig, with its defaults (GPT-2 124M; ``bias=True`` as model.py — nanoGPT's
    train.py passes ``bias=False``)."""
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded to a multiple of 64
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True

    def _native(self):
        c = _C._GPTConfig()
        for k in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias"):
            setattr(c, k, getattr(self, k))
        return c


class GPT(_C._GPT):
    """nanoGPT's GPT(config): token and position embeddings, ``n_layer`` pre-norm Blocks, ln_f and
    lm_head tied to ``transformer.wte``; nanoGPT's initialisation. ValueError naming the field for
    a non-positive size, ``n_embd`` not a multiple of ``n_head`` or ``dropout`` outside [0, 1].

    ``model(idx)`` runs nanoGPT's forward (below). Under ``nn.DataParallel`` (one tensor in, one
    out) a call ``dp(idx)`` gives the logits of every position, [B, T, vocab_size]; the loss is
    then ``F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)``, nanoGPT's.
    No ``crop_block_size`` or ``from_pretrained`` (the C++ model has neither); ``from_pretrained``'s
    tensors load through ``load_state_dict`` after transposing GPT-2's Conv1D weights."""

    def __init__(self, config):
        if not isinstance(config, GPTConfig):
            raise TypeError(f"GPT(config) takes a lockstep.models.GPTConfig, got {type(config).__name__}")
        super().__init__(config._native())
        self.config = config

    def forward(self, idx, targets=None):
        """nanoGPT's forward. idx [B, T] int64 token indices, T <= block_size; targets [B, T] int64
        or None. With targets: (logits [B, T, vocab_size], the mean cross-entropy over the targets
        that are not -1). Without: (logits [B, 1, vocab_size] of the last position, None).
        ShapeError for idx of another rank, T = 0 or T > block_size ("Cannot forward sequence of
        length T, block size is only ..."); IndexError for a token outside [0, vocab_size);
        DTypeError for idx that are not int64; ShapeError naming both shapes when targets do not
        fit."""
        logits = _C.Module.forward(self, idx)
        if targets is not None:
            return logits, _C.gpt_loss(logits, targets, -1)
        return logits.narrow(1, logits.size(1) - 1, 1), None

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """nanoGPT's: AdamW over two groups, the parameters with dim() >= 2 (every matmul weight
        and both embeddings, the tied one once) with ``weight_decay`` and the rest with 0.
        ``device_type`` is accepted (nanoGPT asks for the fused AdamW on 'cuda'; Lockstep's is one
        implementation)."""
        from .optim import AdamW
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for p in param_dict.values() if p.dim() >= 2]
        nodecay_params = [p for p in param_dict.values() if p.dim() < 2]
        groups = [{"params": decay_params, "weight_decay": weight_decay},
                  {"params": nodecay_params, "weight_decay": 0.0}]
        return AdamW(groups, lr=learning_rate, betas=betas)

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """nanoGPT's sampling loop, without autograd: ``max_new_tokens`` times, the last position's
        logits (the context cropped to the last block_size tokens) divided by ``temperature``,
        those below the ``top_k``-th largest set to -inf, softmax, one token drawn with
        ``multinomial`` from the default generator and appended. idx [B, T] int64 ->
        [B, T + max_new_tokens]. Call ``eval()`` first (dropout stays as the mode says)."""
        from . import no_grad, topk, multinomial, cat
        from .nn.functional import softmax
        with no_grad():
            for _ in range(max_new_tokens):
                block = self.config.block_size
                idx_cond = idx if idx.size(1) <= block else idx[:, -block:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = topk(logits, min(top_k, logits.size(-1)))
                    logits = logits.masked_fill(logits < v[:, -1:], -math.inf)
                probs = softmax(logits, dim=-1)
                idx_next = multinomial(probs, num_samples=1)
                idx = cat((idx, idx_next), dim=1)
        return idx


def resnet20(num_classes=10, in_channels=1):
    """He et al. 2016's CIFAR ResNet-20 (n = 3; 16/32/64 channels; 272,186 parameters for one input
    channel and 10 classes) with torchvision's names (conv1, bn1, layer1.0.conv1, ...,
    layer2.0.downsample.0, fc) and PyTorch's default initialisation from the default generator
    (after ``lockstep.manual_seed(s)``, torch.manual_seed(s)'s weights). input [N, in_channels,
    H, W] float -> logits [N, num_classes]. ``in_channels`` defaults to 1 (Fashion-MNIST, the
    CLI's data); 3 for CIFAR images. ValueError for in_channels or num_classes < 1."""
    return _C.resnet20(in_channels, num_classes)
