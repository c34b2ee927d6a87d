"""lockstep.save / load: safetensors both ways, nested checkpoints, refused pickles."""
import os

import pytest

import lockstep as torch
import lockstep.nn as nn


def test_state_dict_round_trip_and_safetensors_reads_it(tmp_path):
    net = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    path = tmp_path / "m.safetensors"
    torch.save(net.state_dict(), path)
    back = torch.load(path)
    assert list(back) == list(net.state_dict())
    assert back["0.weight"].tolist() == net[0].weight.tolist()
    st = pytest.importorskip("safetensors.numpy")
    arrays = st.load_file(str(path))
    assert arrays["2.bias"].tolist() == net[2].bias.tolist()


def test_nested_checkpoint_round_trips(tmp_path):
    net = nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters())
    net(torch.ones(1, 3)).sum().backward()
    opt.step()
    ckpt = {"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
            "note": "x", "hist": [1.5, None], "pair": (1, 2)}
    path = tmp_path / "ckpt.safetensors"
    torch.save(ckpt, path)
    back = torch.load(path)
    assert back["epoch"] == 3 and back["note"] == "x" and back["hist"] == [1.5, None]
    assert back["pair"] == (1, 2)
    assert back["model"]["weight"].tolist() == net.weight.tolist()
    opt2 = torch.optim.Adam(nn.Linear(3, 2).parameters())
    opt2.load_state_dict(back["optimizer"])


def test_torch_pickle_is_refused_naming_safetensors(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(torch.DataError, match="safetensors.torch.save_file"):
        torch.load(path)


def test_bad_files_and_values(tmp_path):
    with pytest.raises(OSError):
        torch.load(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\0\0\0\0\0\0\0{}garbage")
    with pytest.raises(torch.DataError):
        torch.load(bad)
    with pytest.raises(TypeError):
        torch.save({"f": object()}, tmp_path / "x.safetensors")
    with pytest.raises(OSError):
        torch.save({"a": torch.zeros(1)}, tmp_path / "no" / "dir" / "x.safetensors")
    assert not os.path.exists(tmp_path / "x.safetensors")
