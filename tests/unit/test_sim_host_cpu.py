"""Communication's processor time on a host with no spare core (`cadence.sim.host_cpu`):
measured per call and per byte by a calibration (`AlphaBeta.host_s`), charged to compute by
the data-parallel and ZeRO adapters when the profile's workers fill the host's cores."""

from __future__ import annotations

import dataclasses

import pytest

from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import build_plan
from cadence.sim import SimOptions, simulate_ddp, simulate_dp
from cadence.sim.command import run_strategy
from cadence.sim.host_cpu import charged, compute_share, describe
from cadence.sim.zero_graph import ZeroSimPlan, simulate_zero
from tests.unit.test_sim_dp import TWO, params_of
from tests.unit.test_sim_strategies import FREE, MB, _costs, _setup

MEASURED = AlphaBeta(0.0, 0.0, host_s_per_call=(("allreduce", 0.5),))
"""A free link whose every gloo call takes 0.5 s of processor time."""


def _conditions(threads: int, neighbours: int, cores: int | None, device: str = "cpu") -> float:
    profile = dataclasses.replace(
        TWO, threads=threads, neighbours=neighbours, host_cores=cores, device=device
    )
    return compute_share(profile)


def test_the_compute_pays_only_where_the_workers_fill_the_hosts_cores() -> None:
    assert _conditions(1, 1, 2) == 1.0  # 2 one-thread workers on 2 cores
    assert _conditions(1, 3, 2) == 2.0  # 4 on 2: every worker's calls share 2 cores
    assert _conditions(2, 0, 2) == 1.0  # one worker computing on both cores
    assert _conditions(1, 0, 2) == 0.0  # a core to spare
    assert _conditions(1, 1, 4) == 0.0
    assert _conditions(1, 1, None) == 0.0  # not recorded
    assert _conditions(1, 1, 2, device="cuda:0") == 0.0  # the compute is the device's


def test_host_time_is_per_call_plus_per_byte_sent_and_cadences_own_with_p2p() -> None:
    link = AlphaBeta(
        0.0, 1e-9, host_s_per_call=(("allreduce", 1e-3), ("allgather", 2e-3)),
        p2p_host_s_per_call=(("allgather", 5e-3),), host_s_per_wire_byte=1e-9,
    )  # fmt: skip
    # A ring all-reduce of 1 MB on 2 ranks sends 1 MB along its critical path.
    assert link.host_s("allreduce", "ring", MB, 2) == pytest.approx(1e-3 + 1e-3)
    assert link.host_s("allgather", "ring", MB, 2) == pytest.approx(2e-3 + 0.5e-3)
    assert link.host_s("broadcast", "binomial", 0, 2) == pytest.approx(1e-3)  # all-reduce's
    assert link.host_s("allreduce", "ring", MB, 1) == 0.0
    assert link.p2p().host_s("allgather", "ring", MB, 2) == pytest.approx(5e-3 + 0.5e-3)
    assert link.p2p().host_s("allreduce", "ring", 0, 2) == pytest.approx(1e-3)
    assert link.measures_host and not FREE.measures_host
    assert FREE.host_s("allreduce", "ring", MB, 2) == 0.0
    # A saved calibration stores the pairs as JSON lists.
    loaded = AlphaBeta(0.0, 0.0, host_s_per_call=[["allreduce", 1e-3]])  # type: ignore[arg-type]
    assert loaded == AlphaBeta(0.0, 0.0, host_s_per_call=(("allreduce", 1e-3),))
    with pytest.raises(ValueError, match="host_s_per_call: allreduce"):
        AlphaBeta(0.0, 0.0, host_s_per_call=(("allreduce", -1.0),))
    with pytest.raises(ValueError, match="host_s_per_wire_byte"):
        AlphaBeta(0.0, 0.0, host_s_per_wire_byte=float("nan"))


def test_data_parallel_charges_a_share_of_each_all_reduces_measured_time() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    # As `SimOptions.comm_cpu_s_per_message` 0.5 s does (test_sim_dp): a free link, 5 s of
    # compute, one DDP bucket, two cadence-dp chunks.
    once = SimOptions(host_cpu_share=1.0)
    assert simulate_ddp(TWO, 2, MEASURED, params=plan.params, options=once).iteration_s == (
        pytest.approx(5.5)
    )
    assert simulate_dp(TWO, plan, 2, MEASURED, options=once).iteration_s == pytest.approx(6.0)
    twice = SimOptions(host_cpu_share=2.0)  # oversubscribed cores: each call's time twice
    assert simulate_ddp(TWO, 2, MEASURED, params=plan.params, options=twice).iteration_s == (
        pytest.approx(6.0)
    )
    # No share (a spare core), or a link without measurements: nothing charged.
    assert simulate_ddp(TWO, 2, MEASURED, params=plan.params).iteration_s == pytest.approx(5.0)
    assert simulate_ddp(TWO, 2, FREE, params=plan.params, options=once).iteration_s == (
        pytest.approx(5.0)
    )


def test_the_per_byte_part_is_charged_per_all_reduced_byte() -> None:
    link = AlphaBeta(0.0, 0.0, host_s_per_call=(("allreduce", 0.0),), host_s_per_wire_byte=1e-3)
    options = charged(SimOptions(host_cpu_share=1.0), link, 4)
    # A ring all-reduce of n bytes on 4 ranks sends 2 x 3/4 n along its critical path.
    assert options.comm_cpu_s_per_message == 0.0
    assert options.comm_cpu_s_per_byte == pytest.approx(1.5e-3)
    assert charged(SimOptions(), link, 4) == SimOptions()


@pytest.mark.parametrize(("share", "expected"), [(0.0, 6.0), (1.0, 6.5), (2.0, 7.0)])
def test_zero_charges_each_collectives_time_to_the_compute(share: float, expected: float) -> None:
    # Stage 2 on 2 blocks: 2 reduce-scatters, the used-flags all-reduce, 2 all-gathers, each
    # 0.1 s of processor time (cadence's own collectives' figure, not gloo's 0.5 s), all of it
    # beside 6 s of compute on a free link.
    link = dataclasses.replace(MEASURED, p2p_host_s_per_call=(("allreduce", 0.1),))
    result = simulate_zero(_costs(), ZeroSimPlan(stage=2), 2, link, host_cpu_share=share)
    assert result.iteration_s == pytest.approx(expected)
    unmeasured = simulate_zero(_costs(), ZeroSimPlan(stage=2), 2, FREE, host_cpu_share=share)
    assert unmeasured.iteration_s == pytest.approx(6.0)


def test_predictions_take_the_share_from_the_profiles_conditions() -> None:
    setup = _setup(2, 100e9)  # compute-bound: 0.12 s of compute, the wire hides nothing
    link = dataclasses.replace(setup.link, host_s_per_call=(("allreduce", 0.02),))
    spare = dataclasses.replace(
        setup, link=link, profile=dataclasses.replace(setup.profile, host_cores=4)
    )
    busy = dataclasses.replace(
        spare, profile=dataclasses.replace(setup.profile, neighbours=1, host_cores=2)
    )
    for strategy in ("ddp", "cadence-dp", "zero"):
        alone, _ = run_strategy(spare, strategy, None, None, 25 * MB, SimOptions())
        shared, _ = run_strategy(busy, strategy, None, None, 25 * MB, SimOptions())
        assert shared.iteration_s > alone.iteration_s + 0.01, strategy
    assert "not charged (the profiled host has a spare core)" in describe(spare.profile, link)
    assert "charged to compute x1 (2 busy threads on 2 cores)" in describe(busy.profile, link)
    assert "no calibration" in describe(busy.profile, setup.link)
    assert "did not record its cores" in describe(setup.profile, link)
    gpu = dataclasses.replace(busy.profile, device="cuda:0")
    assert "the compute is the device's" in describe(gpu, link)
