"""TCP congestion control of the emulated hosts.

A new network namespace takes the machine's default congestion control, so the same emulated
cluster behaved differently from machine to machine (BBR on ours, cubic on a stock Linux).
Each host namespace now gets one named explicitly: BBR unless told otherwise.

Why BBR (measured 2026-11-26, 4 emulated hosts): the ports are FIFO queues (tbf; this kernel
has no fair-queueing qdisc, where a real host would run fq_codel), and under cubic a flow that
joins one already filling a port's 50 ms queue gets only 0.17-0.21 of the port over 1-3 s,
where BBR gives it 0.49-0.53 (`results/shared-port-congestion-control.txt`). The simulator and
the cost model share a link fairly between its flows, and gloo's broadcast sends its copies side
by side: under cubic its 1-16 MB rows ran 0.77-0.86 of the fair-share prediction
(`results/bench-collectives-*-cubic-20261126.json`), under BBR 0.83-1.04, 11 of 12 within 10%
(the four `*-4hosts-interleaved-20261125*` runs). Every benchmark in the README ran under BBR
too.

What BBR costs: PROBE_RTT holds a long flow's window at 4 packets for ~200 ms every 10 s, so one
link of the ring idles for most of an 8 MB half of gloo's 64 MB all-gather on 4 hosts at
400mbit (7 of 40 calls over 1.1x the link time, up to 1.21x; under cubic none of 40,
1.02-1.05x: `results/allgather-congestion-control.txt`).

Per-peer port queues (`cadence.netem.fair`, opt-in) split a port evenly under cubic too; the
default stays BBR over FIFO ports until training under cubic is settled (the README's "Cubic
and per-peer port queues").
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cadence.errors import UserError
from cadence.netem import _iproute

DEFAULT_CONGESTION_CONTROL = "bbr"
ENV_VAR = "CADENCE_NETEM_CONGESTION_CONTROL"
IDLE_ENV_VAR = "CADENCE_NETEM_SLOW_START_AFTER_IDLE"
_SYSCTL = Path("/proc/sys/net/ipv4")
_NAME = re.compile(r"^[a-z0-9_]{1,16}$")


def _read(name: str) -> tuple[str, ...]:
    try:
        return tuple((_SYSCTL / name).read_text().split())
    except OSError:
        return ()


def _unavailable(name: str) -> UserError:
    offered = ", ".join(_read("tcp_available_congestion_control")) or "see /proc/sys/net/ipv4"
    return UserError(
        f"bad TCP congestion control {name!r}: this machine offers {offered} "
        "(--congestion-control picks one)"
    )


def default_congestion_control() -> str:
    """What a cluster's hosts run when the caller names nothing: $CADENCE_NETEM_CONGESTION_CONTROL
    if set (so any command that builds a cluster, `cadence bench dp` included, can run under
    another), else BBR."""
    return os.environ.get(ENV_VAR) or DEFAULT_CONGESTION_CONTROL


def default_slow_start_after_idle() -> bool:
    """Whether a cluster's hosts restart an idle connection's window (Linux's default, on):
    $CADENCE_NETEM_SLOW_START_AFTER_IDLE (1 or 0) if set, else on."""
    value = os.environ.get(IDLE_ENV_VAR, "1")
    if value not in ("0", "1"):
        raise UserError(f"bad ${IDLE_ENV_VAR} {value!r}: use 1 (Linux's default) or 0")
    return value == "1"


def set_slow_start_after_idle(namespace: str, on: bool) -> None:
    """Set net.ipv4.tcp_slow_start_after_idle in `namespace` (a per-namespace sysctl).

    On, a connection idle for longer than its retransmission timeout starts again from its
    initial window; a training step's communication comes in bursts between stretches of
    compute, so under cubic that can cost every step a slow start (the README's "Cubic and
    per-peer port queues"). BBR keeps its rate estimate either way.
    """
    _iproute.run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w",
                  f"net.ipv4.tcp_slow_start_after_idle={int(on)}"])  # fmt: skip


def with_allowed(allowed: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The list of congestion controls unprivileged namespaces may pick, with `name` in it."""
    return allowed if name in allowed else (*allowed, name)


def check_congestion_control(name: str) -> None:
    """Raise a one-line `UserError` unless `name` can be a congestion control's name.

    Whether the kernel has it is known only when a cluster sets it (the kernel loads its
    module then, for root): see `set_congestion_control`.
    """
    if not _NAME.match(name):
        raise _unavailable(name)


def set_congestion_control(namespace: str, name: str) -> None:
    """Make `name` the congestion control of every TCP connection opened in `namespace`.

    Outside the root namespace Linux lets a namespace pick only what
    net.ipv4.tcp_allowed_congestion_control lists (ours listed reno and bbr; a stock machine
    reno and cubic), so `name` is added to that machine-wide list first when missing: that
    only widens what unprivileged processes may pick, and the kernel loads the module if it
    has one. Raises a one-line `UserError` if the kernel has no such congestion control.
    """
    allowed = _read("tcp_allowed_congestion_control")
    if allowed and name not in allowed:
        try:
            (_SYSCTL / "tcp_allowed_congestion_control").write_text(
                " ".join(with_allowed(allowed, name)) + "\n"
            )
        except OSError as exc:
            raise _unavailable(name) from exc
    try:
        _iproute.run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w",
                      f"net.ipv4.tcp_congestion_control={name}"])  # fmt: skip
    except _iproute.NetemCommandError as exc:
        raise _unavailable(name) from exc


def congestion_control_of(namespace: str) -> str:
    """The congestion control new connections in `namespace` get."""
    proc = _iproute.run(["ip", "netns", "exec", namespace, "sysctl", "-n",
                         "net.ipv4.tcp_congestion_control"])  # fmt: skip
    return proc.stdout.strip()
