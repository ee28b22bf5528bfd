"""TCP congestion control of the emulated hosts, and their restart of idle connections.

A new network namespace takes the machine's default congestion control, so the same emulated
cluster behaved differently from machine to machine (BBR where the machine defaults to it,
cubic on a stock Linux).
Each host namespace gets one named explicitly: cubic, Linux's own default, unless told
otherwise; and net.ipv4.tcp_slow_start_after_idle is off in every host unless told otherwise.

Why (`cadence.netem.fair` has the port side): the capped ports split evenly between peers
(per-peer queues, the default), so cubic does not
needs BBR to share a port; and BBR's PROBE_RTT holds a long flow's window at 4 packets for
~200 ms every 10 s, which stalled one link of gloo's ring in 7 of 40 64 MB all-gathers on 4
hosts at 400mbit (up to 1.21x the link time; cubic with per-peer queues: 0 of 40 over
1.1x). A training step's communication comes in bursts
between stretches of compute; with idle restarts on (Linux's default) cubic began each burst
from its initial window, and resnet32's cadence-dp at 1gbit ran 1.13x DDP where under BBR it
ran 0.94-0.99x. Off, as a long-running training job's hosts are usually tuned, cadence-dp
ran against DDP as under BBR.

`--congestion-control bbr --port-queue fifo --slow-start-after-idle` (or the environment
variables below) builds a network with BBR, one FIFO per port and idle restarts.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cadence.errors import UserError
from cadence.netem import _iproute

DEFAULT_CONGESTION_CONTROL = "cubic"
DEFAULT_SLOW_START_AFTER_IDLE = False
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
    another), else cubic."""
    return os.environ.get(ENV_VAR) or DEFAULT_CONGESTION_CONTROL


def default_slow_start_after_idle() -> bool:
    """Whether a cluster's hosts restart an idle connection's window (Linux's default, on):
    $CADENCE_NETEM_SLOW_START_AFTER_IDLE (1 or 0) if set, else off."""
    value = os.environ.get(IDLE_ENV_VAR, str(int(DEFAULT_SLOW_START_AFTER_IDLE)))
    if value not in ("0", "1"):
        raise UserError(f"bad ${IDLE_ENV_VAR} {value!r}: use 1 (Linux's default) or 0 (ours)")
    return value == "1"


def set_slow_start_after_idle(namespace: str, on: bool) -> None:
    """Set net.ipv4.tcp_slow_start_after_idle in `namespace` (a per-namespace sysctl).

    On, a connection idle for longer than its retransmission timeout starts again from its
    initial window; a training step's communication comes in bursts between stretches of
    compute, so under cubic that can cost every step a slow start. BBR keeps its rate estimate
    either way.
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
