"""Neighbours for a profile: processes that train the same model beside it, so that its times
are taken with the host's cores shared as a training run shares them.

Synchronous data-parallel workers on one host compute at the same moments (each step starts
when the previous one's gradients are averaged), so a worker's forward and backward run
while its neighbours run theirs. A profile taken alone misses that contention: where several
workers share a host's cores, or more workers x threads are started than it has cores, each
computes slower than alone. `neighbours(model, dataset, batch, threads, count)` starts `count`
processes that run the model's forward and backward on a batch of that size, in a loop, at
that many threads, and stops them when the profile is done.

Run as `python -m cadence.profile.neighbours MODEL DATASET BATCH THREADS`: builds the model,
prints "ready", then trains until its standard input closes.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from cadence.errors import UserError

READY = "ready"
"""What a neighbour prints once its model is built and one step has run."""
START_TIMEOUT_S = 120.0
"""How long a neighbour may take to build its model and run its first step."""


@contextmanager
def neighbours(
    model: str, dataset: str | None, batch: int, threads: int, count: int
) -> Iterator[None]:
    """`count` processes training `model` (a zoo name or `pkg.module:factory` on `dataset`)
    at `batch` samples and `threads` intra-op threads while the block runs; none for 0."""
    if count < 1:
        yield
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
        yield
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


def _wait_ready(proc: subprocess.Popen[str]) -> None:
    line: list[str] = []

    def read() -> None:
        line.append(proc.stdout.readline() if proc.stdout is not None else "")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not line or line[0].strip() != READY:
        proc.kill()
        proc.wait()  # reaped, so its stderr is complete and reading it cannot block
        err = proc.stderr.read() if proc.stderr is not None else ""
        last = err.strip().splitlines()[-1] if err.strip() else "no answer"
        raise UserError(f"a neighbour process for the profile did not start: {last}")


def _train_until_stdin_closes(model: str, dataset: str | None, batch: int, threads: int) -> None:
    import torch

    from cadence.dp.heap import keep_heap
    from cadence.models.loss import loss_fn
    from cadence.models.refs import is_ref
    from cadence.models.user import build_user_model, model_and_data

    torch.set_num_threads(threads)
    keep_heap()
    spec, _ = model_and_data(model, dataset)
    torch.manual_seed(0)
    module = build_user_model(model) if is_ref(model) else spec.build()
    inputs, targets = spec.synthetic_batch(batch, 0)
    stop = threading.Event()

    def watch() -> None:
        sys.stdin.read()  # returns at EOF: the profile is done
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    first = True
    while not stop.is_set():
        module.zero_grad(set_to_none=True)
        loss_fn(module(inputs), targets).backward()
        if first:
            print(READY, flush=True)
            first = False


if __name__ == "__main__":
    _model, _dataset, _batch, _threads = sys.argv[1:5]
    _train_until_stdin_closes(
        _model, None if _dataset == "-" else _dataset, int(_batch), int(_threads)
    )
