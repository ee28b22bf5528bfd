"""An emulated link taken down under `cadence train --emulate-bandwidth` (world size 2, the
switch port of host 1 set down): for longer than `--timeout` the run stops with one line that
names the timeout; for shorter it trains to the end. No namespace survives either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.cli_helpers import SRC
from tests.conftest import needs_netem

# Hang-detection deadlines, not timings.
START_BOUND_S = 120  # workers importing torch, joining and training an epoch
STOP_BOUND_S = 90  # after the link went down: --timeout plus the supervisor's stop
OUTAGE_S = 6  # the short outage, well under the 60 s timeout of its run


def _left_behind(host_namespace: str) -> set[str]:
    """The namespaces of `host_namespace`'s cluster that still exist."""
    cluster = host_namespace.rsplit("-", 1)[0]
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith(cluster + "-")}


def _rank1_namespace(run_dir: Path) -> str | None:
    """The network namespace rank 1 of this run trains in."""
    found = subprocess.run(
        ["pgrep", "-f", f"cadence.launch.worker .*{run_dir}"], capture_output=True, text=True
    )
    for pid in found.stdout.split():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"RANK=1" in environ:
            identified = subprocess.run(
                ["ip", "netns", "identify", pid], capture_output=True, text=True
            )
            return identified.stdout.strip() or None
    return None


def _set_port(host_namespace: str, state: str) -> None:
    """Set host `host_namespace`'s port on its cluster's switch up or down."""
    cluster, host = host_namespace.rsplit("-", 1)
    subprocess.run(
        ["ip", "-n", f"{cluster}-sw", "link", "set", host, state], check=True, timeout=30
    )


def _start(run_dir: Path, steps: int, timeout_s: int, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.Popen(
        [sys.executable, "-m", "cadence", "train", "--model", "mlp", "--steps", str(steps),
         "--emulate-bandwidth", "20mbit", "--timeout", str(timeout_s), "--out", str(run_dir),
         "--name", "run", *args],
        cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _stop(proc: subprocess.Popen[str]) -> None:
    """End a run the test gave up on; SIGTERM first, so that it removes its namespaces."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_exit(proc: subprocess.Popen[str], bound_s: float) -> str:
    """Rank 0's error output once the run has exited (fails the test after `bound_s`)."""
    try:
        proc.wait(timeout=bound_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        stderr = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"no exit within {bound_s} s of the link going down or up:\n{stderr}")
    return proc.stderr.read() if proc.stderr else ""


def _first_epoch_done(proc: subprocess.Popen[str]) -> None:
    """Return once rank 0 printed its first epoch line: the run then trains its second epoch
    (its output is read to the end on a thread of its own)."""
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout or ():
            if line.startswith("epoch 1/"):
                seen.set()

    threading.Thread(target=read, daemon=True).start()
    if not seen.wait(START_BOUND_S):
        _stop(proc)
        stderr = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"no first epoch within {START_BOUND_S} s:\n{stderr}")


@needs_netem
def test_a_link_down_longer_than_the_timeout_stops_the_run_naming_it(tmp_path):
    # cadence-dp with several chunks: the job's group and the communication thread's own group
    # both time out (torch's new_group would wait 30 minutes without cadence's timeout).
    args = ("--strategy", "cadence-dp", "--threshold-mb", "0.05")
    proc = _start(tmp_path, 100_000, 5, "--batch-size", "32", *args)
    _first_epoch_done(proc)
    namespace = _rank1_namespace(tmp_path)
    assert namespace is not None
    _set_port(namespace, "down")  # and never up again: the teardown removes it
    stderr = _wait_exit(proc, STOP_BOUND_S)
    assert proc.returncode == 1, stderr
    last = stderr.strip().splitlines()[-1]
    assert "timed out after 5 s waiting for a peer in a collective (--timeout)" in last, stderr
    assert "a link between them is down" in last
    assert "Traceback" not in stderr
    assert _left_behind(namespace) == set()


@needs_netem
def test_a_link_down_shorter_than_the_timeout_is_ridden_out(tmp_path):
    # 20mbit: a step of mlp waits ~0.14 s for the wire; batches of 32 make an epoch 44 steps.
    # The link goes down as rank 0 prints epoch 1's line, while the ranks finish the epoch
    # (plot, checkpoint and its barrier) and begin the next, and stays down OUTAGE_S.
    proc = _start(tmp_path, 60, 60, "--batch-size", "32")
    _first_epoch_done(proc)
    namespace = _rank1_namespace(tmp_path)
    assert namespace is not None
    _set_port(namespace, "down")
    time.sleep(OUTAGE_S)
    _set_port(namespace, "up")
    stderr = _wait_exit(proc, STOP_BOUND_S + 60)
    assert proc.returncode == 0, stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["steps"] == 60
    # The run waited the outage out (in a step or in the epoch's end): its time beyond its
    # steps' holds most of it.
    waited = metrics["total_seconds"] - sum(metrics["iteration_times_s"])
    assert waited > OUTAGE_S / 2 or max(metrics["iteration_times_s"]) > OUTAGE_S / 2
    assert _left_behind(namespace) == set()
