"""lockstep.cuda: whether GPUs can be used (torch.cuda.is_available, device_count)."""
from . import _C


def is_available():
    """True when this build has the CUDA backend and at least one GPU is usable."""
    return device_count() > 0


def device_count():
    """Number of usable GPUs (0 in a build without CUDA)."""
    return _C._cuda_device_count()


def manual_seed(seed):
    """Accepted for torch compatibility: GPU draws use the default generator too."""
    _C.manual_seed(seed)


manual_seed_all = manual_seed
