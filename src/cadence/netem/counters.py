"""Bytes an interface carried, as the kernel counts them: what crossed the wire, framing and
retransmissions included, not what a strategy handed to its collectives."""

from __future__ import annotations

from pathlib import Path


def read_iface_bytes(iface: str) -> tuple[int, int]:
    """(rx, tx) bytes of `iface` in this process's network namespace, from /proc/net/dev."""
    for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        if name.strip() == iface:
            values = fields.split()
            return int(values[0]), int(values[8])
    raise RuntimeError(f"no interface {iface} in this network namespace")
