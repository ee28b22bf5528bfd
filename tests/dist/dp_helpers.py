"""Training pieces shared by the cadence-dp parity tests: each rank's share of a seeded stream
of classification batches, the training loop, and a copy of the parameters to compare."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def rank_batches(
    rank: int, world_size: int, steps: int, global_batch: int, input_shape: Sequence[int], seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`steps` global batches of random inputs and 10-class labels from `seed`, each cut into
    `world_size` equal shares; this rank's share of each."""
    gen = torch.Generator().manual_seed(seed)
    per_rank = global_batch // world_size
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    for _ in range(steps):
        x = torch.randn(global_batch, *input_shape, generator=gen)
        y = torch.randint(0, 10, (global_batch,), generator=gen)
        yield x[mine], y[mine]


def train_classifier(model: nn.Module, optimizer: Any, batches: Iterator[Any]) -> None:
    """Cross-entropy steps over `batches`, then a cadence-dp optimizer's pending updates."""
    for x, y in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    if hasattr(optimizer, "flush"):
        optimizer.flush()


def parameter_copies(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every named parameter, detached and copied to host memory (a rank's result leaves its
    process pickled, and CUDA tensors would need CUDA to be read back)."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
