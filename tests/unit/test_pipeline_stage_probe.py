"""Stage timing at plan time (`pipeline.stage_probe`) and the costs the planner builds on it."""

from __future__ import annotations

import pytest
import torch

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.models import get_model_spec, loss_fn
from cadence.models.blocks import BlockModel
from cadence.pipeline.planner import plan_pipeline
from cadence.pipeline.stage_probe import probe_stage_times, time_stage
from cadence.profile.record import BlockProfile, Profile
from cadence.sim.pipeline_adapter import Affine, Piecewise, measured_stage_costs

FAST = AlphaBeta(alpha_s=0.0, beta_s_per_byte=1e-15)


def _model() -> tuple[BlockModel, tuple[torch.Tensor, torch.Tensor]]:
    spec = get_model_spec("mlp")
    torch.manual_seed(0)
    model = spec.build()
    assert isinstance(model, BlockModel)
    return model, spec.synthetic_batch(8)


def test_time_stage_times_every_size_and_leaves_the_model_untouched() -> None:
    model, batch = _model()
    before = [p.detach().clone() for p in model.parameters()]
    blocks = len(model.blocks())
    ranges = ((0, 1), (1, blocks))
    for stage in (0, 1):
        times = time_stage(model, ranges, stage, loss_fn, batch, [1, 4, 8], repeats=2)
        assert sorted(times) == [1, 4, 8]
        assert all(f > 0 and b > 0 for f, b in times.values())
    assert all(p.grad is None for p in model.parameters())  # timed on a copy
    for p, q in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="larger than the batch of 8"):
        time_stage(model, ranges, 0, loss_fn, batch, [16])


def test_probe_without_a_process_group_times_every_stage_here() -> None:
    model, batch = _model()
    ranges = ((0, 1), (1, len(model.blocks())))
    times = probe_stage_times(model, ranges, loss_fn, batch, [2, 8], repeats=1)
    assert times is not None and len(times) == 2
    assert all(sorted(t) == [2, 8] for t in times)


def test_measured_costs_are_the_measurements_and_linear_between() -> None:
    costs = measured_stage_costs([{1: (0.004, 0.006), 4: (0.010, 0.020)}, {2: (0.003, 0.005)}])
    assert isinstance(costs.forward[0], Piecewise)
    assert costs.forward[0](1) == pytest.approx(0.004)
    assert costs.backward[0](4) == pytest.approx(0.020)
    assert costs.forward[0](2) == pytest.approx(0.006)  # a third of the way from 1 to 4
    assert costs.backward[1] == Affine(0.0, 0.0025)  # one size: proportional
    with pytest.raises(UserError, match="at least one size for every stage"):
        measured_stage_costs([{1: (0.1, 0.1)}, {}])


def _profile(batch: int) -> Profile:
    # Profiled costs that would make many small micro-batches cheap (proportional to size).
    items = tuple(BlockProfile(f"b{i}", 0.01, 0.01, 0.01, 1000, 400, 40 * batch, 0)
                  for i in range(2))  # fmt: skip
    return Profile("toy", batch, (10,), items, 0.0, 0.0, 1, 0, "cpu", 1, "x", 0, "cpu_accounted")


def test_planner_uses_measured_stage_costs_over_the_profiles() -> None:
    kw = {"stages": 2, "batch_size": 8, "link": FAST, "microbatches": [2, 8]}
    by_profile = plan_pipeline(_profile(8), **kw)  # type: ignore[arg-type]
    assert by_profile.best.microbatches == 8  # proportional costs: the smallest bubble wins
    # Measured: a micro-batch of 1 costs nearly as much as one of 4 (per-call overhead), so
    # 8 micro-batches of 1 lose to 2 of 4 despite the larger bubble.
    slow_small = {1: (0.009, 0.018), 4: (0.010, 0.020)}
    costs = measured_stage_costs([slow_small, slow_small])
    measured = plan_pipeline(_profile(8), costs=costs, **kw)  # type: ignore[arg-type]
    assert measured.best.microbatches == 2
    one = next(c for c in measured.candidates if (c.schedule, c.microbatches) == ("gpipe", 2))
    assert one.predicted_s == pytest.approx(3 * (0.010 + 0.020))  # (M + S - 1) slots
    with pytest.raises(UserError, match="measured costs are for 1 stages, not 2"):
        plan_pipeline(_profile(8), costs=measured_stage_costs([slow_small]), **kw)  # type: ignore[arg-type]
