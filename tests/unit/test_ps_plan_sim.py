"""`PSPlan` as the simulator reads it: transfers per block and server, the chain plan of a
profile's blocks, and `simulate_ps` pricing the plan's placement (no torch, no sockets)."""

from __future__ import annotations

import pytest

from cadence.errors import UserError
from cadence.profile.record import BlockProfile, Profile
from cadence.ps.plan import ParamInfo, PSPlan, Transfer, build_plan, chain_plan
from cadence.sim.ps_adapter import simulate_ps


def test_transfers_group_a_blocks_slices_per_server() -> None:
    params = [ParamInfo(0, "a", 10, 0), ParamInfo(1, "b", 6, 0), ParamInfo(2, "c", 4, 1)]
    plan = build_plan(params, [0, 0, 1], servers=2, slice_bytes=4 * 10)
    # max 10 elements per slice: a (10) -> server 0, b (6) -> 1, c (4) -> 1.
    assert [(s.param, s.server) for s in plan.slices] == [(0, 0), (1, 1), (2, 1)]
    assert plan.transfers() == [
        Transfer(block=0, server=0, nbytes=40, messages=1, priority=0),
        Transfer(block=0, server=1, nbytes=24, messages=1, priority=0),
        Transfer(block=1, server=1, nbytes=16, messages=1, priority=1),
    ]
    split = build_plan([ParamInfo(0, "big", 25, 0)], [3], servers=1, slice_bytes=4 * 10)
    assert split.transfers() == [Transfer(0, 0, 100, 3, 3)]  # 9 + 8 + 8 elements
    assert plan.consistency == "bsp"
    assert build_plan(params, [0, 0, 1], 2, consistency="ssp:2").consistency == "ssp:2"


def test_chain_plan_is_one_parameter_per_block_in_the_asked_order() -> None:
    layer = chain_plan([400, 0, 800], servers=2, order="layer")
    assert [(p.block, p.numel) for p in layer.params] == [(0, 100), (2, 200)]
    # max_elems = 150 (1/S of 300): block 2 is cut in two slices of 100, block 0 is one;
    # equal slices go to the least-loaded server, the lower one on a tie.
    assert [(s.param, s.server, s.priority) for s in layer.slices] == [  # param 1: block 2
        (0, 0, 0), (1, 1, 1), (1, 0, 1),
    ]  # fmt: skip
    assert [(t.block, t.server, t.nbytes) for t in layer.transfers()] == [
        (0, 0, 400), (2, 0, 400), (2, 1, 400),
    ]  # fmt: skip
    assert {s.priority for s in chain_plan([400, 800], 1, "fifo").slices} == {0}


def _profile(*param_bytes: int) -> Profile:
    b = tuple(BlockProfile(f"b{i}", 1.0, 0.5, 0.5, n, 0, 0, 0) for i, n in enumerate(param_bytes))
    n = len(b)
    return Profile("toy", 1, (1,), b, 2.0 * n, 0.0, 1, 0, "cpu", 1, "x", 0, "cpu_accounted")


def test_the_simulator_prices_the_plans_placement_and_latency_per_slice() -> None:
    from cadence.comm.cost import AlphaBeta

    profile = _profile(100, 100)
    # Two servers: each 25-element block lies whole on one server (max 25 per slice), so a
    # worker sends 2 messages per step, not one per block and server (4).
    link = AlphaBeta(alpha_s=0.5, beta_s_per_byte=0.0)
    two = simulate_ps(profile, workers=2, servers=2, link=link, colocated=False)
    assert two.busy_s["w0.up"] == pytest.approx(2 * 0.5)
    # The plan given is read as it is: slices of 10 elements make 3 messages per block.
    fine = chain_plan([100, 100], servers=1, order="layer", slice_bytes=40)
    sliced = simulate_ps(profile, workers=2, link=link, colocated=False, plan=fine)
    assert sliced.busy_s["w0.up"] == pytest.approx(6 * 0.5)


def test_plans_the_simulator_cannot_run_are_refused() -> None:
    profile = _profile(100, 100)
    asp = chain_plan([100, 100], servers=1, order="layer", consistency="asp")
    with pytest.raises(UserError, match="bsp"):
        simulate_ps(profile, workers=2, link=100.0, colocated=False, plan=asp)
    other = chain_plan([100, 100, 100], servers=1, order="layer")
    with pytest.raises(UserError, match="blocks"):
        simulate_ps(profile, workers=2, link=100.0, colocated=False, plan=other)


def test_slice_transfers_are_one_per_slice_in_push_order() -> None:
    # Block 0 holds a (10 elements, cut in two) and b (6); block 1 holds c. Within a block the
    # worker pushes its parameters as their gradients arrive, each one's slices in key order.
    params = [ParamInfo(0, "a", 10, 0), ParamInfo(1, "b", 6, 0), ParamInfo(2, "c", 4, 1)]
    plan = build_plan(params, [0, 0, 1], servers=1, slice_bytes=4 * 5)
    assert [(t.block, t.nbytes, t.messages) for t in plan.slice_transfers([2, 0, 1])] == [
        (0, 20, 1), (0, 20, 1), (0, 12, 1), (0, 12, 1), (1, 16, 1),
    ]  # fmt: skip
    # Without an order, backward's usual one: the last registered first (b, then a).
    assert [t.nbytes for t in plan.slice_transfers()][:4] == [12, 12, 20, 20]
    assert sum(t.nbytes for t in plan.slice_transfers()) == sum(t.nbytes for t in plan.transfers())


def test_a_blocks_first_parameters_come_back_while_its_last_are_pushed() -> None:
    from cadence.dp.plan import ParamInfo as LayoutParam

    # One block: forward 1 s, backward 1 s; 100 bytes at 100 B/s, no latency, free updates.
    # As one parameter: pushed 2-3, answered 3-4, so the next forward starts at 4. As the
    # runtime sends two parameters (60 and 40 bytes): 60 pushed 2-2.6 and answered 2.6-3.2
    # while 40 is pushed 2.6-3.0, then 40 answered 3.2-3.6: the next forward starts at 3.6.
    profile = _profile(100)
    whole = simulate_ps(profile, workers=2, link=100.0, colocated=False)
    layout = (LayoutParam(0, "b0.w", 15, 4, 0), LayoutParam(1, "b0.v", 10, 4, 0))
    split = simulate_ps(
        profile, workers=2, link=100.0, colocated=False, params=layout, arrival_order=[0, 1]
    )
    assert whole.iteration_s == pytest.approx(4.0)
    assert split.iteration_s == pytest.approx(3.6)
    assert split.busy_s["w0.up"] == pytest.approx(whole.busy_s["w0.up"])


def test_the_simulators_plan_is_the_runtimes_for_a_zoo_model() -> None:
    from cadence.models import get_model_spec
    from cadence.profile.facts import zoo_facts
    from cadence.ps.config import PSConfig
    from cadence.ps.trace import model_plan
    from cadence.sim.compute import block_costs
    from cadence.sim.ps_adapter import runtime_plan

    facts = zoo_facts("cnn_lstm")
    module = get_model_spec("cnn_lstm").build()
    runtime = model_plan(module, PSConfig(servers=2, workers=2, priority="layer"))
    blocks = [p.block for p in runtime.params]
    bytes_per_block = [0] * (max(blocks) + 1)
    for p in runtime.params:
        bytes_per_block[p.block] += 4 * p.numel
    profile = _profile(*bytes_per_block)
    costs = block_costs(profile, False)
    # Not named by the profile's blocks: dealt to them by bytes in registration order.
    simulated = runtime_plan(costs, 2, "layer", PSConfig.slice_bytes, facts.params)
    def placed(plan: PSPlan) -> list[tuple[int, int, int, int, int]]:
        return [(s.param, s.start, s.length, s.server, s.priority) for s in plan.slices]

    assert placed(simulated) == placed(runtime)  # the priority classes matter to no transfer
    assert [p.block for p in simulated.params] == blocks
