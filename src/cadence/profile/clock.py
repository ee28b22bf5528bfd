"""Timing a pass on the CPU's clock or, on CUDA, with events in the stream."""

from __future__ import annotations

import time
from typing import Any

import torch


class Stopwatch:
    """Intervals of one pass, read once the pass is over.

    On CUDA, kernels run asynchronously: a synchronise around every block would add its own
    wait to each block and stop the host from queueing ahead, as it does in training. CUDA
    events are recorded in the stream instead and read after one synchronise at the end.
    """

    def __init__(self, device: torch.device, expected_marks: int = 0) -> None:
        self.device = device
        self._marks: list[Any] = []
        # Events and the stream looked up ahead, so that neither is inside what is timed.
        cuda = device.type == "cuda"
        self._spare = [torch.cuda.Event(enable_timing=True) for _ in range(expected_marks * cuda)]
        self._stream = torch.cuda.current_stream(device) if cuda else None

    def mark(self) -> int:
        """Record a point in time; returns its index."""
        if self.device.type == "cuda":
            event = self._spare.pop() if self._spare else torch.cuda.Event(enable_timing=True)
            event.record(self._stream)
            self._marks.append(event)
        else:
            self._marks.append(time.perf_counter())
        return len(self._marks) - 1

    def seconds(self, start: int, end: int) -> float:
        """Time between two marks (synchronises the device on first use)."""
        a, b = self._marks[start], self._marks[end]
        if self.device.type == "cuda":
            b.synchronize()
            return float(a.elapsed_time(b)) / 1e3
        return float(b - a)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
