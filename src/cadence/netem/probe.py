"""Measure the bandwidth between two hosts of an emulated cluster, and generate load."""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from cadence.errors import UserError
from cadence.netem._bandwidth import format_bandwidth
from cadence.netem.cluster import EmulatedCluster

_STARTUP_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of one TCP bulk transfer between two hosts."""

    src: int
    """Index of the sending host."""
    dst: int
    """Index of the receiving host."""
    seconds: float
    """Measured duration at the receiver, first byte to last byte."""
    bytes: int
    """Bytes received in that window (the first chunk only starts the clock)."""
    achieved_bps: float
    """Measured throughput in bits per second."""
    cap_bps: float
    """Configured link cap in bits per second (inf: uncapped)."""
    ratio: float
    """achieved_bps / cap_bps (nan when uncapped)."""

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict (inf and nan become null)."""
        return {
            "src": self.src,
            "dst": self.dst,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "achieved_bps": self.achieved_bps,
            "cap_bps": None if math.isinf(self.cap_bps) else self.cap_bps,
            "ratio": None if math.isnan(self.ratio) else self.ratio,
        }

    def summary(self) -> str:
        """One human line, e.g. ``h0 -> h1: 193mbit of 200mbit cap (96.5%) in 2.00 s``."""
        cap = format_bandwidth(self.cap_bps)
        pct = "" if math.isnan(self.ratio) else f" ({self.ratio:.1%})"
        return (
            f"h{self.src} -> h{self.dst}: {format_bandwidth(self.achieved_bps)} "
            f"of {cap} cap{pct} in {self.seconds:.2f} s"
        )


def _peer_cmd(cluster: EmulatedCluster, host: int, *args: str) -> list[str]:
    return [*cluster.exec_prefix(host), sys.executable, "-m", "cadence.netem._probe_peer", *args]


def _peer_env() -> dict[str, str]:
    # The peer imports cadence by module name: make sure it finds this very copy.
    import cadence.netem

    src_dir = os.path.dirname(os.path.dirname(os.path.dirname(cadence.netem.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_dir, env.get("PYTHONPATH")) if p)
    return env


def _check_hosts(cluster: EmulatedCluster, src: int, dst: int) -> None:
    n = len(cluster.hosts)
    if not (0 <= src < n and 0 <= dst < n) or src == dst:
        raise UserError(f"bad probe hosts {src} -> {dst}: use two different hosts in 0..{n - 1}")


def _start_receiver(
    cluster: EmulatedCluster, dst: int, timeout: float
) -> tuple[subprocess.Popen[str], int]:
    args = ["recv", "--bind", cluster.hosts[dst].ip, "--timeout", str(timeout)]
    recv_cmd = _peer_cmd(cluster, dst, *args)
    proc = subprocess.Popen(
        recv_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_peer_env()
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], _STARTUP_TIMEOUT_S)
    line = proc.stdout.readline() if ready else ""
    if not line.strip().isdigit():
        proc.kill()
        _, err = proc.communicate(timeout=5)
        why = " ".join(err.split()) or "no output"
        raise RuntimeError(f"probe receiver in {cluster.hosts[dst].namespace} did not start: {why}")
    return proc, int(line)


def probe_bandwidth(
    cluster: EmulatedCluster, src: int = 0, dst: int = 1, seconds: float = 2.0
) -> ProbeResult:
    """Send TCP bulk data from host ``src`` to host ``dst`` for ``seconds`` and measure it.

    Bounded: the peers have their own deadlines and are killed if they overrun them.
    """
    _check_hosts(cluster, src, dst)
    if not 0 < seconds <= 60:
        raise UserError(f"bad probe duration {seconds}: use 0 to 60 seconds")
    limit = seconds + 10.0
    receiver, port = _start_receiver(cluster, dst, limit)
    args = ["send", "--connect", cluster.hosts[dst].ip, "--port", str(port)]
    sender = subprocess.Popen(
        _peer_cmd(cluster, src, *args, "--seconds", str(seconds)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_peer_env(),
    )
    try:
        out, err = receiver.communicate(timeout=limit + 5)
        _, send_err = sender.communicate(timeout=5)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"bandwidth probe h{src} -> h{dst} did not finish in time") from exc
    finally:
        for proc in (sender, receiver):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if receiver.returncode != 0 or sender.returncode != 0:
        msg = " ".join((err + " " + send_err).split())
        raise RuntimeError(f"bandwidth probe h{src} -> h{dst} failed: {msg or 'no output'}")
    data = json.loads(out.strip().splitlines()[-1])
    duration = float(data["seconds"])
    nbytes = int(data["bytes"])
    achieved = nbytes * 8 / duration if duration > 0 else 0.0
    cap = cluster.bandwidth_bps
    ratio = math.nan if math.isinf(cap) else achieved / cap
    return ProbeResult(src, dst, duration, nbytes, achieved, cap, ratio)


class BackgroundLoad:
    """A TCP bulk transfer between two hosts that runs until :meth:`stop` (contention)."""

    def __init__(self, cluster: EmulatedCluster, src: int, dst: int) -> None:
        _check_hosts(cluster, src, dst)
        self.src = src
        self.dst = dst
        self._receiver, port = _start_receiver(cluster, dst, 0)
        args = ["send", "--connect", cluster.hosts[dst].ip, "--port", str(port)]
        self._sender = subprocess.Popen(
            _peer_cmd(cluster, src, *args, "--seconds", "0"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_peer_env(),
        )

    def stop(self) -> None:
        """Stop both ends; safe to call twice (teardown of the cluster also kills them)."""
        for proc in (self._sender, self._receiver):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.stderr is not None:
                proc.stderr.close()

    def __enter__(self) -> BackgroundLoad:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_background_load(cluster: EmulatedCluster, src: int, dst: int) -> BackgroundLoad:
    """Start a TCP bulk sender from ``src`` to ``dst``; call ``.stop()`` to end it."""
    return BackgroundLoad(cluster, src, dst)
