"""Chrome-trace JSON of a simulated schedule: one process per worker, one thread per resource,
a memory counter per worker. Opens in Perfetto (https://ui.perfetto.dev) and chrome://tracing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cadence.sim.graph import LINK

if TYPE_CHECKING:
    from cadence.sim.metrics import SimResult

_US = 1e6


def chrome_trace(result: SimResult) -> dict[str, Any]:
    """The trace as a JSON-ready dict (`{"traceEvents": [...]}`, times in microseconds)."""
    schedule = result.schedule
    graph = schedule.graph
    events: list[dict[str, Any]] = []
    workers = sorted({r.worker for r in graph.resources})
    for w in workers:
        events.append(
            {"ph": "M", "name": "process_name", "pid": w, "tid": 0, "args": {"name": f"worker {w}"}}
        )
    for r, res in enumerate(graph.resources):
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": res.worker,
                "tid": r,
                "args": {"name": res.name},
            }
        )
    for t in graph.tasks:
        if not t.resources:
            continue
        start, end = schedule.start_s[t.id], schedule.end_s[t.id]
        args: dict[str, Any] = {"iteration": t.iteration}
        if t.nbytes:
            args["wire_bytes"] = t.nbytes
            args["latency_s"] = t.duration_s
        for r in t.resources:
            res = graph.resources[r]
            common = {"name": t.name, "cat": t.kind, "pid": res.worker, "tid": r, "args": args}
            if end > start or res.kind == LINK:
                events.append({**common, "ph": "X", "ts": start * _US, "dur": (end - start) * _US})
            else:
                events.append({**common, "ph": "i", "s": "t", "ts": start * _US})
    for w in workers:
        for time, level in result.memory_timeline(w):
            events.append(
                {
                    "ph": "C",
                    "name": "memory",
                    "pid": w,
                    "tid": 0,
                    "ts": time * _US,
                    "args": {"bytes": level},
                }
            )
    lo, hi = result.window
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "strategy": result.strategy,
            "world_size": result.world_size,
            "iteration_time_s": result.iteration_s,
            "measured_window_s": [lo, hi],
        },
    }
