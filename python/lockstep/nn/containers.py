"""torch.nn's containers: Sequential (the C++ one, so C++ runs it), ModuleList and ModuleDict."""
from __future__ import annotations

from collections import OrderedDict

from .. import _C
from .module import Module


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


