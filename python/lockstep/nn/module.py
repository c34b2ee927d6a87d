"""lockstep.nn.Module: the C++ nn::Module (python/src/nn.cpp) with what torch.nn.Module does in
Python added: __call__, to(), apply(), modules(), load_state_dict's result, __repr__, parameters()
and friends as iterators, and the copy DataParallel makes of a Python module."""
from __future__ import annotations

import copy
from collections import namedtuple

from .. import _C

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


