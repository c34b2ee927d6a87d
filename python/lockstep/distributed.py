"""lockstep.distributed: the process-group queries torch.distributed answers before a group
exists. Multi-process training from Python (init_process_group, DistributedDataParallel under
mpirun) is not bound yet: init_process_group raises RuntimeError saying so; the C++ library and
the CLI (`mpirun -np N lockstep train ...`) have it (docs/distributed.md)."""

_NOT_INITIALIZED = ("Default process group has not been initialized, please make sure to call "
                    "init_process_group.")


def is_available():
    """Whether this package can train across processes (not yet: False)."""
    return False


def is_initialized():
    return False


def get_rank(group=None):
    raise ValueError(_NOT_INITIALIZED)


def get_world_size(group=None):
    raise ValueError(_NOT_INITIALIZED)


def init_process_group(backend=None, init_method=None, **kwargs):
    raise RuntimeError("lockstep.distributed.init_process_group is not available from Python yet: "
                       "train across processes with the C++ API or the CLI under mpirun "
                       "(mpirun -np N lockstep train ...)")
