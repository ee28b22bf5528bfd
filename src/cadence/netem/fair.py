"""Per-peer fair queueing on the capped ports of an emulated cluster (htb + u32 on addresses).

A plain port is one tbf: one FIFO queue, so flows through it share it as their congestion
controls negotiate. Under cubic a flow joining one that already fills the queue got 0.17-0.21
of the port for seconds, where the simulator and
the cost model share a port evenly; BBR shares it evenly but stalls a long flow for ~200 ms
every 10 s (PROBE_RTT). A real host spreads its flows over fair queues (fq_codel, fq), which
this kernel lacks (fq, fq_codel, sfq, drr and the `flow` classifier are all unknown to it).

Per-peer queues (the default; `--port-queue fifo` for one FIFO) are the
nearest thing this kernel can build. The port keeps its tbf, so the link's rate and token
bucket are exactly those of a FIFO port (and what the cost model and `cadence calibrate`'s
bucket drain assume); under it, as the tbf's child, an htb tree decides
which packet goes next: one leaf per other host, all of one priority and unshaped (rates far
above the cap, buckets a whole queue deep: only the tbf holds traffic back), served round-robin
a quantum of one GSO packet at a time, so the leaves with traffic split the port evenly. u32
filters sort packets by the peer's address: a host's egress (its upload) by destination, the
switch's port towards a host (its download) by source. Flows to or from the same peer share a
leaf, as they would share a path. Anything else (ARP) takes a leaf of its own.

Leaves that shaped themselves, with no tbf above them, each kept a token bucket of its own: a
64 KB broadcast, whose root sends to peers the bucket drain had not touched, ran at 0.16x the
link model. Leaves with htb's default bucket (1250 bytes) held back GSO packets and gave the
late flow of the shared-port test 0.17-0.45; with deep buckets, 0.477-0.480.

The tc commands are built by pure functions so they can be checked without root.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cadence.errors import UserError
from cadence.netem import _iproute
from cadence.netem._bandwidth import GSO_PACKET_BYTES, PORT_QUEUE_S, tbf_args

PORT_QUEUES = ("fifo", "per-peer")
"""How a capped port queues: one FIFO (tbf), or an even share per peer host (htb)."""
DEFAULT_PORT_QUEUE = "per-peer"
ENV_VAR = "CADENCE_NETEM_PORT_QUEUE"
_UNSHAPED = 10  # the htb scheduler's rates, as a multiple of the cap


def check_port_queue(port_queue: str) -> None:
    """A one-line UserError unless `port_queue` is one of `PORT_QUEUES`."""
    if port_queue not in PORT_QUEUES:
        raise UserError(f"unknown port queue {port_queue!r}: use {' or '.join(PORT_QUEUES)}")


def default_port_queue(priority_classes: int = 0, bandwidth_bps: float = 1.0) -> str:
    """$CADENCE_NETEM_PORT_QUEUE, else `DEFAULT_PORT_QUEUE`, except "fifo" where per-peer
    queues cannot be: under priority classes (their own htb tree) or on uncapped links."""
    import os

    named = os.environ.get(ENV_VAR)
    if named:
        return named
    return "fifo" if priority_classes or math.isinf(bandwidth_bps) else DEFAULT_PORT_QUEUE


def _classid(leaf: int) -> str:
    return f"2:{leaf + 0x10:x}"  # htb class minors are hex; leaves from 2:10


def tc_commands(
    dev: str, bandwidth_bps: float, peers: Sequence[str], match: str, frame_bucket: bool = False
) -> list[list[str]]:
    """The `tc` argument lists (without `tc -n NS`) that cap `dev` at `bandwidth_bps` and split
    it evenly between `peers` (IPv4 addresses), packets sorted by their `match` address ("dst"
    on a host's egress, "src" on the switch's port towards a host); the tbf's bucket is a FIFO
    port's (`link_bucket_bytes`)."""
    if match not in ("src", "dst"):
        raise ValueError(f"match must be src or dst, got {match!r}")
    if math.isinf(bandwidth_bps):
        raise UserError("per-peer port queues need a bandwidth cap (e.g. --bandwidth 400mbit)")
    rate = int(bandwidth_bps)
    unshaped = _UNSHAPED * rate  # the scheduler's own rates: never what holds a packet back
    leaves = len(peers) + 1  # the last catches what no filter matches
    queue = str(max(int(bandwidth_bps / 8 * PORT_QUEUE_S), 2 * GSO_PACKET_BYTES))
    default = _classid(leaves - 1).split(":")[1]
    cmds = [
        ["qdisc", "replace", "dev", dev, "root", "handle", "1:", *tbf_args(rate, frame_bucket)],
        f"qdisc add dev {dev} parent 1:1 handle 2: htb default {default}".split(),
        f"class add dev {dev} parent 2: classid 2:1 htb rate {unshaped}bit "
        f"ceil {unshaped}bit burst {queue} cburst {queue}".split(),
    ]
    for leaf in range(leaves):
        cid = _classid(leaf)
        cmds.append(
            f"class add dev {dev} parent 2:1 classid {cid} htb rate {unshaped}bit ceil "
            f"{unshaped}bit burst {queue} cburst {queue} prio 0 quantum {GSO_PACKET_BYTES}".split()
        )
        # Byte-limited, as tbf's queue is: a packet-limited FIFO would hold 1000 GSO packets.
        leaf_qdisc = f"qdisc add dev {dev} parent {cid} handle {leaf + 0x10:x}: bfifo limit {queue}"
        cmds.append(leaf_qdisc.split())
    for leaf, ip in enumerate(peers):
        cmds.append(
            f"filter add dev {dev} parent 2: protocol ip prio 1 u32 "
            f"match ip {match} {ip}/32 flowid {_classid(leaf)}".split()
        )
    return cmds


def install(
    namespace: str,
    dev: str,
    bandwidth_bps: float,
    peers: Sequence[str],
    match: str,
    frame_bucket: bool = False,
) -> None:
    """Replace `dev`'s root qdisc in `namespace` by the tbf and its per-peer scheduler."""
    for args in tc_commands(dev, bandwidth_bps, peers, match, frame_bucket):
        _iproute.run(["tc", "-n", namespace, *args])
