"""Lockstep: data-parallel training with PyTorch's API over a C++ engine.

``import lockstep as torch`` is meant to be enough to port a PyTorch program: the names and
signatures below are torch's (tensors, factories, autograd switches, the default generator,
save/load), each a thin call into the C++ library (include/lockstep/). Tensors are float32,
float64 or int64, always contiguous; errors are torch's exception types (IndexError,
ValueError, TypeError, RuntimeError subclasses such as lockstep.ShapeError) with the C++
message.
"""
from __future__ import annotations

import builtins as _builtins
import contextlib as _contextlib
import os as _os
from collections import namedtuple as _namedtuple
import functools as _functools

import numpy as _np

from . import _C
from ._C import (  # noqa: F401  (re-exported: torch's names)
    Tensor, dtype, device, Generator,
    Error, ShapeError, DTypeError, DeviceError, CudaError, AutogradError, StateDictError,
    DataError, DistError, DistTimeoutError, IoError,
    add, sub, mul, div, pow, eq, neg, exp, log, sqrt, tanh, sigmoid, relu, matmul,
    argmax, softmax, log_softmax, reshape, flatten, transpose, permute, unsqueeze, squeeze,
    narrow, index_select, cat, stack, chunk, tensor_split, randperm,
    manual_seed, is_grad_enabled,
    ne, lt, le, gt, ge, tril, triu, masked_fill, where, topk, multinomial,
)

__version__ = "0.1.0"

less, less_equal, greater, greater_equal, not_equal = lt, le, gt, ge, ne

float32 = float = dtype.float32
float64 = double = dtype.float64
int64 = long = dtype.int64
Size = tuple
default_generator = _C.default_generator()
# PyTorch's streams: the default generator is torch's mt19937, seeded non-deterministically at
# import as torch's is; lockstep.manual_seed(s) then gives torch.manual_seed(s)'s numbers.
_C._use_pytorch_streams(int.from_bytes(_os.urandom(8), "little") & ((1 << 63) - 1))

_max_result = _namedtuple("max", ["values", "indices"])


def max(input, dim=None, keepdim=False):
    """The largest element (0-d), or (values, indices) along ``dim`` (torch.max)."""
    r = _C.max(input, dim, keepdim)
    return r if dim is None else _max_result(*r)


def _tensor_max(self, dim=None, keepdim=False):
    return max(self, dim, keepdim)


def _tensor_to(self, *args, non_blocking=False, copy=False, dtype=None, device=None):
    """Tensor.to(device), to(dtype), to(device, dtype), to(other), and the keywords; a string
    device is parsed (DeviceError naming a bad one). non_blocking is accepted (copies are
    synchronous)."""
    args = [_dev(a) for a in args] + [a for a in (_dev(device), dtype) if a is not None]
    out = self
    for a in args:
        out = _C.Tensor._to(out, a)
    if copy and out is self:
        out = self.clone()
    return out


Tensor.max = _tensor_max
Tensor.to = _tensor_to


def _dev(d):
    """A device argument as torch takes it: a device, a string (DeviceError naming a bad one), or
    None."""
    return device(d) if isinstance(d, str) else d


def _size(size):
    """torch's size arguments: f(2, 3), f((2, 3)) and f([2, 3]) all mean [2, 3]."""
    if len(size) == 1 and not isinstance(size[0], int):
        size = size[0]
    try:
        return [int(s) for s in size]
    except (TypeError, ValueError):
        raise TypeError(f"size must be ints or one sequence of ints, got {size!r}") from None


def empty(*size, dtype=None, device=None, requires_grad=False):
    """Uninitialised tensor of the given size (torch.empty)."""
    return _C._empty(_size(size), dtype, _dev(device), requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    """Tensor of zeros, float32 unless ``dtype`` says otherwise (torch.zeros)."""
    return _C._zeros(_size(size), dtype, _dev(device), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    """Tensor of ones (torch.ones)."""
    return _C._ones(_size(size), dtype, _dev(device), requires_grad)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """Tensor filled with ``fill_value`` (torch.full); float32 unless ``dtype`` is given."""
    return _C._full(_size((size,)), fill_value, dtype, _dev(device), requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal samples (torch.randn) from ``generator`` or the default generator."""
    return _C._randn(_size(size), generator, dtype, _dev(device), requires_grad)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform samples in [0, 1) (torch.rand)."""
    return _C._rand(_size(size), generator, dtype, _dev(device), requires_grad)


def randint(low, high=None, size=None, *, generator=None, dtype=None, device=None):
    """Uniform integers in [low, high) (torch.randint(low=0, high, size)); int64 by default.
    ValueError if high <= low."""
    if size is None:
        if high is None or isinstance(high, int):
            raise TypeError("randint() needs a size: randint(high, size) or randint(low, high, size)")
        low, high, size = 0, low, high
    return _C._randint(int(low), int(high), _size((size,)), generator, dtype, _dev(device))


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """[start, end) in steps of ``step`` (torch.arange): int64 when every argument is an int,
    float32 otherwise. ValueError for step == 0."""
    if end is None:
        start, end = 0, start
    if dtype is None and not all(isinstance(v, int) for v in (start, end, step)):
        dtype = float32
    return _C._arange(start, end, step, dtype, _dev(device), requires_grad)


def _like(input, dtype, device):
    return {"dtype": input.dtype if dtype is None else dtype,
            "device": input.device if device is None else device}


def zeros_like(input, *, dtype=None, device=None, requires_grad=False):
    """Zeros of ``input``'s shape, and its dtype and device unless given (torch.zeros_like)."""
    return zeros(input.shape, **_like(input, dtype, device), requires_grad=requires_grad)


def ones_like(input, *, dtype=None, device=None, requires_grad=False):
    """Ones of ``input``'s shape, and its dtype and device unless given (torch.ones_like)."""
    return ones(input.shape, **_like(input, dtype, device), requires_grad=requires_grad)


def empty_like(input, *, dtype=None, device=None, requires_grad=False):
    """Uninitialised, ``input``'s shape, dtype and device unless given (torch.empty_like)."""
    return empty(input.shape, **_like(input, dtype, device), requires_grad=requires_grad)


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False):
    """``fill_value`` in ``input``'s shape, dtype and device unless given (torch.full_like)."""
    return full(input.shape, fill_value, **_like(input, dtype, device), requires_grad=requires_grad)


def rand_like(input, *, dtype=None, device=None, requires_grad=False):
    """U[0, 1) samples of ``input``'s shape (torch.rand_like): a float dtype."""
    return rand(input.shape, **_like(input, dtype, device), requires_grad=requires_grad)


def randn_like(input, *, dtype=None, device=None, requires_grad=False):
    """N(0, 1) samples of ``input``'s shape (torch.randn_like): a float dtype."""
    return randn(input.shape, **_like(input, dtype, device), requires_grad=requires_grad)


def split(tensor, split_size_or_sections, dim=0):
    """torch.split: pieces of ``split_size_or_sections`` along ``dim`` (an int: equal pieces, the
    last smaller; a list of ints: those sizes, which must sum to the dimension's size —
    lockstep.ValueError, a ValueError and RuntimeError, otherwise, as torch's RuntimeError)."""
    if isinstance(split_size_or_sections, int):
        return _C.split(tensor, split_size_or_sections, dim)
    sizes = [int(s) for s in split_size_or_sections]
    n = tensor.size(dim)
    if any(s < 0 for s in sizes) or _builtins.sum(sizes) != n:
        raise _C.ValueError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input "
                         f"tensor's size at dimension {dim}), but got split_sizes={sizes}")
    out, start = [], 0
    for s in sizes:
        out.append(tensor.narrow(dim, start, s))
        start += s
    return tuple(out)


def _tensor_split_method(self, split_size, dim=0):
    return split(self, split_size, dim)


def _reducer(name):
    """torch.sum / torch.mean (and the methods) with ``dim`` an int, a tuple or list of ints (each
    reduced, highest first; IndexError for one outside the tensor, lockstep.ValueError for one
    named twice, as torch's RuntimeError) or None (every element), and the ``dtype`` keyword
    (the input converted first)."""
    native = getattr(_C, name)

    def reduce(input, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None:
            input = input.to(dtype)
        if dim is None:
            if keepdim:
                dim = tuple(range(input.dim()))
            else:
                return native(input)
        if isinstance(dim, int):
            return native(input, dim, keepdim)
        dims = [d + input.dim() if isinstance(d, int) and d < 0 else d for d in dim]
        for d, orig in zip(dims, dim):
            if not isinstance(d, int) or not 0 <= d < _builtins.max(input.dim(), 1):
                raise IndexError(f"{name}: dimension {orig} out of range for a {input.dim()}-d tensor")
        if len(set(dims)) != len(dims):
            raise _C.ValueError(f"{name}: dim {dims} appears multiple times in the list of dims")
        out = input
        for d in sorted(dims, reverse=True):
            out = native(out, d, keepdim)
        return out

    reduce.__name__ = name
    return reduce


sum = _reducer("sum")
mean = _reducer("mean")
Tensor.sum = lambda self, dim=None, keepdim=False, *, dtype=None: sum(self, dim, keepdim, dtype=dtype)
Tensor.mean = lambda self, dim=None, keepdim=False, *, dtype=None: mean(self, dim, keepdim, dtype=dtype)
Tensor.split = _tensor_split_method


_NUMPY_DTYPES = {float32: _np.float32, float64: _np.float64, int64: _np.int64}


def from_numpy(ndarray):
    """A tensor sharing ``ndarray``'s memory (torch.from_numpy): writes show on both sides and the
    array stays alive as long as the tensor. float32, float64 and int64 arrays share; TypeError
    for other dtypes. Lockstep tensors are always contiguous and writable, so a non-contiguous or
    read-only array is copied (torch would share it)."""
    if not isinstance(ndarray, _np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    if ndarray.dtype not in (_np.float32, _np.float64, _np.int64):
        raise TypeError(f"can't convert np.ndarray of type numpy.{ndarray.dtype}. The only "
                        "supported types are: float64, float32 and int64.")
    if not ndarray.flags.c_contiguous or not ndarray.flags.writeable:
        ndarray = _np.array(ndarray, order="C", copy=True)
    return _C._from_array(ndarray, "from_numpy")


def from_dlpack(ext_tensor):
    """A tensor sharing the memory of any object with ``__dlpack__`` (a torch or numpy array),
    as torch.from_dlpack. CPU, C-contiguous float32/float64/int64 only (TypeError or ValueError
    otherwise)."""
    if not hasattr(ext_tensor, "__dlpack__"):
        raise TypeError(f"from_dlpack: {type(ext_tensor).__name__} has no __dlpack__")
    return _C._from_array(ext_tensor, "from_dlpack")


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of ``data`` (a number, nested lists, a numpy array or a
    tensor), as torch.tensor: Python floats become float32, ints int64, numpy arrays keep
    float64/float32/int64; ``dtype`` converts."""
    if isinstance(data, Tensor):
        t = data.detach().clone()
    else:
        a = _np.asarray(data)
        if a.dtype == _np.bool_:
            raise TypeError("lockstep has no bool dtype: convert the data to int or float first")
        if a.dtype.kind in "iu":
            a = a.astype(_np.int64)
        elif a.dtype.kind == "f":
            if not isinstance(data, _np.ndarray) or a.dtype not in (_np.float32, _np.float64):
                a = a.astype(_np.float32)
        else:
            raise TypeError(f"can't make a tensor from data of type {a.dtype}")
        t = _C._from_array(_np.array(a, order="C", copy=True), "tensor").clone()
    if dtype is not None:
        t = t.to(dtype)
    if device is not None:
        t = t.to(_dev(device))
    if requires_grad:
        t.requires_grad_(True)
    return t


as_tensor = tensor


class _GradMode(_contextlib.ContextDecorator):
    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        self.prev = _C.is_grad_enabled()
        _C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)
        return False


class no_grad(_GradMode):
    """Context manager and decorator (with or without parentheses): ops inside record no
    autograd graph (torch.no_grad)."""

    def __init__(self, orig_func=None):
        super().__init__(False)
        if orig_func is not None:
            _functools.update_wrapper(self, orig_func)
        self._func = orig_func

    def __call__(self, *args, **kwargs):
        if self._func is None:
            return super().__call__(*args, **kwargs)
        with _GradMode(False):
            return self._func(*args, **kwargs)


class enable_grad(_GradMode):
    """Context manager and decorator: turns recording back on (torch.enable_grad)."""

    def __init__(self):
        super().__init__(True)


class set_grad_enabled(_GradMode):
    """torch.set_grad_enabled(mode): sets grad mode now, and restores it when used with ``with``."""

    def __init__(self, mode):
        super().__init__(bool(mode))
        self.prev = _C.is_grad_enabled()
        _C._set_grad_enabled(self.mode)

    def __enter__(self):
        pass


inference_mode = no_grad


def get_rng_state():
    """The default generator's state: torch.get_rng_state()'s 5056 bytes, as an int64 tensor of
    byte values (Lockstep has no uint8 dtype)."""
    return default_generator.get_state()


def set_rng_state(new_state):
    """Restores a state from get_rng_state (a tensor, bytes or a uint8 numpy array)."""
    default_generator.set_state(new_state)


def initial_seed():
    """The seed the default generator was last seeded with."""
    return default_generator.initial_seed()


def seed():
    """Seeds the default generator with a non-deterministic seed and returns it (torch.seed)."""
    s = int.from_bytes(_os.urandom(8), "little") & ((1 << 63) - 1)
    manual_seed(s)
    return s


def compile(model=None, *args, **kwargs):
    """Refused: Lockstep's engine is already compiled C++; call the model itself."""
    raise RuntimeError("lockstep.compile is not supported: Lockstep runs the model through its "
                       "C++ engine already; remove the torch.compile call")


def is_tensor(obj):
    return isinstance(obj, Tensor)


from . import cuda  # noqa: E402
from . import distributed  # noqa: E402
from . import nn  # noqa: E402
from . import optim  # noqa: E402
from . import utils  # noqa: E402
from . import models  # noqa: E402
from ._serialization import save, load  # noqa: E402,F401
