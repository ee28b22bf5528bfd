"""One rank of `cadence bench collectives`: `python -m cadence.bench._collectives_worker
CONFIG.json RESULT.json`, started inside an emulated host's namespace with torchrun-style
environment variables. Calibrates alpha-beta on gloo's all-reduce, then times every
(size, variant), both with gloo's I/O thread under SCHED_IDLE and every timed block started
with the links' token bucket drained unless told otherwise, then the local copies gloo's
binding makes (`cadence.comm.local_copy`), and, on rank 0, writes the slowest rank's medians
to RESULT.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist

from cadence.bench.collectives import CollectivesBenchConfig, elements
from cadence.comm import collectives as ours
from cadence.comm import destroy, init_from_env
from cadence.comm.calibrate import bucket_drain, calibrate, slowest
from cadence.comm.gloo_threads import IO_THREAD_NAME, gloo_io_yields
from cadence.comm.local_copy import measure_local_copy
from cadence.launch.errors import exit_worker, worker_entry

# A timed block repeats a call until ~1 MB has moved (1 to 64 calls): single calls of small
# messages are too short for the clock, and the median of several drops scheduler hiccups.
# Up to 64, like the calibration's rounds (`calls_per_round`), so small sizes are timed the
# same way in both: with at most 8 (before 2026-11-25), 1-16 KB all-reduces came out ~10%
# slower here than in the same run's calibration on 4 hosts.
_BLOCK_BYTES = 1 << 20
_MAX_CALLS = 64
# torch 2.13 deprecates reduce_scatter_tensor and all_gather_into_tensor in favour of the
# *_single names, and warns on every call of the old ones.
_gloo_reduce_scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
_gloo_all_gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)


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
            return (lambda: dist.all_reduce(full)) if gloo else (
                lambda: ours.all_reduce(full, algorithm=algorithm))  # fmt: skip
        return (lambda: dist.broadcast(full, 0)) if gloo else (
            lambda: ours.broadcast(full, 0, algorithm=algorithm))  # fmt: skip
    if collective == "reduce_scatter":
        block = buffers.get(elems, "block")
        return (lambda: _gloo_reduce_scatter(block, full)) if gloo else (
            lambda: ours.reduce_scatter_tensor(block, full, algorithm=algorithm))  # fmt: skip
    if collective == "all_gather":
        block = buffers.get(elems, "block")
        return (lambda: _gloo_all_gather(full, block)) if gloo else (
            lambda: ours.all_gather_into_tensor(full, block, algorithm=algorithm))  # fmt: skip
    if collective == "all_to_all":
        src, dst = full, buffers.get(elems, "other")
        srcs, dsts = list(src.chunk(p)), list(dst.chunk(p))
        return (lambda: dist.all_to_all_single(dst, src)) if gloo else (
            lambda: ours.all_to_all(dsts, srcs, algorithm=algorithm))  # fmt: skip
    raise ValueError(f"unsupported collective {collective!r}")


def measure(config: CollectivesBenchConfig) -> list[dict[str, object]]:
    """Median seconds per call of every (variant, size), the slowest rank's, on every rank.

    Rounds interleave all sizes and variants (A/B side by side), so load from elsewhere on the
    machine lands on all of them alike instead of on whichever ran last.
    """
    p = dist.get_world_size()
    keys = [(v, elements(n, p)) for n in config.sizes for v in config.variants()]
    samples: list[list[float]] = [[] for _ in keys]
    drain = bucket_drain(config.drain_bytes())
    buffers = Buffers(p)
    ops = [make_op(*variant, elems, buffers) for variant, elems in keys]
    for rnd in range(config.warmup + config.repeats):
        for (_, elems), op, out in zip(keys, ops, samples, strict=True):
            calls = max(1, min(_MAX_CALLS, _BLOCK_BYTES // (4 * elems)))
            drain()  # start the block with the links' token bucket empty
            dist.barrier()
            for _ in range(calls):
                start = time.perf_counter()
                op()
                if rnd >= config.warmup:
                    out.append(time.perf_counter() - start)
    agreed = slowest([statistics.median(s) for s in samples])
    return [
        {
            "collective": c,
            "implementation": impl,
            "algorithm": alg,
            "nbytes": 4 * elems,
            "measured_s": float(t),
        }
        for ((c, impl, alg), elems), t in zip(keys, agreed, strict=True)
    ]


def run(config: CollectivesBenchConfig, result: Path) -> None:
    torch.set_num_threads(config.threads)
    ctx = init_from_env()
    try:
        sizes = config.sizes if len(config.sizes) >= 2 else (config.sizes[0], 4 * config.sizes[0])
        with gloo_io_yields(config.yield_io_thread) as demoted:
            if config.yield_io_thread and not demoted:
                raise RuntimeError(f"no {IO_THREAD_NAME} thread found to run under SCHED_IDLE")
            cal = calibrate(sizes=sizes, repeats=config.calibration_repeats, warmup=1,
                            drain_bytes=config.drain_bytes())  # fmt: skip
            measured = measure(config)
            local = measure_local_copy(config.sizes, repeats=config.repeats)
        if ctx.rank == 0:
            data = {"calibration": json.loads(cal.to_json()), "measured": measured,
                    "local_copy": asdict(local)}  # fmt: skip
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
