"""lockstep.utils: data loading (lockstep.utils.data)."""
from . import data  # noqa: F401
