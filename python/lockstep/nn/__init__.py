"""lockstep.nn: torch.nn's modules and losses over Lockstep's C++ layers.

Module is the C++ nn::Module, subclassable from Python: assigning a Parameter, a buffer or a
Module as an attribute registers it (torch.nn.Module.__setattr__), and state_dict(),
parameters(), train()/eval(), to() and zero_grad() see C++ and Python children alike.
"""
from __future__ import annotations

from .. import _C
from ..parameter import Parameter  # noqa: F401
from . import functional  # noqa: F401
from . import init  # noqa: F401
from . import utils  # noqa: F401
from .module import Module  # noqa: F401
from .layers import (  # noqa: F401
    Linear, ReLU, Tanh, Sigmoid, GELU, Dropout, Flatten, Conv2d, MaxPool2d, AvgPool2d,
    AdaptiveAvgPool2d, BatchNorm1d, BatchNorm2d, SyncBatchNorm, LayerNorm, Embedding,
    CrossEntropyLoss, NLLLoss, MSELoss, Identity,
)
from .containers import Sequential, ModuleList, ModuleDict  # noqa: F401
from .data_parallel import DataParallel  # noqa: F401
