"""TCP congestion control of the emulated hosts.

A new network namespace takes the machine's default congestion control, so the same emulated
cluster behaved differently from machine to machine (cubic on a stock Linux, BBR on ours). Each
host namespace now gets one named explicitly: cubic unless told otherwise, Linux's default and
what a cluster's hosts run unless someone tuned them. Found on a machine whose default is BBR
(2026-11-26, `results/allgather-congestion-control.txt`): BBR's PROBE_RTT holds a long flow's
window at 4 packets for ~200 ms every 10 s, so one link of the ring idles for most of an 8 MB
half of gloo's 64 MB all-gather on 4 hosts at 400mbit (7 of 40 calls over 1.1x the link time,
up to 1.21x); with cubic none of 40 (1.02-1.05x). Cubic shares a link more slowly: a flow that
joins one already filling a port's 50 ms queue gets 0.17-0.27 of it in its first 1-3 s (BBR:
half).
"""

from __future__ import annotations

import re
from pathlib import Path

from cadence.errors import UserError
from cadence.netem import _iproute

DEFAULT_CONGESTION_CONTROL = "cubic"
_SYSCTL = Path("/proc/sys/net/ipv4")
_NAME = re.compile(r"^[a-z0-9_]{1,16}$")


def _read(name: str) -> tuple[str, ...]:
    try:
        return tuple((_SYSCTL / name).read_text().split())
    except OSError:
        return ()


def with_allowed(allowed: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The list of congestion controls unprivileged namespaces may pick, with `name` in it."""
    return allowed if name in allowed else (*allowed, name)


def check_congestion_control(name: str) -> None:
    """Raise a one-line `UserError` unless this kernel offers `name` (e.g. "cubic", "bbr")."""
    available = _read("tcp_available_congestion_control")
    if not _NAME.match(name) or (available and name not in available):
        offered = ", ".join(available) or "see /proc/sys/net/ipv4/tcp_available_congestion_control"
        raise UserError(f"bad TCP congestion control {name!r}: this kernel offers {offered}")


def set_congestion_control(namespace: str, name: str) -> None:
    """Make `name` the congestion control of every TCP connection opened in `namespace`.

    Outside the root namespace Linux lets a namespace pick only what
    net.ipv4.tcp_allowed_congestion_control lists (some machines list only reno and their
    default), so `name` is added to that list first when missing; that only widens what may be
    chosen, and needs root, which the cluster needs anyway.
    """
    allowed = _read("tcp_allowed_congestion_control")
    if allowed and name not in allowed:
        (_SYSCTL / "tcp_allowed_congestion_control").write_text(
            " ".join(with_allowed(allowed, name)) + "\n"
        )
    _iproute.run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w",
                  f"net.ipv4.tcp_congestion_control={name}"])  # fmt: skip


def congestion_control_of(namespace: str) -> str:
    """The congestion control new connections in `namespace` get."""
    proc = _iproute.run(["ip", "netns", "exec", namespace, "sysctl", "-n",
                         "net.ipv4.tcp_congestion_control"])  # fmt: skip
    return proc.stdout.strip()
