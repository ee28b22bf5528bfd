"""The memory work torch's gloo binding does around the network, timed on the live group.

torch's gloo reduce-scatter all-reduces a fresh clone of the whole input and then copies one
block out; its all-gather receives into a fresh flat tensor and then copies that out to the
output (ProcessGroupGloo.cpp). Neither is link time, so the alpha-beta model leaves both out.
They matter at the largest sizes: a tensor above glibc's mmap threshold (32 MB at most) is new
memory on every call, and each of its pages faults in. On 4 emulated hosts at 1gbit, gloo's
64 MB reduce-scatter took 921 ms against 843 ms for the all-reduce of the same vector, and a
64 MB clone alone took 70 ms with every rank cloning at once.

`measure_local_copy()` times both kinds of copy at each size, with every rank copying at
once as they do inside a collective (ranks of one machine share its processors and memory
bus), up to the moment the last rank is done. They are measured per size rather than priced
per byte, since whether a size faults its pages in depends on the allocator.
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

# torch (and the calibration, which needs it) load inside the measurement only: the
# benchmark's command line reads `LocalCopyTimes` to check its arguments before torch loads.

KINDS = ("empty", "fresh", "warm")  # what `measure_local_copy` times between two barriers


@dataclass(frozen=True)
class LocalCopyTimes:
    """Seconds of one local copy by size, measured on every rank at once (slowest rank)."""

    sizes: tuple[int, ...]
    """Bytes copied, ascending."""
    fresh_s: tuple[float, ...]
    """`clone()`: read a tensor and write it into newly allocated memory, then free it."""
    warm_s: tuple[float, ...]
    """`copy_()`: read a tensor and write it into one that already exists."""

    def __post_init__(self) -> None:
        if not (len(self.sizes) == len(self.fresh_s) == len(self.warm_s)):
            raise ValueError("sizes, fresh_s and warm_s must have one entry each per size")
        if list(self.sizes) != sorted(set(self.sizes)) or (self.sizes and self.sizes[0] <= 0):
            raise ValueError(f"sizes must be positive and strictly ascending, got {self.sizes}")
        if any(t < 0 for t in (*self.fresh_s, *self.warm_s)):
            raise ValueError("copy times must be >= 0")

    @classmethod
    def none(cls) -> LocalCopyTimes:
        """No measurement: every copy is free (runs saved before copies were timed)."""
        return cls((), (), ())

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> LocalCopyTimes:
        """Read back `dataclasses.asdict` output; None (an older result file) -> `none()`."""
        if raw is None:
            return cls.none()
        return cls(tuple(raw["sizes"]), tuple(raw["fresh_s"]), tuple(raw["warm_s"]))

    def fresh(self, nbytes: int) -> float:
        """Seconds to clone `nbytes` into new memory (see `_at`)."""
        return self._at(self.fresh_s, nbytes)

    def warm(self, nbytes: int) -> float:
        """Seconds to copy `nbytes` into an existing tensor (see `_at`)."""
        return self._at(self.warm_s, nbytes)

    def _at(self, seconds: tuple[float, ...], nbytes: int) -> float:
        # Linear between the measured sizes around `nbytes`; outside them, in proportion to
        # the nearest one. No sizes: 0.
        if not self.sizes or nbytes <= 0:
            return 0.0
        i = bisect.bisect_left(self.sizes, nbytes)
        if i < len(self.sizes) and self.sizes[i] == nbytes:
            return seconds[i]
        if i == 0 or i == len(self.sizes):
            j = min(i, len(self.sizes) - 1)
            return seconds[j] * nbytes / self.sizes[j]
        lo, hi = self.sizes[i - 1], self.sizes[i]
        return seconds[i - 1] + (seconds[i] - seconds[i - 1]) * (nbytes - lo) / (hi - lo)


def _timed(copy: Callable[[], object]) -> tuple[float, float]:
    """(seconds of `copy()` on this rank, its result freed; seconds from the barrier before it
    to the barrier after it, until the last rank has copied)."""
    import torch.distributed as dist

    dist.barrier()
    start = time.perf_counter()
    copy()
    own = time.perf_counter() - start
    dist.barrier()
    return own, time.perf_counter() - start


def _copy_s(own: float, span: float, empty_span: float) -> float:
    # The stagger shows only where the copy outlasts a barrier; below that the barrier's
    # jitter would swamp it, and the rank's own time is the figure.
    return max(own, span - empty_span) if own > empty_span else own


def measure_local_copy(
    sizes: Sequence[int], repeats: int = 5, warmup: int = 1, calls: int = 3
) -> LocalCopyTimes:
    """Time `clone()` and `copy_()` of float32 tensors of each size on every rank of the
    initialised group at once; every rank returns the same table.

    A collective that follows a copy starts when the last rank's copy is done. So a copy that
    outlasts a barrier is timed from a barrier to the next, less the median of two barriers
    with nothing between them; a shorter one by each rank's own time (slowest rank's median).
    The rank's own time alone misses the ranks' stagger: on 4 emulated hosts on 2 processors,
    a 64 MB clone took 36 ms on every rank, but 70 ms from barrier to barrier, and an
    all-reduce started right after the clone took 41 ms more than one started after a
    barrier. Sizes are interleaved round by round, like the
    calibration's."""
    if not sizes or min(sizes) <= 0 or repeats < 1 or calls < 1:
        raise ValueError("need positive sizes, repeats >= 1 and calls >= 1")
    import torch

    from cadence.comm.calibrate import slowest

    ordered = sorted(set(sizes))
    source, target = torch.ones(ordered[-1] // 4 + 1), torch.empty(ordered[-1] // 4 + 1)
    # samples[kind][size index] -> (own seconds, span seconds) per call
    samples: dict[str, list[list[tuple[float, float]]]] = {k: [[] for _ in ordered] for k in KINDS}
    for rnd in range(warmup + repeats):
        for i, n in enumerate(ordered):
            src, dst = source[: max(1, n // 4)], target[: max(1, n // 4)]
            copies: dict[str, Callable[[], object]] = {
                "empty": lambda: None,
                "fresh": src.clone,
                "warm": partial(dst.copy_, src),
            }
            for _ in range(calls):
                for kind in KINDS:
                    timed = _timed(copies[kind])
                    if rnd >= warmup:
                        samples[kind][i].append(timed)
    per_size = [samples[kind][i] for kind in KINDS for i in range(len(ordered))]
    own = slowest([statistics.median(t[0] for t in s) for s in per_size])
    span = slowest([statistics.median(t[1] for t in s) for s in per_size])
    k = len(ordered)
    empty = span[:k]

    def seconds(kind: str) -> tuple[float, ...]:
        cut = slice(KINDS.index(kind) * k, (KINDS.index(kind) + 1) * k)
        return tuple(_copy_s(o, s, e) for o, s, e in zip(own[cut], span[cut], empty, strict=True))

    return LocalCopyTimes(tuple(ordered), seconds("fresh"), seconds("warm"))
