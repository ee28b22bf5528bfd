"""Parse and format link bandwidths in tc-style units (kbit, mbit, gbit)."""

from __future__ import annotations

import math
import re

from cadence.errors import UserError

_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_PATTERN = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(kbit|mbit|gbit)$", re.IGNORECASE)
_UNCAPPED = {"none"}


def parse_bandwidth(text: str) -> float:
    """Return the bandwidth in ``text`` as bits per second; ``"none"`` means uncapped (inf).

    Only tc-style units are accepted (``400mbit``, ``2.5gbit``, ``200kbit``): "mbps" is
    ambiguous between bits and bytes, so it is refused rather than guessed.
    """
    cleaned = text.strip() if isinstance(text, str) else ""
    if cleaned.lower() in _UNCAPPED:
        return math.inf
    match = _PATTERN.match(cleaned)
    if match is not None:
        value = float(match.group(1)) * _UNITS[match.group(2).lower()]
        if value >= 1 and math.isfinite(value):
            return value
    raise UserError(
        f"bad bandwidth {text!r}: use a positive number with kbit, mbit or gbit "
        "(e.g. 400mbit, 2.5gbit), or 'none' for no cap"
    )


def format_bandwidth(bps: float) -> str:
    """Format bits per second the way :func:`parse_bandwidth` reads it (``400mbit``)."""
    if math.isinf(bps):
        return "none"
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3f}".rstrip("0").rstrip(".") + unit
    return f"{bps / 1e3:.6f}".rstrip("0").rstrip(".") + "kbit"


GSO_PACKET_BYTES = 64 * 1024 + 2 * 1514
"""The largest packet veth hands a qdisc: a 64 KiB GSO super-packet, and a frame either side."""
PORT_QUEUE_S = 0.05
"""A capped port's queue, in time at its cap (tbf's latency)."""


def tbf_burst_bytes(bps: float) -> int:
    """Token-bucket size for a cap of ``bps``.

    veth hands the qdisc GSO super-packets of up to 64 KiB; a bucket smaller than one of
    those (plus a frame) makes tbf split or stall them, and one smaller than a few ms of
    traffic makes the rate undershoot because of timer granularity. 5 ms keeps the initial
    burst negligible over a transfer of a second or more.
    """
    return max(int(bps / 8 * 0.005), GSO_PACKET_BYTES)


FRAME_BUCKET_BYTES = 2 * 1514
"""Token bucket of two full Ethernet frames, for links shaped with GSO off
(`EmulatedCluster(frame_bucket=True)`): nothing larger than a frame reaches the qdisc, and a
bucket this small passes no burst, so every transfer is serialised at the cap as on a real
link."""


def link_bucket_bytes(bps: float, frame_bucket: bool = False) -> int:
    """The token bucket `EmulatedCluster` gives a link capped at ``bps``: two frames with
    ``frame_bucket`` (`FRAME_BUCKET_BYTES`), else `tbf_burst_bytes`."""
    return FRAME_BUCKET_BYTES if frame_bucket else tbf_burst_bytes(bps)


def tbf_args(bps: float, frame_bucket: bool = False) -> list[str]:
    """The tbf that caps a port at ``bps`` (after ``tc qdisc ... root [handle H:]``): its
    bucket from `link_bucket_bytes`, its queue `PORT_QUEUE_S` long."""
    return ["tbf", "rate", f"{int(bps)}bit", "burst", str(link_bucket_bytes(bps, frame_bucket)),
            "latency", f"{int(PORT_QUEUE_S * 1000)}ms"]  # fmt: skip
