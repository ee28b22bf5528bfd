"""The matrix's own control: DDP with tiny buckets (another summation order and bucket layout)
against DDP with its defaults. Every cell must agree within the tolerance the strategies are
held to, or the tolerance is too tight for honest rounding differences."""

from __future__ import annotations

from functools import partial

import pytest

from tests.parity.loop import HABITS, ddp
from tests.parity.matrix import Cell, cell_id, check_cell, matrix_results
from tests.parity.models import CASES

STRATEGIES = {"ddp_small_buckets": partial(ddp, bucket_cap_mb=0.001)}
CELLS: list[Cell] = [(m, h, "ddp_small_buckets") for m in CASES for h in HABITS]


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("cell", CELLS, ids=cell_id)
def test_reference_agrees_with_itself(cell: Cell, world_size: int) -> None:
    check_cell(matrix_results(__name__, CELLS, world_size), cell, refusals={})


