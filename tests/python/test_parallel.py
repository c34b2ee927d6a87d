"""nn.DataParallel from Python: a Python forward on every replica, PyTorch's gradients."""
import gc
import os
import subprocess
import sys
import weakref

import pytest

import lockstep as torch
import lockstep.nn as nn
import lockstep.nn.functional as F
from conftest import close
from test_nn import Net, reference_net

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_gradients_match_pytorch_on_several_devices(golden):
    for devices in (["cpu:0"], ["cpu:0", "cpu:1"], ["cpu:0", "cpu:1", "cpu:2"]):
        net = reference_net(golden)
        dp = nn.DataParallel(net, device_ids=devices)
        assert dp.module is not None and len(dp.device_ids) == len(devices)
        logits = dp(golden["mlp.X"][:32])
        close(logits, golden["mlp.logits"])
        loss = nn.CrossEntropyLoss()(logits, golden["mlp.y"][:32])
        close(loss, golden["mlp.loss"])
        loss.backward()
        for name, p in net.named_parameters():
            close(p.grad, golden[f"mlp.grad.{name}"])


def test_default_devices_are_one_cpu_worker_per_core():
    dp = nn.DataParallel(Net())
    assert [d.type for d in dp.device_ids] == ["cpu"] * len(dp.device_ids)
    assert len(dp.device_ids) == len(torch._C.default_devices())


def test_a_data_dependent_branch_runs_on_each_replica():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 1)
            self.b = nn.Linear(2, 1)

        def forward(self, x):
            # each replica sees its own chunk and takes its own branch
            return self.a(x) if x.sum().item() > 0 else self.b(x) * 0

    m = Branchy()
    x = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    out = nn.DataParallel(m, device_ids=["cpu:0", "cpu:1"])(x)
    assert out[1].item() == 0.0
    close(out[0], m.a(x[:1])[0])


def test_errors_in_a_replica_keep_their_type():
    class Bad(nn.Module):
        def forward(self, x):
            return x[100]

    with pytest.raises(IndexError, match="out of bounds"):
        nn.DataParallel(Bad(), device_ids=["cpu:0", "cpu:1"])(torch.zeros(4, 2))
    with pytest.raises(ValueError):
        nn.DataParallel(Net(), device_ids=[])
    with pytest.raises(ValueError):
        nn.DataParallel(Net(), dim=1)
    with pytest.raises(torch.DeviceError):
        nn.DataParallel(Net(), device_ids=["cuda:7"])


def test_deterministic_mode_gives_the_same_bits_for_any_device_count(golden):
    results = []
    for devices in (["cpu:0"], ["cpu:0", "cpu:1"], ["cpu:0", "cpu:1", "cpu:2"]):
        net = reference_net(golden)
        dp = nn.DataParallel(net, device_ids=devices, deterministic=True)
        opt = torch.optim.SGD(dp.parameters(), lr=0.1)
        for i in range(0, 96, 32):
            opt.zero_grad()
            F.cross_entropy(dp(golden["mlp.X"][i:i + 32]), golden["mlp.y"][i:i + 32]).backward()
            opt.step()
        results.append([p.detach().numpy().tobytes() for p in net.parameters()])
    assert results[0] == results[1] == results[2]


def test_a_deleted_wrapper_is_freed():
    m = Net()
    dp = nn.DataParallel(m, device_ids=["cpu:0", "cpu:1"])
    dp(torch.randn(4, 10)).sum().backward()
    refs = weakref.ref(m), weakref.ref(dp)
    del m, dp
    gc.collect()
    assert refs[0]() is None and refs[1]() is None


def test_the_reference_program_runs_with_its_imports_changed():
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "reference_program.py")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [l.split(",")[0] for l in lines] == [f"Epoch {k}" for k in range(1, 11)]
    assert all(l.split(": ")[0].endswith("Validation Loss") and len(l.split(": ")[1]) == 6 for l in lines)


def test_batchnorm_replicas_synchronise_and_match_one_device():
    class BNNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4 * 4 * 4, 3)

        def forward(self, x):  # Python forward: the replicas meet in SyncBatchNorm's collectives
            x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
            return self.fc(torch.flatten(x, 1))

    torch.manual_seed(0)
    x = torch.randn(6, 1, 8, 8)
    base = BNNet()
    sd = {k: v.clone() for k, v in base.state_dict().items()}
    outs, grads = [], []
    for devices in (["cpu:0"], ["cpu:0", "cpu:1"], ["cpu:0", "cpu:1", "cpu:2"]):
        m = BNNet()
        m.load_state_dict(sd)
        dp = nn.DataParallel(m, device_ids=devices)
        out = dp(x)
        out.sum().backward()
        outs.append(out)
        grads.append(m.conv.weight.grad)
        assert m.bn.synchronized == (len(devices) > 1)
    for o, g in zip(outs[1:], grads[1:]):
        close(o, outs[0], rtol=1e-4, atol=1e-5)
        close(g, grads[0], rtol=1e-4, atol=1e-5)


def test_two_threads_on_one_wrapper_are_refused_not_hung():
    import threading

    class Slow(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            import time
            time.sleep(0.05)
            return self.fc(x)

    dp = nn.DataParallel(Slow(), device_ids=["cpu:0", "cpu:1"])
    errors = []

    def call():
        try:
            dp(torch.randn(4, 4))
        except RuntimeError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == 1 and "two threads" in errors[0]


def test_state_dict_has_torchs_module_prefix():
    net = Net()
    dp = nn.DataParallel(net, device_ids=["cpu:0", "cpu:1"])
    assert list(dp.state_dict()) == ["module." + k for k in net.state_dict()]
    dp.load_state_dict(dp.state_dict())
    net2 = Net()
    net2.load_state_dict({k[len("module."):]: v for k, v in dp.state_dict().items()})


def test_forward_with_extra_arguments_and_non_tensor_outputs_are_clear_errors():
    with pytest.raises(TypeError, match="one tensor"):
        nn.DataParallel(Net(), device_ids=["cpu:0", "cpu:1"])(torch.zeros(2, 10), torch.zeros(2))

    class Pair(nn.Module):
        def forward(self, x):
            return x, x

    with pytest.raises(ValueError, match="one Tensor"):
        nn.DataParallel(Pair(), device_ids=["cpu:0", "cpu:1"])(torch.zeros(2, 3))


def test_output_device_takes_torchs_spellings():
    assert str(nn.DataParallel(Net(), device_ids=[0, 1], output_device=1).output_device) == "cpu:1"
    assert str(nn.DataParallel(Net(), device_ids=["cpu:0", "cpu:1"], output_device="cpu:1").output_device) == "cpu:1"
    with pytest.raises(torch.DeviceError, match="tpu"):
        nn.DataParallel(Net(), output_device="tpu")


def test_module_eval_reaches_the_replicas():
    # torch.nn.DataParallel replicates the module on every forward, so model.eval() (on the
    # module, not the wrapper) turns its dropout off in every replica; so does a submodule's own.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.Dropout(0.5), nn.Linear(16, 3))
    dp = nn.DataParallel(model, device_ids=["cpu:0", "cpu:1"])
    x = torch.randn(8, 5)
    with torch.no_grad():
        model.eval()
        close(dp(x), model(x), rtol=1e-5, atol=1e-6)
        model.train()
        model[1].eval()
        assert dp.training and model[0].training and not model[1].training
        close(dp(x), model(x), rtol=1e-5, atol=1e-6)
