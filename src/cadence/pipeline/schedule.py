"""Pipeline schedules as data: one list of actions per stage.

An action is a forward or a backward of a *group* of micro-batches on one stage. The group
travels as one message: a stage forwards the K micro-batches one by one, then sends their
activations to the next stage concatenated in a single tensor (and gradients likewise on the
way back). GPipe and 1F1B use groups of one; kFkB runs 1F1B over groups of K.

Actions print as short strings: `1F0` is stage 1 forwarding micro-batch 0, `0B2+3` is stage 0
running the backward of micro-batches 2 and 3 received in one message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cadence.errors import UserError

FORWARD = "F"
BACKWARD = "B"
_ACTION_RE = re.compile(r"^(\d+)([FB])(\d+(?:\+\d+)*)$")


@dataclass(frozen=True)
class Action:
    """One compute step of one stage on a group of micro-batches."""

    stage: int
    """Stage index (0 = first)."""
    kind: str
    """`FORWARD` ("F") or `BACKWARD` ("B")."""
    microbatches: tuple[int, ...]
    """Micro-batch ids computed one after another; their tensors share one message."""

    def __post_init__(self) -> None:
        if self.kind not in (FORWARD, BACKWARD):
            raise ValueError(f"action kind must be F or B, got {self.kind!r}")
        if not self.microbatches:
            raise ValueError("an action needs at least one micro-batch")

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{'+'.join(map(str, self.microbatches))}"

    @classmethod
    def parse(cls, text: str) -> Action:
        """Inverse of `str()`: `"1F0"`, `"0B2+3"`."""
        match = _ACTION_RE.match(text.strip())
        if match is None:
            raise UserError(f"bad pipeline action {text!r}: expected e.g. 1F0 or 0B2+3")
        stage, kind, mbs = match.groups()
        return cls(int(stage), kind, tuple(int(m) for m in mbs.split("+")))


@dataclass(frozen=True)
class Schedule:
    """A whole pipeline schedule: what every stage runs, in order, in one training step."""

    name: str
    """Short name, e.g. "gpipe", "1f1b", "kfkb:2"."""
    num_stages: int
    """Number of pipeline stages S."""
    num_microbatches: int
    """Micro-batches M per step; each action list covers each of them once forward, once back."""
    group_size: int
    """Micro-batches per message K (1 for GPipe and 1F1B)."""
    actions: tuple[tuple[Action, ...], ...]
    """`actions[s]` is stage s's action list."""
    recompute: bool = False
    """Keep only each stage's input during forward and recompute activations in backward."""

    def stage_string(self, stage: int) -> str:
        """Stage `stage`'s actions as one line, e.g. `0F0 0F1 0B0 0B1`."""
        return " ".join(str(a) for a in self.actions[stage])

    def __str__(self) -> str:
        return "\n".join(self.stage_string(s) for s in range(self.num_stages))


def _groups(num_microbatches: int, group_size: int) -> list[tuple[int, ...]]:
    return [
        tuple(range(start, start + group_size))
        for start in range(0, num_microbatches, group_size)
    ]


def _check_sizes(num_stages: int, num_microbatches: int, group_size: int = 1) -> None:
    if num_stages < 1:
        raise UserError(f"a pipeline needs at least 1 stage (got {num_stages})")
    if num_microbatches < 1:
        raise UserError(f"--microbatches must be at least 1 (got {num_microbatches})")
    if group_size < 1:
        raise UserError(f"kfkb needs K >= 1 (got {group_size})")
    if num_microbatches % group_size:
        divisors = [k for k in range(1, num_microbatches + 1) if num_microbatches % k == 0]
        raise UserError(
            f"kfkb:{group_size} needs K to divide the {num_microbatches} micro-batches: "
            f"use K in {divisors}"
        )


def gpipe(num_stages: int, num_microbatches: int, recompute: bool = False) -> Schedule:
    """All forwards, then all backwards (in micro-batch order), one micro-batch per message."""
    _check_sizes(num_stages, num_microbatches)
    groups = _groups(num_microbatches, 1)
    actions = tuple(
        tuple(Action(s, FORWARD, g) for g in groups) + tuple(Action(s, BACKWARD, g) for g in groups)
        for s in range(num_stages)
    )
    return Schedule("gpipe", num_stages, num_microbatches, 1, actions, recompute)


def kfkb(
    num_stages: int, num_microbatches: int, group_size: int, recompute: bool = False
) -> Schedule:
    """1F1B over groups of `group_size` micro-batches; each group is one message.

    Stage s first forwards min(S - 1 - s, G) groups (warm-up), then alternates one forward and
    one backward group, then drains the remaining backwards.
    """
    _check_sizes(num_stages, num_microbatches, group_size)
    groups = _groups(num_microbatches, group_size)
    per_stage = []
    for s in range(num_stages):
        warmup = min(num_stages - 1 - s, len(groups))
        acts = [Action(s, FORWARD, g) for g in groups[:warmup]]
        for i in range(len(groups) - warmup):
            acts += [Action(s, FORWARD, groups[warmup + i]), Action(s, BACKWARD, groups[i])]
        acts += [Action(s, BACKWARD, g) for g in groups[len(groups) - warmup :]]
        per_stage.append(tuple(acts))
    name = "1f1b" if group_size == 1 else f"kfkb:{group_size}"
    return Schedule(name, num_stages, num_microbatches, group_size, tuple(per_stage), recompute)


def one_f_one_b(num_stages: int, num_microbatches: int, recompute: bool = False) -> Schedule:
    """1F1B: kFkB with K = 1."""
    return kfkb(num_stages, num_microbatches, 1, recompute)


SCHEDULE_HELP = "gpipe, 1f1b or kfkb:K (K micro-batches per message; K must divide M)"


def parse_schedule_name(name: str) -> tuple[str, int]:
    """`"gpipe"` -> ("gpipe", 1), `"1f1b"` -> ("kfkb", 1), `"kfkb:4"` -> ("kfkb", 4)."""
    text = name.strip().lower()
    if text == "gpipe":
        return "gpipe", 1
    if text == "1f1b":
        return "kfkb", 1
    if text.startswith("kfkb:") and text[5:].isdigit() and int(text[5:]) >= 1:
        return "kfkb", int(text[5:])
    raise UserError(f"unknown pipeline schedule {name!r}: choose {SCHEDULE_HELP}")


def build_schedule(
    name: str, num_stages: int, num_microbatches: int, recompute: bool = False
) -> Schedule:
    """The named schedule (see `parse_schedule_name`) for S stages and M micro-batches."""
    kind, k = parse_schedule_name(name)
    if kind == "gpipe":
        return gpipe(num_stages, num_microbatches, recompute)
    return kfkb(num_stages, num_microbatches, k, recompute)
