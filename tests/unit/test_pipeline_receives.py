"""`receive_points`: where each runtime posts the receive of each message (pure)."""

from __future__ import annotations

import pytest

from cadence.errors import UserError
from cadence.pipeline.receives import receive_points
from cadence.pipeline.schedule import Action, build_schedule


def _a(text: str) -> Action:
    return Action.parse(text)


def test_ours_posts_every_receive_at_the_steps_start() -> None:
    schedule = build_schedule("kfkb:2", 2, 4, False)
    points = receive_points(schedule, "cadence")
    assert points and set(points.values()) == {None}
    assert set(points) == {_a("1F0+1"), _a("1F2+3"), _a("0B0+1"), _a("0B2+3")}


def test_torchs_lowering_of_1f1b_on_two_stages() -> None:
    # Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3, stage 1 F0 B0 F1 B1 F2 B2 F3 B3. The lowering
    # visits the stages in turn and places a receive when its message's sender is placed:
    # stage 1's receive of F(m) lands after its F(m-1), stage 0's of B(m) after its F(m+1).
    points = receive_points(build_schedule("1f1b", 2, 4, False), "torch")
    assert points == {
        _a("1F0"): None, _a("1F1"): _a("1F0"), _a("1F2"): _a("1F1"), _a("1F3"): _a("1F2"),
        _a("0B0"): _a("0F1"), _a("0B1"): _a("0F2"), _a("0B2"): _a("0F3"), _a("0B3"): _a("0B2"),
    }  # fmt: skip


@pytest.mark.parametrize(("name", "stages", "microbatches"), [
    ("gpipe", 2, 4), ("1f1b", 2, 4), ("1f1b", 4, 8), ("gpipe", 3, 6), ("1f1b", 3, 3),
])  # fmt: skip
def test_the_lowering_is_torchs(name: str, stages: int, microbatches: int) -> None:
    # Against torch's own lowering of the same compute lists (a private function: this test
    # says so when torch changes it).
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    kind = schedules._ComputationType
    schedule = build_schedule(name, stages, microbatches, False)
    actions = {
        s: [
            schedules._Action(
                a.stage, kind.FORWARD if a.kind == "F" else kind.FULL_BACKWARD, a.microbatches[0]
            )
            for a in acts
        ]
        for s, acts in enumerate(schedule.actions)
    }
    lowered = schedules._add_send_recv(actions, stage_to_rank=lambda s: s, num_stages=stages)
    theirs: dict[Action, Action | None] = {}
    for acts in lowered.values():
        last = None
        for a in acts:
            t = a.computation_type
            if t in (kind.RECV_F, kind.RECV_B):
                theirs[Action(a.stage_index, "F" if t == kind.RECV_F else "B",
                              (a.microbatch_index,))] = last  # fmt: skip
            elif t in (kind.FORWARD, kind.FULL_BACKWARD):
                last = Action(a.stage_index, "F" if t == kind.FORWARD else "B",
                              (a.microbatch_index,))  # fmt: skip
    assert receive_points(schedule, "torch") == theirs


def test_what_a_runtime_cannot_run_is_refused() -> None:
    with pytest.raises(UserError, match="cannot run kfkb:2"):
        receive_points(build_schedule("kfkb:2", 2, 4, False), "torch")
    with pytest.raises(UserError, match="must be one of cadence, torch"):
        receive_points(build_schedule("1f1b", 2, 4, False), "mpi")
