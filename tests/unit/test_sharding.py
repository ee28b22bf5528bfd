import torch

from cadence.train.sharding import epoch_batches, rank_slice, steps_per_epoch


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
            covered = []
            for r in range(world):
                s = rank_slice(n, r, world)
                covered.extend(range(n)[s])
            assert covered == list(range(n))
