"""Find, list and remove emulated clusters, including leftovers of crashed runs."""

from __future__ import annotations

import dataclasses
import re

from cadence.errors import UserError
from cadence.netem import _iproute, _state
from cadence.netem._state import ClusterInfo

NAMESPACE_PREFIX = "cadence-"
# Our namespaces: cadence-<id>-h<i> for hosts, cadence-<id>-sw for the switch.
_NS_PATTERN = re.compile(r"^cadence-([a-z0-9]{1,12})-(h\d+|sw)$")


def cluster_namespaces(cluster_id: str, namespaces: list[str]) -> list[str]:
    """The namespaces in ``namespaces`` that belong to ``cluster_id``."""
    out = []
    for name in namespaces:
        match = _NS_PATTERN.match(name)
        if match is not None and match.group(1) == cluster_id:
            out.append(name)
    return out


def list_clusters() -> list[ClusterInfo]:
    """Every cluster with a state file or a namespace on this machine.

    Namespaces of ours without a state file (should not happen: the state file is written
    before anything else) are reported as a stale, ephemeral cluster owned by pid 0.
    """
    existing = _iproute.list_namespaces()
    infos = []
    seen = set()
    for info in _state.read_states():
        present = tuple(cluster_namespaces(info.cluster_id, existing))
        infos.append(dataclasses.replace(info, present_namespaces=present))
        seen.add(info.cluster_id)
    orphans: dict[str, list[str]] = {}
    for name in existing:
        match = _NS_PATTERN.match(name)
        if match is not None and match.group(1) not in seen:
            orphans.setdefault(match.group(1), []).append(name)
    for cluster_id, names in sorted(orphans.items()):
        hosts = tuple(sorted(n for n in names if not n.endswith("-sw")))
        infos.append(
            ClusterInfo(
                cluster_id=cluster_id,
                host_namespaces=hosts,
                switch_namespace=f"{NAMESPACE_PREFIX}{cluster_id}-sw",
                ips=(),
                bandwidth_bps=float("inf"),
                owner_pid=0,
                owner_start=None,
                created=0.0,
                persistent=False,
                present_namespaces=tuple(names),
            )
        )
    return infos


def teardown(cluster_id: str) -> None:
    """Remove every namespace of ``cluster_id`` (killing what runs there), then its state.

    Idempotent; the state file goes last so that an interrupted teardown can be retried.
    """
    errors = []
    names = cluster_namespaces(cluster_id, _iproute.list_namespaces())
    # Hosts first, switch last: deleting a host also deletes its veth pair.
    for name in sorted(names, key=lambda n: n.endswith("-sw")):
        try:
            _iproute.delete_namespace(name)
        except UserError as exc:
            errors.append(str(exc))
    if errors:
        raise _iproute.NetemCommandError("; ".join(errors))
    _state.remove_state(cluster_id)


def remove_cluster(cluster_id: str) -> None:
    """Tear down cluster ``cluster_id``; a :class:`UserError` if there is no such cluster."""
    if not any(info.cluster_id == cluster_id for info in list_clusters()):
        raise UserError(f"no emulated cluster with id {cluster_id!r} (see `cadence netem status`)")
    teardown(cluster_id)


def remove_all_clusters() -> list[str]:
    """Tear down every cluster on this machine; returns their ids."""
    ids = [info.cluster_id for info in list_clusters()]
    for cluster_id in ids:
        teardown(cluster_id)
    return ids


def remove_stale_clusters() -> list[str]:
    """Tear down ephemeral clusters whose owner died (e.g. SIGKILLed); returns their ids."""
    ids = [info.cluster_id for info in list_clusters() if info.stale]
    for cluster_id in ids:
        teardown(cluster_id)
    return ids
