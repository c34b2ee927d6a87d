"""The Module class and the built-in layers with torch.nn's constructor signatures.

The layers are the C++ ones (include/lockstep/nn/); this file only widens torch's int-or-pair
arguments and adds what torch.nn.Module does in Python: __call__, to(), apply(), modules(),
load_state_dict's result, __repr__ and the containers Sequential, ModuleList and ModuleDict.
"""
from __future__ import annotations

import copy
from collections import OrderedDict, namedtuple

from .. import _C
from . import functional as F

Module = _C.Module

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _call(self, *args, **kwargs):
    return self.forward(*args, **kwargs)


def _to(self, *args, **kwargs):
    """Moves (and/or converts) every parameter and buffer in place; returns self (torch.nn.Module.to)."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, _C.dtype):
            self._to_dtype(a)
        elif isinstance(a, (str, _C.device)):
            self._to_device(_C.device(a) if isinstance(a, str) else a)
        elif a is not None:
            raise TypeError(f"to() got an unexpected argument {a!r}")
    return self


def _load_state_dict(self, state_dict, strict=True, assign=False):
    """Copies values into the existing tensors (torch.nn.Module.load_state_dict). strict: keys
    must match exactly (StateDictError listing missing and unexpected keys; nothing is modified).
    Returns (missing_keys, unexpected_keys)."""
    if assign:
        raise ValueError("load_state_dict(assign=True) is not supported")
    own = list(self.state_dict().keys())
    given = dict(state_dict)
    self._load_state_dict(given, strict)
    return _IncompatibleKeys([k for k in own if k not in given], [k for k in given if k not in own])


# torch returns generators from these; the C++ binding returns lists (kept as _C's names).
_LISTS = {name: getattr(Module, name) for name in
          ("parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children")}


def _iterating(name):
    as_list = _LISTS[name]

    def method(self, *args, **kwargs):
        return iter(as_list(self, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = as_list.__doc__
    return method


def _modules(self):
    for _, m in self.named_modules():
        yield m


def _apply_fn(self, fn):
    for m in self.children():
        m.apply(fn)
    fn(self)
    return self


def _extra_repr(self):
    return ""


def _repr(self):
    lines = []
    for name, child in self.named_children():
        child_repr = repr(child).replace("\n", "\n  ")
        lines.append(f"({name}): {child_repr}")
    head = type(self).__name__ + "(" + self.extra_repr()
    if not lines:
        return head + ")"
    return head + "\n  " + "\n  ".join(lines) + "\n)"


def _cuda(self, device=None):
    return self.to(_C.device("cuda", device or 0))


def _cpu(self):
    return self.to(_C.device("cpu"))


def _requires_grad_(self, requires_grad=True):
    for p in self.parameters():
        p.requires_grad_(requires_grad)
    return self


def _float(self):
    return self.to(_C.dtype.float32)


def _double(self):
    return self.to(_C.dtype.float64)


for _name, _fn in {
    "__call__": _call, "to": _to, "load_state_dict": _load_state_dict, "modules": _modules,
    "apply": _apply_fn, "extra_repr": _extra_repr, "__repr__": _repr, "cuda": _cuda, "cpu": _cpu,
    "requires_grad_": _requires_grad_, "float": _float, "double": _double,
}.items():
    setattr(Module, _name, _fn)
for _name in _LISTS:
    setattr(Module, "_" + _name + "_list", _LISTS[_name])
    setattr(Module, _name, _iterating(_name))


def _clone_python_module(m):
    """A copy of a module whose class is Python (called by C++ Module.clone for DataParallel's
    replicas): a new instance of the same class, its plain attributes deep-copied, its
    parameters and buffers copied (same requires_grad), its children cloned, its mode kept."""
    cls = type(m)
    new = cls.__new__(cls)
    Module.__init__(new)
    memo = {}
    for k, v in m.__dict__.items():
        object.__setattr__(new, k, copy.deepcopy(v, memo))
    for name, p in m.named_parameters(recurse=False):
        new.register_parameter(name, _C.Parameter(p.detach().clone(), p.requires_grad))
    for name, b in m.named_buffers(recurse=False):
        new.register_buffer(name, b.clone())
    _C.Module.train(new, m.training)  # before the children, which keep their own mode
    for name, c in m.named_children():
        new.add_module(name, c._clone())
    return new


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


class _IndexedChildren:
    """len, iteration and indexing over the children, in order (Sequential, ModuleList)."""

    def __len__(self):
        return len(self._named_children_list())

    def __iter__(self):
        return self.children()

    def __getitem__(self, idx):
        children = self._children_list()
        if isinstance(idx, slice):
            return type(self)._from_children(children[idx])
        return children[idx]


class Sequential(_IndexedChildren, _C._Sequential):
    """Children run in order (torch.nn.Sequential); named "0", "1", ... or by an OrderedDict."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for m in args:
                self.append(m)

    @classmethod
    def _from_children(cls, children):
        return cls(*children)


class ModuleList(_IndexedChildren, Module):
    """A list of modules registered as children "0", "1", ... (torch.nn.ModuleList)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    @classmethod
    def _from_children(cls, children):
        return cls(children)


class ModuleDict(Module):
    """Modules registered under string keys (torch.nn.ModuleDict)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            for k, m in dict(modules).items():
                self.add_module(k, m)

    def __getitem__(self, key):
        return getattr(self, key)

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __len__(self):
        return len(self._named_children_list())

    def __iter__(self):
        return iter(self.keys())

    def keys(self):
        return [k for k, _ in self.named_children()]

    def items(self):
        return list(self.named_children())

    def values(self):
        return list(self.children())


class CrossEntropyLoss(Module):
    """Mean cross-entropy of logits [N, C] against int64 class indices [N]
    (torch.nn.CrossEntropyLoss, reduction='mean'). IndexError naming the row for a target
    outside [0, C)."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__()
        F._check_loss_options(weight, reduction, label_smoothing, size_average, reduce)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return _C.cross_entropy(input, target, self.ignore_index)


class MSELoss(Module):
    """mean((input - target)^2) (torch.nn.MSELoss, reduction='mean')."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        F._check_loss_options(None, reduction, 0.0, size_average, reduce)

    def forward(self, input, target):
        return _C.mse_loss(input, target)


class DataParallel(_C.DataParallel):
    """torch.nn.DataParallel(module, device_ids=None, output_device=None, dim=0): ``module``
    replicated on ``device_ids`` (default: every usable GPU, else one CPU worker per usable core);
    a call splits the batch along dim 0, runs the replicas at once (a Python forward too: each
    replica is a clone of the module) and gathers the outputs; backward sums the replicas'
    gradients into ``module``'s .grad. state_dict() keys carry torch's ``module.`` prefix.
    Lockstep's additions: ``sync_bn`` (default True: BatchNorm layers use the whole batch's
    statistics on CPU devices) and ``deterministic`` (the same bits for any device count).
    ValueError for dim != 0 or an empty device list; DeviceError for an unavailable device.
    One tensor in, one tensor out (TypeError for more arguments)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, *, sync_bn=True,
                 deterministic=False):
        if isinstance(output_device, int):
            kind = "cuda" if _C.default_devices()[0].type == "cuda" else "cpu"
            output_device = _C.device(kind, output_device)
        elif isinstance(output_device, str):
            output_device = _C.device(output_device)
        super().__init__(module, device_ids, output_device, dim, sync_bn, deterministic)

    def forward(self, *inputs, **kwargs):
        if kwargs or len(inputs) != 1:
            raise TypeError("DataParallel.forward takes exactly one tensor in Lockstep (got "
                            f"{len(inputs)} positional and {len(kwargs)} keyword arguments)")
        try:
            return _C.DataParallel.forward(self, inputs[0])
        except _C.Error as e:
            if "KeyboardInterrupt in a replica" in str(e):
                raise KeyboardInterrupt from None
            raise

    def state_dict(self):
        return OrderedDict(("module." + k, v) for k, v in self.module.state_dict().items())

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Takes torch's ``module.``-prefixed keys (or the wrapped module's own)."""
        stripped = OrderedDict((k[len("module."):] if k.startswith("module.") else k, v)
                               for k, v in dict(state_dict).items())
        return self.module.load_state_dict(stripped, strict, assign)
