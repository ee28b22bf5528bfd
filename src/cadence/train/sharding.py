"""Deterministic data sharding: every rank derives the same permutation from (seed, epoch) and
takes its own contiguous slice of each global batch, so W workers see exactly the samples one
process would see with the full batch (what parity tests rely on)."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def steps_per_epoch(num_samples: int, global_batch: int) -> int:
    return num_samples // global_batch


def epoch_batches(
    num_samples: int, global_batch: int, rank: int, world_size: int, seed: int, epoch: int
) -> Iterator[torch.Tensor]:
    """Yield this rank's sample indices for each full global batch of the epoch."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(num_samples, generator=generator)
    per_rank = global_batch // world_size
    for step in range(steps_per_epoch(num_samples, global_batch)):
        start = step * global_batch + rank * per_rank
        yield order[start : start + per_rank]


def batch_stream(
    num_samples: int, global_batch: int, rank: int, world_size: int, seed: int = 0
) -> Iterator[torch.Tensor]:
    """This rank's batches epoch after epoch (1, 2, ...) without end, for runs measured in
    steps rather than epochs: a step count beyond one epoch goes on into the next."""
    if steps_per_epoch(num_samples, global_batch) < 1:
        raise ValueError(f"a global batch of {global_batch} exceeds the {num_samples} samples")
    epoch = 1
    while True:
        yield from epoch_batches(num_samples, global_batch, rank, world_size, seed, epoch)
        epoch += 1


def rank_slice(num_samples: int, rank: int, world_size: int) -> slice:
    """Contiguous, near-equal share of an evaluation set for `rank`."""
    base, extra = divmod(num_samples, world_size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))
