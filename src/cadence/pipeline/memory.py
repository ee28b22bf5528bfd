"""Memory of each pipeline stage under a schedule: parameters, gradients, optimizer state, the
activations of the micro-batches in flight (forwarded, not yet backwarded), the kernels'
workspace while a block runs, the messages the stage has sent (our executor keeps every posted
send's tensor until the step's last action, when it waits on them all) and the buffers of the
messages it will receive (posted at the step's start, each freed by the action consuming it)."""

from __future__ import annotations

from dataclasses import dataclass

from cadence.errors import UserError
from cadence.pipeline.schedule import FORWARD, Action, Schedule
from cadence.pipeline.stages import StagePlan

# Optimizer state as a multiple of the parameter bytes.
_STATE_FACTOR = {"adam": 2.0, "adamw": 2.0, "sgd": 1.0, "sgd-nomomentum": 0.0}


def optimizer_state_factor(optimizer: str, momentum: float = 0.9) -> float:
    """Bytes of optimizer state per parameter byte (Adam: two moments; SGD: momentum buffer)."""
    if optimizer == "sgd" and momentum == 0:
        return 0.0
    try:
        return _STATE_FACTOR[optimizer]
    except KeyError:
        raise UserError(f"no memory model for optimizer {optimizer!r}") from None


def peak_in_flight(schedule: Schedule) -> tuple[int, ...]:
    """Per stage, the most micro-batches whose activations are held at once.

    A group's micro-batches are held from their own forward until their own backward; a
    forward adds them one by one and a backward releases them one by one.
    """
    peaks = []
    for acts in schedule.actions:
        held = peak = 0
        for a in acts:
            for _ in a.microbatches:
                held += 1 if a.kind == FORWARD else -1
                peak = max(peak, held)
        peaks.append(peak)
    return tuple(peaks)


@dataclass(frozen=True)
class StageMemory:
    """Predicted peak bytes of one stage."""

    params: int
    """Parameter bytes."""
    grads: int
    """Gradient bytes (one per parameter byte)."""
    optimizer_state: int
    """Optimizer state bytes."""
    activations: int
    """Peak bytes of activations held for backward plus what a forward or backward allocates
    besides (kernel workspace; with recomputation, the micro-batch being recomputed; one
    block's new weight gradients while they are accumulated) plus the step's sent messages."""
    in_flight: int
    """Peak micro-batches held at once."""

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer_state + self.activations


def stage_memory(
    plan: StagePlan,
    schedule: Schedule,
    microbatch_size: int,
    optimizer: str = "adam",
    momentum: float = 0.9,
) -> tuple[StageMemory, ...]:
    """Peak memory of every stage when `schedule` runs `plan` with `microbatch_size` samples."""
    if plan.num_stages != schedule.num_stages:
        raise UserError(f"stage plan has {plan.num_stages} stages, schedule {schedule.num_stages}")
    factor = optimizer_state_factor(optimizer, momentum)
    out = []
    for s, held in enumerate(peak_in_flight(schedule)):
        params = plan.param_bytes[s]
        activations = _activation_peak(plan, schedule, s, microbatch_size)
        out.append(StageMemory(params, params, int(factor * params), activations, held))
    return tuple(out)


def backward_extra(
    plan: StagePlan, schedule: Schedule, stage: int, microbatch_size: int, first: bool
) -> tuple[int, int]:
    """(bytes, bytes kept) of one micro-batch's backward on `stage`: what it allocates while it
    runs besides what its forward kept (kernel workspace; recomputed activations; after the
    stage's first backward, one block's new weight gradients being accumulated), and what its
    forward kept."""
    full = int(plan.activation_bytes_per_sample[stage] * microbatch_size)
    kept = full
    extra = forward_extra(plan, stage)
    if schedule.recompute:
        kept = int(plan.input_bytes_per_sample[stage] * microbatch_size)
        extra += full
    if not first and plan.grad_transient_bytes:
        extra += plan.grad_transient_bytes[stage]
    return extra, kept


def forward_extra(plan: StagePlan, stage: int) -> int:
    """Bytes a forward allocates while it runs besides what it keeps: kernel workspace."""
    return plan.workspace_bytes[stage] if plan.workspace_bytes else 0


def sent_bytes(plan: StagePlan, schedule: Schedule, action: Action, microbatch_size: int) -> int:
    """Bytes of the message `action` sends (0 when it sends none): a forward's activations to
    the next stage, a backward's input gradients to the previous one, K micro-batches at once."""
    forward = action.kind == FORWARD
    peer = action.stage + 1 if forward else action.stage - 1
    if not 0 <= peer < schedule.num_stages:
        return 0
    per_sample = plan.output_bytes_per_sample[action.stage if forward else peer]
    return int(per_sample * microbatch_size * len(action.microbatches))


def received_bytes(
    plan: StagePlan, schedule: Schedule, action: Action, microbatch_size: int
) -> int:
    """Bytes of the message `action` waits for (0 when none): its receive buffer is posted at
    the start of the step and freed when `action` is done with it."""
    from cadence.pipeline.validation import message_source

    source = message_source(schedule, action)
    return 0 if source is None else sent_bytes(plan, schedule, source, microbatch_size)


def _activation_peak(plan: StagePlan, schedule: Schedule, stage: int, microbatch_size: int) -> int:
    # Replay the stage's actions micro-batch by micro-batch, as the simulator does over time.
    acts = schedule.actions[stage]
    level = peak = sum(received_bytes(plan, schedule, a, microbatch_size) for a in acts)
    first = True
    for a in acts:
        for _ in a.microbatches:
            extra, kept = backward_extra(plan, schedule, stage, microbatch_size, first)
            if a.kind == FORWARD:
                peak = max(peak, level + kept + forward_extra(plan, stage))
                level += kept
            else:
                peak = max(peak, level + extra)
                level -= kept
                first = False
            peak = max(peak, level)
        level += sent_bytes(plan, schedule, a, microbatch_size)  # held until the step ends
        peak = max(peak, level)
        level -= received_bytes(plan, schedule, a, microbatch_size)
    return peak
