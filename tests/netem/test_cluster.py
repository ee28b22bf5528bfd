"""Emulated cluster end to end: namespaces, shaping, probes, teardown. Needs root + iproute2."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.netem import (
    EmulatedCluster,
    list_clusters,
    netem_down,
    netem_up,
    parse_bandwidth,
    probe_bandwidth,
    start_background_load,
)
from cadence.netem._state import state_path
from cadence.netem.registry import teardown

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root"),
    pytest.mark.skipif(
        shutil.which("ip") is None or shutil.which("tc") is None,
        reason="the emulated cluster needs iproute2 (ip, tc)",
    ),
]

SRC_DIR = str(Path(__file__).resolve().parents[2] / "src")


def namespaces_of(cluster_id: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.startswith(f"cadence-{cluster_id}-")]


def assert_gone(cluster_id: str) -> None:
    assert namespaces_of(cluster_id) == []
    assert not state_path(cluster_id).exists()


def shown(command: list[str], pattern: str) -> re.Match[str]:
    """The first match of `pattern` in what `command` prints (fails the test if none)."""
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    match = re.search(pattern, out)
    assert match is not None, out
    return match


def tbf_rate(namespace: str, dev: str) -> float:
    qdisc = ["tc", "-n", namespace, "qdisc", "show", "dev", dev]
    return parse_bandwidth(shown(qdisc, r"qdisc tbf \S+ root .*?rate (\d+(?:\.\d+)?[KMG]bit)")[1])


def test_up_creates_namespaces_state_and_tears_down() -> None:
    with EmulatedCluster(3, 200e6) as cluster:
        cid = cluster.cluster_id
        assert sorted(namespaces_of(cid)) == sorted(
            [f"cadence-{cid}-h0", f"cadence-{cid}-h1", f"cadence-{cid}-h2", f"cadence-{cid}-sw"]
        )
        state = json.loads(state_path(cid).read_text())
        assert state["ips"] == [h.ip for h in cluster.hosts]
        assert state["owner_pid"] == os.getpid() and state["persistent"] is False
        info = next(i for i in list_clusters() if i.cluster_id == cid)
        assert not info.stale and len(info.present_namespaces) == 4
        assert cluster.exec_prefix(1) == ["ip", "netns", "exec", f"cadence-{cid}-h1"]
        assert all(len(h.iface) <= 15 for h in cluster.hosts)
    assert_gone(cid)


def tbf_burst(namespace: str, dev: str) -> float:
    """The tbf bucket tc reports, in bytes (tc rounds it through its time units)."""
    qdisc = ["tc", "-n", namespace, "qdisc", "show", "dev", dev]
    match = shown(qdisc, r" burst (\d+(?:\.\d+)?)(b|Kb|Mb) ")
    return float(match[1]) * {"b": 1, "Kb": 1024, "Mb": 1 << 20}[match[2]]


def gso_max_segs(namespace: str, dev: str) -> int:
    link = ["ip", "-d", "-n", namespace, "link", "show", "dev", dev]
    return int(shown(link, r"gso_max_segs (\d+)")[1])


def ends(cluster: EmulatedCluster) -> list[tuple[str, str]]:
    """(namespace, device) of both shaped ends of every link."""
    return [
        end
        for host in cluster.hosts
        for end in ((host.namespace, host.iface), (cluster.switch_namespace, f"h{host.index}"))
    ]


def test_tbf_on_both_ends_of_every_link() -> None:
    with EmulatedCluster(2, 400e6) as cluster:
        for namespace, dev in ends(cluster):
            assert tbf_rate(namespace, dev) == pytest.approx(400e6)
            assert tbf_burst(namespace, dev) >= 64 * 1024  # ~5 ms of traffic: 250 KB here
            assert gso_max_segs(namespace, dev) > 1


def test_frame_bucket_turns_gso_off_and_keeps_two_frames() -> None:
    with EmulatedCluster(2, 400e6, frame_bucket=True) as cluster:
        for namespace, dev in ends(cluster):
            assert tbf_rate(namespace, dev) == pytest.approx(400e6)
            assert 1514 < tbf_burst(namespace, dev) < 4096
            assert gso_max_segs(namespace, dev) == 1
        # Frame by frame, the link still carries bulk traffic near (and not above) its cap.
        # Sending one frame at a time costs processor time, so a probe that lands on a busy
        # moment of a 2-core machine falls short (0.40 once in CI): the link's capacity is the
        # best of up to three probes, and none may exceed the cap.
        results = []
        for _ in range(3):
            results.append(probe_bandwidth(cluster, 0, 1, seconds=1.0))
            assert results[-1].ratio <= 1.1, results
            if results[-1].ratio >= 0.6:
                break
        assert max(r.ratio for r in results) >= 0.6, results


def test_hosts_reach_each_other() -> None:
    with EmulatedCluster(3, 1e9) as cluster:
        for src, dst in [(0, 1), (1, 2), (2, 0)]:
            assert probe_bandwidth(cluster, src, dst, seconds=0.3).bytes > 0


def test_teardown_when_body_raises() -> None:
    with pytest.raises(RuntimeError, match="boom"), EmulatedCluster(2, 100e6) as cluster:
        cid = cluster.cluster_id
        raise RuntimeError("boom")
    assert_gone(cid)


def test_two_clusters_at_once() -> None:
    with EmulatedCluster(2, 300e6) as a, EmulatedCluster(2, 300e6) as b:
        assert a.cluster_id != b.cluster_id
        assert not set(namespaces_of(a.cluster_id)) & set(namespaces_of(b.cluster_id))
        for cluster in (a, b):
            assert probe_bandwidth(cluster, 0, 1, seconds=0.5).ratio > 0.8
    assert_gone(a.cluster_id)
    assert_gone(b.cluster_id)


def test_probe_200mbit_within_10_percent() -> None:
    with EmulatedCluster(2, parse_bandwidth("200mbit")) as cluster:
        result = probe_bandwidth(cluster, 0, 1, seconds=2.0)
    assert 0.9 <= result.ratio <= 1.1, result
    assert result.to_json()["cap_bps"] == 200e6


def port_bytes_sent(cluster: EmulatedCluster, host: int) -> int:
    """Bytes the switch port towards `host` has sent (its download)."""
    qdisc = ["tc", "-s", "-n", cluster.switch_namespace, "qdisc", "show", "dev", f"h{host}"]
    return int(shown(qdisc, r"Sent (\d+) bytes")[1])


def test_background_load_shares_the_receivers_link() -> None:
    with EmulatedCluster(3, 200e6) as cluster:
        load = start_background_load(cluster, 2, 1)
        try:
            time.sleep(0.3)
            before, start = port_bytes_sent(cluster, 1), time.monotonic()
            result = probe_bandwidth(cluster, 0, 1, seconds=1.0)
            both_bps = (port_bytes_sent(cluster, 1) - before) * 8 / (time.monotonic() - start)
        finally:
            load.stop()
    # Two flows into h1's capped download: together they fill it, and with per-peer port
    # queues (the default) the probe gets about half. Under cubic with one FIFO it got
    # 0.17-0.36 over 1-3 s: a late flow grows slowly against one that fills the port's queue.
    assert 0.85 <= both_bps / 200e6 <= 1.05, both_bps
    assert 0.3 <= result.ratio <= 0.7, result


def _child() -> subprocess.Popen[str]:
    """A process that owns a 2-host cluster and prints its id."""
    code = textwrap.dedent(
        """
        import time
        from cadence.netem import EmulatedCluster, cleanup_on_signals
        with cleanup_on_signals(), EmulatedCluster(2, 100e6) as c:
            print(c.cluster_id, flush=True)
            time.sleep(30)
        """
    )
    env = {**os.environ, "PYTHONPATH": SRC_DIR}
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )


def test_sigterm_tears_down() -> None:
    proc = _child()
    assert proc.stdout is not None
    cid = proc.stdout.readline().strip()
    assert namespaces_of(cid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    assert_gone(cid)


def test_sigkilled_owner_is_cleaned_up_by_next_cluster() -> None:
    proc = _child()
    assert proc.stdout is not None
    cid = proc.stdout.readline().strip()
    proc.kill()
    proc.wait(timeout=10)
    try:
        info = next(i for i in list_clusters() if i.cluster_id == cid)
        assert info.stale and len(info.present_namespaces) == 3
        with EmulatedCluster(2, 100e6):
            assert_gone(cid)
    finally:
        teardown(cid)  # no-op when the test passed


def test_persistent_cluster_survives_until_down() -> None:
    info = netem_up(2, 100e6, echo=False)
    try:
        data = json.loads(state_path(info.cluster_id).read_text())
        data["owner_pid"] = 0  # as if `cadence netem up` exited long ago
        state_path(info.cluster_id).write_text(json.dumps(data))
        with EmulatedCluster(2, 100e6):
            assert len(namespaces_of(info.cluster_id)) == 3
    finally:
        assert netem_down(info.cluster_id, echo=False) == [info.cluster_id]
    assert_gone(info.cluster_id)


def socket_congestion_control(namespace: str) -> str:
    """The congestion control a TCP socket opened inside `namespace` gets."""
    code = (
        "import socket; s = socket.socket(); "
        "print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b'\\0').decode())"
    )
    out = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", code],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return out.strip()


def test_hosts_run_cubic_unless_told() -> None:
    with EmulatedCluster(2, 400e6) as cluster:
        assert [socket_congestion_control(h.namespace) for h in cluster.hosts] == ["cubic"] * 2
        state = json.loads(state_path(cluster.cluster_id).read_text())
        assert state["congestion_control"] == "cubic"
    with EmulatedCluster(2, 400e6, congestion_control="reno") as cluster:
        assert [socket_congestion_control(h.namespace) for h in cluster.hosts] == ["reno"] * 2


def test_a_congestion_control_the_kernel_lacks_is_one_line_and_leaves_nothing() -> None:
    cluster = EmulatedCluster(2, 400e6, congestion_control="vegasx")
    lacks = r"bad TCP congestion control 'vegasx': this machine offers"
    with pytest.raises(UserError, match=lacks):
        cluster.up()
    assert_gone(cluster.cluster_id)


def test_congestion_control_missing_from_the_allowed_list_is_added() -> None:
    # Namespaces may pick only what this machine-wide list names (ours: "reno bbr").
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    before = allowed.read_text()
    try:
        allowed.write_text("reno\n")
        with EmulatedCluster(2, 400e6, congestion_control="cubic") as cluster:
            assert socket_congestion_control(cluster.hosts[1].namespace) == "cubic"
        assert allowed.read_text().split() == ["reno", "cubic"]
    finally:
        allowed.write_text(before)


def test_per_peer_port_queues_split_a_port_evenly_under_cubic() -> None:
    """The late probe of the background-load test, under cubic: a FIFO port gave it 0.17-0.36
    over 1-3 s; per-peer queues give it half (0.478 of the cap is half of what TCP's payload
    can fill)."""
    with EmulatedCluster(3, 200e6, congestion_control="cubic", port_queue="per-peer") as cluster:
        load = start_background_load(cluster, 2, 1)
        try:
            time.sleep(0.3)
            before, start = port_bytes_sent(cluster, 1), time.monotonic()
            share = probe_bandwidth(cluster, 0, 1, seconds=1.0).ratio
            both_bps = (port_bytes_sent(cluster, 1) - before) * 8 / (time.monotonic() - start)
        finally:
            load.stop()
    assert 0.85 <= both_bps / 200e6 <= 1.05, both_bps
    assert 0.44 <= share <= 0.52, share


def test_per_peer_queues_sort_by_the_peers_address_on_both_ends() -> None:
    with EmulatedCluster(3, 400e6, port_queue="per-peer") as cluster:
        assert cluster.info().port_queue == "per-peer"
        for host in cluster.hosts:
            peers = [h.ip for h in cluster.hosts if h is not host]
            for namespace, dev, key in (
                (host.namespace, host.iface, "dst"),
                (cluster.switch_namespace, f"h{host.index}", "src"),
            ):
                assert tbf_rate(namespace, dev) == pytest.approx(400e6)  # a FIFO port's cap
                classes = ["tc", "-n", namespace, "class", "show", "dev", dev]
                out = subprocess.run(classes, capture_output=True, text=True, check=True).stdout
                assert out.count("class htb 2:") == 1 + len(peers) + 1, out  # root, leaves
                filters = ["tc", "-n", namespace, "filter", "show", "dev", dev, "parent", "2:"]
                out = subprocess.run(filters, capture_output=True, text=True, check=True).stdout
                # u32 prints the matched address as hex at its offset (12 src, 16 dst).
                offset = {"src": 12, "dst": 16}[key]
                for ip in peers:
                    hex_ip = "".join(f"{int(part):02x}" for part in ip.split("."))
                    assert f"match {hex_ip}/ffffffff at {offset}" in out, out
        assert probe_bandwidth(cluster, 0, 1, seconds=1.0).ratio > 0.85


def test_hosts_keep_an_idle_connections_window_unless_told() -> None:
    def setting(namespace: str) -> str:
        sysctl = ["ip", "netns", "exec", namespace, "sysctl", "-n",
                  "net.ipv4.tcp_slow_start_after_idle"]  # fmt: skip
        return subprocess.run(sysctl, capture_output=True, text=True, check=True).stdout.strip()

    with EmulatedCluster(2, 400e6, slow_start_after_idle=True) as cluster:
        assert [setting(h.namespace) for h in cluster.hosts] == ["1", "1"]
    with EmulatedCluster(2, 400e6) as cluster:
        assert [setting(h.namespace) for h in cluster.hosts] == ["0", "0"]
        state = json.loads(state_path(cluster.cluster_id).read_text())
        assert state["slow_start_after_idle"] is False
        assert probe_bandwidth(cluster, 0, 1, seconds=0.5).ratio > 0.8
