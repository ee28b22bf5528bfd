"""When each stage posts the receive of each message it consumes, under each runtime: pure.

Over gloo a message moves only once its receiver has posted the receive, so where a runtime
posts it decides when a message can cross, whatever its sender does. The two runtimes that run
a cadence `Schedule` (`cadence.pipeline.executor`) post them differently:

- `cadence`: every receive of the step at its start (the executor's `_prefetch`): a message
  crosses as soon as its sender has computed it.
- `torch`: torch.distributed.pipelining's runtime lowers the compute lists to lists with send
  and receive actions (`schedules._add_send_recv`): it visits the ranks in turn, takes each
  rank's next compute action once the message it needs has been sent (placed on its sender's
  list), and places a message's receive on the receiver's list at the moment the sending
  action is placed, so after whatever the receiver had placed by then. The receive is posted
  when the receiver's runtime reaches it: after that earlier action has run.

`receive_points` gives, per consuming action, the action of the same stage after which its
receive is posted (None: at the step's start), which the simulator turns into a dependency of
the message (`cadence.sim.pipeline_adapter`).
"""

from __future__ import annotations

from cadence.errors import UserError
from cadence.pipeline.schedule import FORWARD, Action, Schedule
from cadence.pipeline.validation import message_source

RUNTIMES = ("cadence", "torch")


def torch_runtime_supports(schedule: Schedule) -> bool:
    """Whether torch's runtime can run `schedule`: one micro-batch per action, no recompute."""
    return not schedule.recompute and all(
        len(a.microbatches) == 1 for acts in schedule.actions for a in acts
    )


def receive_points(schedule: Schedule, runtime: str) -> dict[Action, Action | None]:
    """For each action that consumes a message, the action of its stage after which the
    runtime posts its receive (None: before the stage's first action)."""
    if runtime not in RUNTIMES:
        raise UserError(f"pipeline runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
    if runtime == "torch" and not torch_runtime_supports(schedule):
        raise UserError(
            f"torch's pipeline runtime cannot run {schedule.name} (grouped micro-batches or "
            "recomputation): it runs on cadence's"
        )
    consumers = [a for acts in schedule.actions for a in acts if message_source(schedule, a)]
    if runtime == "cadence":
        return dict.fromkeys(consumers)
    return _torch_points(schedule)


def _torch_points(schedule: Schedule) -> dict[Action, Action | None]:
    """The lowering's placements (module doc), one rank per stage."""
    S = schedule.num_stages
    placed: list[list[Action]] = [[] for _ in range(S)]  # compute actions placed, per stage
    # consumer -> the receiver's last placed action when its receive was placed
    points: dict[Action, Action | None] = {}
    sent: set[Action] = set()
    pos = [0] * S
    remaining = sum(len(acts) for acts in schedule.actions)
    while remaining:
        progress = False
        for s in range(S):
            acts = schedule.actions[s]
            if pos[s] == len(acts):
                continue
            action = acts[pos[s]]
            source = message_source(schedule, action)
            if source is not None and source not in sent:
                continue  # its receive is not placed yet: try the next rank
            placed[s].append(action)
            pos[s] += 1
            remaining -= 1
            progress = True
            receiver = _receiver(schedule, action)
            if receiver is not None:
                sent.add(action)
                stage = placed[receiver.stage]
                points[receiver] = stage[-1] if stage else None
        if not progress:  # the validator has replayed the schedule: unreachable
            raise ValueError(f"schedule {schedule.name} cannot be lowered: it would deadlock")
    return points


def _receiver(schedule: Schedule, action: Action) -> Action | None:
    """The action that consumes `action`'s message, or None if it sends none."""
    peer = action.stage + (1 if action.kind == FORWARD else -1)
    if not 0 <= peer < schedule.num_stages:
        return None
    consumer = Action(peer, action.kind, action.microbatches)
    return consumer if message_source(schedule, consumer) == action else None
