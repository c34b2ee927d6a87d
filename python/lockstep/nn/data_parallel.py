"""lockstep.nn.DataParallel: the C++ DataParallel (python/src/parallel.cpp) with torch's signature."""
from __future__ import annotations

from collections import OrderedDict

from .. import _C


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
