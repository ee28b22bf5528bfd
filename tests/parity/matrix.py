"""Run many parity cells in one process-group launch and compare each with its reference.

A strategy module (a test file) defines `STRATEGIES: dict[str, Wrap]` and may define
`REFERENCE: dict[str, str]` (strategy -> the strategy in `STRATEGIES` or "ddp" it is compared
with; "ddp" by default), `PARTIAL: set[str]` (strategies whose results hold only some entries)
and `EXTRA_CASES: dict[str, ModelCase]` (model cases of its own besides `models.CASES`).
`run_matrix` trains every cell on this rank and returns, per cell, either the largest error
against the reference or what the strategy said when it refused.
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any

import torch

from cadence.errors import UserError
from cadence.testing import run_ranks
from tests.parity.loop import DEFAULT_TOLERANCE, HABIT_TOLERANCE, Wrap, ddp, train
from tests.parity.models import CASES

Cell = tuple[str, str, str]
"""(model case, habit, strategy)."""


def cell_id(cell: Cell) -> str:
    return "-".join(cell)


def compare(reference: dict[str, torch.Tensor], got: dict[str, torch.Tensor], habit: str,
            partial: bool,
            tolerance: tuple[float, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """The largest |got - ref| / (atol + rtol |ref|) over every entry (<= 1 passes) and the
    entry where it is; missing or extra entries are reported as such. `tolerance`: (atol,
    rtol) instead of the habit's."""
    atol, rtol = tolerance or HABIT_TOLERANCE.get(habit, DEFAULT_TOLERANCE)
    missing = sorted(set(reference) - set(got))
    extra = sorted(set(got) - set(reference))
    if (missing and not partial) or extra or not got:
        return {"keys": f"missing {missing[:5]} extra {extra[:5]}"}
    worst, where, diff = 0.0, "", 0.0
    for key, value in got.items():
        ref = reference[key]
        if value.shape != ref.shape:
            return {"keys": f"{key}: shape {tuple(value.shape)} != {tuple(ref.shape)}"}
        err = (value - ref).abs()
        ratio = (err / (atol + rtol * ref.abs())).max().item() if err.numel() else 0.0
        if not ratio <= worst:  # NaN counts as worst
            worst, where, diff = ratio, key, err.max().item()
    return {"ratio": worst, "where": where, "max_abs": diff}


def run_matrix(rank: int, world_size: int, strategy_module: str, cells: list[Cell]) -> dict:
    """Every cell on this rank (called through `run_ranks`)."""
    module = importlib.import_module(strategy_module)
    strategies: dict[str, Wrap] = {"ddp": ddp, **module.STRATEGIES}
    references: dict[str, str] = getattr(module, "REFERENCE", {})
    cache: dict[tuple[str, str, str], dict[str, torch.Tensor]] = {}
    results: dict[str, Any] = {}
    for model_name, habit, strategy in cells:
        case = {**CASES, **getattr(module, "EXTRA_CASES", {})}[model_name]
        ref_name = references.get(strategy, "ddp")
        key = (model_name, habit, ref_name)
        try:  # the strategy first: a refused cell needs no reference
            got = train(case, habit, strategies[strategy], rank, world_size)
        except UserError as exc:
            results[cell_id((model_name, habit, strategy))] = {"refused": str(exc)}
            continue
        except Exception:
            results[cell_id((model_name, habit, strategy))] = {"error": traceback.format_exc()}
            continue
        if key not in cache:
            cache[key] = train(case, habit, strategies[ref_name], rank, world_size)
        partial: set[str] = getattr(module, "PARTIAL", set())
        results[cell_id((model_name, habit, strategy))] = compare(
            cache[key], got, habit, strategy in partial
        )
        # A strategy module's TOLERANCE: {(strategy, world size): (atol, rtol)} for a strategy
        # that rounds differently from its reference; it replaces the habit's tolerance.
        tolerance = getattr(module, "TOLERANCE", {}).get((strategy, world_size))
        if tolerance is not None:
            results[cell_id((model_name, habit, strategy))] = compare(
                cache[key], got, habit, strategy in partial, tolerance
            )
    return results


_launched: dict[tuple[str, int, tuple[Cell, ...]], list[dict]] = {}


def matrix_results(strategy_module: str, cells: list[Cell], world_size: int,
                   timeout: float = 600.0) -> list[dict]:  # fmt: skip
    """`run_matrix` on `world_size` gloo ranks: one dict of cell results per rank. Launched once
    per module, world size and cells; later calls (one per parametrised test) read the result."""
    key = (strategy_module, world_size, tuple(cells))
    if key not in _launched:
        _launched[key] = run_ranks(run_matrix, world_size, strategy_module, cells, timeout=timeout)
    return _launched[key]


def check_cell(per_rank: list[dict], cell: Cell, refusals: dict[str, str]) -> None:
    """Assert one cell: equal to its reference on every rank, or refused with the expected
    words where `refusals` (cell id -> a phrase of the message) says it must be."""
    cid = cell_id(cell)
    for rank, results in enumerate(per_rank):
        result = results[cid]
        if cid in refusals:
            assert "refused" in result, f"rank {rank}: expected a refusal, got {result}"
            assert refusals[cid] in result["refused"], result["refused"]
            continue
        assert "error" not in result, f"rank {rank} raised:\n{result['error']}"
        assert "refused" not in result, f"rank {rank} refused: {result['refused']}"
        assert "keys" not in result, f"rank {rank}: {result['keys']}"
        assert result["ratio"] <= 1.0, (
            f"rank {rank}: differs from the reference at {result['where']} by "
            f"{result['max_abs']:.3g} ({result['ratio']:.3g}x the tolerance)"
        )


def check_cells(per_rank: list[dict], cells: list[Cell], refusals: dict[str, str]) -> None:
    """`check_cell` for every cell, reporting every failing cell at once."""
    failures = []
    for cell in cells:
        try:
            check_cell(per_rank, cell, refusals)
        except AssertionError as exc:
            failures.append(f"{cell_id(cell)}: {exc}")
    assert not failures, "\n".join(failures)
