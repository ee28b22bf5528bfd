"""Keep freed memory in the process heap so every iteration reuses the same pages.

glibc returns the top of its heap to the kernel once more than a trim threshold of it is free,
and serves allocations above an mmap threshold with fresh mappings; both thresholds move with
the sizes it has seen freed. A training step frees its activations at the end of the backward
pass; when that leaves more than the threshold free at the top, the next forward faults its
activations in again, page by page. Whether it happens depends on the order of the process's
allocations. Measured on resnet32 at batch 32 per worker, two workers sharing 2 cores, every
variant in one process: cadence-dp took 8,600 page faults per step and 220 ms,
DDP 480 and 202 ms (in another run of the same, DDP 6,000 and 229 ms); with the thresholds
fixed, none for either, 203 ms each.

Every cadence executor fixes them when it is set up (`keep_heap=True`, the default: cadence-dp,
ZeRO, the pipeline, the parameter server's workers, local SGD / DiLoCo), `cadence train` fixes
them in every worker whatever the strategy (`--no-keep-heap` leaves glibc's own), and profiles
are taken with them fixed (`cadence.profile`), so the simulator's compute times are the
steady state of what `cadence train` runs. A plain torch script keeps glibc's thresholds: GPT-2
on two workers sharing two cores faulted 2,000-2,400 pages a step under DDP.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

TRIM_THRESHOLD_BYTES = 1 << 30
"""Free heap top kept before any is returned to the kernel."""
MMAP_THRESHOLD_BYTES = 32 << 20
"""Allocations served by the heap (and so reused) below this; glibc's largest allowed value."""

FIXED_HEAP_ENV = {
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD_BYTES),
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
}
"""The same two thresholds as environment settings, which glibc reads when a process starts:
how `cadence bench dp --ddp-fixed-heap` gives DDP's processes cadence-dp's heap."""

_ENV_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")


def keep_heap() -> bool:
    """Fix glibc's trim and mmap thresholds for this process; True if they were set.

    Does nothing (False) off glibc, or where the user already chose malloc settings through
    the environment: theirs stay.
    """
    if any(name in os.environ for name in _ENV_SETTINGS):
        return False
    libc = _glibc()
    if libc is None:
        return False
    trim = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    mmap = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return bool(trim) and bool(mmap)  # mallopt returns 1 on success


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only: musl and macOS differ
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc
