"""An emulated cluster: one network namespace per host, joined by a bandwidth-capped switch."""

from __future__ import annotations

import contextlib
import math
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType, TracebackType

from cadence.errors import UserError
from cadence.netem import _iproute, _state, fair, priority, registry
from cadence.netem._bandwidth import tbf_args
from cadence.netem._congestion import (
    check_congestion_control,
    default_congestion_control,
    default_slow_start_after_idle,
    set_congestion_control,
    set_slow_start_after_idle,
)
from cadence.netem._state import ClusterInfo

MAX_HOSTS = 200
HOST_IFACE = "cad0"
_BRIDGE = "br0"
# Each cluster is its own L2 domain, so every cluster can reuse the same private /24.
_SUBNET = "10.213.0"
_ID_PATTERN = re.compile(r"^[a-z0-9]{1,12}$")


@dataclass(frozen=True)
class Host:
    """One emulated machine."""

    index: int
    """Position of the host in the cluster, from 0."""
    namespace: str
    """Network namespace the host's processes run in."""
    ip: str
    """IPv4 address of the host on the cluster network."""
    iface: str
    """Name of the host's capped interface inside its namespace."""


class TerminatedBySignal(BaseException):
    """SIGTERM/SIGHUP arrived; a BaseException so ``except Exception`` cannot swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def cleanup_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into :class:`TerminatedBySignal` so ``finally`` blocks run.

    Only the main thread may install handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise TerminatedBySignal(signum)

    previous = {sig: signal.signal(sig, _raise) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM/SIGHUP while tearing down, so a second Ctrl-C cannot leave
    half a cluster behind; teardown takes well under a second per host."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class EmulatedCluster:
    """``hosts`` network namespaces joined by a bridge; every link capped at ``bandwidth_bps``.

    Use as a context manager (torn down on exit, whatever happens), or call :meth:`up` and
    :meth:`down` directly; ``persistent=True`` marks a cluster left running on purpose.
    ``priority_classes`` > 0 shapes every port with that many TOS-based priority classes
    (:mod:`cadence.netem.priority`) instead of one tbf.

    ``frame_bucket=True`` turns GSO off on every link and gives each tbf a bucket of two
    frames instead of ~5 ms of traffic: the default bucket passes transfers smaller than it at
    veth speed (a 16 KB message in 0.02 ms where 400mbit serialises it in 0.33 ms), which no
    real link does. The price is one packet per frame through every qdisc (more CPU), which
    is why only `cadence bench collectives` offers it (`--link-bucket frames`, off by default).

    ``congestion_control`` is the TCP congestion control every host runs (None: cubic, or
    $CADENCE_NETEM_CONGESTION_CONTROL): a namespace would otherwise take this machine's
    default (`cadence.netem._congestion` has why cubic, and the measurements).

    ``port_queue`` is how every capped port queues: "fifo" (one tbf) or "per-peer" (an even
    share for each other host, :mod:`cadence.netem.fair`); None: $CADENCE_NETEM_PORT_QUEUE,
    else per-peer (fifo under priority classes and on uncapped links).
    ``slow_start_after_idle`` is every host's net.ipv4.tcp_slow_start_after_idle (None:
    $CADENCE_NETEM_SLOW_START_AFTER_IDLE, else off; Linux's default is on).
    """

    def __init__(
        self,
        hosts: int,
        bandwidth_bps: float,
        name: str | None = None,
        persistent: bool = False,
        priority_classes: int = 0,
        frame_bucket: bool = False,
        congestion_control: str | None = None,
        port_queue: str | None = None,
        slow_start_after_idle: bool | None = None,
    ) -> None:
        if not 1 <= hosts <= MAX_HOSTS:
            raise UserError(f"bad host count {hosts}: use 1 to {MAX_HOSTS}")
        if not bandwidth_bps > 0:
            raise UserError(f"bad bandwidth {bandwidth_bps}: must be positive")
        priority.check_classes(priority_classes)
        if priority_classes and math.isinf(bandwidth_bps):
            raise UserError("priority classes need a bandwidth cap (e.g. --bandwidth 400mbit)")
        if frame_bucket and priority_classes:
            raise UserError("a frame-sized token bucket shapes with tbf: no priority classes")
        self.port_queue = port_queue or fair.default_port_queue(priority_classes, bandwidth_bps)
        fair.check_port_queue(self.port_queue)
        if self.port_queue == "per-peer" and priority_classes:
            raise UserError("per-peer port queues and priority classes are two htb trees: pick one")
        if self.port_queue == "per-peer" and math.isinf(bandwidth_bps):
            raise UserError("per-peer port queues need a bandwidth cap (e.g. --bandwidth 400mbit)")
        self.slow_start_after_idle = (
            default_slow_start_after_idle()
            if slow_start_after_idle is None
            else slow_start_after_idle
        )
        self.congestion_control = congestion_control or default_congestion_control()
        check_congestion_control(self.congestion_control)
        self.priority_classes = priority_classes
        self.frame_bucket = frame_bucket
        cluster_id = name if name is not None else secrets.token_hex(3)
        if not _ID_PATTERN.match(cluster_id):
            raise UserError(f"bad cluster name {cluster_id!r}: use 1-12 of a-z, 0-9")
        self.cluster_id = cluster_id
        self.bandwidth_bps = float(bandwidth_bps)
        self.persistent = persistent
        self.switch_namespace = f"{registry.NAMESPACE_PREFIX}{cluster_id}-sw"
        self.hosts = [
            Host(
                index=i,
                namespace=f"{registry.NAMESPACE_PREFIX}{cluster_id}-h{i}",
                ip=f"{_SUBNET}.{i + 1}",
                iface=HOST_IFACE,
            )
            for i in range(hosts)
        ]
        self._owner = True
        self._created: float = _state.now()

    @classmethod
    def attach(cls, info: ClusterInfo) -> EmulatedCluster:
        """A handle on an existing cluster (e.g. a persistent one) that does not own it."""
        cluster = cls(
            len(info.host_namespaces),
            info.bandwidth_bps,
            name=info.cluster_id,
            priority_classes=info.priority_classes,
            congestion_control=info.congestion_control or None,
            port_queue=info.port_queue,
            slow_start_after_idle=info.slow_start_after_idle,
        )
        cluster.persistent = info.persistent
        cluster._owner = False
        cluster._created = info.created
        return cluster

    def exec_prefix(self, i: int) -> list[str]:
        """Command prefix that runs a program inside host ``i``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[i].namespace]

    def info(self) -> ClusterInfo:
        """The description written to the state file."""
        pid = os.getpid()
        return ClusterInfo(
            cluster_id=self.cluster_id,
            host_namespaces=tuple(h.namespace for h in self.hosts),
            switch_namespace=self.switch_namespace,
            ips=tuple(h.ip for h in self.hosts),
            bandwidth_bps=self.bandwidth_bps,
            owner_pid=pid,
            owner_start=_state.process_start_ticks(pid),
            created=self._created,
            persistent=self.persistent,
            priority_classes=self.priority_classes,
            congestion_control=self.congestion_control,
            port_queue=self.port_queue,
            slow_start_after_idle=self.slow_start_after_idle,
        )

    def up(self) -> None:
        """Create the cluster; on failure part-way, remove what was made and re-raise."""
        _iproute.check_netem_available()
        # Leftovers of runs that were SIGKILLed: nobody else will ever remove them.
        registry.remove_stale_clusters()
        existing = _iproute.list_namespaces()
        if (
            registry.cluster_namespaces(self.cluster_id, existing)
            or _state.state_path(self.cluster_id).exists()
        ):
            raise UserError(f"an emulated cluster named {self.cluster_id!r} already exists")
        # State first: if we die mid-way, the next run knows whose namespaces these are.
        _state.write_state(self.info())
        try:
            self._build()
        except BaseException:
            self.down()
            raise

    def _build(self) -> None:
        sw = self.switch_namespace
        run = _iproute.run
        _iproute.add_namespace(sw)
        run(["ip", "-n", sw, "link", "add", "name", _BRIDGE, "type", "bridge"])
        run(["ip", "-n", sw, "link", "set", _BRIDGE, "up"])
        for host in self.hosts:
            port = f"h{host.index}"
            _iproute.add_namespace(host.namespace)
            set_congestion_control(host.namespace, self.congestion_control)
            set_slow_start_after_idle(host.namespace, self.slow_start_after_idle)
            # Both ends are created directly in their namespaces: no name clash in ours.
            run(["ip", "link", "add", "name", host.iface, "netns", host.namespace,
                 "type", "veth", "peer", "name", port, "netns", sw])  # fmt: skip
            run(["ip", "-n", host.namespace, "addr", "add", f"{host.ip}/24", "dev", host.iface])
            run(["ip", "-n", host.namespace, "link", "set", host.iface, "up"])
            run(["ip", "-n", sw, "link", "set", port, "master", _BRIDGE])
            run(["ip", "-n", sw, "link", "set", port, "up"])
            if self.frame_bucket and not math.isinf(self.bandwidth_bps):
                # One segment per packet, so no super-packet ever outgrows the small bucket.
                for namespace, dev in ((host.namespace, host.iface), (sw, port)):
                    run(["ip", "-n", namespace, "link", "set", "dev", dev,
                         "gso_max_size", "1514", "gso_max_segs", "1"])  # fmt: skip
            # Cap both directions: host egress shapes uploads, switch-port egress downloads.
            peers = [h.ip for h in self.hosts if h is not host]
            self._shape(host.namespace, host.iface, peers, "dst")
            self._shape(sw, port, peers, "src")

    def _shape(self, namespace: str, dev: str, peers: list[str], match: str) -> None:
        """Cap `dev`'s egress; with per-peer queues, `peers` sorted by their `match` address."""
        if math.isinf(self.bandwidth_bps):
            return
        if self.port_queue == "per-peer":
            fair.install(namespace, dev, self.bandwidth_bps, peers, match, self.frame_bucket)
            return
        if self.priority_classes:
            # Both ends, like tbf: a host's own flows queue at its egress, flows of
            # several hosts to one host at that host's switch port.
            priority.install(namespace, dev, self.bandwidth_bps, self.priority_classes)
            return
        _iproute.run(["tc", "-n", namespace, "qdisc", "replace", "dev", dev, "root",
                      *tbf_args(self.bandwidth_bps, self.frame_bucket)])  # fmt: skip

    def down(self) -> None:
        """Remove everything the cluster made; safe to call more than once."""
        with _signals_deferred():
            registry.teardown(self.cluster_id)

    def __enter__(self) -> EmulatedCluster:
        self.up()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._owner:
            return
        try:
            self.down()
        except Exception as teardown_exc:
            if exc is None:
                raise
            # Do not hide the error that ended the body; report the cleanup one beside it.
            print(f"cadence: emulated cluster teardown failed: {teardown_exc}", file=sys.stderr)
