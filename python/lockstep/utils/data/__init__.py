"""lockstep.utils.data: torch.utils.data's Dataset, TensorDataset, samplers and DataLoader.

DataLoader iterates as torch's does: each iter() draws one int64 base seed from the loader's
generator (the default one when none is given) before its sampler runs, a RandomSampler
without a generator then draws its own seed and permutes with randperm, and batches are
collated by default_collate (a TensorDataset's batch is one index_select per tensor, or a view
when the batch's indices are consecutive). num_workers and pin_memory are accepted; loading runs
in the calling thread.
"""
from __future__ import annotations

import math

import numpy as _np

from ... import _C
from ..._C import Tensor

__all__ = ["Dataset", "TensorDataset", "Sampler", "SequentialSampler", "RandomSampler",
           "BatchSampler", "DistributedSampler", "DataLoader", "default_collate", "random_split",
           "Subset"]


def _draw_seed(generator=None):
    """One int64 seed from ``generator`` or the default generator, as torch draws it:
    ``torch.empty((), dtype=torch.int64).random_(generator=generator)``."""
    return _C._empty([], _C.dtype.int64, None, False).random_(generator=generator).item()


class Dataset:
    """Base class: __getitem__(index) -> sample, __len__()."""

    def __getitem__(self, index):
        raise NotImplementedError("Dataset subclasses define __getitem__")


class TensorDataset(Dataset):
    """Samples are rows of tensors that share dim 0 (torch.utils.data.TensorDataset).
    ValueError when their first dimensions differ."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].size(0)
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"TensorDataset: argument {i} is {type(t).__name__}, not a Tensor")
            if t.dim() == 0 or t.size(0) != n:
                raise ValueError(f"Size mismatch between tensors: tensor 0 has {n} rows, tensor {i} "
                                 f"has shape {tuple(t.shape)}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)

    def _batch(self, indices):
        first, count = indices[0], len(indices)
        if indices[-1] - first == count - 1 and all(b - a == 1 for a, b in zip(indices, indices[1:])):
            return [t.narrow(0, first, count) for t in self.tensors]
        idx = _C._from_array(_np.asarray(indices, dtype=_np.int64), "DataLoader")
        return [t.index_select(0, idx) for t in self.tensors]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, i):
        return self.dataset[self.indices[i]]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Non-overlapping random subsets of the given lengths (or fractions), torch's order."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        lengths = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(lengths)):
            lengths[i % len(lengths)] += 1
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _C.randperm(n, generator).tolist()  # torch: randperm(sum(lengths), generator)
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[start:start + length]))
        start += length
    return out


class Sampler:
    def __init__(self, data_source=None):
        pass


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A permutation per pass (torch.utils.data.RandomSampler, without replacement)."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        if replacement or num_samples is not None:
            raise ValueError("RandomSampler: replacement and num_samples are not supported")
        self.data_source, self.generator = data_source, generator

    def __iter__(self):
        # torch's order: without a generator a seed from the default one and randperm of a fresh
        # generator; with one, randperm of it, and a second (empty-sliced) randperm drawn at the
        # end as torch's loop does (include/lockstep/data/sampler.h, TorchRandomSampler).
        return iter(_C._RandomSampler(len(self.data_source), self.generator).indices())

    def __len__(self):
        return len(self.data_source)


class BatchSampler(Sampler):
    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size


class DistributedSampler(Sampler):
    """One rank's share of a dataset (torch.utils.data.distributed.DistributedSampler): the C++
    sampler's indices. num_replicas/rank default to the initialised process group's."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from ... import distributed as dist
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        self.dataset, self.epoch = dataset, 0
        self._impl = _C._DistributedSampler(len(dataset), num_replicas, rank, shuffle, seed, drop_last)
        self.num_replicas, self.rank, self.shuffle, self.seed = num_replicas, rank, shuffle, seed
        self.num_samples = self._impl.num_samples
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        return iter(self._impl.indices(self.epoch))

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch


def default_collate(batch):
    """torch's default_collate: tensors stacked, Python ints to int64, floats to float64, numpy
    arrays stacked, tuples/lists/dicts collated element by element."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _C.stack(list(batch), 0)
    if isinstance(elem, _np.ndarray):
        from ... import from_numpy
        return _C.stack([from_numpy(_np.ascontiguousarray(b)) for b in batch], 0)
    if isinstance(elem, bool):
        raise TypeError("default_collate: bool samples need a bool dtype, which Lockstep lacks")
    if isinstance(elem, int):
        from ... import tensor, int64
        return tensor(batch, dtype=int64)
    if isinstance(elem, float):
        from ... import tensor, float64
        return tensor(batch, dtype=float64)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, dict):
        return {k: default_collate([d[k] for d in batch]) for k in elem}
    if isinstance(elem, (tuple, list)):
        sizes = {len(e) for e in batch}
        if len(sizes) != 1:
            raise RuntimeError("each element in list of batch should be of equal size")
        out = [default_collate(list(s)) for s in zip(*batch)]
        return out if isinstance(elem, list) else type(elem)(out) if type(elem) is not tuple else tuple(out)
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                    f"lists; found {type(elem).__name__}")


class DataLoader:
    """Batches of a dataset in sampler order (torch.utils.data.DataLoader). ValueError for a
    non-positive batch_size, or shuffle together with a sampler."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device=""):
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size = None
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative")
        self.dataset, self.generator = dataset, generator
        self.batch_size, self.drop_last, self.num_workers = batch_size, drop_last, num_workers
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        self.sampler = sampler
        self.batch_sampler = batch_sampler or BatchSampler(sampler, batch_size, drop_last)
        self._fast = collate_fn is None and isinstance(dataset, TensorDataset)
        self.collate_fn = collate_fn or default_collate

    def __len__(self):
        return len(self.batch_sampler)

    def __iter__(self):
        # torch's _BaseDataLoaderIter draws its base seed before the sampler's first index.
        _draw_seed(self.generator)
        for indices in self.batch_sampler:
            if self._fast:
                yield self.dataset._batch(indices)
            else:
                yield self.collate_fn([self.dataset[i] for i in indices])
