"""What a parameter server's processor spends serving a BSP step, per message and per byte.

Per slice and step a server takes a PUSH, a PULL and an ACK from every worker and sends it a
PARAM, each verified or signed and parsed in Python, and applies the optimizer to the slice
once every gradient is in. On resnet32 (95 slices) with two workers that took 93 ms of the
server's processor time a step, where the optimizer's arithmetic alone (torch's Adam over the
same bytes) takes about 4 ms. The simulator's parameter-server adapter charges each slice's
serving to the processor of the server's host, from the two rates a profile records
(`Profile.ps_serving_s`), or, for a profile without them, measured on the simulating machine.

They are measured on the runtime itself: a server process (`cadence.ps.runtime.spawn_server`)
serves `MEASURED_WORKERS` in-process workers (`cadence.ps.worker.WorkerChannels`, the
channels every worker uses) for BSP steps of Adam and reports the processor time it spent
serving (`cpu_s` in its final counters). Once on many one-element slices, which gives the
cost of a message, and once on a few large slices, which gives the cost of a byte (the
optimizer, signing, verifying and copying it); each twice, for two numbers of steps, so that
the start (first values, first pulls) cancels out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cadence.profile.record import Profile

MESSAGES_PER_SLICE = 4
"""Messages a server handles per slice, worker and step: PUSH, PULL and ACK taken, PARAM sent."""
MEASURED_WORKERS = 2
"""Workers the rates are measured with; a slice's bytes cost per worker (pushed in, answered
out), its update once per step: with more workers the update's share is overcounted."""
SMALL_SLICES = 64
"""One-element slices of the per-message measurement."""
LARGE_SLICE_ELEMENTS = 1 << 18
"""Elements (1 MiB) of each of the `LARGE_SLICES` slices of the per-byte measurement."""
LARGE_SLICES = 4
SPACING_S = 3e-4
"""Time between two slices' messages: a backward pass sends its gradients spread over its
duration, so in training the server wakes for nearly every slice (sent all at once, the same
messages cost it a sixth as much: it takes them in batches)."""
STEPS = (2, 8)
"""Steps of the two runs of each measurement: their difference is steady-state serving."""


@dataclass(frozen=True)
class ServingCost:
    """Processor seconds of a parameter server's serving."""

    s_per_message: float
    """Per message taken or sent (`MESSAGES_PER_SLICE` per slice, worker and step)."""
    s_per_byte: float
    """Per byte of a slice, per worker and step (its push taken, its answer sent, and its
    share of the update)."""

    def slice_s(self, nbytes: float, workers: int) -> float:
        """Seconds a server spends on one slice of `nbytes` in one step of `workers` workers."""
        return workers * (MESSAGES_PER_SLICE * self.s_per_message + nbytes * self.s_per_byte)

    def as_dict(self) -> dict[str, float]:
        """The form a profile saves (`Profile.ps_serving_s`)."""
        return {"message": self.s_per_message, "byte": self.s_per_byte}


def _serving_cpu_s(lengths: list[int], steps: int) -> float:
    """Processor seconds a server spent serving `steps` BSP steps of Adam over slices of
    `lengths` elements (each one parameter of its own block) to `MEASURED_WORKERS` workers."""
    import os
    import time
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from cadence.ps.plan import ParamInfo, build_plan
    from cadence.ps.runtime import spawn_server
    from cadence.ps.wire import Header, Kind
    from cadence.ps.worker import WorkerChannels

    workers = MEASURED_WORKERS
    infos = [ParamInfo(i, f"p{i}", n, i) for i, n in enumerate(lengths)]
    plan = build_plan(infos, list(range(len(lengths))), servers=1, slice_bytes=4 * max(lengths))
    secret = os.urandom(32)
    settings = {
        "server": 0, "secret": secret.hex(), "bind": "127.0.0.1", "workers": workers,
        "consistency": "bsp", "classes": plan.classes,
        "slices": [[s.key, s.length, s.priority, s.klass] for s in plan.slices],
        "optimizer": "adam", "optimizer_kwargs": {"lr": 1e-3}, "parent_pid": os.getpid(),
    }  # fmt: skip

    def header(kind: Kind, key: int, rank: int, step: int) -> Header:
        piece = plan.slices[key]
        numel = piece.length if kind in (Kind.INIT, Kind.PUSH) else 0
        return Header(kind, piece.priority, rank, key, step, 0, numel)

    proc, ports = spawn_server(settings)
    try:
        channels = [
            WorkerChannels(plan, rank, [("127.0.0.1", ports)],
                           [torch.zeros(n) for n in lengths], len(lengths), 60.0, secret)
            for rank in range(workers)
        ]  # fmt: skip
        payloads = [bytes(4 * s.length) for s in plan.slices]
        keys = plan.pull_order()
        for key in keys:  # worker 0 gives the first values, as the runtime's does
            channels[0].send(0, 0, header(Kind.INIT, key, 0, 0), payloads[key])
        for rank, ch in enumerate(channels):  # the first values
            ch.expect(keys)
            for key in keys:
                ch.send(0, 0, header(Kind.PULL, key, rank, 0))
        for ch in channels:
            ch.wait_all()
        for step in range(1, steps + 1):
            for ch in channels:
                ch.expect(keys)
            # As a backward pass sends them: one slice at a time, its push then its pull, and
            # each worker's on its own (their steps do not end at the same moment).
            for key in reversed(keys):
                for rank, ch in enumerate(channels):
                    time.sleep(SPACING_S)
                    ch.send(0, 0, header(Kind.PUSH, key, rank, step - 1), payloads[key])
                    ch.send(0, 0, header(Kind.PULL, key, rank, step))
            for ch in channels:
                ch.wait_all()
        with ThreadPoolExecutor(workers) as pool:  # the server answers once all said STOP
            stats = list(pool.map(lambda ch: ch.stop(1)[0], channels))
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return float(stats[0]["cpu_s"])


def _per_step_s(lengths: list[int]) -> float:
    few, many = STEPS
    return max(0.0, (_serving_cpu_s(lengths, many) - _serving_cpu_s(lengths, few)) / (many - few))


@functools.cache  # the simulator asks per prediction: measure once per process
def time_serving() -> ServingCost:
    """Both rates, measured here (a few seconds)."""
    per_slice_worker = MESSAGES_PER_SLICE * MEASURED_WORKERS
    message = _per_step_s([1] * SMALL_SLICES) / (SMALL_SLICES * per_slice_worker)
    large = _per_step_s([LARGE_SLICE_ELEMENTS] * LARGE_SLICES)
    nbytes = 4 * LARGE_SLICE_ELEMENTS * LARGE_SLICES * MEASURED_WORKERS
    byte = max(0.0, large - LARGE_SLICES * per_slice_worker * message) / nbytes
    return ServingCost(message, byte)


def recorded_serving(profile: Profile) -> ServingCost | None:
    """The serving cost measured where `profile` was made; None if it was not recorded."""
    recorded = profile.ps_serving_s
    return ServingCost(recorded["message"], recorded["byte"]) if recorded else None


def profile_serving(profile: Profile) -> ServingCost:
    """The serving cost where `profile` was made, or, for a profile without it, measured
    here."""
    return recorded_serving(profile) or time_serving()
