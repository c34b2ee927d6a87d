"""lockstep.models against PyTorch: nanoGPT's GPT (tests/data/gpt, made by make_gpt_golden.py with
nanoGPT's model.py) and ResNet-20 (tests/data/resnet, make_resnet_golden.py). The same files the
C++ tests read; no torch needed."""
import base64
import json
import math
import os

import numpy as np
import pytest

import lockstep as torch
import lockstep.nn as nn
import lockstep.nn.functional as F
from lockstep.models import GPT, GPTConfig, resnet20
from conftest import close

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
# The C++ tests' tolerances for the same files (tests/support/gpt_training.h, cnn_training.h).
GPT_TOL = dict(rtol=2e-4, atol=2e-5)
CNN_TOL = dict(rtol=1e-4, atol=1e-5)


def gpt_golden(name):
    with open(os.path.join(DATA, "gpt", f"gpt_{name}.json")) as f:
        meta = json.load(f)
    files = {k: torch.load(os.path.join(DATA, "gpt", f"gpt_{name}_{k}.safetensors"))
             for k in ("init", "grads", "final")}
    return meta, files


def gpt_from(meta, state):
    torch.manual_seed(12345)  # other weights than the golden's, so the load is what counts
    model = GPT(GPTConfig(**meta["config"]))
    model.load_state_dict(state, strict=True)
    return model.train()


def batch(meta, step):
    return torch.tensor(meta["idx"][step]), torch.tensor(meta["targets"][step])


def as_tensor(entry):
    return torch.tensor(np.array(entry["data"], dtype=np.float32).reshape(entry["shape"]))


@pytest.mark.parametrize("name", ["nobias", "bias"])
def test_gpt_is_nanogpts_forward_backward_and_training(name):
    meta, files = gpt_golden(name)
    model = gpt_from(meta, files["init"])
    assert list(model.state_dict()) == meta["state_dict_keys"]
    assert [n for n, _ in model.named_parameters()] == meta["parameter_names"]
    assert sum(p.numel() for p in model.parameters()) == meta["parameter_count"]
    assert model.get_num_params() == meta["num_params_non_embedding"]
    assert model.get_num_params(non_embedding=False) == meta["parameter_count"]

    idx, targets = batch(meta, 0)
    logits, loss = model(idx, targets)
    close(logits, as_tensor(meta["first_logits"]), **GPT_TOL)
    assert loss.item() == pytest.approx(meta["first_loss"], rel=GPT_TOL["rtol"])
    loss.backward()
    for n, p in model.named_parameters():
        close(p.grad, files["grads"][n], **GPT_TOL)

    # Inference: nanoGPT's last position only, [B, 1, V].
    last, none = model(idx)
    assert none is None and last.shape == (4, 1, meta["config"]["vocab_size"])
    close(last, as_tensor(meta["first_logits"])[:, -1:, :], **GPT_TOL)

    # train.py's loop: configure_optimizers, get_lr, clip_grad_norm_, AdamW.
    model = gpt_from(meta, files["init"])
    opt_meta = meta["optimizer"]
    opt = model.configure_optimizers(opt_meta["weight_decay"], opt_meta["learning_rate"],
                                     tuple(opt_meta["betas"]), "cpu")
    assert [len(g["params"]) for g in opt.param_groups] == [len(meta["decay"]), len(meta["nodecay"])]
    for step in meta["steps"]:
        for g in opt.param_groups:
            g["lr"] = step["lr"]
        idx, targets = batch(meta, step["it"])
        _, loss = model(idx, targets)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), opt_meta["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        assert loss.item() == pytest.approx(step["loss"], rel=GPT_TOL["rtol"])
        assert float(norm) == pytest.approx(step["grad_norm"], rel=GPT_TOL["rtol"])
    final = model.state_dict()
    for k, v in files["final"].items():
        close(final[k], v, **GPT_TOL)


def test_gpt_initialisation_is_nanogpts_after_manual_seed():
    meta, files = gpt_golden("nobias")
    torch.manual_seed(0)
    model = GPT(GPTConfig(**meta["config"]))
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.detach().numpy(), files["init"][k].numpy(), err_msg=k)


def test_a_checkpoint_with_one_of_the_tied_keys_loads():
    # safetensors.torch.save_model keeps one of transformer.wte.weight / lm_head.weight.
    meta, files = gpt_golden("nobias")
    sd = torch.load(os.path.join(DATA, "gpt", "gpt_nobias_init_save_model.safetensors"))
    assert len(sd) == len(files["init"]) - 1
    model = gpt_from(meta, sd)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.detach().numpy(), files["init"][k].numpy(), err_msg=k)
    assert model.transformer.wte.weight.data_ptr() == model.lm_head.weight.data_ptr()


def test_gpt_under_data_parallel_gives_every_positions_logits_and_the_gradients():
    meta, files = gpt_golden("bias")
    model = gpt_from(meta, files["init"])
    dp = nn.DataParallel(model, device_ids=["cpu:0", "cpu:1"])
    idx, targets = batch(meta, 0)
    logits = dp(idx)
    close(logits, as_tensor(meta["first_logits"]), **GPT_TOL)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
    assert loss.item() == pytest.approx(meta["first_loss"], rel=GPT_TOL["rtol"])
    loss.backward()
    for n, p in model.named_parameters():
        close(p.grad, files["grads"][n], **GPT_TOL)
    assert list(dp.state_dict())[0] == "module.transformer.wte.weight"


def test_gpt_bad_input_raises_torchs_exceptions():
    small = GPTConfig(block_size=8, vocab_size=10, n_layer=1, n_head=2, n_embd=8)
    model = GPT(small)
    with pytest.raises(ValueError, match="n_head"):
        GPT(GPTConfig(block_size=8, vocab_size=10, n_layer=1, n_head=3, n_embd=8))
    with pytest.raises(TypeError, match="GPTConfig"):
        GPT({"block_size": 8})
    with pytest.raises(torch.ShapeError, match="Cannot forward sequence of length 9, block size is only 8"):
        model(torch.zeros(1, 9, dtype=torch.int64))
    with pytest.raises(torch.ShapeError):
        model(torch.zeros(9, dtype=torch.int64))
    with pytest.raises(IndexError):
        model(torch.tensor([[1, 10]]))
    with pytest.raises(torch.DTypeError):
        model(torch.zeros(1, 4))
    with pytest.raises(torch.ShapeError, match="targets"):
        model(torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.int64))


# ---- ResNet-20 ------------------------------------------------------------------------------


def decode(entry):
    shape = entry["shape"]
    if entry["encoding"] == "int":
        return torch.tensor(np.array(entry["data"], dtype=np.int64).reshape(shape))
    raw = np.frombuffer(base64.b64decode(entry["data"]), dtype=np.uint8)
    if entry["encoding"] == "f16":
        v = raw.view("<f2").astype(np.float32)
    elif entry["encoding"] == "f32_top24":
        b = raw.reshape(-1, 3).astype(np.uint32)
        v = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8).astype("<u4").view("<f4")
    else:
        v = raw.view("<f4")
    return torch.tensor(v.reshape(shape).copy())


@pytest.fixture(scope="module")
def resnet_golden():
    with open(os.path.join(DATA, "resnet", "resnet20_step.json")) as f:
        return json.load(f)


def resnet_from(g):
    model = resnet20(num_classes=10)
    model.load_state_dict({k: decode(v) for k, v in g["initial_state"].items()}, strict=True)
    return model


@pytest.mark.parametrize("devices", [None, ["cpu:0", "cpu:1"]])
def test_resnet20_is_the_pytorch_models_sgd_step(resnet_golden, devices):
    g = resnet_golden
    model = resnet_from(g)
    assert sum(p.numel() for p in model.parameters()) == g["parameter_count"] == 272186
    assert list(model.state_dict()) == list(g["final_state"])
    # Under DataParallel on CPU devices BatchNorm synchronises: the unsplit batch's numbers.
    run = model if devices is None else nn.DataParallel(model, device_ids=devices)
    o = g["optimizer"]
    opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"],
                          weight_decay=o["weight_decay"])
    x, y = decode(g["x"]), torch.tensor(g["y"])
    model.train()
    logits = run(x)
    loss = F.cross_entropy(logits, y)
    close(logits, decode(g["logits"]), **CNN_TOL)
    assert loss.item() == pytest.approx(g["loss"], rel=1e-5)
    loss.backward()
    opt.step()
    final = model.state_dict()
    for k, v in g["final_state"].items():
        close(final[k], decode(v), **CNN_TOL)
    run.eval()  # the wrapper's mode reaches its replicas, as torch's DataParallel's
    close(run(x), decode(g["eval_logits"]), **CNN_TOL)


def test_resnet20_bad_input_names_the_layer():
    model = resnet20(num_classes=10)
    with pytest.raises(torch.ShapeError, match="Conv2d"):
        model(torch.zeros(2, 3, 28, 28))
    with pytest.raises(ValueError):
        resnet20(num_classes=0)
    assert resnet20(num_classes=4, in_channels=3)(torch.zeros(2, 3, 8, 8)).shape == (2, 4)
    assert math.isclose(float(sum(p.numel() for p in resnet20(in_channels=3).parameters())), 272474)
