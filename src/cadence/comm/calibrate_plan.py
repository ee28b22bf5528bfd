"""What a calibration times: the message sizes, the collectives and how many calls of each size
make a round. Free of torch, so `cadence calibrate` checks its flags before it imports torch."""

from __future__ import annotations

from cadence.comm.cost import GLOO_ALGORITHMS

DEFAULT_SIZES: tuple[int, ...] = tuple(1024 * 4**i for i in range(9))  # 1 KB .. 64 MB
"""Message sizes in bytes: 1 KB to 64 MB, a factor of 4 apart."""
# The collectives `calibrate` times -> (cost-model collective, gloo's CPU algorithm).
MODEL_OF: dict[str, tuple[str, str]] = {
    c: GLOO_ALGORITHMS[c] for c in ("all_reduce", "broadcast", "all_gather")
}
# Calls per size per round: ~16 MB of traffic, 3..64 calls. Each call is timed on its own: on a
# loaded machine some calls wait a scheduler tick (ms), and a median of single calls drops them
# where a burst average would not.
_BYTES_PER_ROUND = 16 << 20


def calls_per_round(nbytes: int) -> int:
    """Calls of one size timed back to back in each round: enough to fill `_BYTES_PER_ROUND`
    (small messages are too short for the clock alone), 3 to 64."""
    return max(3, min(64, _BYTES_PER_ROUND // nbytes))
