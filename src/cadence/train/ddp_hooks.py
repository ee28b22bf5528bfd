"""torch's own DDP communication hooks (`--strategy ddp --ddp-comm-hook fp16|powersgd`): the
real peers cadence-dp's gradient compression is compared with. Each is wrapped to count the
bytes this rank hands to the collectives, as cadence-dp's engine counts its own
(`engine.wire_bytes_total`), so a benchmark reads both the same way."""

# No `from __future__ import annotations`: torch checks a hook's annotations as objects.
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel

from cadence.config import DPSection


class WireCounter:
    """Bytes handed to the collectives so far (every bucket of every step)."""

    def __init__(self) -> None:
        self.total = 0


def _fp16_hook(counter: WireCounter) -> Any:
    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        counter.total += bucket.buffer().numel() * 2  # cast to fp16, then all-reduced
        return default_hooks.fp16_compress_hook(state, bucket)

    return hook


def _powersgd_hook(counter: WireCounter) -> Any:
    def hook(
        state: powersgd.PowerSGDState, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        if state.iter < state.start_powerSGD_iter:  # the bucket all-reduced as it is
            buffer = bucket.buffer()
            counter.total += buffer.numel() * buffer.element_size()
            return powersgd.powerSGD_hook(state, bucket)
        before = state.total_numel_after_compression  # P, Q and the uncompressed tensors
        future = powersgd.powerSGD_hook(state, bucket)
        counter.total += (state.total_numel_after_compression - before) * 4
        return future

    return hook


def register_hook(ddp: DistributedDataParallel, dp: DPSection) -> WireCounter:
    """Register `dp.ddp_comm_hook` on `ddp` (before its first backward); the counter is also
    kept as `ddp.cadence_wire` for the training loop's metrics."""
    counter = WireCounter()
    if dp.ddp_comm_hook == "fp16":
        ddp.register_comm_hook(None, _fp16_hook(counter))
    elif dp.ddp_comm_hook == "powersgd":
        state = powersgd.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=dp.powersgd_rank,
            start_powerSGD_iter=dp.powersgd_start_step,
        )
        ddp.register_comm_hook(state, _powersgd_hook(counter))
    else:
        raise ValueError(f"unknown ddp comm hook {dp.ddp_comm_hook!r}")
    ddp.cadence_wire = counter  # type: ignore[assignment]
    return counter
