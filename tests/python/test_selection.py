"""Comparisons, tril/triu, masked_fill, where, topk and multinomial against torch 2.15's values
(tests/data/python/generate.py, bool results stored as int64 0/1), and their bad input."""
import math

import numpy as np
import pytest

import lockstep as torch
import lockstep.nn.functional as F
from lockstep.models import GPT, GPTConfig
from conftest import close


def test_comparisons_are_torchs_as_int64_masks(golden):
    a, b = golden["ops.a"], golden["ops.b"]
    for name, op in (("lt", a < b), ("le", a <= b), ("gt", a > b), ("ge", a >= b), ("ne", a != b)):
        assert op.dtype == torch.int64
        np.testing.assert_array_equal(op.numpy(), golden[f"sel.{name}"].numpy(), err_msg=name)
        np.testing.assert_array_equal(getattr(torch, name)(a, b).numpy(), golden[f"sel.{name}"].numpy())
        np.testing.assert_array_equal(getattr(a, name)(b).numpy(), golden[f"sel.{name}"].numpy())
    # a number on either side; a float number against an int64 tensor compares in float
    assert (torch.tensor([1, 2, 3]) > 1.5).tolist() == [0, 1, 1]
    assert (2 < torch.tensor([1.0, 3.0])).tolist() == [0, 1]
    assert torch.less is torch.lt and torch.greater_equal is torch.ge


def test_comparison_bad_input():
    with pytest.raises(TypeError, match="comparison"):
        torch.ones(2) < "x"
    with pytest.raises(torch.DTypeError):
        torch.ones(2) < torch.ones(2, dtype=torch.int64)
    with pytest.raises(torch.ShapeError):
        torch.ones(2) >= torch.ones(3)


def test_tril_triu_and_nanogpts_causal_mask(golden):
    a = golden["ops.a"]
    close(torch.tril(a, 1), golden["sel.tril1"], rtol=0, atol=0)
    close(a.triu(-1), golden["sel.triu_m1"], rtol=0, atol=0)
    T = 5
    bias = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    att = golden["sel.att"].masked_fill(bias[:, :, :T, :T] == 0, float("-inf"))
    close(F.softmax(att, dim=-1), golden["sel.causal_softmax"])
    with pytest.raises(torch.ShapeError, match="at least 2 dimensions"):
        torch.tril(torch.ones(3))


def test_masked_fill_masks_and_gradient():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x.masked_fill(torch.tensor([1, 0]), -1.0)  # int64 mask, broadcast over rows
    assert y.tolist() == [[-1.0, 2.0], [-1.0, 4.0]]
    y.sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0], [0.0, 1.0]]
    assert torch.masked_fill(x.detach(), x.detach() > 2.5, torch.tensor(0.0)).tolist() == [[1, 2], [0, 0]]
    with pytest.raises(torch.ShapeError):
        x.masked_fill(torch.tensor([1, 0, 1]), 0.0)
    with pytest.raises(ValueError, match="0-dimensional"):
        x.masked_fill(torch.tensor([1, 0]), torch.tensor([1.0]))
    with pytest.raises(TypeError):
        x.masked_fill(torch.tensor([1, 0]), "zero")
    with pytest.raises(ValueError, match="int64"):
        torch.tensor([1, 2]).masked_fill(torch.tensor([1, 0]), float("inf"))


def test_where(golden):
    a, b = golden["ops.a"], golden["ops.b"]
    close(torch.where(a > 0, a, b), golden["sel.where"], rtol=0, atol=0)
    close(a.where(a > 0, b), golden["sel.where"], rtol=0, atol=0)
    assert torch.where(torch.tensor([1, 0]), 1.0, 0.0).tolist() == [1.0, 0.0]
    with pytest.raises(torch.DTypeError):
        torch.where(torch.tensor([1]), torch.ones(1), torch.tensor([1]))


def test_topk(golden):
    a = golden["ops.a"]
    v, i = torch.topk(a, 3, dim=1)
    close(v, golden["sel.topk_values"], rtol=0, atol=0)
    np.testing.assert_array_equal(i.numpy(), golden["sel.topk_indices"].numpy())
    r = a.topk(2, dim=0, largest=False)
    close(r.values, golden["sel.bottomk_values"], rtol=0, atol=0)
    np.testing.assert_array_equal(r.indices.numpy(), golden["sel.bottomk_indices"].numpy())
    x = torch.tensor([1.0, 5.0, 3.0], requires_grad=True)
    x.topk(2).values.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="out of range"):
        torch.topk(a, 8)
    with pytest.raises(IndexError):
        torch.topk(a, 1, dim=2)


def test_multinomial():
    g = torch.Generator().manual_seed(0)
    assert torch.multinomial(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), 3, True, generator=g).tolist() == \
        [[1, 1, 1], [0, 0, 0]]
    draws = torch.multinomial(torch.tensor([1.0, 3.0]), 20000, replacement=True, generator=g)
    frac = float(draws.sum()) / 20000  # fraction of index 1: 3/4, within 4 standard errors
    assert abs(frac - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 20000)
    assert sorted(torch.tensor([1.0, 2.0, 3.0]).multinomial(3).tolist()) == [0, 1, 2]
    with pytest.raises(ValueError, match="without replacement"):
        torch.multinomial(torch.ones(2), 3)
    with pytest.raises(ValueError, match="element < 0"):
        torch.multinomial(torch.tensor([1.0, -1.0]), 1)
    with pytest.raises(ValueError, match="sum of probabilities"):
        torch.multinomial(torch.zeros(3), 1)
    with pytest.raises(torch.DTypeError):
        torch.multinomial(torch.tensor([1, 2]), 1)
    with pytest.raises(torch.ShapeError):
        torch.multinomial(torch.ones(1, 2, 2), 1)


def test_gpt_generate_is_nanogpts_greedy_decoding(golden):
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    model = GPT(GPTConfig(block_size=16, vocab_size=20, n_layer=2, n_head=2, n_embd=32, bias=True))
    model.load_state_dict(torch.load(os.path.join(here, "..", "data", "gpt", "gpt_bias_final.safetensors")))
    model.eval()
    prompt = golden["gpt.prompt"]
    out = model.generate(prompt, 14, temperature=0.8, top_k=1)  # 19 tokens > block_size: cropped
    np.testing.assert_array_equal(out.numpy(), golden["gpt.greedy"].numpy())
    logits, loss = model(prompt)
    assert loss is None
    close(logits, golden["gpt.last_logits"], rtol=2e-4, atol=2e-5)
    # Sampling: top_k=3 draws only among each step's three largest logits.
    torch.manual_seed(0)
    sampled = model.generate(prompt, 3, top_k=3)
    assert sampled.shape == (2, 8) and sampled[:, :5].tolist() == prompt.tolist()


def test_equality_with_a_float_promotes_and_with_none_is_false():
    # torch: an int64 tensor == 2.5 compares in float (all False), not with 2; `t == None` is
    # False and `t != None` True (Python's identity fallback), not a TypeError.
    t = torch.tensor([1, 2, 3])
    assert (t == 2.5).tolist() == [0, 0, 0]
    assert (t != 2.5).tolist() == [1, 1, 1]
    assert (t == 2).tolist() == [0, 1, 0]
    assert (t == None) is False  # noqa: E711
    assert (t != None) is True  # noqa: E711
    assert (t == "a") is False


def test_where_with_an_int_tensor_and_a_float_is_float32():
    t = torch.tensor([1, 2, 3])
    out = torch.where(t == 1, torch.arange(3), 2.5)
    assert out.dtype == torch.float32
    assert out.tolist() == [0.0, 2.5, 2.5]
    assert torch.where(t == 1, torch.arange(3), 2).dtype == torch.int64


def test_masked_fill_refuses_a_value_float32_cannot_hold():
    # torch: "value cannot be converted to type float without overflow" (a RuntimeError); it was
    # stored as inf. inf itself, and the largest float32, are kept.
    x = torch.tensor([1.0, 2.0])
    m = torch.tensor([0, 1])
    with pytest.raises(RuntimeError, match="without overflow"):
        x.masked_fill(m, 1e40)
    assert x.masked_fill(m, float("inf")).tolist() == [1.0, float("inf")]
    assert x.masked_fill(m, -3.4028234663852886e38).tolist()[1] == -3.4028234663852886e38
