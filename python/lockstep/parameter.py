"""lockstep.nn.Parameter (torch.nn.Parameter): a Tensor registered as a parameter on assignment."""
from ._C import Parameter  # noqa: F401
