"""`cadence.heap.keep_heap`: freed activations stay in the heap, not faulted in again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import cadence
from cadence.heap import _glibc, keep_heap

# An iteration's worth of activations: a hundred 1 MiB tensors, every page written, then freed.
# 100 MiB is past any trim threshold glibc adapts to by itself (at most 64 MiB).
PAGES_PER_ITERATION = 100 * (1 << 20) // 4096
CHURN = textwrap.dedent(
    """
    import resource, sys, torch
    from cadence.heap import keep_heap
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


class _Kept(Exception):
    """Raised by the stand-in for `keep_heap`: the executor asked for a settled heap."""


def _refuse(*_args: object, **_kwargs: object) -> bool:
    raise _Kept


def _tiny() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))


def test_every_cadence_executor_keeps_the_heap_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The profile's compute times are taken with the thresholds fixed, so every executor the
    simulator predicts fixes them too (torch's DDP, the peer, is left as torch runs it)."""
    import cadence.heap
    from cadence.ps.strategy import ps_wrap

    monkeypatch.setattr(cadence.heap, "keep_heap", _refuse)
    model = _tiny()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = [
        lambda: cadence.zero(_tiny(), stage=2, lr=0.1),
        lambda: cadence.pipeline_parallel(_tiny()),
        lambda: cadence.parameter_server(model, sgd),
        lambda: cadence.local_sgd(model, sgd),
        lambda: cadence.diloco(model, sgd),
        lambda: ps_wrap(model, sgd, 0, 1, cadence.TrainConfig()),
    ]
    for call in calls:
        with pytest.raises(_Kept):
            call()
    # Opted out: set up without touching the process's malloc settings.
    cadence.zero(_tiny(), stage=2, lr=0.1, keep_heap=False)
    with pytest.raises(ValueError, match="process group"):  # past the heap: it needs a group
        cadence.pipeline_parallel(_tiny(), keep_heap=False)
    cadence.local_sgd(model, sgd, keep_heap=False)
