"""Per-peer port queues: the tc commands and the arguments refused before anything is made."""

from __future__ import annotations

import pytest

from cadence.errors import UserError
from cadence.netem import EmulatedCluster
from cadence.netem.fair import ENV_VAR, default_port_queue, tc_commands

PEERS = ("10.1.0.2", "10.1.0.3")


def test_the_tbf_shapes_and_an_htb_under_it_takes_turns_by_peer() -> None:
    cmds = [" ".join(c) for c in tc_commands("h1", 400e6, PEERS, "src")]
    # The link's rate and bucket are a FIFO port's: the tbf at the root.
    assert cmds[0] == (
        "qdisc replace dev h1 root handle 1: tbf rate 400000000bit burst 250000 latency 50ms"
    )
    assert cmds[1] == "qdisc add dev h1 parent 1:1 handle 2: htb default 12"
    leaves = [c for c in cmds if c.startswith("class add dev h1 parent 2:1 ")]
    assert [c.split()[7] for c in leaves] == ["2:10", "2:11", "2:12"]
    # One priority, one quantum, rates far above the cap: only the tbf holds a packet back.
    assert all(
        "rate 4000000000bit ceil 4000000000bit burst 2500000 cburst 2500000 prio 0 quantum 68564"
        in c
        for c in leaves
    )
    filters = [c for c in cmds if c.startswith("filter")]
    assert filters == [
        f"filter add dev h1 parent 2: protocol ip prio 1 u32 match ip src {ip}/32 flowid 2:1{k}"
        for k, ip in enumerate(PEERS)
    ]
    assert sum(" bfifo limit 2500000" in c for c in cmds) == 3


def test_a_hosts_egress_is_sorted_by_destination() -> None:
    cmds = tc_commands("eth0", 1e9, PEERS, "dst")
    assert any(c[-4:] == ["dst", "10.1.0.3/32", "flowid", "2:11"] for c in cmds)
    with pytest.raises(ValueError):
        tc_commands("eth0", 1e9, PEERS, "both")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"port_queue": "fair"}, "unknown port queue 'fair': use fifo or per-peer"),
        ({"port_queue": "per-peer", "priority_classes": 2}, "two htb trees: pick one"),
    ],
)
def test_bad_combinations_are_one_line_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        EmulatedCluster(2, 400e6, **kwargs)


def test_uncapped_links_have_nothing_to_share() -> None:
    with pytest.raises(UserError, match="need a bandwidth cap"):
        EmulatedCluster(2, float("inf"), port_queue="per-peer")


def test_the_environment_chooses_when_nothing_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert default_port_queue() == "per-peer"
    assert EmulatedCluster(2, 400e6).port_queue == "per-peer"
    monkeypatch.setenv(ENV_VAR, "fifo")
    assert EmulatedCluster(2, 400e6).port_queue == "fifo"
    monkeypatch.setenv(ENV_VAR, "round-robin")
    with pytest.raises(UserError, match="unknown port queue 'round-robin'"):
        EmulatedCluster(2, 400e6)


def test_a_frame_bucket_shrinks_only_the_tbf() -> None:
    cmds = [" ".join(c) for c in tc_commands("h1", 400e6, PEERS, "src", frame_bucket=True)]
    assert cmds[0].startswith("qdisc replace dev h1 root handle 1: tbf rate 400000000bit burst ")
    assert 1514 < int(cmds[0].split(" burst ")[1].split()[0]) < 4096
    assert all("burst 2500000 cburst 2500000" in c for c in cmds if c.startswith("class"))


def test_fifo_where_per_peer_queues_cannot_be(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert EmulatedCluster(2, 400e6, priority_classes=2).port_queue == "fifo"
    assert EmulatedCluster(2, float("inf")).port_queue == "fifo"
    assert EmulatedCluster(2, 400e6, port_queue="per-peer", frame_bucket=True).frame_bucket
