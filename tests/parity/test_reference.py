"""The matrix's own control: DDP with tiny buckets (another summation order and bucket layout)
against DDP with its defaults. Every cell must agree within the tolerance the strategies are
held to, or the tolerance is too tight for honest rounding differences."""

from __future__ import annotations

from functools import partial

import pytest

from tests.parity.loop import FOUR_RANK_CASES, HABITS, WIDE_HABITS, ddp
from tests.parity.matrix import Cell, cell_id, check_cell, matrix_results
from tests.parity.models import CASES

STRATEGIES = {"ddp_small_buckets": partial(ddp, bucket_cap_mb=0.001)}
CELLS: list[Cell] = [(m, h, "ddp_small_buckets") for m in CASES for h in HABITS]
CELLS_AT = {2: CELLS, 4: [c for c in CELLS if c[0] in FOUR_RANK_CASES and c[1] in WIDE_HABITS]}
"""At 4 the cases and the habits that change the gradients' reduction, which every matrix
crosses there."""


@pytest.mark.parametrize(
    ("cell", "world_size"),
    [(cell, world) for world, cells in CELLS_AT.items() for cell in cells],
    ids=lambda v: cell_id(v) if isinstance(v, tuple) else str(v),
)
def test_reference_agrees_with_itself(cell: Cell, world_size: int) -> None:
    check_cell(matrix_results(__name__, CELLS_AT[world_size], world_size), cell, refusals={})


