"""`dp.heap.keep_heap`: freed activations stay in the heap instead of being faulted in again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cadence
from cadence.dp.heap import _glibc, keep_heap

# An iteration's worth of activations: a hundred 1 MiB tensors, every page written, then freed.
# 100 MiB is past any trim threshold glibc adapts to by itself (at most 64 MiB).
PAGES_PER_ITERATION = 100 * (1 << 20) // 4096
CHURN = textwrap.dedent(
    """
    import resource, sys, torch
    from cadence.dp.heap import keep_heap
    applied = keep_heap() if sys.argv[1] == "keep" else False
    def churn():
        tensors = [torch.ones(1 << 18) for _ in range(100)]
        del tensors
    for _ in range(3):
        churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        churn()
    print(int(applied), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
    """
)


def _faults_per_iteration(mode: str) -> tuple[bool, float]:
    src = str(Path(cadence.__file__).resolve().parents[1])
    # A fresh process without MALLOC_* settings inherited from the test's shell.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    return out[0] == "1", float(out[1])


@pytest.mark.skipif(_glibc() is None, reason="mallopt thresholds are glibc's")
def test_freed_memory_is_reused_instead_of_faulted_in_again() -> None:
    """Without it the same churn faulted 2,600-22,800 of its 25,600 pages back in every
    iteration here (glibc's own thresholds depend on what the process freed before, so that
    count is not asserted); with it, none."""
    applied, faults = _faults_per_iteration("keep")
    assert applied
    assert faults < PAGES_PER_ITERATION / 100


def test_settings_from_the_environment_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert keep_heap() is False
