"""Run iproute2 commands (ip, tc) with one-line errors, and namespace helpers."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time

from cadence.errors import UserError

_TIMEOUT_S = 20.0


class NetemUnavailable(UserError):
    """The machine cannot host an emulated cluster (not root, or iproute2 missing)."""


class NetemCommandError(UserError):
    """An ip/tc command failed; the message holds the command and its stderr."""


def check_netem_available() -> None:
    """Raise :class:`NetemUnavailable` unless we are root and ``ip`` and ``tc`` exist."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        why = "not running as root" if os.geteuid() != 0 else f"missing {', '.join(missing)}"
        raise NetemUnavailable(
            f"the emulated cluster needs root and iproute2 (ip, tc); {why}: "
            "run as root or drop --emulate-bandwidth"
        )


def run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``args``; with ``check``, a failure raises :class:`NetemCommandError`."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetemCommandError(f"`{shlex.join(args)}` failed: {exc}") from exc
    if check and proc.returncode != 0:
        err = " ".join(proc.stderr.split()) or f"exit status {proc.returncode}"
        raise NetemCommandError(f"`{shlex.join(args)}` failed: {err}")
    return proc


def list_namespaces() -> list[str]:
    """Names of all network namespaces known to ``ip netns``."""
    out = run(["ip", "netns", "list"], check=False).stdout
    # Lines look like "name (id: 3)" or just "name".
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def add_namespace(name: str) -> None:
    """Create namespace ``name`` and bring its loopback up."""
    run(["ip", "netns", "add", name])
    run(["ip", "-n", name, "link", "set", "lo", "up"])


def namespace_pids(name: str) -> list[int]:
    """Processes running inside namespace ``name`` (empty if it is gone)."""
    out = run(["ip", "netns", "pids", name], check=False).stdout
    return [int(tok) for tok in out.split() if tok.isdigit()]


def kill_namespace_processes(name: str, grace_s: float = 1.0) -> None:
    """SIGTERM everything in ``name``, then SIGKILL what is left after ``grace_s``."""
    pids = namespace_pids(name)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            if pid == os.getpid():
                continue  # never kill ourselves if we were run inside the namespace
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 0.5)
        while time.monotonic() < deadline:
            pids = [p for p in namespace_pids(name) if p != os.getpid()]
            if not pids:
                return
            time.sleep(0.05)


def delete_namespace(name: str) -> None:
    """Kill the processes in ``name`` and delete it (its veth ends go with it).

    Missing namespaces are fine: teardown must be idempotent.
    """
    if name not in list_namespaces():
        return
    kill_namespace_processes(name)
    proc = run(["ip", "netns", "del", name], check=False)
    if proc.returncode != 0 and name in list_namespaces():
        err = " ".join(proc.stderr.split())
        raise NetemCommandError(f"`ip netns del {name}` failed: {err}")
