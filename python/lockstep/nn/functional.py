"""lockstep.nn.functional: torch.nn.functional's ops, each one call into the C++ library."""
from __future__ import annotations

from .. import _C
from .._C import (  # noqa: F401
    relu, gelu, softmax, log_softmax, linear, conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d,
    layer_norm, embedding, batch_norm, scaled_dot_product_attention, sigmoid, tanh,
)


def _check_loss_options(weight, reduction, label_smoothing, size_average=None, reduce=None):
    if weight is not None:
        raise ValueError("class weights are not supported (weight must be None)")
    if reduction != "mean":
        raise ValueError(f"reduction='{reduction}' is not supported (only 'mean')")
    if label_smoothing != 0.0:
        raise ValueError("label_smoothing is not supported (must be 0.0)")
    if size_average is not None or reduce is not None:
        raise ValueError("size_average and reduce are deprecated in torch and not supported")


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Mean cross-entropy of logits [N, C] against int64 targets [N] (torch's, reduction='mean')."""
    _check_loss_options(weight, reduction, label_smoothing, size_average, reduce)
    return _C.cross_entropy(input, target, ignore_index)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """mean((input - target)^2) (torch.nn.functional.mse_loss, reduction='mean')."""
    _check_loss_options(None, reduction, 0.0, size_average, reduce)
    return _C.mse_loss(input, target)


def dropout(input, p=0.5, training=True, inplace=False):
    """Inverted dropout (torch.nn.functional.dropout). ValueError for p outside [0, 1]."""
    return _C.dropout(input, p, training)
