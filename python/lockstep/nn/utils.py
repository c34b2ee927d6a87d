"""lockstep.nn.utils: gradient clipping (torch.nn.utils.clip_grad_norm_)."""
from .. import _C


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scales the gradients in place so their total norm is at most ``max_norm``; returns the
    total norm before clipping as a 0-d float32 tensor (torch.nn.utils.clip_grad_norm_)."""
    if error_if_nonfinite:
        raise ValueError("clip_grad_norm_(error_if_nonfinite=True) is not supported")
    from .. import tensor
    return tensor(_C.clip_grad_norm_(parameters, float(max_norm), float(norm_type)))
