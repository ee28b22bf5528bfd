"""Gradients ready layer by layer inside their block (`cadence.sim.grad_ready`): the points,
the cut backward, and what the adapters do with them, on blocks worked out by hand."""

from __future__ import annotations

import pytest

from cadence.dp.plan import ParamInfo, build_plan
from cadence.profile import BlockProfile, Profile
from cadence.sim import SimOptions, simulate_ddp, simulate_dp
from cadence.sim.grad_ready import Piece, point_of, ready_points, split_backward


def conv_norm_params() -> list[ParamInfo]:
    """Block 0: a convolution (layer 0, 4000 B weight + 40 B bias) then its norm (layer 1,
    2 x 40 B); block 1: one linear layer (layer 2, 400 B)."""
    return [
        ParamInfo(0, "b0.0.weight", 1000, 4, 0),
        ParamInfo(1, "b0.0.bias", 10, 4, 0),
        ParamInfo(2, "b0.1.weight", 10, 4, 1),
        ParamInfo(3, "b0.1.bias", 10, 4, 1),
        ParamInfo(4, "b1.weight", 100, 4, 2),
    ]


def test_a_norm_after_a_convolution_is_ready_at_its_share_of_the_block_bytes() -> None:
    points = ready_points(conv_norm_params(), (0, 0, 0, 0, 1), 2)
    # Back to front: the norm's 80 B of 4120 B, then the convolution at the block's end.
    assert points.shares == ((80 / 4120, 1.0), (1.0,))
    assert points.point == (1, 1, 0, 0, 0)


def test_a_block_without_parameters_has_its_end_as_its_one_point() -> None:
    points = ready_points([ParamInfo(0, "b1.weight", 100, 4, 0)], (1,), 3)
    assert points.shares == ((1.0,), (1.0,), (1.0,))


def test_joined_steps_are_cut_on_both_together_and_the_last_point_ends_the_weight_step() -> None:
    inputs, weights = split_backward(2.0, 6.0, (0.25, 0.5, 1.0), joined=True)
    assert inputs == [Piece("I", 2.0, 0)]  # 0.25 of 8 s: the input step's end
    assert weights == [Piece("W", 2.0, 1), Piece("W", 4.0, 2)]


def test_a_reordered_weight_step_is_cut_on_its_own_time() -> None:
    inputs, weights = split_backward(2.0, 6.0, (0.5, 1.0), joined=False)
    assert inputs == [Piece("I", 2.0, None)]
    assert weights == [Piece("W", 3.0, 0), Piece("W", 3.0, 1)]


def test_every_point_gets_a_piece_even_in_a_block_that_takes_no_time() -> None:
    inputs, weights = split_backward(0.0, 0.0, (0.3, 0.6, 1.0), joined=True)
    assert [p.point for p in inputs + weights if p.point is not None] == [0, 1, 2]
    assert sum(p.seconds for p in inputs + weights) == 0.0


@pytest.mark.parametrize(
    ("name", "point"), [("W3", (3, 1)), ("I3:0", (3, 0)), ("W3:0", (3, 0)), ("I3", None)]
)
def test_piece_names_give_back_their_points(name: str, point: tuple[int, int] | None) -> None:
    assert point_of(name, [(1.0,)] * 3 + [(0.5, 1.0)]) == point


def profile_of(blocks: list[tuple[float, float, float, int]]) -> Profile:
    """blocks: (forward, input-grad, weight-grad, param bytes); no activations, no loss."""
    bs = tuple(BlockProfile(f"b{i}", f, ig, wg, pb, 0, 0, 0) for i, (f, ig, wg, pb) in
               enumerate(blocks))  # fmt: skip
    total = sum(b.total_s for b in bs)
    return Profile("toy", 1, (1,), bs, total, 0.0, 1, 0, "cpu", 1, "test", 0, "cpu_accounted")


def flow_starts(result: object) -> dict[str, float]:
    """Flow name -> its start in the measured iteration, from that iteration's first forward."""
    schedule = result.schedule  # type: ignore[attr-defined]
    tasks = [t for t in schedule.graph.tasks if t.iteration == 1 and t.worker == 0]
    start = min(schedule.start_s[t.id] for t in tasks if t.kind == "forward")
    return {t.name: schedule.start_s[t.id] - start for t in tasks if t.kind == "allreduce"}


# Block 0 (convolution + norm: 4 s of backward), block 1 (the head: no backward time). The
# norm's gradients are 80 B of the block's 4120: ready 4 * 80 / 4120 s into its backward, which
# starts after the two 1 s forwards.
PROFILE = profile_of([(1.0, 2.0, 2.0, 4120), (1.0, 0.0, 0.0, 400)])
NORM_READY_S = 2.0 + 4.0 * 80 / 4120


def test_the_norm_s_chunk_leaves_before_its_convolution_s_backward() -> None:
    params = conv_norm_params()
    plan = build_plan(params, threshold_bytes=80, credit_bytes=10**6)
    (norm,) = [c for c, chunk in enumerate(plan.chunks)
               if {s.param for s in chunk.segments} == {2, 3}]  # fmt: skip
    options = SimOptions(calibrate_compute=False)
    by_layer = simulate_dp(PROFILE, plan, 2, 1e6, iterations=1, options=options)
    # Ready at the norm's point, well before the block's backward ends at 6 s.
    assert flow_starts(by_layer)[f"ar c{norm}"] == pytest.approx(NORM_READY_S)
    assert NORM_READY_S < 6.0


def test_ddp_buckets_close_at_their_last_layer_s_point() -> None:
    # The head and the norm (480 B) fill the first bucket; the convolution the second.
    options = SimOptions(calibrate_compute=False, ddp_first_bucket_bytes=None)
    params = conv_norm_params()
    by_layer = simulate_ddp(PROFILE, 2, 1e3, bucket_bytes=480, options=options, params=params)
    # 480 B at 1000 B/s leave during the convolution's backward, not after it (6 s).
    assert flow_starts(by_layer)["ar b0"] == pytest.approx(NORM_READY_S)
    assert NORM_READY_S < 6.0
