"""Modules: registration as torch.nn.Module's __setattr__, state_dict, the reference model
against PyTorch's numbers."""
import os

import pytest

import lockstep as torch
import lockstep.nn as nn
import lockstep.nn.functional as F
from conftest import DATA, close


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 5)
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def reference_net(golden):
    net = Net()
    net.load_state_dict({k[len("mlp.init."):]: v for k, v in golden.items() if k.startswith("mlp.init.")})
    return net


def test_attributes_register_parameters_buffers_children():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(3))
            self.register_buffer("running", torch.zeros(2))
            self.inner = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
            self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 1)])
            self.scale = 2.0  # a plain attribute

        def forward(self, x):
            x = self.inner(x * self.w)
            for b in self.blocks:
                x = b(x)
            return x * self.scale

    m = M()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["w", "inner.0.weight", "inner.0.bias", "blocks.0.weight", "blocks.0.bias",
                     "blocks.1.weight", "blocks.1.bias"]
    assert list(m.state_dict().keys()) == names[:1] + ["running"] + names[1:]
    assert isinstance(m.w, nn.Parameter) and m.w.requires_grad
    assert m.scale == 2.0 and m.running.shape == (2,)
    assert m(torch.ones(5, 3)).shape == (5, 1)
    assert [type(c).__name__ for c in m.children()] == ["Sequential", "ModuleList"]
    assert len(list(m.modules())) == 7
    assert m.eval() is m and not m.inner[0].training
    m.train()
    assert m.blocks[1].training
    with pytest.raises(TypeError):
        m.w = torch.zeros(3)  # a plain tensor where a Parameter was
    m.w = None
    assert "w" not in dict(m.named_parameters())


def test_sequential_calls_python_children_through_cpp():
    class Double(nn.Module):
        def forward(self, x):
            return x * 2

    seq = nn.Sequential(nn.Linear(3, 3), Double())
    assert seq(torch.ones(2, 3)).shape == (2, 3)
    assert type(seq[1]).__name__ == "Double" and len(seq) == 2


def test_reference_model_matches_pytorch(golden):
    net = reference_net(golden)
    X, y = golden["mlp.X"], golden["mlp.y"]
    logits = net(X[:32])
    close(logits, golden["mlp.logits"])
    loss = nn.CrossEntropyLoss()(logits, y[:32])
    close(loss, golden["mlp.loss"])
    loss.backward()
    for name, p in net.named_parameters():
        close(p.grad, golden[f"mlp.grad.{name}"])
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_loads_a_state_dict_written_by_safetensors_torch():
    seq = nn.Sequential(nn.Linear(10, 5), nn.ReLU(), nn.Linear(5, 2))
    sd = torch.load(os.path.join(DATA, "torch_sequential.safetensors"))
    result = seq.load_state_dict(sd, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert seq[0].weight.tolist() == sd["0.weight"].tolist()


def test_load_state_dict_errors_name_the_keys():
    net = Net()
    with pytest.raises(torch.StateDictError, match="fc1.weight"):
        net.load_state_dict({"fc2.weight": torch.zeros(2, 5), "fc2.bias": torch.zeros(2)})
    with pytest.raises(RuntimeError, match=r"\[5, 10\]"):
        net.load_state_dict({**net.state_dict(), "fc1.weight": torch.zeros(3, 3)})
    res = net.load_state_dict({"fc2.bias": torch.zeros(2), "extra": torch.zeros(1)}, strict=False)
    assert "fc1.weight" in res.missing_keys and res.unexpected_keys == ["extra"]


def test_built_in_layers_run():
    x = torch.randn(2, 3, 8, 8)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10), nn.Dropout(0.1))
    assert model(x).shape == (2, 10)
    assert "1.running_mean" in model.state_dict()
    assert nn.LayerNorm(8)(torch.randn(2, 8)).shape == (2, 8)
    assert nn.Embedding(10, 4)(torch.tensor([[1, 2]])).shape == (1, 2, 4)
    assert nn.GELU("tanh")(torch.zeros(1)).item() == 0.0
    sync = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert sync is model and sync[1].synchronized  # switched in place, as the C++ library does


def test_module_to_and_dtype():
    net = Net().double()
    assert net.fc1.weight.dtype == torch.float64
    assert net.to(torch.float32) is net and net.fc2.bias.dtype == torch.float32
    assert net.to("cpu") is net
