"""utils.data: TensorDataset, DataLoader batching and shuffling, collate, samplers."""
import pytest

import lockstep as torch
from lockstep.utils.data import DataLoader, TensorDataset, DistributedSampler, Dataset, random_split


def test_batches_in_order_as_views():
    X = torch.arange(20, dtype=torch.float32).reshape(10, 2)
    y = torch.arange(10)
    batches = list(DataLoader(TensorDataset(X, y), batch_size=4))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[1][0].data_ptr() == X.data_ptr() + 4 * 2 * 4  # a view of X's rows
    assert len(DataLoader(TensorDataset(X, y), batch_size=4, drop_last=True)) == 2


def test_shuffle_is_a_permutation_repeatable_with_a_generator():
    ds = TensorDataset(torch.arange(10))
    g = torch.Generator().manual_seed(1)
    first = [i for b in DataLoader(ds, batch_size=3, shuffle=True, generator=g) for i in b[0].tolist()]
    assert sorted(first) == list(range(10)) and first != list(range(10))
    g.manual_seed(1)
    again = [i for b in DataLoader(ds, batch_size=3, shuffle=True, generator=g) for i in b[0].tolist()]
    assert again == first


def test_generic_dataset_and_collate():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": torch.tensor([float(i)]), "y": i * i, "w": 0.5}

    b = next(iter(DataLoader(Squares(), batch_size=5)))
    assert b["x"].shape == (5, 1) and b["y"].tolist() == [0, 1, 4, 9, 16]
    assert b["w"].dtype == torch.float64
    custom = next(iter(DataLoader(Squares(), batch_size=2, collate_fn=lambda s: len(s))))
    assert custom == 2


def test_distributed_sampler_shards_cover_the_dataset():
    ds = TensorDataset(torch.arange(10))
    shards = [list(DistributedSampler(ds, num_replicas=3, rank=r, shuffle=False)) for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]


def test_bad_arguments():
    ds = TensorDataset(torch.arange(4))
    with pytest.raises(ValueError):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError):
        DataLoader(ds, sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(torch.zeros(3), torch.zeros(4))
    assert len(random_split(ds, [3, 1])[0]) == 3


def test_distributed_sampler_without_a_process_group_says_so():
    with pytest.raises(ValueError, match="init_process_group"):
        DistributedSampler(TensorDataset(torch.arange(4)))
    with pytest.raises(RuntimeError, match="mpirun"):
        torch.distributed.init_process_group("gloo")
    assert not torch.distributed.is_initialized()
