"""Writes golden.safetensors: what PyTorch computes for the cases tests/python checks.

Run with a venv that has torch, numpy and safetensors (CI installs no torch; the file is
committed):
    python3 -m venv ../torch-venv && ../torch-venv/bin/pip install torch numpy safetensors
    ../torch-venv/bin/python tests/data/python/generate.py
Every tensor is float32 unless named *_f64 or int64 (labels). Inputs are stored beside the
outputs, so the tests never depend on a random stream.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

torch.manual_seed(0)
out = {}

# ---- the reference program's model: forward, loss, gradients, SGD and Adam trajectories ----
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 5)
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


net = Net()
for k, v in net.state_dict().items():
    out[f"mlp.init.{k}"] = v.clone()
X = torch.randn(96, 10)
y = torch.randint(0, 2, (96,))
out["mlp.X"], out["mlp.y"] = X, y
logits = net(X[:32])
loss = F.cross_entropy(logits, y[:32])
loss.backward()
out["mlp.logits"], out["mlp.loss"] = logits.detach(), loss.detach()
for k, p in net.named_parameters():
    out[f"mlp.grad.{k}"] = p.grad.clone()


def trajectory(make_opt, name, sched=None):
    m = Net()
    m.load_state_dict({k[len("mlp.init."):]: v for k, v in out.items() if k.startswith("mlp.init.")})
    opt = make_opt(m.parameters())
    s = sched(opt) if sched else None
    lrs = []
    for epoch in range(2):
        for i in range(0, 96, 32):
            opt.zero_grad()
            F.cross_entropy(m(X[i:i + 32]), y[i:i + 32]).backward()
            opt.step()
        if s:
            s.step()
        lrs.append(opt.param_groups[0]["lr"])
    for k, v in m.state_dict().items():
        out[f"{name}.{k}"] = v.clone()
    out[f"{name}.lrs_f64"] = torch.tensor(lrs, dtype=torch.float64)


trajectory(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3), "sgd")
trajectory(lambda p: torch.optim.Adam(p, lr=1e-2), "adam")
trajectory(lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1), "adamw",
           lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5))

# ---- ops ----
a = torch.randn(4, 7)
out["ops.a"] = a
out["ops.softmax1"] = F.softmax(a, dim=1)
out["ops.log_softmax0"] = F.log_softmax(a, dim=0)
out["ops.gelu"] = F.gelu(a)
out["ops.gelu_tanh"] = F.gelu(a, approximate="tanh")
t = torch.tensor([1, -100, 6, 0])
out["ops.ce_target"] = t
out["ops.ce_ignore"] = F.cross_entropy(a, t)
b = torch.randn(4, 7)
out["ops.b"] = b
out["ops.mse"] = F.mse_loss(a, b)
out["ops.expr"] = (a * 2 - b / 3 + 1).exp().sum(1)
img = torch.randn(2, 3, 8, 8)
w = torch.randn(4, 3, 3, 3)
cb = torch.randn(4)
out["ops.img"], out["ops.conv_w"], out["ops.conv_b"] = img, w, cb
out["ops.conv"] = F.conv2d(img, w, cb, stride=1, padding=1)
out["ops.maxpool"] = F.max_pool2d(img, 2)
out["ops.avgpool"] = F.avg_pool2d(img, 2, stride=2)
out["ops.layer_norm"] = F.layer_norm(a, (7,))
out["ops.index_rows"] = a[torch.tensor([3, 0, 0])]
out["ops.slice"] = a[1:3, ::2]

# ---- PyTorch's random streams after torch.manual_seed (issue: lockstep.manual_seed gives them) ----
torch.manual_seed(0)
out["rng.randn"] = torch.randn(5)
out["rng.rand_f64"] = torch.rand(3, dtype=torch.float64)
out["rng.randint"] = torch.randint(0, 10, (4,))
out["rng.randperm"] = torch.randperm(6)
out["rng.randn_big"] = torch.randn(40)
torch.manual_seed(0)
for k, v in Net().state_dict().items():
    out[f"rng.net.{k}"] = v.clone()
from torch.utils.data import DataLoader as _DL
torch.manual_seed(0)
ds = list(range(10))
out["rng.loader_default"] = torch.tensor([i for _ in range(2) for b in _DL(ds, batch_size=3, shuffle=True) for i in b.tolist()])
g = torch.Generator().manual_seed(1)
out["rng.loader_generator"] = torch.tensor([i for _ in range(2) for b in _DL(ds, batch_size=3, shuffle=True, generator=g) for i in b.tolist()])
out["rng.after_loaders"] = torch.randn(2)

# ---- the reference program with torch.manual_seed(0) after its imports: its ten losses ----
torch.manual_seed(0)
RX = torch.randn(1000, 10)
Ry = torch.randint(0, 2, (1000,))
ref = Net()
ref = nn.DataParallel(ref)
crit = nn.CrossEntropyLoss()
opt = torch.optim.SGD(ref.parameters(), lr=0.01)
loader = _DL(torch.utils.data.TensorDataset(RX[:800], Ry[:800]), batch_size=32)
losses = []
for epoch in range(10):
    ref.train()
    for bx, by in loader:
        opt.zero_grad()
        crit(ref(bx), by).backward()
        opt.step()
    ref.eval()
    losses.append(crit(ref(RX[800:]), Ry[800:]).item())
out["refprog.val_losses_f64"] = torch.tensor(losses, dtype=torch.float64)

# ---- selection ops: comparisons (bool as int64 0/1), tril/triu, masked_fill, where, topk ----
_rng = torch.get_rng_state()  # restored below: torch_sequential.safetensors keeps its weights
a, b = out["ops.a"], out["ops.b"]
for name in ("lt", "le", "gt", "ge", "ne"):
    out[f"sel.{name}"] = getattr(torch, name)(a, b).long()
out["sel.tril1"] = torch.tril(a, 1)
out["sel.triu_m1"] = torch.triu(a, -1)
torch.manual_seed(3)
att = torch.randn(2, 2, 5, 5)
out["sel.att"] = att
# nanoGPT's manual attention: the causal mask as a buffer, masked_fill(bias == 0, -inf), softmax.
bias = torch.tril(torch.ones(5, 5)).view(1, 1, 5, 5)
out["sel.causal_softmax"] = F.softmax(att.masked_fill(bias[:, :, :5, :5] == 0, float("-inf")), dim=-1)
out["sel.where"] = torch.where(a > 0, a, b)
v, i = torch.topk(a, 3, dim=1)
out["sel.topk_values"], out["sel.topk_indices"] = v, i
v, i = torch.topk(a, 2, dim=0, largest=False)
out["sel.bottomk_values"], out["sel.bottomk_indices"] = v, i

# ---- nll_loss and the losses' reductions (ops.ce_target has an ignored -100) ----
t = out["ops.ce_target"]
lp = F.log_softmax(a, dim=1)
for r in ("mean", "sum", "none"):
    out[f"loss.nll_{r}"] = F.nll_loss(lp, t, reduction=r)
    out[f"loss.ce_{r}"] = F.cross_entropy(a, t, reduction=r)
    out[f"loss.mse_{r}"] = F.mse_loss(a, b, reduction=r)
x = a.clone().requires_grad_(True)
F.nll_loss(F.log_softmax(x, dim=1), t, reduction="sum").backward()
out["loss.nll_sum_grad"] = x.grad

# ---- nanoGPT's generate with top_k=1 (greedy, so no random stream) from tests/data/gpt's model
# after its five AdamW steps ----
import importlib.util
import safetensors.torch
_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "make_gpt_golden", os.path.join(_here, "..", "gpt", "make_gpt_golden.py"))
gg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gg)


@torch.no_grad()
def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
    # nanoGPT's GPT.generate (model.py at commit 3adf61e1, MIT License, Copyright (c) 2022
    # Andrej Karpathy), verbatim but for its comments.
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
        logits, _ = self(idx_cond)
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


gpt = gg.GPT(gg.GPTConfig(**gg.CONFIGS["bias"]))
gpt.load_state_dict(safetensors.torch.load_file(os.path.join(_here, "..", "gpt", "gpt_bias_final.safetensors")))
gpt.eval()
prompt = torch.tensor([[5, 19, 4, 8, 3], [2, 1, 2, 16, 10]])
out["gpt.prompt"] = prompt
out["gpt.greedy"] = generate(gpt, prompt, 14, temperature=0.8, top_k=1)  # 19 > block_size 16: cropped
logits, _ = gpt(prompt)
out["gpt.last_logits"] = logits
torch.set_rng_state(_rng)

out = {k: v.contiguous().clone() for k, v in out.items()}
save_file(out, os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.safetensors"),
          metadata={"torch": torch.__version__,
                    "cpu_capability": torch.backends.cpu.get_cpu_capability()})
# A state_dict written by safetensors.torch as a torch user would: loads into lockstep's Sequential.
seq = nn.Sequential(nn.Linear(10, 5), nn.ReLU(), nn.Linear(5, 2))
save_file(seq.state_dict(), os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_sequential.safetensors"))
print("wrote", len(out), "tensors with torch", torch.__version__)
