"""Strategy estimates and the cross-strategy ranking behind `cadence plan strategies` / `map`."""

from __future__ import annotations

import dataclasses

import pytest

from cadence.comm.cost import AlphaBeta
from cadence.profile import BlockProfile, Profile
from cadence.ps.config import PSConfig
from cadence.ps.plan import chain_plan
from cadence.sim import strategies
from cadence.sim.command import Setup
from cadence.sim.compute import BlockCosts, block_costs, block_params
from cadence.sim.estimates import state_bytes, tp_estimate
from cadence.sim.options import SimOptions
from cadence.sim.ps_adapter import host_bytes, simulate_ps
from cadence.sim.strategies import best_fitting, rank_strategies, why

MB = 1_000_000


def _costs(nb: int = 2, f: float = 1.0, b: float = 2.0, pbytes: int = 4 * MB) -> BlockCosts:
    return BlockCosts(
        names=tuple(f"b{i}" for i in range(nb)),
        forward_s=(f,) * nb,
        input_grad_s=(b / 2,) * nb,
        weight_grad_s=(b / 2,) * nb,
        activation_bytes=(MB,) * nb,
        param_bytes=(pbytes,) * nb,
        loss_s=0.0,
    )


FREE = AlphaBeta(alpha_s=0.0, beta_s_per_byte=0.0)
SLOW = AlphaBeta(alpha_s=0.0, beta_s_per_byte=1e-6)  # 1 MB/s


def test_tp_adds_blocking_communication_and_exposed_data_parallel_sync() -> None:
    costs = _costs()
    assert tp_estimate(costs, SLOW, 1.5, 2).iteration_s == pytest.approx(6.0 + 1.5)
    sync = SLOW.time("allreduce", "ring", 4 * MB, 4)  # 1/2 of 8 MB over 4 replicas: 6 s
    est = tp_estimate(costs, SLOW, 1.5, 2, dp_size=4)
    assert est.iteration_s == pytest.approx(6.0 + 1.5 + sync - 4.0)


def test_state_bytes_follow_the_zero_formulas() -> None:
    p, n = 1200, 4
    assert state_bytes(p, 2, "replicated", n) == 4 * p
    assert state_bytes(p, 2, "zero1", n) == 2 * p + 2 * p // n
    assert state_bytes(p, 2, "zero2", n) == p + 3 * p // n
    assert state_bytes(p, 2, "zero3", n) == 4 * p // n
    with pytest.raises(ValueError):
        state_bytes(p, 2, "zero4", n)


def _profile(nb: int = 4) -> Profile:
    blocks = tuple(
        BlockProfile(f"b{i}", 0.01, 0.01 if i else 0.0, 0.01, 4 * MB, MB, MB, 0) for i in range(nb)
    )
    return Profile(
        model="mlp",
        batch_size=8,
        input_shape=(64,),
        blocks=blocks,
        iteration_s=nb * 0.03,
        loss_s=0.0,
        iterations=10,
        warmup=2,
        device="cpu",
        threads=1,
        torch_version="test",
        peak_memory_bytes=0,
        peak_memory_kind="cpu_accounted",
    )


def _setup(workers: int, bps: float) -> Setup:
    profile = _profile()
    return Setup(
        profile=profile,
        params=tuple(block_params(block_costs(profile))),
        world_size=workers,
        link=AlphaBeta.from_bandwidth(bps),
        description="test",
        update_s_per_byte=1e-9,
    )


def test_ranking_covers_every_strategy_fastest_first() -> None:
    rows = rank_strategies(_setup(4, 100e6), "mlp")
    names = {c.strategy for c in rows}
    assert {"ddp", "cadence-dp", "zero", "ps", "pipeline", "pipeline x dp"} <= names
    zero = [c for c in rows if c.strategy == "zero"]
    assert len(zero) == 10 and all(c.method == "simulated" for c in zero)
    by_setting = {c.setting: c for c in zero}
    for stage in (1, 2):  # replicated updates: faster on this slow link, 4 bytes/param more
        gathered = by_setting[f"stage {stage}, onebit"]
        replicated = by_setting[f"stage {stage}, onebit, replicated update"]
        assert replicated.iteration_s < gathered.iteration_s
        assert replicated.memory_bytes > gathered.memory_bytes
        # The front 30% (mlp's fc1, a fifth of it): in between, on both counts.
        front = by_setting[f"stage {stage}, onebit, overlap, replicated front 30%"]
        assert replicated.iteration_s < front.iteration_s < gathered.iteration_s
        assert gathered.memory_bytes < front.memory_bytes < replicated.memory_bytes
    times = [round(c.iteration_s, 9) for c in rows]  # the ranking's resolution: 1 ns
    assert times == sorted(times)
    assert all(c.iteration_s > 0 and c.memory_bytes > 0 for c in rows)


def test_equal_predicted_times_rank_the_smaller_memory_first() -> None:
    # On a near-free link, with a free codec, the 1-bit ZeRO rows that update early are all
    # compute-bound.
    setup = _setup(2, 1e12)
    free = {"encode": 0.0, "decode": 0.0}
    setup = dataclasses.replace(
        setup, profile=dataclasses.replace(setup.profile, codec_s_per_element=free)
    )
    rows = rank_strategies(setup, "mlp")
    ties = 0
    for first, second in zip(rows, rows[1:], strict=False):
        if round(first.iteration_s, 9) == round(second.iteration_s, 9):
            ties += 1
            assert first.memory_bytes <= second.memory_bytes
    assert ties >= 2


def test_a_memory_limit_picks_the_fastest_that_fits() -> None:
    rows = rank_strategies(_setup(4, 100e6), "mlp")
    replicated = next(c for c in rows if c.strategy == "ddp").memory_bytes
    pick = best_fitting(rows, replicated - 1)
    assert pick is not None and pick.memory_bytes < replicated
    assert pick.strategy not in ("ddp", "cadence-dp")
    assert "nothing fits" in why(rows, 1)


def test_a_single_worker_ranks_only_data_parallel() -> None:
    rows = rank_strategies(_setup(1, 100e6), "mlp")
    assert {c.strategy for c in rows} == {"ddp", "cadence-dp"}


def test_the_ps_row_is_simulate_ps_on_the_runtime_plan() -> None:
    setup = _setup(4, 100e6)
    ps = next(c for c in rank_strategies(setup, "mlp") if c.strategy == "ps")
    costs = block_costs(setup.profile)
    runtime = PSConfig(servers=4, workers=4)
    plan = chain_plan(costs.param_bytes, 4, runtime.order, slice_bytes=runtime.slice_bytes)
    options = SimOptions(update_s_per_byte=setup.update_s_per_byte)
    expected = simulate_ps(
        setup.profile, workers=4, link=setup.link, iterations=3, options=options, plan=plan,
        shared_hosts=True,
    )
    assert ps.method == "simulated"
    assert ps.iteration_s == pytest.approx(expected.iteration_s, rel=1e-12)
    assert ps.wire_bytes == max(host_bytes(plan, 4))
    # Each host sends its worker's 3/4 of the gradients and its server's 1/4 to 3 workers.
    assert ps.wire_bytes == pytest.approx(2 * 3 / 4 * sum(costs.param_bytes), rel=0.01)


def test_above_the_full_size_the_ps_row_is_the_folded_cluster_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(strategies, "PS_FULL_WORKERS", 2)
    setup = _setup(4, 100e6)
    ps = next(c for c in rank_strategies(setup, "mlp") if c.strategy == "ps")
    costs = block_costs(setup.profile)
    runtime = PSConfig(servers=4, workers=4)
    plan = chain_plan(costs.param_bytes, 4, runtime.order, slice_bytes=runtime.slice_bytes)
    options = SimOptions(update_s_per_byte=setup.update_s_per_byte)
    expected = simulate_ps(
        setup.profile, workers=4, link=setup.link, iterations=3, options=options, plan=plan,
        shared_hosts=True, fold=True,
    )  # fmt: skip
    assert ps.method == strategies.FOLDED != strategies.SIMULATED
    assert ps.iteration_s == pytest.approx(expected.iteration_s, rel=1e-12)
    assert ps.wire_bytes == max(host_bytes(plan, 4))  # the full cluster's, not the folded one's
