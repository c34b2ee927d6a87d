"""lockstep.optim: torch.optim's SGD, Adam and AdamW over the C++ optimizers.

param_groups is torch's list of dicts and is mutable: a new ``lr`` written into every group
(nanoGPT's ``for g in optimizer.param_groups: g['lr'] = lr``) is taken by the next step(). The
C++ optimizers keep one learning rate for all groups: groups with different lr raise ValueError.
"""
from __future__ import annotations

from .. import _C
from . import lr_scheduler  # noqa: F401


def _groups(params, defaults):
    from .._C import Tensor
    if isinstance(params, Tensor):
        raise TypeError("params argument given to the optimizer should be an iterable of Tensors "
                        "or dicts, but got a Tensor")
    params = list(params)
    if not params:
        raise ValueError("optimizer got an empty parameter list")
    if isinstance(params[0], dict):
        groups = [dict(g) for g in params]
    else:
        groups = [{"params": params}]
    for g in groups:
        g["params"] = [g["params"]] if isinstance(g["params"], Tensor) else list(g["params"])
        for p in g["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for k, v in defaults.items():
            g.setdefault(k, v)
    return groups


class Optimizer:
    """Base of the optimizers (torch.optim.Optimizer): param_groups, zero_grad, step,
    state_dict/load_state_dict (the C++ optimizer's state under torch's keys
    ``state.<i>.<name>``, ``param_groups.0.lr``)."""

    def __init__(self, groups, impl):
        self.param_groups = groups
        self._impl = impl
        self._lr = groups[0]["lr"]
        self.defaults = {k: v for k, v in groups[0].items() if k != "params"}

    def _sync_lr(self):
        lrs = {float(g["lr"]) for g in self.param_groups}
        if len(lrs) != 1:
            raise ValueError(f"parameter groups with different learning rates {sorted(lrs)} are "
                             "not supported: Lockstep's optimizers keep one lr")
        lr = lrs.pop()
        if lr != self._lr:
            self._impl.set_lr(lr)
            self._lr = lr

    def step(self, closure=None):
        """One update from the parameters' current gradients; a parameter with no gradient is
        skipped. ``closure`` (re-evaluates the loss) is called first when given; its loss is
        returned."""
        loss = None
        if closure is not None:
            from .. import enable_grad
            with enable_grad():
                loss = closure()
        self._sync_lr()
        self._impl.step()
        return loss

    def zero_grad(self, set_to_none=True):
        """Sets every gradient to None (default) or to zero."""
        self._impl.zero_grad(set_to_none)

    def state_dict(self):
        self._sync_lr()
        return self._impl.state_dict()

    def load_state_dict(self, state_dict):
        self._impl.load_state_dict(dict(state_dict))
        self._lr = self._impl.lr
        for g in self.param_groups:
            g["lr"] = self._lr

    def _after_schedule(self):
        self._lr = self._impl.lr
        for g in self.param_groups:
            g["lr"] = self._lr


class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, weight_decay, nesterov. ValueError for negative
    lr/momentum/weight_decay or nesterov without momentum (PyTorch's rules)."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize=False, foreach=None, differentiable=False, fused=None):
        if maximize:
            raise ValueError("SGD(maximize=True) is not supported")
        groups = _groups(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))
        for g in groups[1:]:
            for k in ("momentum", "dampening", "weight_decay", "nesterov"):
                if g[k] != groups[0][k]:
                    raise ValueError(f"SGD: parameter groups with different {k} are not supported")
        flat = [p for g in groups for p in g["params"]]
        g0 = groups[0]
        super().__init__(groups, _C._SGD(flat, float(g0["lr"]), float(g0["momentum"]),
                                         float(g0["dampening"]), float(g0["weight_decay"]),
                                         bool(g0["nesterov"])))


class Adam(Optimizer):
    """torch.optim.Adam (amsgrad False); groups may differ in weight_decay only."""

    _impl_class = _C._Adam
    _default_wd = 0.0

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=None,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None):
        if amsgrad or maximize:
            raise ValueError(f"{type(self).__name__}: amsgrad and maximize are not supported")
        if weight_decay is None:
            weight_decay = self._default_wd
        groups = _groups(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        for g in groups[1:]:
            for k in ("betas", "eps"):
                if g[k] != groups[0][k]:
                    raise ValueError(f"{type(self).__name__}: parameter groups with different {k} "
                                     "are not supported")
        b1, b2 = groups[0]["betas"]
        impl = self._impl_class([g["params"] for g in groups],
                                [float(g["weight_decay"]) for g in groups], float(groups[0]["lr"]),
                                float(b1), float(b2), float(groups[0]["eps"]), float(weight_decay))
        super().__init__(groups, impl)


class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay, default 0.01."""

    _impl_class = _C._AdamW
    _default_wd = 1e-2
