"""Tensors: factories, dtypes, arithmetic, indexing, autograd basics."""
import numpy as np
import pytest

import lockstep as torch
from conftest import close


def test_tensor_infers_torch_dtypes():
    assert torch.tensor([1.5, 2]).dtype == torch.float32
    assert torch.tensor([1, 2]).dtype == torch.int64
    assert torch.tensor(np.zeros(3)).dtype == torch.float64
    assert torch.tensor(3).dim() == 0 and torch.tensor(3).item() == 3
    assert torch.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]


def test_factories_take_torch_size_arguments():
    assert torch.zeros(2, 3).shape == (2, 3)
    assert torch.ones((2, 3)).shape == (2, 3)
    assert torch.randn([4]).shape == (4,)
    assert torch.full((2,), 7.0).tolist() == [7.0, 7.0]
    assert torch.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert torch.arange(0, 1, 0.5).dtype == torch.float32
    r = torch.randint(0, 3, (100,))
    assert set(r.tolist()) <= {0, 1, 2}
    assert torch.randint(5, (3,)).shape == (3,)
    assert sorted(torch.randperm(6).tolist()) == list(range(6))


def test_manual_seed_repeats_streams():
    torch.manual_seed(3)
    a = torch.randn(5)
    torch.manual_seed(3)
    assert torch.randn(5).tolist() == a.tolist()
    g = torch.Generator().manual_seed(3)
    assert torch.randn(5, generator=g).tolist() == a.tolist()
    state = torch.get_rng_state()
    b = torch.rand(3)
    torch.set_rng_state(state)
    assert torch.rand(3).tolist() == b.tolist()


def test_arithmetic_follows_torch(golden):
    a, b = golden["ops.a"], golden["ops.b"]
    close((a * 2 - b / 3 + 1).exp().sum(1), golden["ops.expr"])
    assert (torch.tensor([1, 2]) + 1.5).dtype == torch.float32
    assert (torch.tensor([1, 2]) + 1).dtype == torch.int64
    assert (2 - torch.tensor([1.0])).item() == 1.0
    assert (1 / torch.tensor([4.0])).item() == 0.25
    x = torch.ones(3)
    x += 1
    assert x.tolist() == [2.0, 2.0, 2.0]
    assert (torch.tensor([1, 2, 3]) == torch.tensor([1, 0, 3])).tolist() == [1, 0, 1]


def test_indexing_matches_torch(golden):
    a = golden["ops.a"]
    close(a[torch.tensor([3, 0, 0])], golden["ops.index_rows"])
    close(a[1:3, ::2], golden["ops.slice"])
    assert a[0].shape == (7,) and a[-1, 2].dim() == 0
    assert a[None].shape == (1, 4, 7) and a[..., 0].shape == (4,)
    with pytest.raises(IndexError):
        a[4]
    with pytest.raises(IndexError):
        a[0, 0, 0]
    with pytest.raises(ValueError):
        a[::-1]


def test_setitem_writes_rows():
    x = torch.zeros(3, 2)
    x[1] = 5.0
    x[2:] = torch.ones(1, 2)
    x[torch.tensor([0])] = 7.0
    assert x.tolist() == [[7.0, 7.0], [5.0, 5.0], [1.0, 1.0]]
    with pytest.raises(IndexError):
        x[:, 0] = 1.0


def test_dim0_slice_is_a_view():
    x = torch.arange(6).reshape(3, 2)
    v = x[1:]
    v[0] = 9
    assert x.tolist() == [[0, 1], [9, 9], [4, 5]]


def test_backward_and_grad():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    assert w.grad.tolist() == [2.0, 4.0]
    assert w.is_leaf and not loss.is_leaf
    w.grad = None
    assert w.grad is None
    with torch.no_grad():
        y = w * 2
    assert not y.requires_grad
    assert torch.is_grad_enabled()

    @torch.no_grad()
    def f():
        return torch.is_grad_enabled()

    assert f() is False


def test_shape_methods():
    x = torch.arange(24).reshape(2, 3, 4)
    assert x.view(6, 4).shape == (6, 4)
    assert x.view(-1).shape == (24,)
    assert x.flatten(1).shape == (2, 12)
    assert x.permute(2, 0, 1).shape == (4, 2, 3)
    assert x.transpose(0, 1).shape == (3, 2, 4)
    assert x.unsqueeze(0).shape == (1, 2, 3, 4)
    assert torch.zeros(1, 3, 1).squeeze().shape == (3,)
    assert len(x) == 2 and x.size(-1) == 4 and x.numel() == 24
    assert torch.cat([x, x]).shape == (4, 3, 4) and torch.stack([x, x], 1).shape == (2, 2, 3, 4)
    v, i = torch.tensor([[1.0, 5.0], [7.0, 2.0]]).max(1)
    assert v.tolist() == [5.0, 7.0] and i.tolist() == [1, 0]
    assert torch.tensor([[1.0, 5.0], [7.0, 2.0]]).argmax(1).tolist() == [1, 0]
