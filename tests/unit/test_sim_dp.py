"""cadence-dp and DDP adapters on tiny models whose schedules are worked out by hand.

Link in the small cases: 80 B/s; a ring all-reduce of 400 B on 2 workers moves 400 B per NIC,
so one chunk alone takes 5 s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import DPPlan, ParamInfo, build_plan
from cadence.errors import UserError
from cadence.profile import BlockProfile, Profile
from cadence.sim import SimOptions, simulate_ddp, simulate_dp
from cadence.sim.compute import backward_steps, reordered_blocks
from cadence.sim.dp_adapter import ddp_buckets

LINK = 80.0  # bytes/s


def make_profile(blocks: list[tuple[float, float, float, int, int]], loss: float = 0.0) -> Profile:
    """blocks: (forward, input-grad, weight-grad, param bytes, activation bytes)."""
    bs = tuple(
        BlockProfile(f"b{i}", f, ig, wg, pb, act, 0, 0)
        for i, (f, ig, wg, pb, act) in enumerate(blocks)
    )
    total = sum(b.total_s for b in bs) + loss
    return Profile("toy", 1, (1,), bs, total, loss, 1, 0, "cpu", 1, "test", 0, "cpu_accounted")


def params_of(profile: Profile) -> list[ParamInfo]:
    out: list[ParamInfo] = []
    for b in profile.blocks:
        if b.param_bytes:
            out.append(ParamInfo(len(out), f"{b.name}.w", b.param_bytes // 4, 4, len(out)))
    return out


def with_reorder(plan: DPPlan, k: int) -> DPPlan:
    """The plan reordered at K (a field the executor's plan carries once it supports it)."""
    if "reorder_k" in {f.name for f in dataclasses.fields(plan)}:
        return dataclasses.replace(plan, reorder_k=k)

    @dataclasses.dataclass(frozen=True)
    class Reordered(DPPlan):
        reorder_k: int | None = None

    return Reordered(
        **{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}, reorder_k=k
    )


TWO = make_profile([(1.0, 0.0, 1.0, 400, 1000), (1.0, 1.0, 1.0, 400, 200)])


def test_two_layers_exact_iteration_time_against_ddp() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    assert plan.describe() == "c0[p1:0+100]@1 c1[p0:0+100]@0 | order 0 1"
    dp = simulate_dp(TWO, plan, 2, LINK)
    # Backward ends W1 at 4, W0 at 5. The collectives run in issue order: c0 4..9 (400 B at
    # 80 B/s), c1 9..14; layer 0's update at 14 starts the next forward; every iteration repeats.
    assert dp.iteration_s == pytest.approx(14.0)
    assert dp.compute_s == pytest.approx(5.0)
    assert dp.wire_s == pytest.approx(10.0)
    assert (dp.serial_s, dp.bound_s) == pytest.approx((15.0, 10.0))
    assert dp.efficiency == pytest.approx((15 - 14) / (15 - 10))
    assert dp.overlap_ratio == pytest.approx(0.1)  # of 10 s on the wire, W0 (1 s) overlaps
    assert dp.busy_s == pytest.approx({"w0.compute": 5.0, "w0.comm": 0.0, "w0.nic": 10.0})
    # Memory: params 800 + activations 1000 + 200, then W1 frees 200 and adds 400 of grads.
    assert dp.peak_memory_bytes == 2200
    ddp = simulate_ddp(TWO, 2, LINK, params=plan.params)
    # One bucket (< 1 MiB) of 800 B launched at 5, 10 s on the wire, step at 15.
    assert ddp.iteration_s == pytest.approx(15.0)
    assert ddp.efficiency == pytest.approx(0.0)
    assert ddp.overlap_ratio == 0.0


def flow_spans(result: object) -> dict[str, tuple[float, float]]:
    """First iteration's flows: name -> (start, end)."""
    schedule = result.schedule  # type: ignore[attr-defined]
    flows = [t for t in schedule.graph.tasks if t.kind == "allreduce" and t.iteration == 0]
    return {t.name: (schedule.start_s[t.id], schedule.end_s[t.id]) for t in flows}


def test_collectives_queue_in_issue_order() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    queued = simulate_dp(TWO, plan, 2, LINK)
    # c1 is ready at 5 but waits for c0 (issued first) to end, rather than sharing the link.
    assert flow_spans(queued) == {"ar c0": pytest.approx((4.0, 9.0)),
                                  "ar c1": pytest.approx((9.0, 14.0))}  # fmt: skip
    # DDP's buckets queue too: two of 400 B, the second starting as the first ends.
    ddp = simulate_ddp(TWO, 2, LINK, bucket_bytes=400, params=plan.params,
                       options=SimOptions(ddp_first_bucket_bytes=None))  # fmt: skip
    first, second = sorted(flow_spans(ddp).values())
    assert second[0] == pytest.approx(first[1]) and first[1] - first[0] == pytest.approx(5.0)


def test_compute_bound_and_wire_bound_limits() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    fast = simulate_dp(TWO, plan, 2, 1e12)
    assert fast.iteration_s == pytest.approx(5.0, rel=1e-6)
    slow = simulate_dp(TWO, plan, 2, AlphaBeta.from_bandwidth(8 * 0.4))  # 1000 s on the wire
    assert slow.wire_s == pytest.approx(2000.0)
    # Only the 4 s of compute between layer 0's update and the first chunk cannot overlap.
    assert slow.iteration_s == pytest.approx(2004.0)
    assert slow.iteration_s / slow.bound_s < 1.01


def test_perfectly_packed_schedule_has_efficiency_one() -> None:
    # Block 0 has no parameters; block 1's chunk (2 s) hides under the next forward of block 0.
    profile = make_profile([(2.0, 0.0, 0.0, 0, 0), (1.0, 1.0, 1.0, 400, 0)])
    plan = build_plan(params_of(profile), threshold_bytes=400, credit_bytes=400)
    dp = simulate_dp(profile, plan, 2, 200.0)
    assert dp.iteration_s == pytest.approx(5.0)
    assert dp.efficiency == pytest.approx(1.0)
    assert dp.overlap_ratio == pytest.approx(1.0)
    ddp = simulate_ddp(profile, 2, 200.0, params=plan.params)
    assert ddp.iteration_s == pytest.approx(7.0)
    assert ddp.efficiency == pytest.approx(0.0)


THREE = make_profile([(1.0, 0.0, 1.0, 400, 0), (1.0, 1.0, 1.0, 400, 0), (1.0, 1.0, 1.0, 400, 0)])


def test_issue_order_decides_which_chunk_goes_first_and_the_time() -> None:
    plan = build_plan(params_of(THREE), threshold_bytes=400, credit_bytes=400)
    backward = dataclasses.replace(plan, issue_order=(0, 1, 2))
    urgent = dataclasses.replace(plan, issue_order=(0, 2, 1))  # layer 0's chunk overtakes
    results = {}
    for name, p in (("backward", backward), ("urgent", urgent)):
        r = simulate_dp(THREE, p, 2, LINK)
        flows = [t for t in r.schedule.graph.tasks if t.kind == "allreduce" and t.iteration == 1]
        order = sorted(flows, key=lambda t: r.schedule.start_s[t.id])
        assert [t.name for t in order] == [f"ar c{c}" for c in p.issue_order]
        results[name] = r.iteration_s
    # Chunks ready at 5, 7, 8 (c0, c1, c2), one in flight, 5 s each, c0 first in both.
    # backward order: c1 10..15, c2 15..20, layer 0 updated at 20 -> a period of 20.
    # urgent: c2 10..15 (F0 may start at 15), c1 15..20 (F1 stalls until 20); the next
    # backward ends at 24 instead of 25, so the period is 19.
    assert results == pytest.approx({"backward": 20.0, "urgent": 19.0})
    first = {}
    for name, p in (("backward", backward), ("urgent", urgent)):
        r = simulate_dp(THREE, p, 2, LINK, iterations=1, options=SimOptions(warmup_iterations=0))
        first[name] = r.iteration_s
    assert first == pytest.approx({"backward": 20.0, "urgent": 15.0})


def test_backward_steps_reordered_at_k() -> None:
    assert backward_steps(3) == [("I", 2), ("W", 2), ("I", 1), ("W", 1), ("I", 0), ("W", 0)]
    # One layer per block: K=2 runs weight gradients 2, 1 then 3 (1-based), after all inputs.
    order = reordered_blocks([0, 1, 2], 3, 2)
    assert order == [1, 0, 2]
    assert backward_steps(3, order) == [("I", 2), ("I", 1), ("I", 0), ("W", 1), ("W", 0), ("W", 2)]
    assert (
        reordered_blocks([0, 1, 2], 3, 3) is None and reordered_blocks([0, 1, 2], 3, None) is None
    )
    # Two layers per block (conv + bn): K=3 is block 1's conv; block 0 follows, then the rest.
    assert reordered_blocks([0, 0, 1, 1, 2, 2], 4, 3) == [1, 0, 2, 3]


def test_reordering_makes_the_front_layer_ready_first() -> None:
    plan = build_plan(params_of(THREE), threshold_bytes=400, credit_bytes=400)
    plain = simulate_dp(THREE, plan, 2, LINK, iterations=1, options=SimOptions(warmup_iterations=0))
    k1 = simulate_dp(
        THREE, with_reorder(plan, 1), 2, LINK, iterations=1, options=SimOptions(warmup_iterations=0)
    )

    def first_weight_grad(r) -> str:
        grads = [t for t in r.schedule.graph.tasks if t.kind == "weight_grad"]
        return min(grads, key=lambda t: r.schedule.end_s[t.id]).name

    assert first_weight_grad(plain) == "W2"
    assert first_weight_grad(k1) == "W0"
    assert k1.compute_s == pytest.approx(plain.compute_s)


def test_more_replicas_predict_the_same() -> None:
    plan = build_plan(params_of(THREE), threshold_bytes=400, credit_bytes=800)
    one = simulate_dp(THREE, plan, 4, LINK)
    three = simulate_dp(THREE, plan, 4, LINK, options=SimOptions(replicas=3))
    assert three.iteration_s == pytest.approx(one.iteration_s)
    assert "w2.nic" in three.busy_s


def test_ddp_buckets_follow_torch_caps() -> None:
    params = [ParamInfo(i, f"p{i}", 300_000, 4, i) for i in range(4)]  # 1.2 MB each
    buckets = ddp_buckets(params, bucket_bytes=2_000_000)
    assert [[p.index for p in b] for b in buckets] == [[3], [2, 1], [0]]
    # DDP built with bucket_cap_mb: the first bucket has the same cap as the others.
    buckets = ddp_buckets(params, bucket_bytes=2_000_000, first_bucket_bytes=None)
    assert [[p.index for p in b] for b in buckets] == [[3, 2], [1, 0]]


def test_bad_input_is_a_user_error() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    with pytest.raises(UserError, match="another model"):
        simulate_dp(THREE, plan, 2, LINK)
    with pytest.raises(UserError, match="workers must be >= 1"):
        simulate_dp(TWO, plan, 0, LINK)
    with pytest.raises(UserError, match="positive bytes/s"):
        simulate_ddp(TWO, 2, -1.0)


def test_optimizer_updates_take_compute_time_and_are_charged_where_they_run() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    one_second_per_layer = SimOptions(update_s_per_byte=1 / 400)
    dp = simulate_dp(TWO, plan, 2, LINK, options=one_second_per_layer)
    # c0 ends at 13 -> U1 13..14 on the (idle) compute stream; c1 ends at 14 -> U0 14..15.
    assert dp.iteration_s == pytest.approx(15.0)
    assert (dp.compute_s, dp.update_s) == pytest.approx((5.0, 2.0))
    assert dp.busy_s["w0.compute"] == pytest.approx(7.0) and dp.busy_s["w0.comm"] == 0.0
    assert (dp.serial_s, dp.bound_s) == pytest.approx((17.0, 10.0))
    assert dp.efficiency == pytest.approx(2 / 7)
    apart = simulate_dp(
        TWO,
        plan,
        2,
        LINK,
        options=SimOptions(update_s_per_byte=1 / 400, updates_share_compute=False),
    )
    assert apart.busy_s["w0.comm"] == pytest.approx(2.0)
    ddp = simulate_ddp(TWO, 2, LINK, params=plan.params, options=one_second_per_layer)
    assert ddp.iteration_s == pytest.approx(17.0)  # the whole step after the last bucket


def test_communication_processor_time_is_charged_to_compute() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    per_message = SimOptions(comm_cpu_s_per_message=0.5)
    per_byte = SimOptions(comm_cpu_s_per_byte=0.5 / 400)  # 0.5 s per 400 B chunk
    # Free link: the processor is the only bottleneck and sharing conserves work, so the
    # period is 5 s of compute plus the charge: two chunks for cadence-dp, one bucket for DDP.
    assert simulate_dp(TWO, plan, 2, 1e12, options=per_message).iteration_s == pytest.approx(6.0)
    assert simulate_dp(TWO, plan, 2, 1e12, options=per_byte).iteration_s == pytest.approx(6.0)
    ddp = simulate_ddp(TWO, 2, 1e12, params=plan.params, options=per_message)
    assert ddp.iteration_s == pytest.approx(5.5)
    ddp = simulate_ddp(TWO, 2, 1e12, params=plan.params, options=per_byte)
    assert ddp.iteration_s == pytest.approx(6.0)  # its bucket holds 800 B
    # Slow link: 2 s per message hides under the 10 s transfers; 12 s does not. DDP's bucket
    # launches at 5 and its processor time ends at 17; cadence-dp runs 5 s + 2 x 12 s of work.
    hidden = SimOptions(comm_cpu_s_per_message=2.0)
    exposed = SimOptions(comm_cpu_s_per_message=12.0)
    assert simulate_dp(TWO, plan, 2, LINK, options=hidden).iteration_s == pytest.approx(14.0)
    assert simulate_ddp(TWO, 2, LINK, params=plan.params, options=hidden).iteration_s == 15.0
    assert simulate_dp(TWO, plan, 2, LINK, options=exposed).iteration_s == pytest.approx(29.0)
    ddp = simulate_ddp(TWO, 2, LINK, params=plan.params, options=exposed)
    assert ddp.iteration_s == pytest.approx(17.0)


@pytest.mark.parametrize("field", ["comm_cpu_s_per_message", "comm_cpu_s_per_byte"])
def test_negative_communication_processor_time_is_rejected(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        negative: dict[str, Any] = {field: -1.0}
        SimOptions(**negative)


def test_ddp_waits_for_the_buffer_broadcast_before_each_forward() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    link = AlphaBeta(alpha_s=0.5, beta_s_per_byte=1 / LINK)
    # 5 s of compute, then the 800 B bucket: 10 s on the wire plus 2 messages of 0.5 s.
    plain = simulate_ddp(TWO, 2, link, params=plan.params)
    assert plain.iteration_s == pytest.approx(16.0)
    assert simulate_ddp(TWO, 2, link, params=plan.params, buffer_bytes=0).iteration_s == 16.0
    # 80 B of buffers from rank 0 to rank 1: one message, 0.5 s + 1 s, before every forward.
    buffers = simulate_ddp(TWO, 2, link, params=plan.params, buffer_bytes=80)
    assert buffers.iteration_s == pytest.approx(17.5)
    assert buffers.wire_bytes == pytest.approx(plain.wire_bytes + 80)
    # One worker has nobody to broadcast to.
    assert simulate_ddp(TWO, 1, link, params=plan.params, buffer_bytes=80).iteration_s == 5.0
    with pytest.raises(UserError, match="buffer bytes must be >= 0"):
        simulate_ddp(TWO, 2, link, params=plan.params, buffer_bytes=-1)


def test_each_buffer_broadcast_call_takes_its_processor_time_from_the_forward() -> None:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    link = AlphaBeta(alpha_s=0.5, beta_s_per_byte=1 / LINK)
    charged = SimOptions(comm_cpu_s_per_message=2.0)
    # Without buffers only the bucket's call is charged, while the compute waits on the wire.
    base = simulate_ddp(TWO, 2, link, params=plan.params, options=charged)
    assert base.iteration_s == pytest.approx(16.0)
    # Each call's 2 s of processor time starts with the broadcast (1.5 s on the wire, which
    # gates the forward); what is left of it when the forward starts shares the processor
    # with the forward and delays it by as much: 0.5 s for one call, 2.5 s for two.
    for calls, delay in ((1, 0.5), (2, 2.5)):
        with_buffers = simulate_ddp(
            TWO, 2, link, params=plan.params, options=charged, buffer_bytes=80,
            buffer_broadcasts=calls,
        )  # fmt: skip
        assert with_buffers.iteration_s == pytest.approx(17.5 + delay)
    # Uncharged, the calls cost nothing beyond the wire.
    uncharged = simulate_ddp(TWO, 2, link, params=plan.params, buffer_bytes=80, buffer_broadcasts=2)
    assert uncharged.iteration_s == pytest.approx(17.5)
    with pytest.raises(UserError, match="buffer broadcasts must be >= 1"):
        simulate_ddp(TWO, 2, link, params=plan.params, buffer_bytes=80, buffer_broadcasts=0)


def test_transfers_kept_at_a_share_of_the_link_while_computing_slow_only_overlapped_ones() -> None:
    plan = build_plan(params_of(THREE), threshold_bytes=400, credit_bytes=800)
    opts = SimOptions(warmup_iterations=0, ddp_first_bucket_bytes=None)
    half = dataclasses.replace(opts, comm_rate_while_computing=0.5)
    plain, slowed = (
        simulate_dp(THREE, plan, 2, LINK, iterations=1, options=o) for o in (opts, half)
    )
    small, small_slowed = (
        simulate_ddp(THREE, 2, LINK, bucket_bytes=400, iterations=1, options=o)
        for o in (opts, half)
    )
    # Layer by layer, some transfer overlaps the backward pass: each strategy ends later, by
    # at most the overlapped part (no more than the compute) at half the rate.
    for a, b in ((plain, slowed), (small, small_slowed)):
        assert a.iteration_s < b.iteration_s <= a.iteration_s + a.compute_s
    # One bucket of every gradient goes out after the backward pass: nothing to slow.
    one, one_slowed = (simulate_ddp(THREE, 2, LINK, iterations=1, options=o) for o in (opts, half))
    assert one_slowed.iteration_s == one.iteration_s
    for share in (0.0, 1.01, float("nan")):
        with pytest.raises(ValueError, match="comm_rate_while_computing"):
            SimOptions(comm_rate_while_computing=share)
