"""lockstep.save / lockstep.load: safetensors files that safetensors.torch reads, and back.

A flat dict of tensors (a state_dict) is written as is: its keys are the file's tensor names, so
``safetensors.torch.load_file(path)`` returns it and a torch model loads it with strict=True. A
nested object — ``{"model": sd, "optimizer": osd, "epoch": 3}`` — is flattened: each tensor is
stored under the dotted path of its keys ("model.fc1.weight"), and the object's structure, with
its non-tensor values (ints, floats, strings, bools, None, lists, dicts), goes as JSON into the
file's ``__metadata__`` under the key "lockstep.structure"; load() rebuilds it. Writes are
atomic (a temporary file renamed into place): an interrupted save leaves no half-written file.
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict

from . import _C
from ._C import Tensor

_STRUCTURE = "lockstep.structure"


def _flatten(obj, prefix, tensors):
    if isinstance(obj, Tensor):
        name = prefix or "tensor"
        if name in tensors:
            raise ValueError(f"save: two tensors would be stored under the name '{name}'")
        tensors[name] = obj.detach().cpu()
        return {"__tensor__": name}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"save: dictionary keys must be strings, got {k!r}")
            out[k] = _flatten(v, f"{prefix}.{k}" if prefix else k, tensors)
        return {"__dict__": out}
    if isinstance(obj, (list, tuple)):
        items = [_flatten(v, f"{prefix}.{i}" if prefix else str(i), tensors) for i, v in enumerate(obj)]
        return {"__list__": items, "tuple": isinstance(obj, tuple)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"__value__": obj}
    raise TypeError(f"save: cannot store a {type(obj).__name__} (at '{prefix}'): lockstep.save "
                    "writes safetensors, which hold tensors, numbers, strings, lists and dicts")


def _rebuild(node, tensors):
    if "__tensor__" in node:
        return tensors[node["__tensor__"]]
    if "__dict__" in node:
        return {k: _rebuild(v, tensors) for k, v in node["__dict__"].items()}
    if "__list__" in node:
        items = [_rebuild(v, tensors) for v in node["__list__"]]
        return tuple(items) if node.get("tuple") else items
    return node["__value__"]


def save(obj, f):
    """Writes ``obj`` (a tensor, a state_dict, or a nested dict/list of them with plain values)
    to the safetensors file ``f``. TypeError for a value safetensors cannot hold; IoError when
    the file cannot be written (nothing is left behind)."""
    path = os.fspath(f)
    tensors = {}
    flat_dict = isinstance(obj, dict) and all(isinstance(k, str) and isinstance(v, Tensor)
                                              for k, v in obj.items())
    metadata = {}
    if flat_dict:
        tensors = {k: v.detach().cpu() for k, v in obj.items()}
    else:
        metadata[_STRUCTURE] = json.dumps(_flatten(obj, "", tensors))
    _C._save_file(list(tensors.items()), path, metadata)


def load(f, map_location=None, weights_only=None, mmap=None):
    """Reads a file written by save() or by safetensors.torch.save_file: the object as saved, or
    an OrderedDict of name -> tensor for a plain safetensors file. A torch pickle (torch.save's
    .pt/.pth) is refused with a DataError that names safetensors.torch.save_file."""
    path = os.fspath(f)
    try:
        with open(path, "rb") as fh:
            head = fh.read(9)
    except OSError as e:
        raise _C.IoError(f"load: cannot open '{path}': {e.strerror}") from None
    # A safetensors file: an 8-byte header length, then the JSON header's '{'. torch.save writes a
    # zip archive ("PK\3\4") or, in its legacy format, a pickle (protocol 2: "\x80\x02").
    if head[8:9] != b"{" and (head.startswith(b"PK\x03\x04") or head.startswith(b"\x80\x02")):
        raise _C.DataError(f"load: '{path}' is a torch pickle (torch.save), not a safetensors file; "
                           "lockstep reads safetensors: in PyTorch, write it with "
                           "safetensors.torch.save_file(state_dict, path)")
    tensor_list, metadata = _C._load_file(path)
    tensors = OrderedDict(tensor_list)
    if map_location is not None:
        tensors = OrderedDict((k, v.to(_C.device(map_location) if isinstance(map_location, str)
                                       else map_location)) for k, v in tensors.items())
    if _STRUCTURE in metadata:
        return _rebuild(json.loads(metadata[_STRUCTURE]), tensors)
    return tensors
