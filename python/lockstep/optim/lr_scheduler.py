"""lockstep.optim.lr_scheduler: StepLR and CosineAnnealingLR over the C++ schedulers
(torch.optim.lr_scheduler; one learning rate per optimizer)."""
from __future__ import annotations

from .. import _C


class LRScheduler:
    def __init__(self, optimizer, impl):
        self.optimizer = optimizer
        optimizer._sync_lr()
        self._impl = impl
        optimizer._after_schedule()

    def step(self):
        """Advances one epoch and sets the optimizer's lr (written into its param_groups)."""
        self.optimizer._sync_lr()
        self._impl.step()
        self.optimizer._after_schedule()

    def get_last_lr(self):
        return self._impl.get_last_lr()

    @property
    def last_epoch(self):
        return self._impl.last_epoch

    def state_dict(self):
        return self._impl.state_dict()

    def load_state_dict(self, state_dict):
        self._impl.load_state_dict(dict(state_dict))
        self.optimizer._after_schedule()


class StepLR(LRScheduler):
    """lr = base_lr · gamma^(epoch // step_size) (torch.optim.lr_scheduler.StepLR)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        if last_epoch != -1:
            raise ValueError("StepLR(last_epoch=...) is not supported: use load_state_dict")
        optimizer._sync_lr()
        super().__init__(optimizer, _C._StepLR(optimizer._impl, int(step_size), float(gamma)))


class CosineAnnealingLR(LRScheduler):
    """torch.optim.lr_scheduler.CosineAnnealingLR."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        if last_epoch != -1:
            raise ValueError("CosineAnnealingLR(last_epoch=...) is not supported: use load_state_dict")
        optimizer._sync_lr()
        super().__init__(optimizer, _C._CosineAnnealingLR(optimizer._impl, int(T_max), float(eta_min)))
