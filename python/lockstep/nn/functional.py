"""lockstep.nn.functional: torch.nn.functional's ops, each one call into the C++ library."""
from __future__ import annotations

from .. import _C
from .._C import (  # noqa: F401
    relu, gelu, softmax, log_softmax, linear, conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d,
    layer_norm, embedding, batch_norm, scaled_dot_product_attention, sigmoid, tanh,
)


_REDUCTIONS = ("none", "mean", "sum")


def _check_loss_options(weight, reduction, label_smoothing, size_average=None, reduce=None):
    if weight is not None:
        raise ValueError("class weights are not supported (weight must be None)")
    if reduction not in _REDUCTIONS:
        raise _C.ValueError(f"{reduction} is not a valid value for reduction")
    if label_smoothing != 0.0:
        raise ValueError("label_smoothing is not supported (must be 0.0)")
    if size_average is not None or reduce is not None:
        raise ValueError("size_average and reduce are deprecated in torch and not supported")


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits [N, C] against int64 targets [N], targets equal to ignore_index
    left out (torch's): 'mean' over the counted targets, 'sum', or 'none' ([N], 0 where
    ignored)."""
    _check_loss_options(weight, reduction, label_smoothing, size_average, reduce)
    _check_batch(input, target)
    return _C.cross_entropy(input, target, ignore_index, reduction)


def _check_batch(input, target):
    """torch's ValueError for logits and class targets of different batch sizes (its
    torch/nn/functional.py and aten's nll_loss: "Expected input batch_size (N) to match target
    batch_size (M)."); other shape errors stay the engine's ShapeError."""
    if (isinstance(input, _C.Tensor) and isinstance(target, _C.Tensor) and input.dim() >= 2
            and target.dim() >= 1 and input.size(0) != target.size(0)):
        raise ValueError(f"Expected input batch_size ({input.size(0)}) to match target "
                         f"batch_size ({target.size(0)}).")


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """Negative log-likelihood of log-probabilities [N, C] (or [C] with a 0-d target) at int64
    targets [N] (torch.nn.functional.nll_loss; pytorch/examples:mnist/main.py pairs it with
    log_softmax). IndexError for a target outside [0, C) ("Target k is out of bounds")."""
    _check_loss_options(weight, reduction, 0.0, size_average, reduce)
    _check_batch(input, target)
    return _C.nll_loss(input, target, ignore_index, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """(input - target)^2: its mean, its sum, or elementwise ('none')."""
    _check_loss_options(None, reduction, 0.0, size_average, reduce)
    return _C.mse_loss(input, target, reduction)


def dropout(input, p=0.5, training=True, inplace=False):
    """Inverted dropout (torch.nn.functional.dropout). ValueError for p outside [0, 1]."""
    return _C.dropout(input, p, training)
