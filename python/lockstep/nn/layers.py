"""The built-in layers and losses with torch.nn's constructor signatures: the C++ layers
(python/src/layers.cpp) with torch's int-or-pair arguments widened, and the losses as Modules."""
from __future__ import annotations

from .. import _C
from . import functional as F
from .module import Module


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class Identity(Module):
    """Returns its input (torch.nn.Identity)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


Linear = _C.Linear
ReLU = _C.ReLU
Tanh = _C.Tanh
Sigmoid = _C.Sigmoid
GELU = _C.GELU
Dropout = _C.Dropout
Flatten = _C.Flatten
BatchNorm1d = _C.BatchNorm1d
BatchNorm2d = _C.BatchNorm2d
SyncBatchNorm = _C.SyncBatchNorm
Embedding = _C.Embedding


def _convert_sync_batchnorm(module, process_group=None):
    if process_group is not None:
        raise ValueError("convert_sync_batchnorm(process_group=...) is not supported")
    return _C.convert_sync_batchnorm(module)


SyncBatchNorm.convert_sync_batchnorm = staticmethod(_convert_sync_batchnorm)


class Conv2d(_C.Conv2d):
    """2-d convolution (torch.nn.Conv2d); weight [out, in/groups, kH, kW]. padding_mode 'zeros' only."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros"):
        if padding_mode != "zeros":
            raise ValueError(f"Conv2d: padding_mode '{padding_mode}' is not supported (only 'zeros')")
        if isinstance(padding, str):
            raise ValueError(f"Conv2d: padding='{padding}' is not supported; give the padding in pixels")
        super().__init__(in_channels, out_channels, _pair(kernel_size), _pair(stride),
                         _pair(padding), _pair(dilation), groups, bias)


class MaxPool2d(_C.MaxPool2d):
    """torch.nn.MaxPool2d (dilation 1, ceil_mode False)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        if dilation != 1 or return_indices or ceil_mode:
            raise ValueError("MaxPool2d: dilation, return_indices and ceil_mode are not supported")
        super().__init__(_pair(kernel_size), None if stride is None else _pair(stride), _pair(padding))


class AvgPool2d(_C.AvgPool2d):
    """torch.nn.AvgPool2d (ceil_mode False, count_include_pad True)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        if ceil_mode or not count_include_pad or divisor_override is not None:
            raise ValueError("AvgPool2d: ceil_mode, count_include_pad=False and divisor_override "
                             "are not supported")
        super().__init__(_pair(kernel_size), None if stride is None else _pair(stride), _pair(padding))


class AdaptiveAvgPool2d(_C.AdaptiveAvgPool2d):
    """torch.nn.AdaptiveAvgPool2d."""

    def __init__(self, output_size):
        super().__init__(_pair(output_size))


class LayerNorm(_C.LayerNorm):
    """torch.nn.LayerNorm over the trailing ``normalized_shape`` dimensions."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        if isinstance(normalized_shape, int):
            normalized_shape = [normalized_shape]
        super().__init__(list(normalized_shape), eps, elementwise_affine, bias)


class CrossEntropyLoss(Module):
    """Cross-entropy of logits [N, C] against int64 class indices [N] (torch.nn.CrossEntropyLoss;
    reduction 'mean', 'sum' or 'none'). IndexError naming the row for a target outside [0, C)."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__()
        F._check_loss_options(weight, reduction, label_smoothing, size_average, reduce)
        self.ignore_index = ignore_index
        self.reduction = reduction

    def forward(self, input, target):
        F._check_batch(input, target)
        return _C.cross_entropy(input, target, self.ignore_index, self.reduction)


class NLLLoss(Module):
    """torch.nn.NLLLoss: F.nll_loss with the module's ignore_index and reduction."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        super().__init__()
        F._check_loss_options(weight, reduction, 0.0, size_average, reduce)
        self.ignore_index = ignore_index
        self.reduction = reduction

    def forward(self, input, target):
        F._check_batch(input, target)
        return _C.nll_loss(input, target, self.ignore_index, self.reduction)


class MSELoss(Module):
    """(input - target)^2 reduced by ``reduction`` (torch.nn.MSELoss)."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        F._check_loss_options(None, reduction, 0.0, size_average, reduce)
        self.reduction = reduction

    def forward(self, input, target):
        return _C.mse_loss(input, target, self.reduction)


