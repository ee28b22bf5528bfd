"""The simulator reads the plan the way the executor runs it: on 2 gloo ranks, the order in
which cadence-dp applies layer updates (the order their chunks complete, decided by issue
order and byte credit) equals the order of the simulated update tasks for the same plan.

The loop clips between backward and step: the clip waits for every reduction, so every update
is pending when step() releases them and they run in completion order whatever the timing.
Without it, chunks that complete after step() are applied at once, ahead of the pending ones,
and which those are depends on how the reductions race the main thread."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from cadence.dp import DPConfig, data_parallel
from cadence.models import get_model_spec
from cadence.sim import SimOptions, simulate_dp
from cadence.testing import run_ranks
from tests.unit.test_sim_cli import zoo_profile

STEPS = 3


def _train(rank: int, world_size: int, threshold: int) -> tuple[list[list[int]], object]:
    torch.manual_seed(0)
    model: torch.nn.Module = get_model_spec("mlp").build()
    model, opt = data_parallel(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        DPConfig(threshold_bytes=threshold, credit_bytes=2 * threshold),
    )
    engine: Any = model._cadence_dp_engine  # its updater's step is replaced below
    applied: list[int] = []
    step = engine.updater.step

    def recording_step(layer: int, *args: object) -> None:  # runs on the communication thread
        applied.append(layer)
        step(layer, *args)

    engine.updater.step = recording_step
    per_iteration = []
    gen = torch.Generator().manual_seed(rank)
    for _ in range(STEPS):
        x, y = torch.randn(8, 1, 8, 8, generator=gen), torch.randint(0, 10, (8,), generator=gen)
        F.cross_entropy(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)  # waits; scales by 1
        opt.step()
        opt.flush()
        per_iteration.append(list(applied))
        applied.clear()
    return per_iteration, engine.plan


def test_simulated_update_order_matches_the_runtime() -> None:
    threshold = 64 * 1024  # mlp's 256x256 weight (256 KiB) is split, the small ones fused
    (orders, plan), _ = run_ranks(_train, 2, threshold)
    assert len(plan.chunks) > 3 and plan.issue_order != tuple(range(len(plan.chunks)))
    clip = SimOptions(clip=True)
    result = simulate_dp(zoo_profile("mlp"), plan, 2, 1e6, iterations=1, options=clip)
    simulated = [
        int(t.name[1:])
        for t in result.schedule.graph.tasks
        if t.kind == "update" and t.iteration == 1 and t.worker == 0 and t.name != "clip"
    ]
    assert sorted(simulated) == list(range(len(plan.layer_chunks)))
    assert orders[-1] == simulated  # the plan in force after warm-up, as the simulator ran it
