"""Pipeline schedules as data: golden strings, the validator, and schedule names."""

import dataclasses

import pytest

from cadence.errors import UserError
from cadence.pipeline import (
    Action,
    build_schedule,
    gpipe,
    kfkb,
    message_source,
    one_f_one_b,
    validate,
)
from cadence.pipeline.schedule import parse_schedule_name


def test_gpipe_golden() -> None:
    assert str(gpipe(2, 3)) == "0F0 0F1 0F2 0B0 0B1 0B2\n1F0 1F1 1F2 1B0 1B1 1B2"


def test_1f1b_golden() -> None:
    assert str(one_f_one_b(3, 4)) == (
        "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3\n"
        "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3\n"
        "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3"
    )


def test_kfkb_groups_travel_together_and_k1_is_1f1b() -> None:
    assert str(kfkb(2, 4, 2)) == "0F0+1 0F2+3 0B0+1 0B2+3\n1F0+1 1B0+1 1F2+3 1B2+3"
    assert kfkb(3, 6, 1).actions == one_f_one_b(3, 6).actions
    assert kfkb(2, 4, 4).actions[0] == (Action.parse("0F0+1+2+3"), Action.parse("0B0+1+2+3"))


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("microbatches", [1, 2, 4, 6, 8])
def test_generated_schedules_are_valid(stages: int, microbatches: int) -> None:
    for k in [k for k in (1, 2, 3, 4) if microbatches % k == 0]:
        validate(kfkb(stages, microbatches, k))
    validate(gpipe(stages, microbatches))


def test_action_round_trips() -> None:
    for text in ("1F0", "0B2+3", "12F10+11+12"):
        assert str(Action.parse(text)) == text
    with pytest.raises(UserError, match="bad pipeline action 'F1'"):
        Action.parse("F1")


def _with_stage(schedule, stage: int, text: str):
    actions = list(schedule.actions)
    actions[stage] = tuple(Action.parse(t) for t in text.split())
    return dataclasses.replace(schedule, actions=tuple(actions))


def test_validator_finds_deadlock() -> None:
    # Stage 0 waits for stage 1's backward of 0 before forwarding 1; stage 1 wants 1 first.
    bad = _with_stage(gpipe(2, 2), 0, "0F0 0B0 0F1 0B1")
    with pytest.raises(UserError, match=r"deadlocks: 0B0 waits for 1B0; 1F1 waits for 0F1"):
        validate(bad)


@pytest.mark.parametrize(
    ("stage", "text", "needle"),
    [
        (1, "1F0 1F1 1B0", "stage 1 never runs B of micro-batch 1"),
        (1, "1F0 1F1 1F1 1B0 1B1", "stage 1 runs F of micro-batch 1 twice"),
        (1, "1F0 1F1 1B0 1B7", "names micro-batch 7, outside 0..1"),
        (0, "1F0 1F1 1B0 1B1", "action 1F0 is in stage 0's list"),
        (1, "1F0+1 1B0 1B1", "group micro-batches differently for F"),
        (1, "1B0 1F0 1F1 1B1", "runs 1B0 before the forward of micro-batch 0"),
    ],
)
def test_validator_rejects_missing_or_duplicate_actions(stage: int, text: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle) as info:
        validate(_with_stage(gpipe(2, 2), stage, text))
    assert "\n" not in str(info.value)


def test_schedule_names() -> None:
    assert parse_schedule_name("GPipe") == ("gpipe", 1)
    assert parse_schedule_name("1f1b") == ("kfkb", 1)
    assert parse_schedule_name("kfkb:3") == ("kfkb", 3)
    assert build_schedule("kfkb:2", 2, 4, recompute=True).recompute
    for bad in ("kfkb", "kfkb:0", "zb", "kfkb:x"):
        with pytest.raises(UserError, match="choose gpipe, 1f1b or kfkb:K"):
            parse_schedule_name(bad)
    needle = r"kfkb:3 needs K to divide the 4 micro-batches: use K in \[1, 2, 4\]"
    with pytest.raises(UserError, match=needle):
        build_schedule("kfkb:3", 2, 4)


def test_message_source_names_the_neighbour_action() -> None:
    schedule = kfkb(3, 4, 2)
    first, middle, last = (acts[0] for acts in schedule.actions)
    assert message_source(schedule, first) is None  # 0F0+1 reads the batch
    assert str(message_source(schedule, middle)) == "0F0+1"
    backward = Action.parse("1B2+3")
    assert str(message_source(schedule, backward)) == "2B2+3"
    assert message_source(schedule, Action.parse("2B0+1")) is None  # the loss is local
