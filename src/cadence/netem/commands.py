"""Functions behind ``cadence netem up|down|status|probe`` (the CLI parses, these act).

Each prints a short human summary (unless ``echo=False``) and returns the data, so the CLI
can also emit JSON via ``to_json()``.
"""

from __future__ import annotations

import time

from cadence.errors import UserError
from cadence.netem import _iproute, registry
from cadence.netem._bandwidth import format_bandwidth
from cadence.netem._state import ClusterInfo
from cadence.netem.cluster import EmulatedCluster, cleanup_on_signals
from cadence.netem.probe import ProbeResult, probe_bandwidth


def describe(info: ClusterInfo) -> str:
    """One line about a cluster, e.g. ``3f9a1c  4 hosts  400mbit  tcp cubic  per-peer port
    queues  no slow start after idle  persistent  since ...  up``."""
    expected = len(info.host_namespaces) + 1
    if len(info.present_namespaces) == expected:
        health = "up"
    else:
        health = f"partial ({len(info.present_namespaces)}/{expected} namespaces)"
    kind = "persistent" if info.persistent else f"owner pid {info.owner_pid}"
    stale = "  STALE (owner gone)" if info.stale else ""
    if info.priority_classes:
        kind = f"{info.priority_classes} priority classes  {kind}"
    if not info.slow_start_after_idle:
        kind = f"no slow start after idle  {kind}"
    if info.port_queue != "fifo":
        kind = f"{info.port_queue} port queues  {kind}"
    if info.congestion_control:
        kind = f"tcp {info.congestion_control}  {kind}"
    age = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.created)) if info.created else "?"
    return (
        f"{info.cluster_id}  {len(info.host_namespaces)} hosts  "
        f"{format_bandwidth(info.bandwidth_bps)}  {kind}  since {age}  {health}{stale}"
    )


def netem_up(
    hosts: int,
    bandwidth_bps: float,
    echo: bool = True,
    priority_classes: int = 0,
    congestion_control: str | None = None,
    port_queue: str | None = None,
    slow_start_after_idle: bool | None = None,
) -> ClusterInfo:
    """Create a persistent cluster that outlives this process (remove with ``netem_down``);
    ``priority_classes`` > 0 installs that many TOS priority classes on every port, and every
    host runs TCP with ``congestion_control`` (None: `default_congestion_control()`); every
    capped port queues as ``port_queue`` says (None: `fair.default_port_queue()`), and
    ``slow_start_after_idle`` sets the hosts' sysctl of that name (None: the default)."""
    _iproute.check_netem_available()
    cluster = EmulatedCluster(
        hosts, bandwidth_bps, persistent=True, priority_classes=priority_classes,
        congestion_control=congestion_control, port_queue=port_queue,
        slow_start_after_idle=slow_start_after_idle,
    )  # fmt: skip
    with cleanup_on_signals():
        cluster.up()
    info = next(i for i in registry.list_clusters() if i.cluster_id == cluster.cluster_id)
    if echo:
        print(describe(info))
        for host in cluster.hosts:
            print(f"  h{host.index}  {host.ip}  ip netns exec {host.namespace} <command>")
    return info


def netem_down(cluster_id: str | None, all: bool = False, echo: bool = True) -> list[str]:
    """Remove one cluster, or every one with ``all``; with neither, the only cluster there is.

    Returns the removed ids.
    """
    _iproute.check_netem_available()
    if all:
        removed = registry.remove_all_clusters()
    elif cluster_id is not None:
        registry.remove_cluster(cluster_id)
        removed = [cluster_id]
    else:
        ids = [info.cluster_id for info in registry.list_clusters()]
        if len(ids) != 1:
            found = ", ".join(ids) if ids else "none"
            raise UserError(f"say which cluster to remove (found: {found}), or use --all")
        registry.remove_cluster(ids[0])
        removed = ids
    if echo:
        print(f"removed {len(removed)} emulated cluster(s)" + "".join(f" {i}" for i in removed))
    return removed


def netem_status(echo: bool = True) -> list[ClusterInfo]:
    """Every emulated cluster on this machine, stale ones flagged."""
    _iproute.check_netem_available()
    infos = registry.list_clusters()
    if echo:
        if not infos:
            print("no emulated clusters")
        for info in infos:
            print(describe(info))
    return infos


def netem_probe(
    cluster_id: str | None,
    bandwidth_bps: float | None,
    src: int = 0,
    dst: int = 1,
    seconds: float = 2.0,
    echo: bool = True,
) -> ProbeResult:
    """Probe an existing cluster, or (no id) a temporary 2-host one at ``bandwidth_bps``."""
    _iproute.check_netem_available()
    with cleanup_on_signals():
        if cluster_id is not None:
            match = [i for i in registry.list_clusters() if i.cluster_id == cluster_id]
            if not match:
                raise UserError(f"no emulated cluster with id {cluster_id!r}")
            result = probe_bandwidth(EmulatedCluster.attach(match[0]), src, dst, seconds)
        else:
            if bandwidth_bps is None:
                raise UserError("give a bandwidth to probe (e.g. 400mbit) or a cluster id")
            with EmulatedCluster(max(2, src + 1, dst + 1), bandwidth_bps) as cluster:
                result = probe_bandwidth(cluster, src, dst, seconds)
    if echo:
        print(result.summary())
    return result
