"""The simulator fuses gradients into the chunks the runtime builds: on 2 gloo ranks, the plan
cadence-dp settles on after warm-up (fused in the order its gradient hooks saw) holds the same
chunks as the simulator's plan for the same threshold, given the order one backward pass of
the zoo model accumulates its gradients. cnn_lstm is the case where that order matters: its
LSTM's input weights arrive before its hidden weights, the reverse of registration."""

from __future__ import annotations

from typing import cast

import pytest
import torch

from cadence.dp import DPConfig, data_parallel
from cadence.dp.plan import DPPlan
from cadence.dp.runtime import SyncEngine
from cadence.models import get_model_spec
from cadence.models.loss import loss_fn
from cadence.sim import plan_dp
from cadence.sim.command import model_params, zoo_arrival_order
from cadence.testing import run_ranks
from tests.unit.test_sim_cli import zoo_profile

MODEL = "cnn_lstm"
STEPS = 3


def _runtime_plan(rank: int, world_size: int, threshold: int) -> DPPlan:
    torch.manual_seed(0)
    spec = get_model_spec(MODEL)
    plain = spec.build()
    config = DPConfig(threshold_bytes=threshold, credit_bytes=2 * threshold)
    model, opt = data_parallel(plain, torch.optim.Adam(plain.parameters(), lr=1e-3), config)
    for step in range(STEPS):
        x, y = spec.synthetic_batch(2, seed=10 * rank + step)
        loss_fn(model(x), y).backward()
        opt.step()
    opt.flush()
    return cast(SyncEngine, model._cadence_dp_engine).plan


def _chunks(plan: DPPlan) -> list[list[tuple[int, int, int]]]:
    """Each chunk's slices (parameter, start, length), chunks in creation order."""
    return [[(s.param, s.start, s.length) for s in c.segments] for c in plan.chunks]


@pytest.mark.parametrize("threshold", [1 << 20, 64 << 10])
def test_simulated_chunks_equal_the_runtime_chunks(threshold: int) -> None:
    plans = run_ranks(_runtime_plan, 2, threshold, timeout=180)
    assert _chunks(plans[0]) == _chunks(plans[1])  # every rank follows one plan
    params = model_params(MODEL)
    profile = zoo_profile(MODEL)

    def simulated(order: tuple[int, ...] | None) -> DPPlan:
        return plan_dp(profile, params, threshold, 2 * threshold, 2, 1e8, arrival_order=order)

    assert _chunks(simulated(zoo_arrival_order(MODEL))) == _chunks(plans[0])
    # Reverse registration order, the simulator's old assumption, fuses other chunks.
    assert _chunks(simulated(None)) != _chunks(plans[0])
