"""Reject schedules that miss or repeat work, or that would deadlock, before any process runs.

The deadlock check replays the schedule symbolically with the executor's rules: sends never
block (they are posted asynchronously), a forward on stage s > 0 waits for the message of stage
s - 1's forward of the same group, and a backward on stage s < S - 1 waits for stage s + 1's
backward of the same group. If no stage can move and some still have work, it deadlocks.
"""

from __future__ import annotations

from collections import Counter

from cadence.errors import UserError
from cadence.pipeline.schedule import BACKWARD, FORWARD, Action, Schedule


def _check_coverage(schedule: Schedule) -> None:
    S, M = schedule.num_stages, schedule.num_microbatches
    if len(schedule.actions) != S:
        raise UserError(f"schedule has {len(schedule.actions)} action lists for {S} stages")
    for s, acts in enumerate(schedule.actions):
        for a in acts:
            if a.stage != s:
                raise UserError(f"action {a} is in stage {s}'s list")
            bad = [m for m in a.microbatches if not 0 <= m < M]
            if bad:
                raise UserError(f"action {a} names micro-batch {bad[0]}, outside 0..{M - 1}")
        for kind in (FORWARD, BACKWARD):
            counts = Counter(m for a in acts if a.kind == kind for m in a.microbatches)
            missing = [m for m in range(M) if counts[m] == 0]
            twice = [m for m in range(M) if counts[m] > 1]
            if missing:
                raise UserError(f"stage {s} never runs {kind} of micro-batch {missing[0]}")
            if twice:
                raise UserError(f"stage {s} runs {kind} of micro-batch {twice[0]} twice")


def _check_messages(schedule: Schedule) -> None:
    # Adjacent stages must cut the micro-batches into the same groups: one group, one message.
    for s in range(schedule.num_stages - 1):
        for kind in (FORWARD, BACKWARD):
            mine = {a.microbatches for a in schedule.actions[s] if a.kind == kind}
            theirs = {a.microbatches for a in schedule.actions[s + 1] if a.kind == kind}
            if mine != theirs:
                odd = sorted(mine ^ theirs)[0]
                raise UserError(
                    f"stages {s} and {s + 1} group micro-batches differently for {kind} "
                    f"(e.g. {'+'.join(map(str, odd))}): a message must carry the same group"
                )


def message_source(schedule: Schedule, action: Action) -> Action | None:
    """The action on a neighbouring stage whose message `action` consumes, or None.

    A forward on stage s > 0 needs the activations of stage s - 1's forward of the same group;
    a backward on stage s < S - 1 needs the gradients of stage s + 1's backward of it. These are
    the only cross-stage dependencies: what the executor waits for and a simulator must model
    (message bytes: `StagePlan.output_bytes_per_sample` of the sending forward's stage, or of the
    receiving backward's stage, times the group's samples).
    """
    if action.kind == FORWARD:
        if action.stage == 0:
            return None
        return Action(action.stage - 1, FORWARD, action.microbatches)
    if action.stage == schedule.num_stages - 1:
        return None
    return Action(action.stage + 1, BACKWARD, action.microbatches)


def _waits_for(schedule: Schedule, a: Action, done: list[set[tuple[str, tuple[int, ...]]]],
               forwarded: list[set[int]]) -> str | None:
    """What `a` still waits for, or None if it can run now."""
    if a.kind == BACKWARD:
        unforwarded = [m for m in a.microbatches if m not in forwarded[a.stage]]
        if unforwarded:
            raise UserError(f"stage {a.stage} runs {a} before the forward of micro-batch "
                            f"{unforwarded[0]}")
    source = message_source(schedule, a)
    if source is not None and (source.kind, source.microbatches) not in done[source.stage]:
        return str(source)
    return None


def validate(schedule: Schedule) -> None:
    """Raise a one-line `UserError` if `schedule` misses or repeats an action, or deadlocks."""
    _check_coverage(schedule)
    _check_messages(schedule)
    S = schedule.num_stages
    position = [0] * S
    done: list[set[tuple[str, tuple[int, ...]]]] = [set() for _ in range(S)]
    forwarded: list[set[int]] = [set() for _ in range(S)]
    while True:
        moved = False
        for s in range(S):
            acts = schedule.actions[s]
            while position[s] < len(acts):
                a = acts[position[s]]
                if _waits_for(schedule, a, done, forwarded) is not None:
                    break
                done[s].add((a.kind, a.microbatches))
                if a.kind == FORWARD:
                    forwarded[s].update(a.microbatches)
                position[s] += 1
                moved = True
        if all(position[s] == len(schedule.actions[s]) for s in range(S)):
            return
        if not moved:
            stuck = []
            for s in range(S):
                if position[s] < len(schedule.actions[s]):
                    a = schedule.actions[s][position[s]]
                    stuck.append(f"{a} waits for {_waits_for(schedule, a, done, forwarded)}")
            raise UserError(f"schedule {schedule.name} deadlocks: " + "; ".join(stuck))
