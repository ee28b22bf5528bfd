"""Neighbours for a profile: processes that train the same model beside it, so that its times
are taken with the host's cores shared as a training run shares them.

Synchronous data-parallel workers on one host compute at the same moments (each step starts
when the previous one's gradients are averaged), so a worker's forward and backward run
while its neighbours run theirs. A profile taken alone misses that contention: where several
workers share a host's cores, or more workers x threads are started than it has cores, each
computes slower than alone. `neighbours(model, dataset, batch, threads, count)` starts `count`
processes that run the model's forward and backward on a batch of that size, in a loop, at
that many threads, while the profile is timed.

Free-running loops are not in step, though: one may be in its forward while another is in
its backward, and one may run well ahead of the other (on a 2-core machine one of two such
loops commonly runs 10-30% slower for tens of seconds). Training's workers start each step
together, contend in the same phase, and the step ends with the slowest. So, once the
profile is timed, `Neighbours.lockstep` runs iterations of every process started together,
each one's step the slowest process's time, and `paced` puts the profile's times at that
pace.

Run as `python -m cadence.profile.neighbours MODEL DATASET BATCH THREADS`: builds the model,
prints "ready", trains until a line arrives on its standard input, then for each "step" line
runs one iteration and prints "took SECONDS", until its standard input closes.
"""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cadence.errors import UserError

if TYPE_CHECKING:
    import torch

    from cadence.profile.record import Profile

READY = "ready"
"""What a neighbour prints once its model is built and one step has run."""
STEP = "step"
"""What a neighbour is sent for one lockstep iteration; it answers "took SECONDS"."""
LOCKSTEP_ITERATIONS = 5
"""Lockstep iterations timed (after one untimed): the pace is their median."""
START_TIMEOUT_S = 120.0
"""How long a neighbour may take to build its model and run its first step."""


class Neighbours:
    """The running neighbour processes (none for a profile taken alone)."""

    def __init__(self, procs: list[subprocess.Popen[str]]) -> None:
        self.procs = procs

    def lockstep(
        self, own: Callable[[], None], iterations: int = LOCKSTEP_ITERATIONS
    ) -> float | None:
        """Median over `iterations` (after one untimed) of the slowest process's time when
        this one runs `own` (one forward and backward) while every neighbour runs one, all
        started together; None without neighbours."""
        if not self.procs:
            return None
        for proc in self.procs:  # leave the free-running loop
            _send(proc, STEP)
            _answer(proc)
        steps = []
        for _ in range(iterations + 1):
            for proc in self.procs:
                _send(proc, STEP)
            started = time.perf_counter()
            own()
            took = [time.perf_counter() - started, *(_answer(proc) for proc in self.procs)]
            steps.append(max(took))
        return statistics.median(steps[1:])


@contextmanager
def neighbours(
    model: str, dataset: str | None, batch: int, threads: int, count: int
) -> Iterator[Neighbours]:
    """`count` processes training `model` (a zoo name or `pkg.module:factory` on `dataset`)
    at `batch` samples and `threads` intra-op threads while the block runs; none for 0."""
    if count < 1:
        yield Neighbours([])
        return
    args = [sys.executable, "-m", __name__, model, dataset or "-", str(batch), str(threads)]
    procs = [
        subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]
    try:
        for proc in procs:
            _wait_ready(proc)
        yield Neighbours(procs)
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()  # the loop's signal to stop
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def iteration_of(module: torch.nn.Module, inputs: Any, targets: Any) -> Callable[[], None]:
    """One forward, loss and backward of `module` on a batch, as a neighbour runs it."""
    from cadence.models.loss import loss_fn

    def run() -> None:
        module.zero_grad(set_to_none=True)
        loss_fn(module(inputs), targets).backward()

    return run


def paced(profile: Profile, step_s: float | None) -> Profile:
    """`profile` with its times (blocks, loss, whole iteration, optimizer steps) multiplied so
    that its whole iteration takes `step_s`, the lockstep pace (`Neighbours.lockstep`); the
    factor is kept in `Profile.pace_factor`. None: as it was timed."""
    from cadence.profile.record import scaled_profile

    if step_s is None:
        return profile
    factor = step_s / profile.iteration_s
    steps = profile.optimizer_step_s
    return dataclasses.replace(
        scaled_profile(profile, factor),
        optimizer_step_s=None if steps is None else {k: v * factor for k, v in steps.items()},
        pace_factor=factor,
    )


def _send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _answer(proc: subprocess.Popen[str]) -> float:
    """A neighbour's "took SECONDS" (a one-line UserError if it died instead)."""
    said = proc.stdout.readline().split() if proc.stdout is not None else []
    if len(said) != 2 or said[0] != "took":
        raise _failed(proc, "stopped")
    return float(said[1])


def _failed(proc: subprocess.Popen[str], what: str) -> UserError:
    """Kill a neighbour that did not answer; the last line of its stderr, as a UserError."""
    proc.kill()
    proc.wait()  # reaped, so its stderr is complete and reading it cannot block
    err = proc.stderr.read() if proc.stderr is not None else ""
    last = err.strip().splitlines()[-1] if err.strip() else "no answer"
    return UserError(f"a neighbour process for the profile {what}: {last}")


def _wait_ready(proc: subprocess.Popen[str]) -> None:
    line: list[str] = []

    def read() -> None:
        line.append(proc.stdout.readline() if proc.stdout is not None else "")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not line or line[0].strip() != READY:
        raise _failed(proc, "did not start")


def _train(model: str, dataset: str | None, batch: int, threads: int) -> None:
    """Free-running iterations until a line arrives, then one iteration per "step" line,
    answered with its time, until standard input closes."""
    import torch

    from cadence.heap import keep_heap
    from cadence.models.refs import is_ref
    from cadence.models.user import build_user_model, model_and_data

    torch.set_num_threads(threads)
    keep_heap()
    spec, _ = model_and_data(model, dataset)
    torch.manual_seed(0)
    module = build_user_model(model) if is_ref(model) else spec.build()
    inputs, targets = spec.synthetic_batch(batch, 0)

    run = iteration_of(module, inputs, targets)

    def iteration() -> float:
        started = time.perf_counter()
        run()
        return time.perf_counter() - started

    lines: list[str] = []
    arrived = threading.Event()

    def watch() -> None:
        lines.append(sys.stdin.readline())  # "" at EOF: the profile is done
        arrived.set()

    threading.Thread(target=watch, daemon=True).start()
    iteration()
    print(READY, flush=True)
    while not arrived.is_set():
        iteration()
    line = lines[0]
    while line.strip() == STEP:
        print(f"took {iteration()!r}", flush=True)
        line = sys.stdin.readline()


if __name__ == "__main__":
    _model, _dataset, _batch, _threads = sys.argv[1:5]
    _train(_model, None if _dataset == "-" else _dataset, int(_batch), int(_threads))
