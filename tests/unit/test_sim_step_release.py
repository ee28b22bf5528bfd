"""cadence-dp's simulation follows the runtime's ordinary loop: updates released by step() at
the backward's end, clipping after every reduction, buffers broadcast before each forward.

Tiny hand-checkable cases on `test_sim_dp`'s two-block profile TWO (blocks of 400 B of
parameters; backward: W1 ends at 4, W0 at 5) and 80 B/s links: one 400 B chunk takes 5 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.dp.plan import build_plan
from cadence.sim import SimOptions, simulate_ddp, simulate_dp
from cadence.sim.metrics import SimResult
from cadence.sim.options import CLIP_SHARE_OF_STEP
from cadence.sim.zero_graph import ZeroSimPlan, simulate_zero
from tests.unit.test_sim_cli import zoo_profile
from tests.unit.test_sim_dp import LINK, THREE, TWO, params_of

PLAN = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)  # one chunk per block


def _spans(result: SimResult, kind: str, iteration: int = 1) -> dict[str, tuple[float, float]]:
    """Worker 0's tasks of `kind` in `iteration`: name -> (start, end)."""
    s = result.schedule
    return {
        t.name: (s.start_s[t.id], s.end_s[t.id])
        for t in s.graph.tasks
        if t.kind == kind and t.iteration == iteration and t.worker == 0
    }


def _backward_end(result: SimResult, iteration: int = 1) -> float:
    grads = _spans(result, "weight_grad", iteration) | _spans(result, "input_grad", iteration)
    return max(end for _, end in grads.values())


def test_no_update_starts_before_the_backward_ends() -> None:
    # A free link: c0 (layer 1) is reduced at 4, during the backward, yet its update waits
    # for step() at the backward's end (5); the period stays the 5 s of compute.
    dp = simulate_dp(TWO, PLAN, 2, 1e12, options=SimOptions(warmup_iterations=0), iterations=2)
    for it in (0, 1):
        updates = _spans(dp, "update", it)
        assert set(updates) == {"U0", "U1"}
        assert min(start for start, _ in updates.values()) >= _backward_end(dp, it) - 1e-9
    assert _spans(dp, "allreduce", 0)["ar c0"][1] == pytest.approx(4.0, abs=1e-6)
    assert _spans(dp, "update", 0)["U1"][0] == pytest.approx(5.0, abs=1e-6)
    assert dp.iteration_s == pytest.approx(5.0, rel=1e-6)


def test_the_used_flags_follow_the_last_chunk_at_one_messages_latency() -> None:
    from cadence.comm.cost import AlphaBeta

    link = AlphaBeta(alpha_s=0.5, beta_s_per_byte=1 / LINK)
    dp = simulate_dp(TWO, PLAN, 2, link, iterations=1, options=SimOptions(clip=True))
    # c0 4..10 and c1 10..16 (two messages of 0.5 s each, then 5 s of bytes); the flags'
    # all-reduce follows, 16..17, with no bytes priced; the clip waits for it.
    flags = _spans(dp, "collective", 0)["ar flags"]
    assert flags == pytest.approx((16.0, 17.0))
    assert _spans(dp, "update", 0)["clip"][0] == pytest.approx(17.0)
    # A one-chunk plan carries its flags in its one all-reduce.
    one = build_plan(params_of(TWO), threshold_bytes=800, credit_bytes=800)
    assert "ar flags" not in _spans(simulate_dp(TWO, one, 2, link), "collective")


def test_a_chunk_completing_after_step_is_applied_at_once_an_earlier_one_after_all() -> None:
    # THREE: three blocks of 400 B, one chunk each, 400 B in flight at most, 400 B take 1 s.
    # W2 ends at 5: c0 5..6. W1 at 7: c0 is completed to make room (before step(), which
    # comes at the backward's end, 8), c1 goes 7..8. W0 at 8: c1 is completed (after step():
    # layer 1 is updated at once), c2 goes 8..9 and is completed at 9 (layer 0 at once);
    # layer 2's update, held since 7, runs once every chunk and the flags are reduced: last.
    plan = build_plan(params_of(THREE), threshold_bytes=400, credit_bytes=400)
    dp = simulate_dp(THREE, plan, 2, 400.0, iterations=1, options=SimOptions(warmup_iterations=0))
    s = dp.schedule
    ran = {t.name: s.start_s[t.id] for t in s.graph.tasks
           if t.kind == "update" and t.worker == 0 and s.did_work(t.id)}  # fmt: skip
    flows = _spans(dp, "allreduce", 0)
    assert [flows[f"ar c{c}"] for c in range(3)] == [(5.0, 6.0), (7.0, 8.0), (8.0, 9.0)]
    assert ran == {"U1": 8.0, "U0": 9.0, "U2": 9.0}
    # Each update twice: at its chunk's completion if step() has happened by then, else
    # deferred behind every reduction (in completion order); one of the two does the work.
    updates = [t for t in s.graph.tasks if t.kind == "update" and t.worker == 0]
    assert [(t.name, s.did_work(t.id)) for t in updates] == [
        ("U2", False), ("U1", True), ("U0", True), ("U2", True), ("U1", False), ("U0", False)
    ]


def test_with_clip_the_first_update_starts_after_the_last_reduction_and_the_clip() -> None:
    step = 7 / (3 * 800)  # s per byte: the clip over 800 B of gradients takes 1 s
    plain = simulate_dp(TWO, PLAN, 2, LINK, options=SimOptions(update_s_per_byte=step))
    clip = SimOptions(update_s_per_byte=step, clip=True)
    assert clip.clip_s(800) == pytest.approx(CLIP_SHARE_OF_STEP * step * 800) == 1.0
    dp = simulate_dp(TWO, PLAN, 2, LINK, options=clip)
    last = _spans(dp, "allreduce")["ar c1"][1]
    assert last == max(end for _, end in _spans(dp, "allreduce").values())
    clip_task = _spans(dp, "update")["clip"]
    assert clip_task[0] == pytest.approx(last) and clip_task[1] == pytest.approx(last + 1.0)
    layers = {k: v for k, v in _spans(dp, "update").items() if k != "clip"}
    assert min(start for start, _ in layers.values()) == pytest.approx(last + 1.0)
    # Without the clip U1 runs at c0's end (9) and U0 at c1's (14): a period of 14 + 7/6.
    # With it: c1 ends 14; clip 14..15; U1 15..(15 + 7/6), then U0: 17 + 1/3.
    assert plain.iteration_s == pytest.approx(14.0 + 7 / 6)
    assert dp.iteration_s == pytest.approx(17.0 + 1 / 3)
    # DDP steps after its backward and its bucket anyway: the clip goes in between.
    ddp = simulate_ddp(TWO, 2, LINK, params=PLAN.params, options=clip)
    unclipped = SimOptions(update_s_per_byte=step)
    ddp_plain = simulate_ddp(TWO, 2, LINK, params=PLAN.params, options=unclipped)
    assert ddp.iteration_s == pytest.approx(ddp_plain.iteration_s + 1.0)
    bucket = next(iter(_spans(ddp, "allreduce").values()))
    assert _spans(ddp, "update")["clip"][0] == pytest.approx(bucket[1])


def test_zero_clips_its_shard_then_all_reduces_the_norm_before_its_step() -> None:
    plan = ZeroSimPlan(stage=2)
    plain = simulate_zero(TWO, plan, 2, LINK, 1, update_s_per_byte=0.0)
    clipped = simulate_zero(TWO, plan, 2, LINK, 1, update_s_per_byte=0.0, clip=True)
    norm = _spans(clipped, "collective", 0)["ar norm"]
    step = _spans(clipped, "update", 0)["step"]
    assert step[0] >= norm[1] and "ar norm" not in _spans(plain, "collective", 0)
    # 8 bytes on 2 workers at 80 B/s: 0.1 s more per iteration on this wire-bound case.
    assert clipped.iteration_s == pytest.approx(plain.iteration_s + 0.1)


def test_buffers_are_broadcast_before_each_forward_and_the_forward_waits() -> None:
    plain = simulate_dp(TWO, PLAN, 2, LINK)
    assert plain.iteration_s == pytest.approx(14.0)
    dp = simulate_dp(TWO, PLAN, 2, LINK, buffer_bytes=800)
    # Wire-bound: from c0's issue at 4, each NIC carries 800 B of gradients and 800 B of
    # buffers (sent from the backward's end at 5, beside c0, then c1): 20 s; F0 waits for
    # the broadcast, so the period is 24 instead of 14.
    assert dp.iteration_s == pytest.approx(24.0)
    assert dp.wire_bytes == pytest.approx(plain.wire_bytes + 800)
    for it in (1, 2):
        broadcast = _spans(dp, "collective", it)["buffers"]
        forward = _spans(dp, "forward", it)
        assert min(start for start, _ in forward.values()) >= broadcast[1] - 1e-9
        assert broadcast[0] == pytest.approx(_backward_end(dp, it - 1))
    # One worker has nobody to broadcast to.
    assert simulate_dp(TWO, PLAN, 1, LINK, buffer_bytes=800).iteration_s == pytest.approx(
        simulate_dp(TWO, PLAN, 1, LINK).iteration_s
    )


@pytest.mark.parametrize("strategy", ["cadence-dp", "ddp", "zero"])
def test_the_clip_flag_prices_the_clip_in_simulate_and_plan(
    strategy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    common = ["--model", "cnn", "--profile", str(profile), "--workers", "2",
              "--bandwidth", "100mbit", "--optimizer-step", "0.05"]  # fmt: skip

    def predicted(*extra: str) -> float:
        out = tmp_path / "r.json"
        assert main(["simulate", *common, "--strategy", strategy, "--json", str(out), *extra]) == 0
        return float(json.loads(out.read_text())["iteration_time_s"])

    assert predicted("--clip") > predicted()
    assert main(["plan", "dp", *common, "--thresholds", "64kib", "--clip"]) == 0
    assert "cadence-dp" in capsys.readouterr().out
