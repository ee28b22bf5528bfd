"""The parity matrix for ZeRO: stages 1-3, with fp32 and fp16 gradient traffic, against DDP on
every model case and ordinary-loop habit, at world sizes 2 and 4.

fp16 traffic is not exact, so its reference is DDP with torch's own `fp16_compress_hook` (the
same rounding of the same gradients); its cells cross fewer habits (`FP16_HABITS`) to keep the
file's time in check: the habits that touch gradients (accumulation, clipping), the optimizer
(groups, schedules) and checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

import cadence
from tests.parity.loop import FOUR_RANK_CASES, HABITS, WIDE_HABITS, Wrapped, ddp
from tests.parity.matrix import Cell, cell_id, check_cell, matrix_results
from tests.parity.models import CASES


def ddp_fp16(model: nn.Module, make_optimizer: Any) -> Wrapped:
    """DDP whose gradient all-reduce travels in fp16 (torch's fp16_compress_hook)."""
    wrapped = ddp(model, make_optimizer)
    cast(nn.parallel.DistributedDataParallel, wrapped.model).register_comm_hook(
        None, fp16_compress_hook
    )
    return wrapped


def _zero(stage: int, compression: str) -> Callable[[nn.Module, Any], Wrapped]:
    def wrap(model: nn.Module, make_optimizer: Any) -> Wrapped:
        model, optimizer = cadence.zero(
            model, stage=stage, optimizer=make_optimizer, compression=compression
        )
        return Wrapped(
            model=model,
            optimizer=optimizer,
            module=model,
            no_sync=optimizer.no_sync,
            clip=optimizer.clip_grad_norm_,
            finish=optimizer.wait_gathers,
            close=optimizer.engine.close,
        )

    return wrap


STRATEGIES = {
    "ddp_fp16": ddp_fp16,
    **{f"zero{s}": _zero(s, "none") for s in (1, 2, 3)},
    **{f"zero{s}_fp16": _zero(s, "fp16") for s in (1, 2, 3)},
}
REFERENCE = {f"zero{s}_fp16": "ddp_fp16" for s in (1, 2, 3)}
TOLERANCE = {(f"zero{s}_fp16", 4): (1e-3, 1e-2) for s in (1, 2, 3)}
"""At 2 ranks an fp16 sum of two terms is the same in any order, so fp16 cells meet the
default tolerance. At 4 ranks cadence's ring and gloo's all-reduce under DDP's hook add the
four fp16 gradients in different orders (other chunk boundaries), so an element may differ by
an fp16 rounding (2^-11 of it); Adam turns that into up to lr per step on a near-zero entry.
Seen: up to 4e-4 (AdamW, lr 1e-3, 4 steps); a wrong reduction misses by far more."""
FP16_HABITS = ("plain", "accum", "clip", "adamw_groups", "state_dict")
CELLS: list[Cell] = [
    (m, h, s)
    for m in CASES
    for s in STRATEGIES
    if s != "ddp_fp16"
    for h in (FP16_HABITS if s.endswith("fp16") else HABITS)
]
CELLS_AT = {
    2: CELLS,
    4: [
        (m, h, s)
        for m, h, s in CELLS
        if m in FOUR_RANK_CASES
        and (s == "zero3" or (s in ("zero1", "zero2") and h in WIDE_HABITS) or h == "plain")
    ],
}
"""At world size 2 every cell runs. At 4 (four ranks sharing the CI machine's two cores), on
`FOUR_RANK_CASES`, stage 3, which holds every path (sharded parameters, gathers,
reduce-scatter), crosses every habit; stages 1 and 2 the habits that touch the gradients'
reduction, and fp16 the plain loop."""
REFUSALS: dict[str, str] = {}
"""Cells that must be refused, with a phrase of the message: none."""


@pytest.mark.parametrize(
    ("cell", "world_size"),
    [(cell, world) for world, cells in CELLS_AT.items() for cell in cells],
    ids=lambda v: cell_id(v) if isinstance(v, tuple) else str(v),
)
def test_zero_equals_ddp(cell: Cell, world_size: int) -> None:
    cells = CELLS_AT[world_size]
    check_cell(matrix_results(__name__, cells, world_size, timeout=900), cell, REFUSALS)
