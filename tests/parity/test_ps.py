"""Parameter-server parity: `cadence.parameter_server` in bsp mode under every habit of the
ordinary loop equals torch's DDP on the same ranks, or refuses the habit with one clear line.

The reference is DDP over the same W ranks, because every rank is a worker: the servers are
child processes of the workers (server s runs beside worker s % W) and take no rank. A bsp
step averages the W workers' gradients of their shares of the global batch, which is what DDP
computes; the servers apply the user's optimizer elementwise (numpy), so results agree within
float tolerance. Two servers, so parameters are split over processes. asp, ssp and backup
workers are not exact by design (stale or missing gradients) and are not in this matrix.

The state_dict habit saves the model and the optimizer (whose state `state_dict()` fetches
from the servers) mid-run and loads both into a fresh wrap with fresh servers. Refused: the
strategy's own clip and torch's clip (the averaged gradient exists only on the servers, in
slices). At world size 4 the cells of `FOUR_RANK_HABITS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from cadence.errors import UserError
from cadence.ps import PSConfig, parameter_server
from cadence.testing import run_ranks
from tests.parity.loop import HABITS, WIDE_HABITS, MakeOptimizer, Wrapped
from tests.parity.matrix import Cell, cell_id, check_cells, matrix_results


def ps_bsp(model: nn.Module, make_optimizer: MakeOptimizer) -> Wrapped:
    optimizer = make_optimizer(model.parameters())
    model, ps_optimizer = parameter_server(model, optimizer, PSConfig(servers=2))
    return Wrapped(
        model=model, optimizer=ps_optimizer, module=model, no_sync=ps_optimizer.no_sync,
        clip=ps_optimizer.clip_grad_norm_, finish=ps_optimizer.flush, close=ps_optimizer.close,
    )  # fmt: skip


STRATEGIES = {"ps_bsp": ps_bsp}
REFUSED = {
    "clip": "only the parameter servers hold",
    "torch_clip": "gradients changed after backward",
}
EVERY_HABIT = ("smallnet", "encoder", "gpt2")
SOME_HABITS = {"bert": ("plain", "bf16"), "resnet": ("plain", "eval", "state_dict"),
               "gpt_mini_tied": ("plain", "adamw_groups", "state_dict")}  # fmt: skip


def _cells() -> tuple[list[Cell], dict[str, str]]:
    cells: list[Cell] = [(m, h, "ps_bsp") for m in EVERY_HABIT for h in HABITS]
    cells += [(m, h, "ps_bsp") for m, habits in SOME_HABITS.items() for h in habits]
    refusals = {cell_id(c): REFUSED[c[1]] for c in cells if c[1] in REFUSED}
    return cells, refusals




FOUR_RANK_HABITS = (*WIDE_HABITS, "state_dict")
"""At 4 ranks (sharing CI's two cores) the habits that change the gradients' reduction, and
the optimizer state fetched back from the servers; every habit runs at 2."""


@pytest.mark.parametrize("world_size", [2, 4])
def test_ps_bsp_matrix(world_size: int) -> None:
    cells, refusals = _cells()
    if world_size == 4:
        cells = [c for c in cells if c[1] in FOUR_RANK_HABITS]
    check_cells(matrix_results(__name__, cells, world_size), cells, refusals)


def _refusals(rank: int, world_size: int) -> dict[str, str]:
    """The misuses a worker must refuse with one line (each on fresh servers)."""
    out: dict[str, str] = {}

    def attempt(name: str, misuse: Callable[[nn.Module, Any], None],
                optimizer: Callable[..., torch.optim.Optimizer] = torch.optim.SGD,
                **options: Any) -> None:  # fmt: skip
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
        model = opt = None
        try:
            model, opt = parameter_server(net, optimizer(net.parameters(), lr=0.1, **options))
            misuse(model, opt)
        except UserError as exc:
            out[name] = str(exc)
        if opt is not None:
            opt.close()

    x = torch.randn(4, 4)

    def twice(model: nn.Module, opt: Any) -> None:
        model(x).sum().backward()
        model(x).sum().backward()

    def edit_before_step(model: nn.Module, opt: Any) -> None:
        model(x).sum().backward()
        opt.param_groups[0]["lr"] = 0.01
        opt.step()

    attempt("second_backward", twice)
    attempt("lr_edit", edit_before_step)
    attempt("amsgrad", lambda m, o: None, torch.optim.Adam, amsgrad=True)
    attempt("rmsprop", lambda m, o: None, torch.optim.RMSprop)
    return out


def test_misuse_is_refused_with_one_line() -> None:
    for out in run_ranks(_refusals, 2, timeout=120):
        assert "accumulate gradients under optimizer.no_sync()" in out["second_backward"]
        assert "param_groups changed between backward and step()" in out["lr_edit"]
        assert "amsgrad=True" in out["amsgrad"]
        assert "RMSprop" in out["rmsprop"]
