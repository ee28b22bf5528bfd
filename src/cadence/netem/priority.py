"""Priority classes on the capped ports of an emulated cluster (htb + u32 on the TOS byte).

Instead of one tbf, a shaped port gets an htb tree: a root class at the link cap and one leaf
per priority class. Every leaf is guaranteed only a sliver of the link (so nothing starves:
heartbeats and gloo still get through) and may borrow up to the whole cap; htb lends spare
rate to the leaf with the lowest `prio` first, so a waiting urgent packet goes before bulk
traffic whoever sent it. u32 filters sort packets into leaves by their TOS byte, i.e. the DSCP
marks the parameter server's channels set (`cadence.ps.config.DSCP`); anything else (unmarked
TCP, ARP) falls into the last, least urgent class.

The tc commands are built by pure functions so they can be checked without root.
"""

from __future__ import annotations

import math

from cadence.errors import UserError
from cadence.netem import _iproute
from cadence.netem._bandwidth import GSO_PACKET_BYTES, PORT_QUEUE_S, tbf_burst_bytes

MAX_CLASSES = 4
# DSCP code points the PS channels mark, most urgent first (kept equal to cadence.ps.config.DSCP,
# which a unit test checks; netem does not import the PS package).
CHANNEL_DSCP = (46, 34, 18, 0)
_LEAF_SHARE = 0.01  # rate each leaf is guaranteed, as a share of the cap


def check_classes(classes: int) -> None:
    """Raise a :class:`UserError` unless ``classes`` is 0 (off) or 2..MAX_CLASSES."""
    if classes != 0 and not 2 <= classes <= MAX_CLASSES:
        raise UserError(
            f"bad --priority-classes {classes}: use 2 to {MAX_CLASSES} (0 turns them off)"
        )


def network_class(channel: int, classes: int) -> int:
    """Class (0 = most urgent) of a packet sent on PS channel ``channel`` (0..3): the four
    channels are spread evenly over ``classes``; unmarked traffic is channel 3, the last."""
    return min(classes - 1, channel * classes // len(CHANNEL_DSCP))


def _classid(klass: int) -> str:
    return f"1:1{klass}"  # htb class minors are hex; 1:10.. stays readable for 0..9


def tc_commands(dev: str, bandwidth_bps: float, classes: int) -> list[list[str]]:
    """The ``tc`` argument lists (without ``tc -n NS``) that install ``classes`` classes on
    ``dev`` capped at ``bandwidth_bps``."""
    check_classes(classes)
    if classes == 0 or math.isinf(bandwidth_bps):
        raise UserError("priority classes need a bandwidth cap (e.g. --bandwidth 400mbit)")
    rate = int(bandwidth_bps)
    burst = str(tbf_burst_bytes(bandwidth_bps))
    leaf = max(8000, int(bandwidth_bps * _LEAF_SHARE))
    # quantum only splits rate between leaves of equal prio (none here); one GSO packet.
    quantum = str(GSO_PACKET_BYTES)
    queue = str(max(int(bandwidth_bps / 8 * PORT_QUEUE_S), 2 * (64 * 1024 + 1514)))
    last = _classid(classes - 1).split(":")[1]
    cmds = [
        f"qdisc replace dev {dev} root handle 1: htb default {last}".split(),
        f"class add dev {dev} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit "
        f"burst {burst} cburst {burst}".split(),
    ]
    for k in range(classes):
        cid = _classid(k)
        cmds.append(
            f"class add dev {dev} parent 1:1 classid {cid} htb rate {leaf}bit ceil {rate}bit "
            f"burst {burst} cburst {burst} prio {k} quantum {quantum}".split()
        )
        # A byte-limited FIFO per leaf: the default packet-limited one holds 1000 GSO
        # packets (up to 64 MB), which would add seconds of queueing to everything behind.
        cmds.append(f"qdisc add dev {dev} parent {cid} handle {k + 2}: bfifo limit {queue}".split())
    for channel, dscp in enumerate(CHANNEL_DSCP):
        klass = network_class(channel, classes)
        if dscp == 0 or klass == classes - 1:
            continue  # the default class catches these
        cmds.append(
            f"filter add dev {dev} parent 1: protocol ip prio 1 u32 "
            f"match ip tos 0x{dscp << 2:02x} 0xfc flowid {_classid(klass)}".split()
        )
    return cmds


def install(namespace: str, dev: str, bandwidth_bps: float, classes: int) -> None:
    """Replace ``dev``'s root qdisc in ``namespace`` by the priority tree."""
    for args in tc_commands(dev, bandwidth_bps, classes):
        _iproute.run(["tc", "-n", namespace, *args])


def class_bytes(namespace: str, dev: str) -> dict[str, int]:
    """Bytes each htb class of ``dev`` has sent, by class id (e.g. ``{"1:10": 123}``)."""
    out = _iproute.run(["tc", "-n", namespace, "-s", "class", "show", "dev", dev]).stdout
    sent: dict[str, int] = {}
    current = None
    for line in out.splitlines():
        words = line.split()
        if words[:2] == ["class", "htb"]:
            current = words[2]
        elif words[:1] == ["Sent"] and current is not None:
            sent[current] = int(words[1])
            current = None
    return sent
