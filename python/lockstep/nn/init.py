"""lockstep.nn.init: in-place initialisers over the default generator (torch.nn.init)."""
from __future__ import annotations

import math

from .. import _C

uniform_ = _C.init.uniform_
normal_ = _C.init.normal_


def zeros_(tensor):
    """Fills ``tensor`` with 0 in place (torch.nn.init.zeros_)."""
    with _no_grad():
        return tensor.zero_()


def ones_(tensor):
    with _no_grad():
        return tensor.fill_(1.0)


def constant_(tensor, val):
    with _no_grad():
        return tensor.fill_(val)


def _no_grad():
    from .. import no_grad
    return no_grad()


def _fans(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def calculate_gain(nonlinearity, param=None):
    """torch.nn.init.calculate_gain."""
    if nonlinearity in ("linear", "conv1d", "conv2d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-b, b), b = gain · √(3 / fan) (torch.nn.init.kaiming_uniform_)."""
    fan_in, fan_out = _fans(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)
