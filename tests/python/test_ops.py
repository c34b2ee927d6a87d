"""nn.functional against PyTorch's numbers (tests/data/python/generate.py)."""
import lockstep as torch
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
