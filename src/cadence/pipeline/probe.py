"""Measure the link between two pipeline stages: per-message latency and bandwidth.

Ping-pong with point-to-point sends, as the executor's messages travel: a small message and
its echo give the round trip (2 x latency), a large message answered by a small one gives
latency + bytes / bandwidth + latency. Medians over a few repeats. Only the two ranks take part.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from cadence.comm.cost import AlphaBeta

PROBE_BYTES = 2 * 2**20


def _ping(peer: int, payload: torch.Tensor, echo: torch.Tensor, first: bool) -> float:
    start = time.perf_counter()
    if first:
        dist.send(payload, peer)
        dist.recv(echo, peer)
    else:
        dist.recv(payload, peer)
        dist.send(echo, peer)
    return time.perf_counter() - start


def probe_stage_link(
    a: int = 0, b: int = 1, repeats: int = 3, nbytes: int = PROBE_BYTES
) -> AlphaBeta | None:
    """The link from rank `a` to rank `b` as measured at `a` (None on every other rank, and
    on `b`). Both must call it; nothing else should be on the wire meanwhile."""
    rank = dist.get_rank()
    if rank not in (a, b):
        return None
    peer, first = (b, True) if rank == a else (a, False)
    small, echo = torch.zeros(1), torch.zeros(1)
    large = torch.zeros(max(1, nbytes // 4))
    _ping(peer, large, echo, first)  # connection set-up outside the timing
    rtt = statistics.median(_ping(peer, small, echo, first) for _ in range(repeats))
    big = statistics.median(_ping(peer, large, echo, first) for _ in range(repeats))
    if not first:
        return None
    seconds = max(big - rtt, 1e-9)  # the large message's own transfer time
    return AlphaBeta(alpha_s=rtt / 2, beta_s_per_byte=seconds / large.nbytes)
