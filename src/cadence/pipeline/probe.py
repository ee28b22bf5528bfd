"""Measure the link between two pipeline stages: per-message latency and bandwidth.

Ping-pong with point-to-point sends, as the executor's messages travel. A tiny message and its
echo give the round trip; a medium (64 KiB) and a large (2 MiB) message, each answered by a tiny
one, give two one-way message times, and the line through them is the link: latency (per
message, whatever slows a message that is not its bytes -- gloo's overhead, the queue at a
shaper, TCP ramping up next to a bulk flow) and seconds per byte. Medians over 5 repeats (3
left one slow ping next to a bulk flow able to triple the estimate: 3.4e-7 s/B once at
200mbit under `netem load`, against 0.8-1.3e-7 in other runs).
Only the two ranks take part.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from cadence.comm import ops as comm
from cadence.comm.cost import AlphaBeta
from cadence.comm.ops import wire_device
from cadence.profile.clock import sync

PROBE_BYTES = 2 * 2**20
MEDIUM_BYTES = 64 * 2**10


def _ping(peer: int, payload: torch.Tensor, echo: torch.Tensor, first: bool) -> float:
    start = time.perf_counter()
    if first:
        comm.send(payload, peer)
        comm.recv(echo, peer)
    else:
        comm.recv(payload, peer)
        comm.send(echo, peer)
    sync(echo.device)  # NCCL returns once the transfer is queued
    return time.perf_counter() - start


def probe_stage_link(
    a: int = 0, b: int = 1, repeats: int = 5, nbytes: int = PROBE_BYTES
) -> AlphaBeta | None:
    """The link from rank `a` to rank `b` as measured at `a` (None on every other rank, and
    on `b`). Both must call it; nothing else of theirs should be on the wire meanwhile."""
    rank = dist.get_rank()
    if rank not in (a, b):
        return None
    peer, first = (b, True) if rank == a else (a, False)
    device = wire_device()
    echo = torch.zeros(1, device=device)
    tiny, medium = torch.zeros(1, device=device), torch.zeros(MEDIUM_BYTES // 4, device=device)
    large = torch.zeros(max(2 * MEDIUM_BYTES, nbytes) // 4, device=device)
    _ping(peer, large, echo, first)  # connection set-up outside the timing
    rtt = statistics.median(_ping(peer, tiny, echo, first) for _ in range(repeats))
    one_way = [  # a message's own time: its round trip less the tiny echo's half
        statistics.median(_ping(peer, t, echo, first) for _ in range(repeats)) - rtt / 2
        for t in (medium, large)
    ]
    if not first:
        return None
    beta = max((one_way[1] - one_way[0]) / (large.nbytes - medium.nbytes), 1e-12)
    alpha = max(one_way[0] - beta * medium.nbytes, rtt / 2)
    return AlphaBeta(alpha_s=alpha, beta_s_per_byte=beta)
