"""The collectives benchmark's workers time every round on the same tensors."""

from __future__ import annotations

import torch

from cadence.bench._collectives_worker import Buffers


def test_each_size_and_role_is_made_once_and_reused() -> None:
    buffers = Buffers(world_size=4)
    full = buffers.get(1024, "full")
    assert buffers.get(1024, "full") is full  # the next round's call sees the same pages
    assert buffers.get(1024, "other") is not full  # all-to-all's two sides stay apart
    block = buffers.get(1024, "block")
    assert block.numel() == 256 and full.numel() == 1024
    assert buffers.get(4096, "full") is not full
    assert torch.count_nonzero(full) == 0  # zeros, so repeated reductions stay finite
