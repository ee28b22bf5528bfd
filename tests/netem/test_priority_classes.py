"""Priority classes on the emulated switch: an urgent (EF-marked) transfer overtakes bulk
traffic from another host on a congested port; without the classes it queues behind it.
The tc commands themselves are checked without root."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.netem import EmulatedCluster, start_background_load
from cadence.netem.priority import CHANNEL_DSCP, class_bytes, network_class, tc_commands
from tests.cli_helpers import assert_one_line_error, run_cadence
from tests.conftest import needs_netem

# Receiver: accept one connection, read NBYTES, answer one byte. Sender: connect with a TOS
# byte, send NBYTES, wait for the answer; prints the seconds from connect to answer.
_PEER = r"""
import socket, sys, time
mode, ip, port, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "recv":
    srv = socket.create_server((ip, port)); srv.settimeout(30)
    print("ready", flush=True)
    conn, _ = srv.accept(); conn.settimeout(30); got = 0
    while got < nbytes:
        chunk = conn.recv(1 << 20)
        if not chunk: break
        got += len(chunk)
    conn.sendall(b"k")
else:
    s = socket.socket(); s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(sys.argv[5]))
    s.settimeout(30); t = time.monotonic(); s.connect((ip, port))
    s.sendall(bytes(nbytes)); s.recv(1)
    print(time.monotonic() - t, flush=True)
"""
_URGENT_BYTES = 2 << 20


def _timed_transfer(cluster: EmulatedCluster, src: int, dst: int, nbytes: int, tos: int) -> float:
    ip, port = cluster.hosts[dst].ip, 5599
    recv = subprocess.Popen(
        [*cluster.exec_prefix(dst), sys.executable, "-c", _PEER, "recv", ip, str(port),
         str(nbytes)], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        out = subprocess.run(
            [*cluster.exec_prefix(src), sys.executable, "-c", _PEER, "send", ip, str(port),
             str(nbytes), str(tos)], capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return float(out.stdout.strip())
    finally:
        recv.kill()
        recv.wait()


def _urgent_time_under_load(classes: int) -> tuple[float, dict[str, int]]:
    # 4 hosts at 50mbit: hosts 1 and 3 flood host 0 with unmarked TCP; host 2 sends 2 MB to
    # host 0 marked EF (the PS's most urgent channel). All meet at host 0's switch port.
    with EmulatedCluster(4, 50e6, priority_classes=classes) as cluster:
        with start_background_load(cluster, 1, 0), start_background_load(cluster, 3, 0):
            time.sleep(1.5)  # let the bulk flows fill the queue
            times = [_timed_transfer(cluster, 2, 0, _URGENT_BYTES, CHANNEL_DSCP[0] << 2)
                     for _ in range(2)]  # fmt: skip
        sent = class_bytes(cluster.switch_namespace, "h0") if classes else {}
    return min(times), sent


@needs_netem
def test_urgent_transfer_overtakes_bulk_traffic_only_with_classes() -> None:
    wire = _URGENT_BYTES * 8 / 50e6  # 0.34 s alone on the link
    plain, _ = _urgent_time_under_load(0)
    prio, sent = _urgent_time_under_load(4)
    print(json.dumps({"wire_s": wire, "without_classes_s": plain, "with_classes_s": prio}))
    # With classes the urgent flow gets (nearly) the whole link; without, it shares it with
    # two bulk flows and waits behind a full queue.
    assert prio < 2.0 * wire
    assert plain > 1.4 * prio  # measured 1.6-1.9x here
    # Both classes carried traffic at the congested port: the EF class and the default one.
    assert sent["1:10"] > _URGENT_BYTES and sent["1:13"] > 4 * (1 << 20)


def test_tc_commands_map_ps_channels_to_classes() -> None:
    cmds = [" ".join(c) for c in tc_commands("h1", 400e6, 2)]
    assert cmds[0] == "qdisc replace dev h1 root handle 1: htb default 11"
    filters = [c for c in cmds if c.startswith("filter")]
    # Channels 0 and 1 (EF, AF41) are urgent with 2 classes; AF21 and unmarked go default.
    assert [f.split(" tos ")[1] for f in filters] == ["0xb8 0xfc flowid 1:10",
                                                      "0x88 0xfc flowid 1:10"]  # fmt: skip
    leaves = [c for c in cmds if "parent 1:1 classid" in c]
    assert [c.split(" prio ")[1].split()[0] for c in leaves] == ["0", "1"]
    assert all("ceil 400000000bit" in c for c in leaves)
    assert [network_class(c, 3) for c in range(4)] == [0, 0, 1, 2]


@pytest.mark.parametrize(("classes", "bw"), [(1, 1e8), (5, 1e8), (3, float("inf"))])
def test_bad_class_settings_are_user_errors(classes: int, bw: float) -> None:
    with pytest.raises(UserError):
        EmulatedCluster(2, bw, priority_classes=classes)


def test_classes_and_a_frame_bucket_are_refused_together() -> None:
    with pytest.raises(UserError, match="frame-sized token bucket"):
        EmulatedCluster(2, 1e8, priority_classes=2, frame_bucket=True)


@needs_netem
def test_ps_training_with_network_classes(tmp_path: Path) -> None:
    proc = run_cadence(
        "train", "--model", "mlp", "--strategy", "ps", "--ps-priority", "graph+net",
        "--emulate-bandwidth", "50mbit", "--optimizer", "sgd", "--steps", "6",
        "--batch-size", "32", "--out", "out", "--name", "net", cwd=tmp_path, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "out" / "net" / "metrics.json").read_text())
    assert metrics["config"]["ps_priority"] == "graph+net" and metrics["steps"] == 6
    per_class = metrics["ps"]["bytes_per_class"]
    assert per_class[0] > 0 and sum(per_class) == (
        metrics["ps"]["bytes_pushed"] + metrics["ps"]["bytes_pulled"]
    )


def test_network_classes_need_an_emulated_cluster(tmp_path: Path) -> None:
    proc = run_cadence(
        "train", "--strategy", "ps", "--ps-priority", "graph+net", cwd=tmp_path, timeout=60
    )
    assert_one_line_error(proc, "needs --emulate-bandwidth")
