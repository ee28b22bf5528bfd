"""One rank of `cadence bench collectives`: `python -m cadence.bench._collectives_worker
CONFIG.json RESULT.json`, started inside an emulated host's namespace with torchrun-style
environment variables. Times every (size, variant) and, in the same rounds, the calibration's
gloo calls (the parent fits alpha and beta to them), with gloo's I/O thread under SCHED_IDLE
and every timed block started with the links' token bucket drained unless told otherwise,
then the local copies gloo's binding makes (`cadence.comm.local_copy`), and, on rank 0,
writes the slowest rank's medians to RESULT.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from cadence.bench.collectives import (
    LATENCY_FITTED,
    LATENCY_SIZES,
    CollectivesBenchConfig,
    elements,
)
from cadence.bench.collectives_fit import calibration_sizes
from cadence.comm import collectives as ours
from cadence.comm import destroy, init_from_env
from cadence.comm import ops as comm
from cadence.comm.calibrate import bucket_drain, slowest
from cadence.comm.gloo_threads import IO_THREAD_NAME, gloo_io_yields
from cadence.comm.local_copy import measure_local_copy
from cadence.launch.errors import exit_worker, worker_entry

# A round repeats a call until ~1 MB has moved (1 to 64 calls): single calls of small
# messages are too short for the clock, and the median of several drops scheduler hiccups
# (with at most 8, 1-16 KB all-reduces came out ~10% slower than the calibration's 64 on 4
# hosts).
_BLOCK_BYTES = 1 << 20
_MAX_CALLS = 64
# A round visits the short entries this many times, between slices of the long ones; an
# entry is split when every block keeps at least _SPLIT_CALLS calls.
_PASSES = 4
_SPLIT_CALLS = 4


class Buffers:
    """Zero-filled tensors shared by every variant of one size, made once and reused each
    round. A block of one large call on fresh tensors timed more than the link: with new
    buffers every round, gloo's 64 MB all-reduce on 4 hosts at 1gbit took 894-906 ms in the
    timed blocks against 843 ms in the same runs' calibration (which reuses its tensors);
    with these, 847 and 851 ms. One set per size keeps the memory to a few of the largest
    size."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._made: dict[tuple[int, str], torch.Tensor] = {}

    def get(self, elems: int, role: str) -> torch.Tensor:
        """The `role` tensor ("full", "other" or "block", 1/p of full) for `elems` elements."""
        key = (elems, role)
        if key not in self._made:
            self._made[key] = torch.zeros(elems // self.world_size if role == "block" else elems)
        return self._made[key]


def make_op(
    collective: str, implementation: str, algorithm: str, elems: int, buffers: Buffers
) -> Callable[[], None]:
    """A thunk issuing one call on `buffers`' zeros, so repeated reductions stay finite."""
    p = dist.get_world_size()
    gloo = implementation == "gloo"
    full = buffers.get(elems, "full")
    if collective in ("all_reduce", "broadcast"):
        if collective == "all_reduce":
            return (lambda: comm.all_reduce(full)) if gloo else (
                lambda: ours.all_reduce(full, algorithm=algorithm))  # fmt: skip
        return (lambda: comm.broadcast(full, 0)) if gloo else (
            lambda: ours.broadcast(full, 0, algorithm=algorithm))  # fmt: skip
    if collective == "reduce_scatter":
        block = buffers.get(elems, "block")
        return (lambda: comm.reduce_scatter_tensor(block, full)) if gloo else (
            lambda: ours.reduce_scatter_tensor(block, full, algorithm=algorithm))  # fmt: skip
    if collective == "all_gather":
        block = buffers.get(elems, "block")
        return (lambda: comm.all_gather_into_tensor(full, block)) if gloo else (
            lambda: ours.all_gather_into_tensor(full, block, algorithm=algorithm))  # fmt: skip
    if collective == "all_to_all":
        src, dst = full, buffers.get(elems, "other")
        srcs, dsts = list(src.chunk(p)), list(dst.chunk(p))
        return (lambda: comm.all_to_all_single(dst, src)) if gloo else (
            lambda: ours.all_to_all(dsts, srcs, algorithm=algorithm))  # fmt: skip
    raise ValueError(f"unsupported collective {collective!r}")


@dataclass(frozen=True)
class Timed:
    """One (variant, size) the rounds time: a benchmark row or a calibration point."""

    role: str
    """"row" (a benchmark row, predicted) or "calibration" (fits the model)."""
    variant: tuple[str, str, str]
    """(collective, implementation, algorithm), as `CollectivesBenchConfig.variants`."""
    elems: int
    """float32 elements of the vector (`elements`)."""


def timed_list(config: CollectivesBenchConfig, world_size: int) -> list[Timed]:
    """The benchmark's rows, then the calibration's points: gloo's all-reduce at
    `calibration_sizes` and, with `alpha_per_collective`, all-gather and broadcast at
    `LATENCY_SIZES`."""
    rows = [Timed("row", v, elements(n, world_size))
            for n in config.sizes for v in config.variants()]  # fmt: skip
    fitted = [("all_reduce", n) for n in calibration_sizes(config.sizes)]
    if config.alpha_per_collective:
        fitted += [(c, n) for c in LATENCY_FITTED if c in config.collectives for n in LATENCY_SIZES]
    gloo = [Timed("calibration", (c, "gloo", "gloo"), elements(n, world_size)) for c, n in fitted]
    return rows + gloo


def schedule(timed: list[Timed]) -> list[list[tuple[int, int]]]:
    """One round as `_PASSES` passes of (entry index, calls) blocks. An entry of at least
    `_PASSES` x `_SPLIT_CALLS` calls (the short ones, up to 64 KB) gets a block in every pass,
    its calls shared out; the others one block each, their slice of the round in one pass. So
    a short entry's blocks spread over the round instead of landing in one stretch of it."""
    calls = [max(1, min(_MAX_CALLS, _BLOCK_BYTES // (4 * t.elems))) for t in timed]
    short = [i for i, c in enumerate(calls) if c >= _PASSES * _SPLIT_CALLS]
    long = [i for i, c in enumerate(calls) if c < _PASSES * _SPLIT_CALLS]
    step = -(-len(long) // _PASSES)  # ceil
    return [
        [(i, calls[i] // _PASSES) for i in short]
        + [(i, calls[i]) for i in long[k * step : (k + 1) * step]]
        for k in range(_PASSES)
    ]


def measure(config: CollectivesBenchConfig, timed: list[Timed]) -> list[dict[str, object]]:
    """Median seconds per call of every entry of `timed`, the slowest rank's, on every rank;
    also the medians of its even and of its odd rounds (`halves_s`), whose ratio shows how far
    the same call's time moves within the run.

    Rounds interleave every entry (A/B side by side), calibration points included, so load
    from elsewhere on the machine lands on the fit and on the rows it predicts alike instead
    of on whichever ran last: with the calibration timed in rounds of its own before the rows,
    the same 1-16 KB all-reduce timed by both agreed within 10% in only 28 of 45 cases over 15
    runs. Small calls get a block in each of the round's passes
    (`schedule`): on 2 emulated hosts at 400mbit, blocks of 64 1-4 KB all-reduces had median
    calls of 0.19-0.34 ms, moving from one block to the next, so a median over one block per round
    moves with where its few blocks land.
    """
    p = dist.get_world_size()
    samples: list[list[list[float]]] = [[[], []] for _ in timed]  # even rounds, odd rounds
    drain = bucket_drain(config.drain_bytes())
    buffers = Buffers(p)
    ops = [make_op(*t.variant, t.elems, buffers) for t in timed]
    passes = schedule(timed)
    for rnd in range(config.warmup + config.repeats):
        for blocks in passes:
            for i, calls in blocks:
                drain()  # start the block with the links' token bucket empty
                comm.barrier()
                for _ in range(calls):
                    start = time.perf_counter()
                    ops[i]()
                    if rnd >= config.warmup:
                        samples[i][(rnd - config.warmup) % 2].append(time.perf_counter() - start)
    medians = [statistics.median(even + odd) for even, odd in samples]
    # One round has no odd half: 0 stands in, and the record says None.
    halves = [statistics.median(half) if half else 0.0 for s in samples for half in s]
    agreed, agreed_halves = slowest(medians), slowest(halves)
    split = config.repeats >= 2
    return [
        {
            "role": t.role,
            "collective": t.variant[0],
            "implementation": t.variant[1],
            "algorithm": t.variant[2],
            "nbytes": 4 * t.elems,
            "measured_s": float(m),
            "halves_s": [float(x) for x in agreed_halves[2 * i : 2 * i + 2]] if split else None,
        }
        for i, (t, m) in enumerate(zip(timed, agreed, strict=True))
    ]


def run(config: CollectivesBenchConfig, result: Path) -> None:
    torch.set_num_threads(config.threads)
    ctx = init_from_env()
    try:
        with gloo_io_yields(config.yield_io_thread) as demoted:
            if config.yield_io_thread and not demoted:
                raise RuntimeError(f"no {IO_THREAD_NAME} thread found to run under SCHED_IDLE")
            timed = measure(config, timed_list(config, dist.get_world_size()))
            local = measure_local_copy(config.sizes, repeats=config.repeats)
        if ctx.rank == 0:
            data = {"timed": timed, "local_copy": asdict(local),
                    "torch_version": torch.__version__}  # fmt: skip
            result.write_text(json.dumps(data, indent=2) + "\n")
    finally:
        destroy()


def main(argv: list[str]) -> int:
    def body() -> None:
        raw = json.loads(Path(argv[0]).read_text())
        run(CollectivesBenchConfig.from_json_dict(raw), Path(argv[1]))

    return worker_entry(body)


def config_json(config: CollectivesBenchConfig) -> str:
    """The config as the worker reads it back."""
    return json.dumps(asdict(config))


if __name__ == "__main__":
    exit_worker(main(sys.argv[1:]))
