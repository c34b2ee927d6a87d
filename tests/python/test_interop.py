"""Zero copy at the border: numpy views, from_numpy, DLPack both ways share the pointer."""
import numpy as np
import pytest

import lockstep as torch


def ptr(a):
    return a.__array_interface__["data"][0]


def test_numpy_is_a_view():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    a = t.numpy()
    assert ptr(a) == t.data_ptr()
    a[0, 0] = 42
    assert t[0, 0].item() == 42
    del t  # the array keeps the memory alive
    assert a[0, 0] == 42


def test_from_numpy_shares_and_keeps_alive():
    a = np.arange(4, dtype=np.float64)
    t = torch.from_numpy(a)
    assert t.data_ptr() == ptr(a) and t.dtype == torch.float64
    t[1] = 10
    assert a[1] == 10
    del a
    assert t.tolist() == [0.0, 10.0, 2.0, 3.0]


def test_dlpack_both_ways_share_the_pointer():
    t = torch.randn(3, 2)
    a = np.from_dlpack(t)
    assert ptr(a) == t.data_ptr()
    b = np.ones((2, 2), np.int64)
    u = torch.from_dlpack(b)
    assert u.data_ptr() == ptr(b) and u.dtype == torch.int64
    assert t.__dlpack_device__() == (1, 0)


def test_view_of_a_narrowed_tensor_points_inside():
    t = torch.arange(10, dtype=torch.float32)
    assert ptr(t[3:].numpy()) == t.data_ptr() + 12


def test_numpy_functions_accept_tensors():
    t = torch.tensor([1.0, 2.0])
    assert np.asarray(t).tolist() == [1.0, 2.0]
    assert np.sum(np.asarray(t)) == 3.0


def test_torch_interop_where_torch_is_installed():
    real_torch = pytest.importorskip("torch")
    t = torch.randn(4, 3)
    rt = real_torch.from_dlpack(t)
    assert rt.data_ptr() == t.data_ptr()
    back = torch.from_dlpack(real_torch.ones(2, 2))
    assert back.tolist() == [[1.0, 1.0], [1.0, 1.0]]
