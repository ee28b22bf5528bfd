"""One optimizer step's forward and backward passes, with gradient accumulation.

With `grad_accum` N the rank's share of the global batch is cut into N equal micro-batches;
each loss is divided by N, so the accumulated gradients are those of the whole share's mean
loss (BatchNorm aside: it sees micro-batches). The first N-1 backward passes run under the
wrapped model's `no_sync()`, as with torch's DDP, so the gradients are synchronised once, in
the last micro-batch's backward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from torch import Tensor, nn

from cadence.errors import UserError

LossFn = Callable[[Tensor, Tensor], Tensor]


def check_accumulation(model: nn.Module, grad_accum: int, strategy: str, world_size: int) -> None:
    """Refuse, in one line, accumulation over a wrapped model that cannot skip a sync."""
    if grad_accum == 1 or world_size == 1:  # alone, there is nothing to skip
        return
    if not callable(getattr(model, "no_sync", None)):
        raise UserError(
            f"--grad-accum {grad_accum} skips the gradient sync of a step's first micro-batches "
            f"with model.no_sync(), which --strategy {strategy}'s wrapped model does not have: "
            "use --strategy ddp or --grad-accum 1"
        )


def forward_backward(
    model: nn.Module, x: Tensor, y: Tensor, loss_fn: LossFn, grad_accum: int = 1
) -> Tensor:
    """Forward and backward of one step's batch in `grad_accum` micro-batches; returns the
    batch's mean loss (detached when accumulating)."""
    if grad_accum == 1:
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss
    if len(x) % grad_accum:
        raise UserError(
            f"this rank's {len(x)} samples per step do not split into --grad-accum "
            f"{grad_accum} equal micro-batches"
        )
    no_sync = getattr(model, "no_sync", None)
    total: Tensor | None = None
    pieces = list(zip(x.chunk(grad_accum), y.chunk(grad_accum), strict=True))
    for i, (xi, yi) in enumerate(pieces):
        last = i == len(pieces) - 1
        quiet = no_sync() if no_sync is not None and not last else contextlib.nullcontext()
        with quiet:
            loss = loss_fn(model(xi), yi) / grad_accum
            loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    assert total is not None
    return total
