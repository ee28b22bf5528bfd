"""Alpha-beta estimates of one training iteration for the parameter server and tensor
parallelism (alone and x data parallel), from the same per-block costs the event simulator uses
(ZeRO has an event-graph adapter: `cadence.sim.zero_graph`).

Each function walks what cadence's executor for that strategy does, with one communication
thread that runs collectives in submission order (`_Comm`), and one compute stream:

- Parameter server (`cadence/ps/`): a worker pushes each block's gradients when its backward
  ends; each server holds 1/S of the parameters, so its link carries W/S workers' pushes and
  pulls; the servers step; the next forward of a block waits only for that block's pull
  (per-block ready flags; pulls go out front block first, as the priorities order them).
- Tensor parallel (`cadence/tp/`): every collective of `gpt_tp_plan` blocks the layer that
  issued it, so the iteration is compute/t + the plan's communication; x data parallel adds
  the all-reduce of 1/t of the gradients across replicas, overlapped with backward.

They are estimates, not event simulations: one worker stands for all, and concurrent flows on a
link are not modelled beyond the server fan-in. `cadence plan strategies` labels them so.
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


class _Comm:
    """One communication thread: collectives run one at a time, in submission order."""

    def __init__(self) -> None:
        self.free_s = 0.0
        self.busy_s = 0.0

    def run(self, submitted_s: float, seconds: float) -> float:
        self.free_s = max(self.free_s, submitted_s) + seconds
        self.busy_s += seconds
        return self.free_s

    def run_by_priority(
        self, ready_s: list[float], seconds: list[float], priority: list[int]
    ) -> list[float]:
        """Run one job per index; whenever free, the ready job earliest in `priority` goes
        (a priority queue, not a fixed order: nothing waits behind a job not yet ready)."""
        rank = {job: i for i, job in enumerate(priority)}
        pending, done = set(range(len(ready_s))), [0.0] * len(ready_s)
        while pending:
            now = max(self.free_s, min(ready_s[j] for j in pending))
            job = min((j for j in pending if ready_s[j] <= now), key=rank.__getitem__)
            done[job] = self.run(now, seconds[job])
            pending.remove(job)
        return done


def _backward_ends(costs: BlockCosts, start_s: float) -> list[float]:
    """When each block's backward ends (ordinary order, back to front), from `start_s`."""
    ends = [0.0] * len(costs.forward_s)
    t = start_s
    for b in reversed(range(len(ends))):
        t += costs.input_grad_s[b] + costs.weight_grad_s[b]
        ends[b] = t
    return ends


def bytes_on_wire(seconds: float, link: AlphaBeta) -> float:
    return seconds / link.beta_s_per_byte if link.beta_s_per_byte > 0 else 0.0


def ps_estimate(
    costs: BlockCosts,
    link: AlphaBeta,
    workers: int,
    servers: int,
    colocated: bool,
    update_s: float = 0.0,
    iterations: int = 4,
    front_first: bool = True,
) -> Estimate:
    """One BSP parameter-server iteration in steady state. Each server holds 1/S of every
    block. Servers on hosts of their own: a server's link carries W/S workers' flows at once,
    so a push or pull moves at S/W of the link when W > S. Servers co-located with the W
    workers (S = W): 1/W of each block stays on the host, and each host's link carries its
    worker's (W-1)/W share one way and its server's (W-1)/W share the other. The servers'
    update of a block (`update_s` x its share of the bytes, spread over S servers) follows the
    last worker's push of it; a co-located server's step also takes its host's processor.
    Pushes and pulls that are ready at once go front block first (`front_first`: layer or
    graph priorities on a chain of blocks) or back block first, the order gradients appear
    (FIFO).
    """
    nb = len(costs.forward_s)
    factor = (workers - 1) / workers if colocated else max(1.0, workers / servers)
    share = [pb / max(1, sum(costs.param_bytes)) for pb in costs.param_bytes]

    def transfer_s(b: int) -> float:
        return link.alpha_for("p2p") + costs.param_bytes[b] * link.beta_s_per_byte * factor

    order = list(range(nb)) if front_first else list(reversed(range(nb)))
    pulled = [0.0] * nb
    push = _Comm()
    # Separate servers: pushes leave on the uplink, answers come back on the downlink. Co-located:
    # the host's uplink carries its worker's pushes and its server's answers, so they queue
    # together (answers after this iteration's pushes: conservative, same bytes).
    pull = push if colocated else _Comm()
    starts = []
    t = 0.0
    for _ in range(iterations):
        starts.append(max(t, pulled[0]))
        for b in range(nb):
            t = max(t, pulled[b]) + costs.forward_s[b]
        ends = _backward_ends(costs, t + costs.loss_s)
        t = ends[0] + (update_s / servers if colocated else 0.0)  # the host's server steps
        sizes = [transfer_s(b) for b in range(nb)]
        pushed = push.run_by_priority(ends, sizes, order)
        updated = [pushed[b] + update_s * share[b] / servers for b in range(nb)]
        pulled = pull.run_by_priority(updated, sizes, order)
    starts.append(max(t, pulled[0]))
    period = (starts[-1] - starts[1]) / (iterations - 1)
    # Busier direction of a worker's link: co-located, its pushes and its server's replies go
    # out; otherwise its pushes (pulls come in).
    sent = sum(costs.param_bytes) * (2 * factor if colocated else 1.0)
    return Estimate(period, costs.compute_s, sent * link.beta_s_per_byte, sent)


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
