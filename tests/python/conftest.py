"""Shared fixtures: the golden values PyTorch computed (tests/data/python/generate.py)."""
import os

import numpy as np
import pytest

import lockstep

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "python")


@pytest.fixture(scope="session")
def golden():
    return lockstep.load(os.path.join(DATA, "golden.safetensors"))


def close(actual, expected, rtol=1e-5, atol=1e-6):
    """Asserts allclose between a lockstep tensor (or number) and a golden tensor."""
    a = actual.detach().numpy() if isinstance(actual, lockstep.Tensor) else np.asarray(actual)
    e = expected.detach().numpy() if isinstance(expected, lockstep.Tensor) else np.asarray(expected)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
