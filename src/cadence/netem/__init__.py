"""Emulated cluster on one machine: one network namespace per worker, capped links.

Each host is a network namespace joined to a Linux bridge (in its own "switch" namespace)
by a veth pair shaped with tbf on both ends, so every host's upload and download are each
capped at the requested bandwidth. Needs root and iproute2; latency cannot be emulated
(no netem qdisc is assumed), only bandwidth.
"""

from cadence.netem._bandwidth import format_bandwidth, link_bucket_bytes, parse_bandwidth
from cadence.netem._iproute import NetemCommandError, NetemUnavailable, check_netem_available
from cadence.netem._state import ClusterInfo
from cadence.netem.cluster import EmulatedCluster, Host, TerminatedBySignal, cleanup_on_signals
from cadence.netem.commands import netem_down, netem_probe, netem_status, netem_up
from cadence.netem.probe import BackgroundLoad, ProbeResult, probe_bandwidth, start_background_load
from cadence.netem.registry import list_clusters, remove_all_clusters, remove_cluster

__all__ = [
    "BackgroundLoad",
    "ClusterInfo",
    "EmulatedCluster",
    "Host",
    "NetemCommandError",
    "NetemUnavailable",
    "ProbeResult",
    "TerminatedBySignal",
    "check_netem_available",
    "cleanup_on_signals",
    "format_bandwidth",
    "link_bucket_bytes",
    "list_clusters",
    "netem_down",
    "netem_probe",
    "netem_status",
    "netem_up",
    "parse_bandwidth",
    "probe_bandwidth",
    "remove_all_clusters",
    "remove_cluster",
    "start_background_load",
]
