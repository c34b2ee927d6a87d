"""nn.functional against PyTorch's numbers (tests/data/python/generate.py)."""
import pytest

import lockstep as torch
import lockstep.nn as nn
import lockstep.nn.functional as F
from conftest import close


def test_softmax_family(golden):
    a = golden["ops.a"]
    close(F.softmax(a, dim=1), golden["ops.softmax1"])
    close(F.log_softmax(a, dim=0), golden["ops.log_softmax0"])
    close(a.softmax(1), golden["ops.softmax1"])


def test_gelu(golden):
    close(F.gelu(golden["ops.a"]), golden["ops.gelu"])
    close(F.gelu(golden["ops.a"], approximate="tanh"), golden["ops.gelu_tanh"])


def test_losses(golden):
    close(F.cross_entropy(golden["ops.a"], golden["ops.ce_target"]), golden["ops.ce_ignore"])
    close(F.mse_loss(golden["ops.a"], golden["ops.b"]), golden["ops.mse"])


def test_convolution_and_pooling(golden):
    img = golden["ops.img"]
    close(F.conv2d(img, golden["ops.conv_w"], golden["ops.conv_b"], stride=1, padding=1),
          golden["ops.conv"], rtol=1e-4, atol=1e-5)
    close(F.max_pool2d(img, 2), golden["ops.maxpool"])
    close(F.avg_pool2d(img, 2, stride=2), golden["ops.avgpool"])


def test_layer_norm(golden):
    close(F.layer_norm(golden["ops.a"], (7,)), golden["ops.layer_norm"], atol=1e-5)


def test_reductions_over_tuples_of_dims_and_dtype():
    x = torch.arange(24.0).view(2, 3, 4)
    expect = x.numpy().sum(axis=(0, 2))
    close(x.sum((0, 2)), expect)
    close(torch.mean(x, dim=[-1, 0], keepdim=True), x.numpy().mean(axis=(2, 0), keepdims=True))
    assert x.sum(keepdim=True).shape == (1, 1, 1) and x.sum().shape == ()
    assert torch.sum(torch.tensor([1, 2]), dtype=torch.float64).dtype == torch.float64
    with pytest.raises(RuntimeError, match="appears multiple times"):
        x.sum((0, -3))
    with pytest.raises(IndexError):
        x.mean((0, 3))


def test_split_with_a_list_of_sizes():
    x = torch.arange(10.0).view(2, 5)
    a, b = x.split([2, 3], dim=1)
    assert a.tolist() == [[0, 1], [5, 6]] and b.tolist() == [[2, 3, 4], [7, 8, 9]]
    assert [t.shape for t in torch.split(x, [1, 1])] == [(1, 5), (1, 5)]
    assert [t.shape for t in x.split(2, 1)] == [(2, 2), (2, 2), (2, 1)]
    with pytest.raises(RuntimeError, match="sum exactly to 5"):
        x.split([2, 2], dim=1)


def test_like_factories_take_dtype_and_device():
    x = torch.ones(2, 3)
    assert torch.zeros_like(x, dtype=torch.int64).dtype == torch.int64
    assert torch.ones_like(torch.tensor([1])).dtype == torch.int64
    assert torch.full_like(x, 7.0).tolist() == [[7.0] * 3] * 2
    assert torch.empty_like(x, dtype=torch.float64).dtype == torch.float64
    torch.manual_seed(0)
    r = torch.randn_like(x)
    torch.manual_seed(0)
    assert r.tolist() == torch.randn(2, 3).tolist()
    assert torch.rand_like(x, requires_grad=True).requires_grad


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_and_the_reductions(golden, reduction):
    a, b, t = golden["ops.a"], golden["ops.b"], golden["ops.ce_target"]
    lp = F.log_softmax(a, dim=1)
    close(F.nll_loss(lp, t, reduction=reduction), golden[f"loss.nll_{reduction}"])
    close(nn.NLLLoss(reduction=reduction)(lp, t), golden[f"loss.nll_{reduction}"])
    close(F.cross_entropy(a, t, reduction=reduction), golden[f"loss.ce_{reduction}"])
    close(nn.CrossEntropyLoss(reduction=reduction)(a, t), golden[f"loss.ce_{reduction}"])
    close(F.mse_loss(a, b, reduction=reduction), golden[f"loss.mse_{reduction}"])
    close(nn.MSELoss(reduction=reduction)(a, b), golden[f"loss.mse_{reduction}"])


def test_nll_loss_gradient_and_bad_input(golden):
    x = golden["ops.a"].clone().requires_grad_(True)
    F.nll_loss(F.log_softmax(x, dim=1), golden["ops.ce_target"], reduction="sum").backward()
    close(x.grad, golden["loss.nll_sum_grad"])
    lp = torch.zeros(2, 3)
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        F.nll_loss(lp, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(2\) to match target batch_size \(1\)"):
        F.nll_loss(lp, torch.tensor([0]))  # torch's ValueError
    with pytest.raises(torch.DTypeError):
        F.nll_loss(lp, torch.zeros(2))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.mse_loss(lp, lp, reduction="avg")
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        nn.CrossEntropyLoss(reduction="batchmean")
