"""Figures read off a schedule, over the steady-state window, and the `SimResult` holding them.

Definitions (all per iteration, averaged over the measured iterations):
- iteration time T: time between the starts of consecutive iterations' first forwards;
- busy time of a stream: the time its tasks run; of a link: the time it moves bytes;
- overlap ratio: the share of the link's busy time during which compute is busy too;
- U: every operation one after another (all stream work + every collective alone, latency
  included); L: max over a worker's resources of the work each must do (its compute stream,
  including optimizer work placed there, its communication thread, its NIC's bytes at full
  bandwidth); efficiency E = (U - T) / (U - L), 1 = perfect.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cadence.errors import UserError
from cadence.sim.dp_adapter import Built
from cadence.sim.engine import Schedule
from cadence.sim.graph import LINK, Task, TaskGraph

Interval = tuple[float, float]
COMPUTE_KINDS = frozenset({"input", "forward", "loss", "input_grad", "weight_grad"})
COLLECTIVE_KINDS = frozenset({"allreduce", "collective"})


def _work_s(graph: TaskGraph, task: Task) -> float:
    """Seconds a task needs alone: a stream's duration, or a shared resource's latency plus
    its bytes at full rate."""
    res = graph.resources[task.resources[0]]
    if res.kind == LINK:
        return task.duration_s + task.nbytes / res.bytes_per_s
    return task.duration_s


def _union(intervals: Sequence[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _clip(intervals: Sequence[Interval], lo: float, hi: float) -> list[Interval]:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]


def _length(intervals: Sequence[Interval]) -> float:
    return sum(b - a for a, b in intervals)


def _intersection(xs: Sequence[Interval], ys: Sequence[Interval]) -> float:
    """Length of the intersection of two sorted, disjoint interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        total += max(0.0, hi - lo)
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class SimResult:
    """What one simulation predicts. Times are seconds per iteration in steady state."""

    strategy: str
    """"cadence-dp" or "ddp"."""
    world_size: int
    """Workers modelled."""
    iteration_s: float
    """Predicted iteration time."""
    compute_s: float
    """Forward, loss and backward time of one worker."""
    update_s: float
    """Optimizer-step time of one worker (DDP: one step; cadence-dp: the per-layer updates)."""
    wire_s: float
    """Time one NIC needs for an iteration's bytes at full bandwidth."""
    serial_s: float
    """U: every operation one after another."""
    bound_s: float
    """L: the busiest resource's work, the best any schedule can do."""
    overlap_ratio: float
    """Share of the link's busy time during which compute is busy too (0 without traffic)."""
    efficiency: float
    """E = (U - T) / (U - L); 1 when T reaches the bound, 0 when nothing overlaps."""
    busy_s: dict[str, float]
    """Busy seconds per iteration of each simulated resource, by name."""
    peak_memory_bytes: int
    """Peak of parameters + gradients + saved activations + packed buffers on worker 0."""
    wire_bytes: float
    """Bytes one NIC moves per iteration."""
    iterations: int
    """Iterations the figures are averaged over."""
    schedule: Schedule = field(repr=False, compare=False)
    """The full simulated schedule (for traces and plots)."""
    window: Interval = field(repr=False, compare=False, default=(0.0, 0.0))
    """The measured steady-state window (start, end) in simulated seconds."""
    base_memory_bytes: int = field(repr=False, compare=False, default=0)
    """Memory held throughout (parameters)."""

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (`iteration_time_s` first)."""
        return {
            "iteration_time_s": self.iteration_s,
            "strategy": self.strategy,
            "world_size": self.world_size,
            "compute_s": self.compute_s,
            "update_s": self.update_s,
            "wire_s": self.wire_s,
            "bound_s": self.bound_s,
            "serial_s": self.serial_s,
            "ratio_to_bound": self.iteration_s / self.bound_s if self.bound_s > 0 else 1.0,
            "overlap_ratio": self.overlap_ratio,
            "efficiency": self.efficiency,
            "busy_s": self.busy_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "wire_bytes": self.wire_bytes,
            "iterations": self.iterations,
        }

    def write_json(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        write_text(path, json.dumps({**self.summary(), **(extra or {})}, indent=2) + "\n")

    def memory_timeline(self, worker: int = 0) -> list[tuple[float, int]]:
        """(time, bytes in use) after each change on `worker`, from time 0."""
        return memory_timeline(self.schedule, self.base_memory_bytes, worker)

    def write_trace(self, path: str | Path) -> None:
        """Chrome-trace JSON (open in https://ui.perfetto.dev or chrome://tracing)."""
        from cadence.sim.trace import chrome_trace

        write_text(path, json.dumps(chrome_trace(self)) + "\n")

    def write_png(self, path: str | Path) -> None:
        """Timeline PNG, one row per resource, memory below."""
        from cadence.sim.plot import plot_timeline

        try:
            plot_timeline(self, path)
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_text(path: str | Path, text: str) -> None:
    """Write an output file; failure is a one-line UserError."""
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def memory_timeline(schedule: Schedule, base: int, worker: int = 0) -> list[tuple[float, int]]:
    changes: list[tuple[float, int]] = []
    for t in schedule.graph.tasks:
        if t.worker != worker:
            continue
        if t.mem_start:
            changes.append((schedule.start_s[t.id], t.mem_start))
        if t.mem_end:
            changes.append((schedule.end_s[t.id], t.mem_end))
    changes.sort(key=lambda c: c[0])
    out, level = [(0.0, base)], base
    for time, delta in changes:
        level += delta
        out.append((time, level))
    return out


def moving_interval(schedule: Schedule, tid: int) -> Interval:
    """When a flow's bytes move (after its fixed latency)."""
    task = schedule.graph.tasks[tid]
    return (schedule.start_s[tid] + task.duration_s, schedule.end_s[tid])


def analyse(built: Built, schedule: Schedule, base_memory: int) -> SimResult:
    """Steady-state figures of `schedule`."""
    graph = built.graph
    starts = [schedule.start_s[t] for t in built.iteration_starts]
    lo, hi = starts[built.measured_from], starts[-1]
    n = len(starts) - 1 - built.measured_from
    measured = [t for t in graph.tasks if built.measured_from <= t.iteration < len(starts) - 1]
    per_resource: dict[int, list[Interval]] = {r: [] for r in range(len(graph.resources))}
    for t in graph.tasks:
        for r in t.resources:
            if graph.resources[r].kind == LINK:
                per_resource[r].append(moving_interval(schedule, t.id))
            else:
                per_resource[r].append((schedule.start_s[t.id], schedule.end_s[t.id]))
    busy: dict[str, float] = {}
    unions: dict[int, list[Interval]] = {}
    for r, intervals in per_resource.items():
        unions[r] = _union(_clip(intervals, lo, hi))
        busy[graph.resources[r].name] = _length(unions[r]) / n
    compute = [r for r, res in enumerate(graph.resources) if res.name == "w0.compute"][0]
    nic = [r for r, res in enumerate(graph.resources) if res.name == "w0.nic"][0]
    link = graph.resources[nic]
    mine = [t for t in measured if t.worker == 0 and t.resources and schedule.did_work(t.id)]
    flows = [t for t in measured if t.kind in COLLECTIVE_KINDS]
    work: dict[int, float] = {}  # per worker-0 resource: seconds it must be busy
    for t in mine:
        r = t.resources[0]
        if t.kind not in COLLECTIVE_KINDS:
            work[r] = work.get(r, 0.0) + _work_s(graph, t) / n
    wire_bytes = sum(t.nbytes for t in flows) / n
    wire_s = wire_bytes / link.bytes_per_s
    latency_s = sum(t.duration_s for t in flows) / n
    compute_s = sum(_work_s(graph, t) for t in mine if t.kind in COMPUTE_KINDS) / n
    update_s = sum(_work_s(graph, t) for t in mine if t.kind == "update") / n
    serial = sum(work.values()) + wire_s + latency_s
    bound = max([wire_s, *work.values()])
    period = (hi - lo) / n
    if serial - bound > 1e-12 * max(serial, 1e-30):
        efficiency = (serial - period) / (serial - bound)
    else:
        efficiency = 1.0  # nothing could overlap: any schedule is perfect
    if abs(efficiency) < 1e-9:
        efficiency = 0.0  # rounding of a fully serial schedule
    link_busy = _length(unions[nic])
    overlap = _intersection(unions[nic], unions[compute]) / link_busy if link_busy > 0 else 0.0
    peak = max(level for _, level in memory_timeline(schedule, base_memory, 0))
    return SimResult(
        strategy=built.strategy,
        world_size=built.world_size,
        iteration_s=period,
        compute_s=compute_s,
        update_s=update_s,
        wire_s=wire_s,
        serial_s=serial,
        bound_s=bound,
        overlap_ratio=overlap,
        efficiency=efficiency,
        busy_s=busy,
        peak_memory_bytes=peak,
        wire_bytes=wire_bytes,
        iterations=n,
        schedule=schedule,
        window=(lo, hi),
        base_memory_bytes=base_memory,
    )
