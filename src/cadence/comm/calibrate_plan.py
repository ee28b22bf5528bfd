"""What a calibration times: the message sizes, the collectives and how many calls of each size
make a round. Free of torch, so `cadence calibrate` checks its flags before it imports torch."""

from __future__ import annotations

from collections.abc import Sequence

from cadence.comm.cost import GLOO_ALGORITHMS

DEFAULT_SIZES: tuple[int, ...] = tuple(1024 * 4**i for i in range(9))  # 1 KB .. 64 MB
"""Message sizes in bytes: 1 KB to 64 MB, a factor of 4 apart."""
P2P_MODEL_OF: dict[str, tuple[str, str]] = {
    "ring_all_reduce": ("allreduce", "ring"),
    "ring_reduce_scatter": ("reduce_scatter", "ring"),
    "ring_all_gather": ("allgather", "ring"),
}
"""cadence's own ring collectives (`cadence.comm.collectives`, which the ZeRO executor runs)
-> (cost-model collective, algorithm). Their fixed cost per message is fitted apart from
gloo's (`AlphaBeta.p2p_alphas`)."""
# The collectives `calibrate` times -> (cost-model collective, algorithm): gloo's built-in
# calls with its CPU algorithms, then cadence's own.
MODEL_OF: dict[str, tuple[str, str]] = {
    c: GLOO_ALGORITHMS[c] for c in ("all_reduce", "broadcast", "all_gather")
} | P2P_MODEL_OF
P2P_MAX_BYTES = 64 << 10
"""cadence's own collectives are timed at the sizes up to this (at least the two smallest):
only their fixed cost per message is fitted, which latency-bound calls show, and a slow
link's large calls would add minutes."""
# Calls per size per round: ~16 MB of traffic, 3..64 calls. Each call is timed on its own: on a
# loaded machine some calls wait a scheduler tick (ms), and a median of single calls drops them
# where a burst average would not.
_BYTES_PER_ROUND = 16 << 20


def sizes_for(collective: str, sizes: Sequence[int]) -> list[int]:
    """The sizes `collective` is timed at: all of `sizes`, or for cadence's own collectives
    those up to `P2P_MAX_BYTES` (at least the two smallest)."""
    if collective not in P2P_MODEL_OF:
        return list(sizes)
    ordered = sorted(sizes)
    return [n for i, n in enumerate(ordered) if i < 2 or n <= P2P_MAX_BYTES]


def calls_per_round(nbytes: int) -> int:
    """Calls of one size timed back to back in each round: enough to fill `_BYTES_PER_ROUND`
    (small messages are too short for the clock alone), 3 to 64."""
    return max(3, min(64, _BYTES_PER_ROUND // nbytes))
