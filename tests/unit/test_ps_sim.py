"""`simulate_ps`: hand-checkable cases of the parameter-server task graph."""

from __future__ import annotations

import pytest

from cadence.errors import UserError
from cadence.profile.record import BlockProfile, Profile
from cadence.ps.plan import chain_plan
from cadence.sim import ps_adapter
from cadence.sim.metrics import SimResult
from cadence.sim.options import SimOptions
from cadence.sim.ps_adapter import alike_servers, host_bytes, server_hosts, simulate_ps


def _profile(blocks: int = 3) -> Profile:
    # Every block: forward 1 s, backward 1 s (0.5 + 0.5), 100 parameter bytes; no loss time.
    b = tuple(BlockProfile(f"b{i}", 1.0, 0.5, 0.5, 100, 0, 0, 0) for i in range(blocks))
    return Profile("toy", 1, (1,), b, 2.0 * blocks, 0.0, 1, 0, "cpu", 1, "x", 0, "cpu_accounted")


def test_fast_link_costs_nothing_and_the_bound_is_compute() -> None:
    result = simulate_ps(_profile(), workers=2, link=1e12, priority="layer", colocated=False)
    assert result.iteration_s == pytest.approx(6.0, rel=1e-6)
    assert result.bound_s == pytest.approx(6.0, rel=1e-6)


def test_transfer_orders_follow_the_runtime_step_by_step() -> None:
    # 1 s per block each way. Backward ends at 6; pushes leave as gradients are ready: block 2
    # 4-5, block 1 5-6, block 0 6-7 (updates are free). Every order asks for each block right
    # after pushing it, and only one answer is ready at a time: 2 (5-6), 1 (6-7), 0 (7-8), so
    # the next forward starts at 8 whatever the order.
    profile = _profile()
    fifo = simulate_ps(profile, workers=2, link=100.0, priority="fifo", colocated=False)
    layer = simulate_ps(profile, workers=2, link=100.0, priority="layer", colocated=False)
    assert fifo.iteration_s == pytest.approx(8.0)
    assert layer.iteration_s == pytest.approx(8.0)
    assert layer.busy_s["w0.up"] == pytest.approx(3.0)
    assert layer.busy_s["w0.down"] == pytest.approx(3.0)


def test_priority_serves_the_front_block_first_when_answers_pile_up() -> None:
    # Block 2 holds 300 bytes (3 s each way). Pushes: 2 at 4-7, 1 at 7-8, 0 at 8-9. Answers:
    # 2 at 7-10; at 10 blocks 1 and 0 are both ready. Layer order sends 0 (10-11) then 1
    # (11-12): forward starts at 11. FIFO sends 1 first (10-11), then 0 (11-12): it starts at 12.
    b = [BlockProfile(f"b{i}", 1.0, 0.5, 0.5, 300 if i == 2 else 100, 0, 0, 0) for i in range(3)]
    profile = Profile("toy", 1, (1,), tuple(b), 6.0, 0.0, 1, 0, "cpu", 1, "x", 0, "cpu_accounted")
    fifo = simulate_ps(profile, workers=2, link=100.0, priority="fifo", colocated=False)
    layer = simulate_ps(profile, workers=2, link=100.0, priority="layer", colocated=False)
    assert layer.iteration_s == pytest.approx(fifo.iteration_s - 1.0)


def test_colocated_worker_moves_nothing_and_bad_input_is_refused() -> None:
    result = simulate_ps(_profile(), workers=2, link=100.0, priority="graph+net")
    assert result.busy_s["w1.up"] == 0.0 and result.busy_s["w0.up"] > 0
    with pytest.raises(UserError, match="unknown priority"):
        simulate_ps(_profile(), workers=2, link=100.0, priority="random")
    with pytest.raises(UserError, match="at least 2 workers"):
        simulate_ps(_profile(), workers=1, link=100.0)


def test_shared_hosts_fan_in_on_the_server_hosts_link() -> None:
    # One server, on worker 3's host: its downlink takes the 3 remote workers' 300 bytes of
    # gradients, its uplink sends them 300 bytes back each: 9 s each way at 100 B/s. Without
    # shared hosts only each worker's own link is priced (3 s each way).
    free = SimOptions(update_s_per_byte=0.0)
    shared = simulate_ps(_profile(), workers=4, link=100.0, shared_hosts=True, options=free)
    alone = simulate_ps(_profile(), workers=4, link=100.0, options=free)
    assert shared.iteration_s >= 9.0 > alone.iteration_s
    assert shared.busy_s["w3.down"] == pytest.approx(9.0)
    assert shared.busy_s["w3.up"] == pytest.approx(9.0)


def test_shared_hosts_run_each_servers_updates_on_its_hosts_processor() -> None:
    # Two blocks on two servers (block 0 on worker 1's host, block 1 on worker 0's), a free
    # link, 1 s per block update: worker 0's processor computes 4 s and updates block 1.
    slow = SimOptions(update_s_per_byte=0.01)
    result = simulate_ps(
        _profile(2), workers=2, servers=2, link=1e12, shared_hosts=True, options=slow
    )
    assert result.update_s == pytest.approx(1.0)
    assert result.iteration_s >= 4.0 + 1.0
    free = simulate_ps(_profile(2), workers=2, servers=2, link=1e12, shared_hosts=True)
    assert free.iteration_s == pytest.approx(4.0, rel=1e-6)


def test_host_bytes_count_the_workers_and_the_servers_traffic() -> None:
    # Blocks 0 and 2 on server 0 (worker 1's host), block 1 on server 1 (worker 0's host).
    plan = chain_plan([100, 100, 100], 2, "graph")
    assert server_hosts(2, 2) == [1, 0]
    # Host 0: its worker pushes 200 bytes to server 0, its server answers worker 1's 100.
    assert host_bytes(plan, 2, 0) == (300, 300)
    assert host_bytes(plan, 2, 1) == (300, 300)


def _link_s(result: SimResult, iteration: int) -> dict[str, float]:
    """Seconds of work each link direction takes in one iteration."""
    graph = result.schedule.graph
    busy: dict[str, float] = {}
    for t in graph.tasks:
        name = graph.resources[t.resources[0]].name if t.resources else ""
        if t.iteration == iteration and name.endswith((".up", ".down")):
            busy[name] = busy.get(name, 0.0) + t.duration_s
    return busy


@pytest.mark.parametrize("workers", [2, 3, 4, 8])
def test_folding_no_more_workers_than_fold_hosts_is_the_full_simulation(workers: int) -> None:
    # Groups of alike servers are halved down to one server each: the same graph.
    plan = chain_plan([100, 300, 200, 400], workers, "graph")
    slow = SimOptions(update_s_per_byte=0.001)
    args = dict(workers=workers, link=100.0, plan=plan, shared_hosts=True, options=slow)
    full = simulate_ps(_profile(4), **args)  # type: ignore[arg-type]
    folded = simulate_ps(_profile(4), fold=True, **args)  # type: ignore[arg-type]
    assert folded.iteration_s == full.iteration_s
    assert folded.wire_bytes == full.wire_bytes
    assert folded.busy_s == full.busy_s
    assert folded.update_s == full.update_s


def test_a_folded_host_carries_what_a_host_of_its_group_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 8 servers, two alike per block (one 400-byte slice each): 4 groups, 4 folded hosts.
    plan = chain_plan([800, 800, 800, 800], 8, "graph")
    groups = alike_servers(plan)
    assert sorted(map(len, groups)) == [2, 2, 2, 2]
    monkeypatch.setattr(ps_adapter, "FOLD_HOSTS", 2)
    args = dict(workers=8, link=100.0, plan=plan, shared_hosts=True)
    full = simulate_ps(_profile(4), **args)  # type: ignore[arg-type]
    folded = simulate_ps(_profile(4), fold=True, **args)  # type: ignore[arg-type]
    assert folded.world_size == 4
    host = server_hosts(8, 8)
    alone, stood = _link_s(full, 1), _link_s(folded, 1)
    for h, group in enumerate(groups):
        for end in ("up", "down"):
            assert stood[f"w{h}.{end}"] == pytest.approx(alone[f"w{host[group[0]]}.{end}"])


def test_folding_many_alike_servers_stays_close_to_the_full_simulation() -> None:
    # 48 workers and servers over uneven blocks, link-bound: the 32-host folded cluster
    # predicts the iteration within 2 % of simulating all 48 hosts.
    profile = _profile(6)
    plan = chain_plan([4000, 24000, 1000, 48000, 8000, 400], 48, "graph")
    assert len(alike_servers(plan)) < 48
    args = dict(workers=48, link=1e5, plan=plan, shared_hosts=True)
    full = simulate_ps(profile, **args)  # type: ignore[arg-type]
    folded = simulate_ps(profile, fold=True, **args)  # type: ignore[arg-type]
    assert folded.world_size == ps_adapter.FOLD_HOSTS
    assert full.iteration_s > 13.0  # over a second more than compute: the links count
    assert folded.iteration_s == pytest.approx(full.iteration_s, rel=0.02)


def test_folding_is_refused_where_it_does_not_apply() -> None:
    with pytest.raises(UserError, match="fold needs shared_hosts"):
        simulate_ps(_profile(), workers=3, link=100.0, fold=True)
    with pytest.raises(UserError, match="one server per worker host"):
        simulate_ps(_profile(), workers=3, servers=2, link=100.0, shared_hosts=True, fold=True)


def test_a_servers_measured_serving_delays_each_answer_by_its_slice() -> None:
    # As in the runtime-order case (8 s a step with free updates), but serving a slice costs
    # its server 1 s (2 workers x 4 messages x 0.125 s): each answer leaves 1 s after its
    # push, so block 0's arrives at 9.
    from cadence.ps.serving_cost import ServingCost

    serving = ServingCost(s_per_message=0.125, s_per_byte=0.0)
    assert serving.slice_s(100, workers=2) == pytest.approx(1.0)
    free = simulate_ps(_profile(), workers=2, link=100.0, priority="layer", colocated=False)
    served = simulate_ps(
        _profile(), workers=2, link=100.0, priority="layer", colocated=False, serving=serving
    )
    assert free.iteration_s == pytest.approx(8.0)
    assert served.iteration_s == pytest.approx(9.0)
    # Without a measured cost a slice costs the optimizer's arithmetic on its bytes.
    arithmetic = ps_adapter.serving_s(None, update_s_per_byte=0.01, workers=2)
    assert arithmetic(100) == pytest.approx(1.0)
    assert ps_adapter.serving_s(serving, update_s_per_byte=0.01, workers=2)(100) == 1.0


def test_a_calibrations_gloo_alphas_do_not_price_the_servers_zeromq_messages() -> None:
    from cadence.comm.cost import AlphaBeta

    rate = AlphaBeta(0.0, 1e-12)  # a fast link: 3 s of transfers a step only with a latency
    latency = AlphaBeta(1.0, 1e-12)  # a network's latency, given by hand: every message pays
    calibrated = AlphaBeta(1.0, 1e-12, collective_alphas=(("p2p", 1.0),), calibrated=True)

    def step(link: AlphaBeta) -> float:
        return simulate_ps(_profile(), workers=2, link=link, colocated=False).iteration_s

    assert step(rate) == pytest.approx(6.0, rel=1e-6)
    assert step(latency) > 6.5
    assert step(calibrated) == pytest.approx(step(rate))
    assert calibrated.outside_gloo() == rate and latency.outside_gloo() == latency
