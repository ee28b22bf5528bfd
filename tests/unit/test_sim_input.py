"""The batch's way to the device (`Profile.input_s`) in every data-parallel adapter."""

from __future__ import annotations

import dataclasses

import pytest

from cadence.profile import Profile
from cadence.sim.api import plan_dp, simulate_ddp, simulate_dp
from cadence.sim.command import model_params
from cadence.sim.metrics import SimResult
from cadence.sim.ps_adapter import simulate_ps
from cadence.sim.zero_graph import ZeroSimPlan, simulate_zero
from tests.unit.test_sim_cli import zoo_profile

INPUT_S = 0.004
LINK = 1e15  # bytes/s: transfers take no time, so the batch has nothing to hide behind


def _strategies(profile: Profile) -> dict[str, SimResult]:
    params = model_params("cnn")
    plan = plan_dp(profile, params, 4096, 8192, 1, LINK)
    return {
        "ddp": simulate_ddp(profile, 1, LINK, params=params),
        "cadence-dp": simulate_dp(profile, plan, 1, LINK),
        "zero": simulate_zero(profile, ZeroSimPlan(stage=2), 1, LINK),
        "ps": simulate_ps(profile, workers=1, link=LINK, colocated=False),
    }


@pytest.mark.parametrize("strategy", ["ddp", "cadence-dp", "zero", "ps"])
def test_the_batch_adds_its_time_to_every_iteration(strategy: str) -> None:
    profile = zoo_profile("cnn")
    without = _strategies(profile)[strategy]
    with_input = _strategies(dataclasses.replace(profile, input_s=INPUT_S))[strategy]
    assert with_input.iteration_s == pytest.approx(without.iteration_s + INPUT_S, rel=1e-9)
    assert with_input.busy_s["w0.compute"] == pytest.approx(without.busy_s["w0.compute"] + INPUT_S)
    graph, schedule = with_input.schedule.graph, with_input.schedule
    tasks = {(t.name, t.iteration, t.worker): t for t in graph.tasks}
    taken = [t for t in graph.tasks if t.kind == "input"]
    assert taken, "no input task"
    for t in taken:  # before the forward of its iteration, where there is one
        forward = tasks.get(("F0", t.iteration, t.worker))
        if forward is not None:
            assert schedule.end_s[t.id] <= schedule.start_s[forward.id]


def test_profiles_without_it_charge_nothing() -> None:
    profile = zoo_profile("cnn")
    assert profile.input_s is None
    result = _strategies(profile)["ddp"]
    assert not [t for t in result.schedule.graph.tasks if t.kind == "input"]


def test_the_batch_overlaps_the_wait_for_parameters() -> None:
    # A parameter server's pulls gate the next forward, not the batch: on a slow link the
    # batch is taken while the pulls are in flight and adds less than its own time.
    profile = zoo_profile("cnn")
    slow = 1e7  # bytes/s

    def ps(p: Profile) -> float:
        return simulate_ps(p, workers=1, link=slow, colocated=False).iteration_s

    without, with_input = ps(profile), ps(dataclasses.replace(profile, input_s=INPUT_S))
    assert without < with_input < without + INPUT_S


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_every_pipeline_stage_takes_the_whole_batch_first(schedule: str) -> None:
    # Every rank of a pipeline reads the step's whole batch before its first action, so with
    # messages free the step moves by the batch's time scaled from the profile's batch to
    # the step's (here twice the profile's).
    from cadence.sim.pipeline_adapter import simulate_pipeline

    profile = zoo_profile("cnn")
    batch = 2 * profile.batch_size

    def step(p: Profile) -> SimResult:
        return simulate_pipeline(
            p, stages=2, microbatches=4, schedule=schedule, link=LINK, batch_size=batch
        )

    without = step(profile)
    with_input = step(dataclasses.replace(profile, input_s=INPUT_S))
    assert with_input.iteration_s == pytest.approx(without.iteration_s + 2 * INPUT_S, rel=1e-9)
    timed = with_input.schedule
    taken = [t for t in timed.graph.tasks if t.kind == "input"]
    assert sorted(t.worker for t in taken) == [0, 1]
    for t in taken:  # first on its stage's compute
        others = [u for u in timed.graph.tasks if u.worker == t.worker and u.kind == "forward"]
        assert timed.end_s[t.id] <= min(timed.start_s[u.id] for u in others)
    assert with_input.compute_s == pytest.approx(without.compute_s + 2 * INPUT_S)
    assert 0.0 <= with_input.efficiency <= 1.0
