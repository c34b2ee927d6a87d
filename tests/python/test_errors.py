"""Bad input raises the exception a PyTorch user expects, with the C++ message, and never
crashes the interpreter."""
import numpy as np
import pytest

import lockstep as torch
import lockstep.nn as nn
import lockstep.nn.functional as F


def test_shape_mismatch_is_a_runtime_error_naming_shapes():
    with pytest.raises(RuntimeError, match=r"\[2, 3\]"):
        torch.matmul(torch.zeros(2, 3), torch.zeros(4, 5))
    with pytest.raises(torch.ShapeError):
        nn.Linear(10, 5)(torch.zeros(3, 4))


def test_label_out_of_range_is_an_index_error():
    with pytest.raises(IndexError, match="row"):
        F.cross_entropy(torch.zeros(2, 3), torch.tensor([0, 3]))


def test_dtype_mismatch_is_a_runtime_error():
    with pytest.raises(torch.DTypeError):
        torch.zeros(2) + torch.zeros(2, dtype=torch.float64)
    with pytest.raises(RuntimeError):
        F.cross_entropy(torch.zeros(2, 3), torch.tensor([0.0, 1.0]))


def test_wrong_python_types_are_type_errors():
    for bad in (None, "x", [1, "a"], object()):
        with pytest.raises(TypeError):
            torch.zeros(2) + bad if bad is not None else torch.matmul(torch.zeros(2, 2), bad)
    with pytest.raises(TypeError):
        torch.zeros("a")
    with pytest.raises(TypeError):
        nn.Linear("a", 2)
    with pytest.raises(TypeError):
        torch.tensor([True, False])


def test_bad_sizes_and_values():
    with pytest.raises(ValueError):
        torch.zeros(-1)
    with pytest.raises((MemoryError, ValueError)):
        torch.zeros(1 << 40, 1 << 40)
    with pytest.raises(ValueError):
        torch.randint(5, 2, (3,))
    with pytest.raises(ValueError):
        F.dropout(torch.zeros(3), p=1.5)
    with pytest.raises(ValueError):
        torch.optim.SGD([nn.Parameter(torch.zeros(2))], lr=-1)
    with pytest.raises(ValueError):
        torch.optim.SGD([], lr=0.1)


def test_autograd_misuse():
    with pytest.raises(torch.AutogradError):
        torch.zeros(3, requires_grad=True).sum().backward() or torch.ones(3).backward()
    with pytest.raises(RuntimeError):
        (torch.ones(2, requires_grad=True) * 2).backward()
    with pytest.raises(RuntimeError):
        torch.zeros(3, dtype=torch.int64).requires_grad_()


def test_numpy_of_a_tensor_requiring_grad_is_refused():
    with pytest.raises(TypeError, match="detach"):
        torch.zeros(2, requires_grad=True).numpy()


def test_item_needs_one_element():
    with pytest.raises(ValueError):
        torch.zeros(2).item()
    with pytest.raises(ValueError):
        bool(torch.zeros(2))


def test_devices():
    with pytest.raises(torch.DeviceError):
        torch.device("tpu")
    assert torch.cuda.is_available() in (True, False)
    with pytest.raises(RuntimeError, match="compile"):
        torch.compile(nn.Linear(2, 2))


@pytest.mark.parametrize("arr", [
    np.zeros((3, 4), np.float32)[:, ::2],          # non-contiguous: copied
    np.zeros(5, np.float64)[::-1],                  # negative strides: copied
    np.frombuffer(b"\0" * 32, dtype=np.float32),    # read-only: copied
    np.zeros((0, 3), np.int64),                     # empty
    np.zeros((1,) * 8, np.float32),                 # 8 dimensions
])
def test_odd_numpy_arrays_convert_safely(arr):
    t = torch.from_numpy(arr)
    assert t.shape == arr.shape
    assert t.numpy().tolist() == arr.tolist()


@pytest.mark.parametrize("arr", [np.zeros(3, np.int32), np.zeros(3, np.bool_), np.zeros(3, np.complex64),
                                 np.zeros(3, np.float16), np.array(["a"])])
def test_unsupported_numpy_dtypes_are_type_errors(arr):
    with pytest.raises(TypeError):
        torch.from_numpy(arr)


def test_nine_dimensions_are_refused():
    with pytest.raises(ValueError):
        torch.from_numpy(np.zeros((1,) * 9, np.float32))


def test_fuzz_argument_conversion_never_crashes():
    rng = np.random.default_rng(0)
    values = [None, 0, -1, 1 << 62, 1.5, float("nan"), "cpu", [], [1, 2], (2,), {}, b"x",
              torch.zeros(2), torch.zeros(2, 2, dtype=torch.int64), torch.zeros(0),
              np.zeros(2, np.float32), nn.Linear(2, 2)]
    fns = [torch.zeros, torch.tensor, torch.randn, torch.from_numpy, torch.matmul, torch.cat,
           torch.add, F.relu, F.linear, F.conv2d, F.cross_entropy, F.softmax, torch.reshape,
           lambda *a: torch.zeros(3)[a[0]] if a else None, nn.Linear, nn.Conv2d, nn.BatchNorm2d,
           torch.arange, torch.randperm]
    for _ in range(600):
        fn = fns[rng.integers(len(fns))]
        args = [values[rng.integers(len(values))] for _ in range(rng.integers(0, 4))]
        try:
            fn(*args)
        except (TypeError, ValueError, IndexError, RuntimeError, MemoryError, OverflowError):
            pass


def test_ctrl_c_in_a_training_loop_raises_keyboard_interrupt():
    import os
    import signal
    import subprocess
    import sys
    import time
    code = (
        "import lockstep as torch, lockstep.nn as nn, sys\n"
        "m = nn.DataParallel(nn.Linear(64, 64))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.01)\n"
        "x = torch.randn(256, 64)\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    while True:\n"
        "        opt.zero_grad(); m(x).sum().backward(); opt.step()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True); sys.exit(3)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ))
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 3 and "interrupted" in out


def test_logits_and_targets_of_different_batch_sizes_raise_torchs_valueerror():
    # torch: ValueError "Expected input batch_size (2) to match target batch_size (3)."
    logits, target = torch.zeros(2, 3), torch.tensor([0, 1, 2])
    for call in (lambda: F.cross_entropy(logits, target), lambda: nn.CrossEntropyLoss()(logits, target),
                 lambda: F.nll_loss(logits, target), lambda: nn.NLLLoss()(logits, target)):
        with pytest.raises(ValueError, match=r"Expected input batch_size \(2\) to match target batch_size \(3\)"):
            call()
