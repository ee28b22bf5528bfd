"""`torch.amp.GradScaler` with fp16 autocast under every strategy, against torch.

GradScaler("cpu") with `torch.autocast("cpu", dtype=torch.float16)` runs the whole scaler path
on CPU: scaled backward, unscale_ (explicit, before a clip, or inside step), the inf/NaN check,
skipped steps and the scale's back-off. One rank's batch overflows at one step: under DDP every
rank's reduced gradient holds the inf, so every rank skips that step; cadence-dp and ZeRO must
skip it on every rank too and end with DDP's parameters, scale history and optimizer step count.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cadence.errors import UserError
from cadence.testing import run_ranks

BATCH, STEPS, INF_STEP = 8, 5, 2


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)
    )


def _data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 8, generator=g), torch.randint(0, 3, (BATCH,), generator=g)


def _adamw(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2, eps=1e-6)


def _step_count(opt: torch.optim.Optimizer) -> int | None:
    """Adam's step count (None on a ZeRO rank whose pieces hold no parameter)."""
    return max((int(s["step"]) for s in opt.state.values() if "step" in s), default=None)


def _train(rank: int, world: int, strategy: str, explicit_unscale: bool) -> dict[str, Any]:
    import cadence

    model = _model()
    if strategy == "ddp":
        wrapped: nn.Module = nn.parallel.DistributedDataParallel(model)
        opt: Any = _adamw(model.parameters())
    elif strategy == "dp":
        wrapped, opt = cadence.data_parallel(
            model, _adamw(model.parameters()), cadence.DPConfig(threshold_bytes=64)
        )
    else:
        wrapped, opt = cadence.zero(model, stage=int(strategy[-1]), optimizer=_adamw)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    per = BATCH // world
    scales = []
    for step in range(STEPS):
        x, y = _data(step)
        x, y = x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]
        if step == INF_STEP and rank == world - 1:
            x = x * float("inf")  # this rank alone overflows
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(wrapped(x), y)
        scaler.scale(loss).backward()
        if explicit_unscale:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(wrapped.parameters(), 0.5)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    if hasattr(opt, "flush"):
        opt.flush()
    inner = opt.engine.inner if strategy.startswith("zero") else opt
    return {
        "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "scales": scales,
        "steps": _step_count(inner) if strategy != "dp" else None,
    }


def _check(got: list[dict[str, Any]], ref: list[dict[str, Any]]) -> None:
    for mine in got:
        assert mine["scales"] == ref[0]["scales"]
        if mine["steps"] is not None:
            assert mine["steps"] == ref[0]["steps"]
        for name, value in ref[0]["params"].items():
            torch.testing.assert_close(mine["params"][name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("explicit_unscale", [True, False])
@pytest.mark.parametrize("strategy", ["dp", "zero1", "zero2", "zero3"])
def test_grad_scaler_equals_ddp(strategy, explicit_unscale, world):
    ref = run_ranks(_train, world, "ddp", explicit_unscale, timeout=120)
    assert ref[0]["steps"] < STEPS  # the overflow step (at least) was skipped
    assert len(set(ref[0]["scales"])) > 1  # and the scale backed off
    got = run_ranks(_train, world, strategy, explicit_unscale, timeout=120)
    _check(got, ref)
    assert strategy == "dp" or any(mine["steps"] is not None for mine in got)


def _onebit(rank: int, world: int) -> str:
    import cadence

    model, opt = cadence.zero(_model(), stage=2, compression="onebit", lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    x, y = _data(0)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    try:
        scaler.step(opt)
    except UserError as exc:
        return str(exc)
    return "accepted"


def test_onebit_refuses_grad_scaler():
    for message in run_ranks(_onebit, 2, timeout=120):
        assert "GradScaler is not supported with onebit" in message
        assert "\n" not in message
