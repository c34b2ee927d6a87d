"""Optimizers and schedulers: PyTorch's trajectories on the reference model."""
import pytest

import lockstep as torch
import lockstep.nn.functional as F
from conftest import close
from test_nn import reference_net


def run(golden, make_opt, name, sched=None):
    net = reference_net(golden)
    X, y = golden["mlp.X"], golden["mlp.y"]
    opt = make_opt(net.parameters())
    s = sched(opt) if sched else None
    lrs = []
    for epoch in range(2):
        for i in range(0, 96, 32):
            opt.zero_grad()
            F.cross_entropy(net(X[i:i + 32]), y[i:i + 32]).backward()
            opt.step()
        if s:
            s.step()
        lrs.append(opt.param_groups[0]["lr"])
    for k, v in net.state_dict().items():
        close(v, golden[f"{name}.{k}"], rtol=1e-5, atol=1e-6)
    close(torch.tensor(lrs, dtype=torch.float64), golden[f"{name}.lrs_f64"])


def test_sgd_momentum_weight_decay(golden):
    run(golden, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3), "sgd")


def test_adam(golden):
    run(golden, lambda p: torch.optim.Adam(p, lr=1e-2), "adam")


def test_adamw_with_step_lr(golden):
    run(golden, lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1), "adamw",
        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5))


def test_param_groups_lr_is_mutable():
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=1.0)
    for g in opt.param_groups:
        g["lr"] = 0.5
    w.grad = torch.ones(2)
    opt.step()
    assert w.tolist() == [0.5, 0.5]
    sd = opt.state_dict()
    assert sd["param_groups.0.lr"].item() == 0.5
    opt.param_groups.append({"params": [], "lr": 0.1})
    with pytest.raises(ValueError, match="learning rates"):
        opt.step()


def test_cosine_annealing_lrs():
    w = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=1.0)
    s = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    lrs = []
    for _ in range(4):
        s.step()
        lrs.append(round(s.get_last_lr()[0], 6))
    assert lrs == [0.853553, 0.5, 0.146447, 0.0]


def test_clip_grad_norm():
    w = torch.nn.Parameter(torch.ones(4))
    w.grad = torch.full((4,), 2.0)
    n = torch.nn.utils.clip_grad_norm_([w], 1.0)
    assert abs(n.item() - 4.0) < 1e-6
    assert abs((w.grad * w.grad).sum().item() - 1.0) < 1e-5
