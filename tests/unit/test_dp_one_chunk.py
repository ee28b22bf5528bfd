"""cadence-dp's default plan stays one chunk where one all-reduce of every gradient is cheap:
the rule, its setting, and the simulator's mirror of it (the runtime's side is in
tests/dist/test_dp_one_chunk_choice.py)."""

from __future__ import annotations

import pytest

from cadence.comm.cost import AlphaBeta
from cadence.dp import DPConfig
from cadence.dp.plan import DEFAULT_ONE_CHUNK_WIRE_SHARE, hideable_share, one_chunk_suffices
from cadence.profile import BlockProfile, Profile
from cadence.sim.command import Setup, last_allreduce_s, run_strategy
from cadence.sim.compute import block_costs, block_params
from cadence.sim.options import SimOptions

MB = 1_000_000


def test_one_chunk_when_its_chunks_could_hide_little() -> None:
    # All but the last chunk's share of the all-reduce could overlap the backward pass.
    assert hideable_share(0.010, 0.100, 4) == pytest.approx(0.075)
    assert hideable_share(0.010, 0.100, 1) == 0.0
    assert one_chunk_suffices(0.006, 0.100, 4, 0.05)  # 4.5% hideable
    assert not one_chunk_suffices(0.006, 0.100, 20, 0.05)  # 5.7%
    assert one_chunk_suffices(0.009, 0.100, 2, 0.05)  # 4.5%
    assert not one_chunk_suffices(0.030, 0.100, 2, 0.05)
    assert not one_chunk_suffices(0.0, 0.100, 4, 0.0)  # a share of 0 turns the rule off


def test_the_share_is_a_validated_setting() -> None:
    assert DPConfig().one_chunk_wire_share == DEFAULT_ONE_CHUNK_WIRE_SHARE
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(ValueError, match="one_chunk_wire_share"):
            DPConfig(one_chunk_wire_share=bad)


def _setup(bps: float) -> Setup:
    # 4 blocks of 4 MB: cadence-dp's default threshold cuts the 16 MB into several chunks.
    blocks = tuple(
        BlockProfile(f"b{i}", 0.01, 0.01 if i else 0.0, 0.01, 4 * MB, MB, MB, 0) for i in range(4)
    )
    profile = Profile(
        model="mlp", batch_size=8, input_shape=(64,), blocks=blocks, iteration_s=0.12,
        loss_s=0.0, iterations=10, warmup=2, device="cpu", threads=1, torch_version="test",
        peak_memory_bytes=0, peak_memory_kind="cpu_accounted",
    )  # fmt: skip
    return Setup(
        profile=profile,
        params=tuple(block_params(block_costs(profile))),
        world_size=2,
        link=AlphaBeta.from_bandwidth(bps),
        description="test",
    )


def test_the_simulator_keeps_the_default_plan_one_chunk_where_the_runtime_would() -> None:
    # 16 MB at 100 Gbit/s: ~1.3 ms against a 120 ms iteration.
    result, plan = run_strategy(_setup(100e9), "cadence-dp", None, None, 25 * MB, SimOptions())
    assert plan is not None and len(plan.chunks) == 1
    assert 0 < last_allreduce_s(result) < DEFAULT_ONE_CHUNK_WIRE_SHARE * result.iteration_s
    # At 400 Mbit/s the same gradients take 0.32 s: the chunked plan, as without the rule.
    result, plan = run_strategy(_setup(400e6), "cadence-dp", None, None, 25 * MB, SimOptions())
    assert plan is not None and len(plan.chunks) > 1
    # A threshold the user gives is kept whatever the link.
    _, plan = run_strategy(_setup(100e9), "cadence-dp", 2 * MB, None, 25 * MB, SimOptions())
    assert plan is not None and len(plan.chunks) > 1


def test_a_runs_recorded_choice_is_simulated_as_it_ran() -> None:
    fast, slow, opts = _setup(100e9), _setup(400e6), SimOptions()
    _, plan = run_strategy(fast, "cadence-dp", None, None, 25 * MB, opts, default_plan="chunked")
    assert plan is not None and len(plan.chunks) > 1
    _, plan = run_strategy(slow, "cadence-dp", None, None, 25 * MB, opts, default_plan="one chunk")
    assert plan is not None and len(plan.chunks) == 1
    with pytest.raises(ValueError, match="default_plan"):
        run_strategy(fast, "cadence-dp", None, None, 25 * MB, opts, default_plan="maybe")
