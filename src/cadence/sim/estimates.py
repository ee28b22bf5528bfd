"""Alpha-beta estimate of one training iteration under tensor parallelism (alone and x data
parallel), from the same per-block costs the event simulator uses, and the per-worker memory
formulas the planner prices every strategy's state with.

Tensor parallel (`cadence/tp/`): every collective of `gpt_tp_plan` blocks the layer that
issued it, so the iteration is compute/t + the plan's communication; x data parallel adds the
all-reduce of 1/t of the gradients across replicas, overlapped with backward. It is an
estimate, not an event simulation; `cadence plan strategies` labels it so.
"""

from __future__ import annotations

from dataclasses import dataclass

from cadence.comm.cost import AlphaBeta
from cadence.sim.compute import BlockCosts


@dataclass(frozen=True)
class Estimate:
    """What an estimate predicts for one iteration of one worker."""

    iteration_s: float
    """Predicted iteration time (steady state)."""
    compute_s: float
    """Forward, loss and backward seconds of one worker under this strategy."""
    wire_s: float
    """Seconds the worker's link needs for the iteration's bytes, back to back."""
    wire_bytes: float
    """Bytes on one worker's link per iteration (the busier direction)."""


def bytes_on_wire(seconds: float, link: AlphaBeta) -> float:
    return seconds / link.beta_s_per_byte if link.beta_s_per_byte > 0 else 0.0


def tp_estimate(
    costs: BlockCosts,
    link: AlphaBeta,
    tp_comm_s: float,
    tp_size: int,
    dp_size: int = 1,
    update_s: float = 0.0,
) -> Estimate:
    """Tensor parallel of size t (x data parallel of size d): the group computes the batch of
    t data-parallel workers split t ways (`costs` are one worker's batch), its blocking
    collectives take `tp_comm_s`, and with d > 1 the all-reduce of 1/t of the gradients
    across replicas overlaps the backward pass (it starts with the backward)."""
    compute = costs.compute_s
    backward = sum(costs.input_grad_s) + sum(costs.weight_grad_s)
    dp_s = 0.0
    if dp_size > 1:
        dp_s = link.time("allreduce", "ring", sum(costs.param_bytes) // tp_size, dp_size)
    exposed = max(0.0, dp_s - backward)
    iteration = compute + tp_comm_s + exposed + update_s / tp_size
    wire = tp_comm_s + dp_s
    return Estimate(iteration, compute, wire, bytes_on_wire(wire, link))


def state_bytes(param_bytes: int, optimizer_slots: int, strategy: str, n: int) -> int:
    """Parameters + gradients + optimizer state per worker (fp32), by ZeRO's formulas:
    `strategy` is "replicated" (data parallel), "zero1", "zero2", "zero3", "sharded" (tensor
    parallel or a pipeline stage holding 1/n of everything) or "ps-worker" (no optimizer)."""
    p = param_bytes
    table = {
        "replicated": 2 * p + optimizer_slots * p,
        "zero1": 2 * p + optimizer_slots * p // n,
        "zero2": p + (1 + optimizer_slots) * p // n,
        "zero3": (2 + optimizer_slots) * p // n,
        "sharded": (2 + optimizer_slots) * p // n,
        "ps-worker": 2 * p,
    }
    if strategy not in table:
        raise ValueError(f"unknown memory layout {strategy!r}")
    return table[strategy]
