"""The pipeline simulator adapter on tiny hand-checkable cases."""

from __future__ import annotations

import pytest

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.pipeline.memory import stage_memory
from cadence.pipeline.schedule import build_schedule
from cadence.pipeline.stages import plan_stages
from cadence.profile.record import BlockProfile, Profile
from cadence.sim.metrics import SimResult
from cadence.sim.pipeline_adapter import (
    Affine,
    Piecewise,
    simulate_pipeline,
    stage_costs,
    stage_peaks,
)

T = 0.04  # each block: forward T, input-grad T, weight-grad T at the profiled batch
FAST = 1e15  # bytes/s: messages take no time


def _profile(blocks: int = 2, batch: int = 4, t: float = T, act: int = 400) -> Profile:
    items = tuple(
        BlockProfile(f"b{i}", t, t, t, 1000, act, 40 * batch, 0) for i in range(blocks)
    )
    # iteration_s = loss_s = 0: no calibration, the block times are taken as they are.
    return Profile("toy", batch, (10,), items, 0.0, 0.0, 1, 0, "cpu", 1, "x", 0, "cpu_accounted")


def test_gpipe_and_1f1b_makespan_is_m_plus_s_minus_1_slots() -> None:
    # 2 stages of one block; 4 micro-batches of 1 sample: f = T/4, b = 2T/4 per micro-batch.
    f, b = T / 4, 2 * T / 4
    for name in ("gpipe", "1f1b"):
        r = simulate_pipeline(_profile(), stages=2, microbatches=4, schedule=name, link=FAST)
        assert r.iteration_s == pytest.approx((4 + 2 - 1) * (f + b))
        assert r.compute_s == pytest.approx(4 * (f + b))
        assert r.world_size == 2


def test_kfkb_runs_groups_as_units() -> None:
    # K = 2: two groups of 2 micro-batches, a slot is 2f + 2b: (G + S - 1) slots.
    f, b = T / 4, 2 * T / 4
    r = simulate_pipeline(_profile(), stages=2, microbatches=4, schedule="kfkb:2", link=FAST)
    assert r.iteration_s == pytest.approx((2 + 2 - 1) * 2 * (f + b))


def test_kfkb_sends_fewer_messages_of_the_same_bytes() -> None:
    def flows(name: str) -> list[float]:
        r = simulate_pipeline(_profile(), stages=2, microbatches=4, schedule=name, link=FAST)
        return [t.nbytes for t in r.schedule.graph.tasks if t.kind in ("activation", "gradient")]

    one, two = flows("1f1b"), flows("kfkb:2")
    assert len(one) == 8 and len(two) == 4  # one message per group and direction
    assert sum(one) == pytest.approx(sum(two))  # 40 bytes per sample each way, 4 samples
    assert sum(one) == pytest.approx(2 * 4 * 40)


def test_latency_favours_fewer_messages() -> None:
    slow = AlphaBeta(alpha_s=2 * T, beta_s_per_byte=0.0)  # every message costs 2T
    times = {
        name: simulate_pipeline(
            _profile(), stages=2, microbatches=4, schedule=name, link=slow
        ).iteration_s
        for name in ("1f1b", "kfkb:2")
    }
    # 1F1B's critical path crosses more messages, each paying the latency; kFkB:2 trades
    # that for a larger bubble (a slot of 2f + 2b), which is cheaper here.
    assert times["kfkb:2"] < times["1f1b"]


def test_bandwidth_bound_step_is_at_least_the_wire_time() -> None:
    rate = 100.0  # bytes/s: 160 bytes each way take 1.6 s, far more than the compute
    r = simulate_pipeline(_profile(), stages=2, microbatches=4, schedule="1f1b", link=rate)
    assert r.wire_s == pytest.approx(160 / rate)
    assert r.iteration_s >= r.wire_s
    assert r.bound_s == pytest.approx(r.wire_s)


def test_a_links_token_bucket_passes_a_message_after_an_idle_spell_at_once() -> None:
    rate = 100.0  # bytes/s: a micro-batch's 40-byte message takes 0.4 s at the rate
    def step(bucket: float) -> SimResult:
        return simulate_pipeline(
            _profile(), stages=2, microbatches=4, schedule="1f1b", link=rate,
            link_bucket_bytes=bucket,
        )  # fmt: skip

    plain = step(0.0)
    assert plain.iteration_s >= plain.wire_s
    # A 40-byte bucket: a message that finds its link idle for 0.4 s passes at once.
    bucket = step(40.0)
    assert bucket.iteration_s < plain.iteration_s - 0.4
    assert bucket.iteration_s >= bucket.compute_s / 2  # each stage still computes its part


def test_peak_memory_grows_with_k_and_matches_the_memory_model() -> None:
    profile = _profile(batch=8)
    plan = plan_stages(profile, 2)
    peaks = []
    for name in ("1f1b", "kfkb:2", "kfkb:4", "gpipe"):
        for recompute in (False, True):
            r = simulate_pipeline(
                profile, stages=2, microbatches=8, schedule=name, link=FAST, recompute=recompute
            )
            schedule = build_schedule(name, 2, 8, recompute)
            model = tuple(m.total for m in stage_memory(plan, schedule, 1))
            assert stage_peaks(r) == model
            if not recompute:
                peaks.append(stage_peaks(r)[0])
    # Memory grows with K; GPipe holds every micro-batch too (kFkB with K = M/2 may top it by a
    # group's receive buffer, freed only when the whole group is done).
    assert peaks[0] < peaks[1] < peaks[2] and peaks[1] < peaks[3]
    assert r.peak_memory_bytes == max(stage_peaks(r))


def test_recompute_costs_a_forward_per_micro_batch() -> None:
    kw = {"stages": 2, "microbatches": 4, "schedule": "gpipe", "link": FAST}
    plain = simulate_pipeline(_profile(), **kw)  # type: ignore[arg-type]
    again = simulate_pipeline(_profile(), recompute=True, **kw)  # type: ignore[arg-type]
    assert again.compute_s == pytest.approx(plain.compute_s + 4 * T / 4)


def test_two_profiles_give_the_line_through_them() -> None:
    small, large = _profile(batch=2, t=0.03), _profile(batch=8, t=0.06)
    costs = stage_costs([small, large], ((0, 1), (1, 2)))
    # forward of a stage: 0.03 s at 2 samples, 0.06 s at 8 -> 0.02 + 0.005 / sample
    assert costs.forward[0](2) == pytest.approx(0.03)
    assert costs.forward[0](4) == pytest.approx(0.04)
    assert costs.forward[0](1) == pytest.approx(0.025)  # the end segment, extended
    assert costs.forward[0](16) == pytest.approx(0.10)
    assert costs.backward[1](8) == pytest.approx(0.12)
    assert Affine(0.0, 0.5)(4) == 2.0


def test_profiles_at_every_size_are_taken_as_measured() -> None:
    # Not linear in the size (a CPU's per-call overhead, caches): 1 -> 10 ms, 2 -> 12, 4 -> 40.
    # One line through the three would misjudge every size; each measured size is exact.
    sizes = {1: 0.010, 2: 0.012, 4: 0.040}
    costs = stage_costs([_profile(batch=b, t=t) for b, t in sizes.items()], ((0, 1), (1, 2)))
    for b, t in sizes.items():
        assert costs.forward[1](b) == pytest.approx(t)
        assert costs.backward[0](b) == pytest.approx(2 * t)
    assert costs.forward[0](3) == pytest.approx(0.026)  # halfway between 2 and 4
    # the same size profiled twice: the mean
    twice = stage_costs([_profile(batch=2, t=0.01), _profile(batch=2, t=0.03)], ((0, 1), (1, 2)))
    assert twice.forward[0](2) == pytest.approx(0.02)
    assert twice.forward[0](4) == pytest.approx(0.04)  # one size: proportional


def test_piecewise_rejects_unsorted_or_short_input() -> None:
    assert Piecewise((1, 4), (0.01, 0.01))(100) == pytest.approx(0.01)
    assert Piecewise((2, 4), (0.02, 0.01))(9) == 0.0  # never negative past a falling end
    with pytest.raises(ValueError, match="must increase"):
        Piecewise((4, 2), (0.1, 0.2))
    with pytest.raises(ValueError, match="at least two sizes"):
        Piecewise((4,), (0.1,))


def test_bad_input_is_one_clear_line() -> None:
    with pytest.raises(UserError, match=r"3 micro-batches do not divide the batch of 4"):
        simulate_pipeline(_profile(), stages=2, microbatches=3, link=FAST)
    with pytest.raises(UserError, match=r"cannot be split into 3 stages"):
        simulate_pipeline(_profile(), stages=3, microbatches=2, link=FAST)
    with pytest.raises(UserError, match=r"kfkb:3 needs K to divide"):
        simulate_pipeline(_profile(), stages=2, microbatches=4, schedule="kfkb:3", link=FAST)


def _tasks(r: SimResult) -> dict[str, tuple[float, float]]:
    sched = r.schedule
    return {t.name: (sched.start_s[t.id], sched.end_s[t.id]) for t in sched.graph.tasks}


def test_messages_between_two_stages_cross_one_at_a_time() -> None:
    # GPipe, 2 micro-batches of 2 samples: stage 0's two activations (80 bytes, 0.8 s each at
    # 100 B/s) leave 0.02 s apart, and cross in turn on the pair's one connection: the first
    # at the link's full rate, the second after it.
    r = simulate_pipeline(_profile(), stages=2, microbatches=2, schedule="gpipe", link=100.0)
    times = _tasks(r)
    first, second = times["0F0>1"], times["0F1>1"]
    assert first[1] - first[0] == pytest.approx(0.8)
    assert second[0] == pytest.approx(first[1])
    assert second[1] - second[0] == pytest.approx(0.8)


def _1f1b_tasks(runtime: str) -> dict[str, tuple[float, float]]:
    """1F1B, 2 stages, 4 micro-batches, messages of 4 s at 100 B/s, on `runtime`."""
    r = simulate_pipeline(
        _profile(), stages=2, microbatches=4, schedule="1f1b", link=100.0, runtime=runtime
    )
    return _tasks(r)


def test_torchs_runtime_posts_a_receive_after_the_action_before_it() -> None:
    # 1F1B, 2 stages: torch's runtime posts stage 1's receive of micro-batch 1 after its
    # forward of micro-batch 0, so the activation waits for that forward to end; ours posts
    # every receive at the step's start, so it follows the first activation at once.
    ours, torchs = _1f1b_tasks("cadence"), _1f1b_tasks("torch")
    assert ours["0F1>1"][0] == pytest.approx(ours["0F0>1"][1])
    assert ours["0F1>1"][0] < ours["1F0"][1]
    assert torchs["0F1>1"][0] == pytest.approx(torchs["1F0"][1])
    with pytest.raises(UserError, match="torch's pipeline runtime cannot run kfkb"):
        simulate_pipeline(
            _profile(), stages=2, microbatches=4, schedule="kfkb:2", link=100.0, runtime="torch"
        )


def test_a_receive_posted_mid_step_waits_for_the_message_queued_back_before_it() -> None:
    # Over gloo a posted receive sends the sender a notice on their one connection, behind the
    # messages the receiver has queued to it. 1F1B on 2 stages, messages of 4 s at 100 B/s:
    # torch's runtime posts stage 0's receive of micro-batch 1's gradients after its forward
    # of micro-batch 2, whose activations (their receive already posted) were queued just
    # before, so those gradients cross only after those activations; ours posted it at the
    # step's start, and the two cross at once, one each way.
    ours, torchs = _1f1b_tasks("cadence"), _1f1b_tasks("torch")
    assert ours["1B1>0"][0] < ours["0F2>1"][1]
    assert torchs["1B1>0"][0] == pytest.approx(torchs["0F2>1"][1])
    # Stage 0's receive of micro-batch 0's gradients is posted after its forward of 1, whose
    # activations stage 1 is not yet receiving: the notice leaves first, nothing waits.
    assert torchs["1B0>0"][0] < torchs["0F1>1"][1]
