"""State files of emulated clusters, one JSON file per cluster under /run/cadence-netem."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cadence.netem._bandwidth import format_bandwidth

# /run is a tmpfs: state vanishes on reboot, exactly like the namespaces it describes.
DEFAULT_STATE_DIR = "/run/cadence-netem"


def state_dir() -> Path:
    """Directory holding the state files (``CADENCE_NETEM_STATE_DIR`` overrides it)."""
    return Path(os.environ.get("CADENCE_NETEM_STATE_DIR", DEFAULT_STATE_DIR))


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if it does not exist.

    Stored with the owner pid so that a recycled pid is not mistaken for a live owner.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) may contain spaces; everything after the last ')' is well-formed.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


@dataclass(frozen=True)
class ClusterInfo:
    """What is known about one emulated cluster (from its state file and the kernel)."""

    cluster_id: str
    """Short random id; every namespace of the cluster is named ``cadence-<id>-...``."""
    host_namespaces: tuple[str, ...]
    """Namespace of each host, in host order."""
    switch_namespace: str
    """Namespace holding the bridge that joins the hosts."""
    ips: tuple[str, ...]
    """IPv4 address of each host, in host order."""
    bandwidth_bps: float
    """Cap of every host link in bits per second, each direction (inf: uncapped)."""
    owner_pid: int
    """Process that created the cluster."""
    owner_start: int | None
    """Start time (clock ticks since boot) of ``owner_pid``, to detect pid reuse."""
    created: float
    """Creation time, seconds since the epoch."""
    persistent: bool
    """True when left running on purpose (``cadence netem up``); never auto-removed."""
    priority_classes: int = 0
    """TOS-based priority classes on every port (0: none, one tbf per port)."""
    congestion_control: str = ""
    """TCP congestion control of every host (empty: the machine's default, as in state files
    written before the cluster set one)."""
    slow_start_after_idle: bool = True
    """net.ipv4.tcp_slow_start_after_idle of every host (on where a state file does not
    record it; a new cluster turns it off unless told otherwise)."""
    port_queue: str = "fifo"
    """How every capped port queues: "fifo" (one tbf) or "per-peer" (`cadence.netem.fair`)."""
    present_namespaces: tuple[str, ...] = field(default=())
    """Namespaces of the cluster that exist right now (filled in by ``list_clusters``)."""

    @property
    def owner_alive(self) -> bool:
        """Whether the creating process still runs (same pid and same start time)."""
        start = process_start_ticks(self.owner_pid)
        return start is not None and (self.owner_start is None or start == self.owner_start)

    @property
    def stale(self) -> bool:
        """An ephemeral cluster whose owner died without tearing it down."""
        return not self.persistent and not self.owner_alive

    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict (uncapped bandwidth becomes null)."""
        data = asdict(self)
        data["host_namespaces"] = list(self.host_namespaces)
        data["ips"] = list(self.ips)
        data["present_namespaces"] = list(self.present_namespaces)
        data["bandwidth_bps"] = None if math.isinf(self.bandwidth_bps) else self.bandwidth_bps
        data["bandwidth"] = format_bandwidth(self.bandwidth_bps)
        data["stale"] = self.stale
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterInfo:
        """Inverse of :meth:`to_json` (derived keys are ignored)."""
        bw = data.get("bandwidth_bps")
        return cls(
            cluster_id=str(data["cluster_id"]),
            host_namespaces=tuple(data["host_namespaces"]),
            switch_namespace=str(data["switch_namespace"]),
            ips=tuple(data["ips"]),
            bandwidth_bps=math.inf if bw is None else float(bw),
            owner_pid=int(data["owner_pid"]),
            owner_start=data.get("owner_start"),
            created=float(data.get("created", 0.0)),
            persistent=bool(data.get("persistent", False)),
            priority_classes=int(data.get("priority_classes", 0)),
            congestion_control=str(data.get("congestion_control", "")),
            port_queue=str(data.get("port_queue", "fifo")),
            slow_start_after_idle=bool(data.get("slow_start_after_idle", True)),
            present_namespaces=tuple(data.get("present_namespaces", ())),
        )


def state_path(cluster_id: str) -> Path:
    """Path of the state file of ``cluster_id``."""
    return state_dir() / f"{cluster_id}.json"


def write_state(info: ClusterInfo) -> None:
    """Write ``info`` atomically (a reader never sees half a file)."""
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{info.cluster_id}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(info.to_json(), indent=2) + "\n")
    os.replace(tmp, state_path(info.cluster_id))


def read_states() -> list[ClusterInfo]:
    """All readable state files; unreadable ones are skipped (they are not ours to judge)."""
    directory = state_dir()
    if not directory.is_dir():
        return []
    infos = []
    for path in sorted(directory.glob("*.json")):
        try:
            infos.append(ClusterInfo.from_json(json.loads(path.read_text())))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return infos


def remove_state(cluster_id: str) -> None:
    """Delete the state file of ``cluster_id`` if it exists."""
    with contextlib.suppress(FileNotFoundError):
        state_path(cluster_id).unlink()


def now() -> float:
    """Current time, seconds since the epoch."""
    return time.time()
