"""Timestamps of one training iteration: forward and backward per layer, gradient
communication, optimizer updates. Off unless a `Recorder` is attached.

- Forward: a pre-hook and a hook on every layer give exact spans.
- Backward: autograd has no per-module "done" signal that tolerates in-place ops, so a layer's
  backward is taken to start when the gradient of its output arrives (a tensor hook) and to
  last until the next layer's starts; the last one ends when the last parameter gradient is
  accumulated. What follows until `backward()` returns is waiting (DDP waits for its buckets).
- Communication: cadence's engine reports each chunk from issue to completion (a callback on
  the collective's future); for DDP a comm hook wraps its all-reduce the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Event:
    """One span on the timeline."""

    row: str
    """compute, comm or update."""
    kind: str
    """forward, backward, wait, allreduce, update or step."""
    label: str
    """What ran (layer index, chunk size)."""
    start: float
    """Seconds (perf_counter)."""
    end: float
    """Seconds (perf_counter)."""
    iteration: int
    """1-based training iteration the work belongs to (the backward pass it follows)."""


class Recorder:
    """Collects events while `active`. Appends come from the main thread, the communication
    thread and gloo's callback threads, hence the lock."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.active = False
        self.iteration = 0  # set by the training loop before each iteration
        self.events: list[Event] = []
        self.marks: dict[str, float] = {}  # named instants, e.g. "start 5"
        self._backward_starts: list[tuple[str, float]] = []
        self._last_grad = 0.0
        self._lock = threading.Lock()

    def span(
        self,
        row: str,
        kind: str,
        label: str,
        start: float,
        end: float,
        iteration: int | None = None,
    ) -> None:
        if self.active:
            event = Event(
                row, kind, label, start, end, self.iteration if iteration is None else iteration
            )
            with self._lock:
                self.events.append(event)

    def mark(self, name: str) -> None:
        self.marks[name] = self.clock()

    # ----- backward bookkeeping (main thread) ------------------------------------------
    def backward_started(self, label: str) -> None:
        if self.active:
            self._backward_starts.append((label, self.clock()))

    def grad_ready(self) -> None:
        self._last_grad = self.clock()

    def end_backward(self, called: float, returned: float) -> None:
        """Turn this iteration's backward instants into spans (after `backward()` returns)."""
        starts, self._backward_starts = self._backward_starts, []
        compute_end = max(self._last_grad, starts[-1][1]) if starts else called
        for kind, label, start, end in backward_spans(starts, compute_end, returned):
            self.span("compute", kind, label, start, end)

    def to_json(self, origin: float) -> list[dict[str, Any]]:
        """Events with times in seconds from `origin`, in start order."""
        out = []
        for event in sorted(self.events, key=lambda e: e.start):
            data = asdict(event)
            data["start"], data["end"] = event.start - origin, event.end - origin
            out.append(data)
        return out


def backward_spans(
    starts: Sequence[tuple[str, float]], compute_end: float, returned: float
) -> list[tuple[str, str, float, float]]:
    """(kind, label, start, end) of each layer's backward from the instants its output gradient
    arrived, then a wait from the last gradient to `backward()` returning (if any)."""
    ordered = sorted(starts, key=lambda s: s[1])
    ends = ([t for _, t in ordered[1:]] + [compute_end])[: len(ordered)]
    spans = [
        ("backward", label, start, max(start, end))
        for (label, start), end in zip(ordered, ends, strict=True)
    ]
    if returned > compute_end:
        spans.append(("wait", "waiting for communication", compute_end, returned))
    return spans


def _first_tensor(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        for item in output:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def trace_layers(
    layers: Iterable[nn.Module], params: Iterable[nn.Parameter], recorder: Recorder
) -> list[Any]:
    """Hooks that report every layer's forward span and backward start, and every parameter's
    gradient accumulation. Returns the handles (call `.remove()` to detach)."""
    handles: list[Any] = []
    for index, layer in enumerate(layers):
        label = f"layer {index + 1} ({type(layer).__name__})"
        started: list[float] = []

        def pre(_m: nn.Module, _a: Any, started: list[float] = started) -> None:
            started.append(recorder.clock())

        def post(_m: nn.Module, _a: Any, output: Any, started: list[float] = started,
                 label: str = label) -> None:  # fmt: skip
            start = started.pop() if started else recorder.clock()
            recorder.span("compute", "forward", label, start, recorder.clock())
            tensor = _first_tensor(output)
            if tensor is not None and tensor.requires_grad and torch.is_grad_enabled():
                tensor.register_hook(lambda _g, label=label: recorder.backward_started(label))

        handles.append(layer.register_forward_pre_hook(pre))
        handles.append(layer.register_forward_hook(post))
    for param in params:
        handles.append(param.register_post_accumulate_grad_hook(lambda _p: recorder.grad_ready()))
    return handles


def trace_ddp(ddp: nn.parallel.DistributedDataParallel, recorder: Recorder) -> None:
    """DDP's own all-reduce (divide by world size, sum), with each bucket's span recorded."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        start, iteration = recorder.clock(), recorder.iteration
        buffer = bucket.buffer()
        label = f"bucket {bucket.index()} ({buffer.numel() * buffer.element_size() / 2**20:.1f} MB)"

        def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            recorder.span("comm", "allreduce", label, start, recorder.clock(), iteration)
            return fut.value()

        return allreduce_hook(state, bucket).then(done)

    # DDP compares annotations with the real classes; postponed (string) ones fail that check.
    hook.__annotations__ = {}
    ddp.register_comm_hook(None, hook)
