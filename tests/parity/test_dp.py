"""cadence-dp in the parity matrix: every model case x ordinary-loop habit, under the default
plan, a forced many-chunk plan and backward reordering at K=2, and exhaustive autotuning on the
small net, each compared with DDP (one process-group launch per world size). At world size 2
every cell runs; at 4, on `FOUR_RANK_CASES`, the default plan crosses every habit and the
other plans the habits that touch the gradients' reduction (`WIDE_HABITS`), to keep the file's
time in check: four ranks share the CI machine's two cores."""

from __future__ import annotations

from typing import Any

import pytest
from torch import nn

import cadence
from tests.parity.loop import FOUR_RANK_CASES, HABITS, WIDE_HABITS, MakeOptimizer, Wrapped
from tests.parity.matrix import Cell, cell_id, check_cell, matrix_results
from tests.parity.models import CASES


def _wrap(config: cadence.DPConfig) -> Any:
    def wrap(model: nn.Module, make_optimizer: MakeOptimizer) -> Wrapped:
        optimizer = make_optimizer(model.parameters())
        hooked, scheduled = cadence.data_parallel(model, optimizer, config)
        engine = hooked._cadence_dp_engine
        return Wrapped(
            model=hooked,
            optimizer=scheduled,
            module=hooked,
            no_sync=hooked.no_sync,
            clip=scheduled.clip_grad_norm_,
            finish=scheduled.flush,
            close=engine.close,
        )

    return wrap


STRATEGIES = {
    "dp": _wrap(cadence.DPConfig()),
    "dp_chunks": _wrap(cadence.DPConfig(threshold_bytes=4096)),  # dozens of chunks per model
    "dp_reorder": _wrap(cadence.DPConfig(threshold_bytes=2048, reorder_k=2)),
    "dp_autotune": _wrap(
        cadence.DPConfig(
            autotune="exhaustive",
            threshold_bytes=1024,
            autotune_trials=2,
            autotune_iterations=1,
            autotune_confirm_rounds=0,
            autotune_hidden_fraction=0.0,
            autotune_cheap_wire_fraction=0.0,
        )
    ),
}
AUTOTUNE_CASES = ("smallnet",)  # tuning's trials make a cell slow: the net with every awkward part
CELLS: list[Cell] = [
    (m, h, s)
    for s in STRATEGIES
    for m in CASES
    for h in HABITS
    if s != "dp_autotune" or m in AUTOTUNE_CASES
]
CELLS_AT = {
    2: CELLS,
    4: [
        (m, h, s)
        for m, h, s in CELLS
        if m in FOUR_RANK_CASES and (s == "dp" or h in WIDE_HABITS)
    ],
}
REFUSALS: dict[str, str] = {}


@pytest.mark.parametrize(
    ("cell", "world_size"),
    [(cell, world) for world, cells in CELLS_AT.items() for cell in cells],
    ids=lambda v: cell_id(v) if isinstance(v, tuple) else str(v),
)
def test_cadence_dp_equals_ddp(cell: Cell, world_size: int) -> None:
    cells = CELLS_AT[world_size]
    check_cell(matrix_results(__name__, cells, world_size), cell, refusals=REFUSALS)
