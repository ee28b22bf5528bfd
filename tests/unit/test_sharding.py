import pytest
import torch

from cadence.train.sharding import batch_stream, epoch_batches, rank_slice, steps_per_epoch


def test_ranks_split_each_global_batch_exactly():
    n, batch, world = 103, 12, 4
    per_rank = [list(epoch_batches(n, batch, r, world, seed=7, epoch=1)) for r in range(world)]
    single = list(epoch_batches(n, batch, 0, 1, seed=7, epoch=1))
    assert len(single) == steps_per_epoch(n, batch) == 8
    for step, full in enumerate(single):
        joined = torch.cat([per_rank[r][step] for r in range(world)])
        assert torch.equal(joined, full)


def test_epochs_shuffle_differently_but_reproducibly():
    a1 = torch.cat(list(epoch_batches(50, 10, 0, 1, seed=1, epoch=1)))
    a2 = torch.cat(list(epoch_batches(50, 10, 0, 1, seed=1, epoch=2)))
    again = torch.cat(list(epoch_batches(50, 10, 0, 1, seed=1, epoch=1)))
    assert torch.equal(a1, again)
    assert not torch.equal(a1, a2)


def test_rank_slices_cover_everything_once():
    for n in (0, 1, 7, 10):
        for world in (1, 2, 3, 4):
            covered: list[int] = []
            for r in range(world):
                s = rank_slice(n, r, world)
                covered.extend(range(n)[s])
            assert covered == list(range(n))


def test_batch_stream_goes_on_into_the_next_epochs() -> None:
    # 10 samples, global batch 4: two batches per epoch, the last two samples dropped.
    stream = batch_stream(10, 4, rank=1, world_size=2, seed=3)
    got = [next(stream) for _ in range(5)]
    expected = [
        *epoch_batches(10, 4, 1, 2, 3, 1),
        *epoch_batches(10, 4, 1, 2, 3, 2),
        *epoch_batches(10, 4, 1, 2, 3, 3),
    ][:5]
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert not torch.equal(got[0], got[2])  # a new permutation each epoch


def test_batch_stream_rejects_a_batch_larger_than_the_data() -> None:
    with pytest.raises(ValueError, match="exceeds the 3 samples"):
        next(batch_stream(3, 4, rank=0, world_size=2))
