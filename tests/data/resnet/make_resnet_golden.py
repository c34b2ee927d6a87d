#!/usr/bin/env python3
"""One SGD step of ResNet-20 made by PyTorch (format and encodings: tests/data/resnet/README.md).

The model is He et al. 2016's CIFAR ResNet-20 (section 4.2) with torchvision's module names
(torchvision/models/resnet.py's BasicBlock, conv3x3, conv1x1 and _make_layer; torchvision itself
is not needed) and ONE input channel (28x28 Fashion-MNIST-sized images): conv3x3(1, 16) + BN +
ReLU, three stages of three BasicBlocks with 16/32/64 channels (the first block of stages 2 and 3
with stride 2 and a projection shortcut, 1x1 conv + BN: option B), global average pooling and
Linear(64, 10). Every layer keeps PyTorch's DEFAULT initialisation: unlike torchvision's ResNet,
no kaiming_normal_(mode='fan_out') re-initialisation. This is lockstep::nn::resnet20(1, 10).

torch.manual_seed(0), the model is built, then each parameter is rounded to float16 (and kept in
float32) so the initial state takes 2 bytes a value in the file; the step runs from exactly those
values. torch.manual_seed(1): 6 images randn(6, 1, 28, 28) and labels randint(0, 10, (6,)). In
train mode: logits, mean cross-entropy, backward, one torch.optim.SGD step (lr 0.1, momentum 0.9,
weight_decay 5e-4). Then the final state_dict (parameters and buffers) and the eval-mode logits
of the same images. The final float tensors are stored to 24 bits (sign, exponent, 15 mantissa
bits, rounded to nearest: relative error <= 2**-16) so that the file stays under 2 MB.

Run from the repository root with PyTorch 2.x:
    python3 tests/data/resnet/make_resnet_golden.py [--exact-final FILE.safetensors]
(--exact-final also writes the final state_dict in full float32, not committed: for checking
how far Lockstep is from PyTorch's own values without the 24-bit storage rounding.)
"""
import argparse
import base64
import json
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock (expansion 1, groups 1, dilation 1)."""

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class CifarResNet(nn.Module):
    """He et al. 2016, section 4.2, with torchvision's names; PyTorch's default init."""

    def __init__(self, layers=(3, 3, 3), in_channels=1, num_classes=10):
        super().__init__()
        self.inplanes = 16
        self.conv1 = conv3x3(in_channels, 16)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(16, layers[0], 1)
        self.layer2 = self._make_layer(32, layers[1], 2)
        self.layer3 = self._make_layer(64, layers[2], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(64, num_classes)

    def _make_layer(self, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes, stride),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def b64(array):
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def encode(t, float_encoding):
    """{shape, dtype, encoding, data} of a float32 or int64 tensor (README.md)."""
    t = t.detach().contiguous()
    entry = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
    if t.dtype == torch.int64:
        entry.update(encoding="int", data=t.flatten().tolist())
        return entry
    assert t.dtype == torch.float32, t.dtype
    v = t.flatten().numpy().astype("<f4")
    if float_encoding == "f16":
        h = v.astype("<f2")
        assert np.array_equal(h.astype("<f4"), v), "value not exactly a float16"
        entry.update(encoding="f16", data=b64(h))
    elif float_encoding == "f32_top24":
        bits = v.view("<u4").astype(np.uint64)
        top = ((bits + 0x80) >> 8).astype("<u4")  # rounded to nearest (ties away from zero)
        entry.update(encoding="f32_top24",
                     data=b64(top.view(np.uint8).reshape(-1, 4)[:, :3]))
    else:
        entry.update(encoding="f32", data=b64(v))
    return entry


def top24(v):
    """What f32_top24 stores, decoded back to float32."""
    bits = v.astype("<f4").view("<u4").astype(np.uint64)
    return ((((bits + 0x80) >> 8) << 8).astype("<u4")).view("<f4")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exact-final", help="also write the exact final state (safetensors)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = CifarResNet()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    parameter_count = sum(p.numel() for p in model.parameters())

    torch.manual_seed(1)
    x = torch.randn(6, 1, 28, 28)
    y = torch.randint(0, 10, (6,))

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    opt.zero_grad(set_to_none=True)
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        eval_logits = model(x)

    final = model.state_dict()
    worst_rel = 0.0
    for v in final.values():
        if v.dtype == torch.float32:
            a = v.flatten().numpy()
            nz = a != 0
            worst_rel = max(worst_rel, float(np.max(np.abs(top24(a)[nz] - a[nz]) / np.abs(a[nz]),
                                                    initial=0.0)))
    doc = {
        "name": "resnet20_step",
        "model": "ResNet-20 (He et al. 2016, section 4.2), torchvision names, default init, "
                 "in_channels 1, num_classes 10",
        "parameter_count": parameter_count,
        "x": encode(x, "f32"),
        "y": y.tolist(),
        "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4},
        "loss": loss.item(),
        "logits": encode(logits, "f32"),
        "eval_logits": encode(eval_logits, "f32"),
        "final_state_max_rel_storage_error": worst_rel,
        "initial_state": {k: encode(v, "f16") for k, v in initial.items()},
        "final_state": {k: encode(v, "f32_top24") for k, v in final.items()},
        "produced_by": "tests/data/resnet/make_resnet_golden.py, torch " + torch.__version__,
    }
    path = os.path.join(HERE, "resnet20_step.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    if args.exact_final:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in final.items()}, args.exact_final)
    print("parameters", parameter_count, "loss", loss.item(), "final storage rel error",
          worst_rel, "bytes", os.path.getsize(path))


if __name__ == "__main__":
    main()
