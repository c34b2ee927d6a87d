"""What a port from PyTorch runs into (each case found by trying the package as a new user)."""
import numpy as np
import pytest

import lockstep as torch
import lockstep.nn as nn
from test_nn import Net


def test_augmented_assignment_keeps_gradients():
    w = torch.ones(3, requires_grad=True)
    loss = (w * 2).sum()
    loss += 0.5 * (w * w).sum()
    loss.backward()
    assert w.grad.tolist() == [3.0, 3.0, 3.0]
    a = torch.ones(3, requires_grad=True)
    total = 0
    total += (a * 2).sum()
    total -= (a * a).sum()
    total.backward()
    assert a.grad.tolist() == [0.0, 0.0, 0.0]


def test_in_place_arithmetic_keeps_dtype_and_shape_rules():
    a = torch.tensor([1, 2])
    with pytest.raises(RuntimeError, match="can't be cast"):
        a += 0.7
    x = torch.zeros(2, 3)
    x += torch.ones(3)
    x *= torch.full((2, 3), 2.0)
    x /= 4
    assert x.tolist() == [[0.5] * 3] * 2
    with pytest.raises(RuntimeError, match="broadcast shape"):
        y = torch.zeros(3)
        y += torch.ones(2, 3)
    leaf = torch.ones(2, requires_grad=True)
    with pytest.raises(torch.AutogradError):
        leaf += 1
    with torch.no_grad():
        leaf -= 1
    assert leaf.tolist() == [0.0, 0.0]


def test_indexed_assignment_into_the_graph_is_refused():
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    with pytest.raises(torch.AutogradError, match="indexed assignment"):
        y[0] = 5.0
    z = torch.zeros(3)
    with pytest.raises(torch.AutogradError):
        z[0:2] = x[:2] * 10


def test_a_numpy_view_outlives_data_replacement():
    p = torch.zeros(1000, 1000)
    a = p.numpy()
    p.data = torch.ones(2)
    a[:] = 7  # the old memory is still the array's
    assert float(a.sum()) == 7e6
    assert p.tolist() == [1.0, 1.0]


def test_optimizer_argument_errors():
    w = torch.ones(3, 2, requires_grad=True)
    with pytest.raises(TypeError, match="iterable"):
        torch.optim.SGD(w, lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        torch.optim.SGD([w * 1], lr=0.1)


def test_value_errors_are_runtime_errors_too():
    for call in (lambda: torch.zeros(-1), lambda: torch.randint(5, 2, (3,)),
                 lambda: torch.ones(2).item()):
        with pytest.raises(RuntimeError):
            call()
        with pytest.raises(ValueError):
            call()


def test_comparison_iteration_and_indices():
    a, b = torch.tensor([1, 2, 3]), torch.tensor([1, 0, 3])
    assert (a != b).tolist() == [0, 1, 0]
    assert a[torch.tensor([-1, 0])].tolist() == [3, 1]
    with pytest.raises(TypeError, match="0-d"):
        list(torch.tensor(1.0))
    assert [r.tolist() for r in torch.tensor([[1, 2], [3, 4]])] == [[1, 2], [3, 4]]
    m = torch.tensor([[1.0, 5.0], [7.0, 2.0]]).max(1)
    assert m.values.tolist() == [5.0, 7.0] and m.indices.tolist() == [1, 0]


def test_devices_given_as_strings():
    with pytest.raises(torch.DeviceError, match="tpu"):
        torch.zeros(2, device="tpu")
    with pytest.raises(torch.DeviceError, match="gpu"):
        torch.zeros(2).to("gpu")
    t = torch.zeros(2).to("cpu", non_blocking=True)
    assert t.device == torch.device("cpu") and torch.zeros(2).to(torch.float64).dtype == torch.float64


def test_module_api_spellings():
    m = Net()
    assert next(m.parameters()).shape == (5, 10)
    assert [n for n, _ in m.named_parameters()][0] == "fc1.weight"
    with pytest.raises(TypeError, match="Parameter"):
        m.register_parameter("w", torch.zeros(2))

    @torch.no_grad
    def f():
        return torch.is_grad_enabled()

    assert f() is False and torch.is_grad_enabled()


def test_safetensors_headers_that_start_like_a_pickle_load(tmp_path):
    # a header length of 128 mod 256 makes the first byte 0x80, a pickle's first byte
    for n in range(1, 40):
        path = tmp_path / f"f{n}.safetensors"
        torch.save({"w" * n: torch.ones(2)}, path)
        assert torch.load(path)["w" * n].tolist() == [1.0, 1.0]
