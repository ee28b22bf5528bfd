"""The task graph the engine runs: tasks on resources, with dependencies and priorities.

Two kinds of resource:
- a *stream* runs one task at a time (a worker's compute, a communication thread, a server
  CPU); among ready tasks the lowest `priority` goes first, then the earliest ready, then the
  earliest added;
- a *link* (a worker's NIC) is shared fairly: every flow crossing it gets an equal share of its
  bandwidth, and a flow over several links moves at its slowest share.

A task with no resource is a pure delay (or a zero-time marker joining dependencies).
A task may be conditional: it works only if another task has ended by the time it is ready
(`Task.work_if_ended`), and a deferred copy of it ends with it when it did (`Task.ends_with`).
A processor shared by two threads (compute and the optimizer work of a communication thread
on one core) is a link of rate 1 whose "bytes" are seconds of work (`add_work`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

STREAM = "stream"
LINK = "link"


@dataclass(frozen=True)
class Resource:
    """Something tasks occupy."""

    name: str
    """Unique name, e.g. "w0.compute" or "w0.nic"; rows of the timeline."""
    kind: str
    """STREAM (one task at a time) or LINK (fair bandwidth sharing)."""
    bytes_per_s: float = 0.0
    """Bandwidth of a LINK; unused for a STREAM."""
    worker: int = 0
    """Worker it belongs to (memory and reports are per worker)."""
    bucket_bytes: float = 0.0
    """A LINK's token bucket (tc's tbf, as on the emulated cluster's links): tokens gather at
    the link's rate while no flow crosses it, up to this many bytes, and a flow that starts on
    the idle link moves that many of its bytes at once. 0: a real link, every byte at the rate."""
    slowed_by: int | None = None
    """A LINK whose rate drops while another resource is in use (a NIC whose transfers need
    processor time on cores its worker's compute keeps busy): that resource's index."""
    slowed_share: float = 1.0
    """The share of `bytes_per_s` a LINK keeps while `slowed_by` is in use."""


@dataclass(frozen=True)
class Task:
    """One operation. Built through `TaskGraph.add`; the engine fills in the times."""

    id: int
    """Index in `TaskGraph.tasks`."""
    name: str
    """Short label for traces, e.g. "F3", "W5", "ar c7"."""
    kind: str
    """Category: forward, input_grad, weight_grad, loss, allreduce, update, marker, ..."""
    resources: tuple[int, ...]
    """Resource indices: one stream, one or more links (a flow), or none (a delay)."""
    duration_s: float
    """Stream time, or for a flow the fixed latency paid before its bytes move."""
    nbytes: float
    """Bytes a flow moves over each of its links (0 for stream tasks)."""
    priority: float
    """Lower runs first on a stream when several tasks are ready."""
    worker: int
    """Worker whose program it belongs to."""
    iteration: int
    """Training iteration it belongs to."""
    mem_start: int = 0
    """Bytes this worker allocates when the task starts (negative frees)."""
    mem_end: int = 0
    """Bytes this worker allocates when the task ends (negative frees)."""
    deps: tuple[int, ...] = ()
    """Tasks that must end before this one may start."""
    work_if_ended: int | None = None
    """A task this one does its work only if it had ended when this one became ready;
    otherwise this one ends at once with no work (a runtime's "apply now if released")."""
    ends_with: int | None = None
    """A task whose work makes this one unnecessary: if that task ends having worked, this one
    ends with it, with no work, whatever its own deps (the deferred copy of a conditional)."""


class TaskGraph:
    """Resources plus tasks; append-only, tasks may only depend on earlier tasks."""

    def __init__(self) -> None:
        self.resources: list[Resource] = []
        self.tasks: list[Task] = []
        self._resource_index: dict[str, int] = {}

    def resource(
        self,
        name: str,
        kind: str,
        bytes_per_s: float = 0.0,
        worker: int = 0,
        bucket_bytes: float = 0.0,
        slowed_by: int | None = None,
        slowed_share: float = 1.0,
    ) -> int:
        """Index of resource `name`, creating it on first use (`Resource` says what the
        arguments mean)."""
        if name in self._resource_index:
            return self._resource_index[name]
        if kind not in (STREAM, LINK):
            raise ValueError(f"resource kind must be {STREAM!r} or {LINK!r}, got {kind!r}")
        if kind == LINK and not bytes_per_s > 0:
            raise ValueError(f"link {name!r} needs a positive bandwidth, got {bytes_per_s}")
        if bucket_bytes and kind != LINK:
            raise ValueError(f"only a link has a token bucket ({name!r} is a {kind})")
        if not (math.isfinite(bucket_bytes) and bucket_bytes >= 0):
            raise ValueError(f"bucket_bytes of {name!r} must be >= 0, got {bucket_bytes}")
        if slowed_by is not None and (kind != LINK or not 0 <= slowed_by < len(self.resources)):
            raise ValueError(f"only a link is slowed, by an existing resource ({name!r})")
        if not (math.isfinite(slowed_share) and 0 < slowed_share <= 1):
            raise ValueError(f"slowed_share of {name!r} must be in (0, 1], got {slowed_share}")
        self._resource_index[name] = len(self.resources)
        self.resources.append(
            Resource(name, kind, bytes_per_s, worker, bucket_bytes, slowed_by, slowed_share)
        )
        return self._resource_index[name]

    def add(
        self,
        name: str,
        kind: str,
        *,
        resources: Iterable[int] = (),
        duration_s: float = 0.0,
        nbytes: float = 0.0,
        deps: Iterable[int | None] = (),
        priority: float = 0.0,
        worker: int = 0,
        iteration: int = 0,
        mem_start: int = 0,
        mem_end: int = 0,
        work_if_ended: int | None = None,
        ends_with: int | None = None,
    ) -> int:
        """Append a task and return its id; `None` entries in `deps` are skipped
        (`work_if_ended`, `ends_with`: see `Task`)."""
        tid = len(self.tasks)
        res = tuple(resources)
        dep_list = [d for d in deps if d is not None]
        if any(not 0 <= d < tid for d in dep_list):
            raise ValueError(f"task {name!r} depends on a task not yet added: {dep_list}")
        kinds = {self.resources[r].kind for r in res}
        if len(kinds) > 1 or (kinds == {STREAM} and len(res) != 1):
            raise ValueError(f"task {name!r} must use one stream or only links, got {res}")
        if duration_s < 0 or nbytes < 0:
            raise ValueError(f"task {name!r} has a negative duration or size")
        self.tasks.append(
            Task(
                tid,
                name,
                kind,
                res,
                duration_s,
                nbytes,
                priority,
                worker,
                iteration,
                mem_start,
                mem_end,
                tuple(dep_list),
                work_if_ended,
                ends_with,
            )
        )
        return tid

    def add_work(self, name: str, kind: str, resource: int, seconds: float, **kw: Any) -> int:
        """Add `seconds` of work on one resource: a stream runs it alone; a processor shared
        like a link (`bytes_per_s` = 1, "bytes" being seconds of work) time-slices it fairly
        with whatever else runs there, as an OS does with two busy threads on one core."""
        if self.resources[resource].kind == STREAM:
            return self.add(name, kind, resources=(resource,), duration_s=seconds, **kw)
        rate = self.resources[resource].bytes_per_s
        return self.add(name, kind, resources=(resource,), nbytes=seconds * rate, **kw)
