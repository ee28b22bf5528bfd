"""Run a function on W gloo ranks and collect results: the one helper every distributed test uses.

Each rank is a fresh process with its own process group, forked from a `forkserver` that has
imported torch once: a `spawn`ed rank spent ~4 s importing it on a 2-core machine, for every
rank of every test. A rank that raises sends its traceback back; the helper then stops every
rank and raises `RankFailed` showing that traceback. A run that exceeds `timeout` is stopped
and reported with the ranks that never finished.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from cadence.comm.process_group import init_group
from cadence.launch.local import free_port

_PRELOADED = ("torch", "torch.distributed", "torch._dynamo", "cadence.testing")
"""Imported once by the fork server, so each rank starts with them (no threads are started by
importing them, so forking after is safe). `torch._dynamo` is there because every torch
optimizer imports it on first use (`torch._disable_dynamo`): ~2.5 s per rank otherwise."""


_extra_preload: list[str] = []


def preload_in_ranks(*modules: str) -> None:
    """Have the fork server import `modules` too (call before the first `run_ranks`; later
    calls do not reach a server already started). For modules slow to import that many ranks
    use, such as a model library; one that fails to import is left to the ranks."""
    _extra_preload.extend(m for m in modules if m not in _extra_preload)


def _rank_context() -> Any:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*_PRELOADED, *_extra_preload])
    return ctx


class RankFailed(AssertionError):
    """A rank raised or the run timed out; the message carries the failing rank's traceback."""


def _rank_main(
    rank: int,
    world_size: int,
    port: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    results: Any,
) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",
    )
    torch.set_num_threads(1)
    try:
        init_group("gloo", rank, world_size, timeout_s=60)
        value = fn(rank, world_size, *args)
        # Plain pickle: torch's queue reductions pass tensors as shared-memory handles that
        # vanish when this process exits, before the parent reads them.
        results.put((rank, "ok", pickle.dumps(value)))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    dying: tuple[int, ...] = (),
) -> list[Any]:
    """Call `fn(rank, world_size, *args)` on every rank; return the values ordered by rank.

    `fn` and `args` must be picklable (a module-level function). Ranks in `dying` are meant to
    end their process without a result (a test of surviving a dead peer): their value is None,
    and a `dying` rank that finishes instead fails the run.
    """
    ctx = _rank_context()
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_rank_main, args=(r, world_size, port, fn, args, results), daemon=True)
        for r in range(world_size)
    ]
    for proc in procs:
        proc.start()
    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(values) < world_size - len(dying):
            try:
                rank, status, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                missing = sorted(set(range(world_size)) - set(values))
                raise RankFailed(
                    f"timed out after {timeout:.0f} s; ranks {missing} did not finish"
                ) from None
            if status == "error":
                raise RankFailed(f"rank {rank} of {world_size} failed:\n{value}")
            if rank in dying:
                raise RankFailed(f"rank {rank} was meant to die but finished")
            values[rank] = pickle.loads(value)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return [values.get(r) for r in range(world_size)]
