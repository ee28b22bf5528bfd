"""Processes that die natively mid-step (`cadence train`, world size 2): a worker in its forward
pass or in cadence-dp's all-reduce, a parameter server. Every process stops within a bound,
with one line naming the dead process and its signal, and no worker is left; a parameter
server comes back from its last checkpoint when the run is started again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cadence.ps.checkpoint import checkpoint_path
from tests.cli_helpers import SRC, WORKER_COMMAND, run_cadence

# A hang-detection deadline, not a timing: start-up plus the supervisor's 0.2 s poll and its
# 5 s grace before SIGKILL take seconds; a survivor stuck in a collective would take minutes.
STOP_BOUND_S = 90


def _leftover_workers(run_dir: Path) -> str:
    found = subprocess.run(
        ["pgrep", "-f", f"{WORKER_COMMAND} .*{run_dir}"], capture_output=True, text=True
    )
    return found.stdout.strip()


@pytest.mark.parametrize(
    ("spec", "args", "signal_name"),
    [
        # Between steps: rank 0, stopped by the supervisor's SIGTERM, is not blamed.
        ("1:3:abort", ("--strategy", "ddp"), "SIGABRT"),
        ("1:3:kill:forward", ("--strategy", "cadence-dp"), "SIGKILL"),
        # A small threshold makes cadence-dp's plan several chunks, reduced on its
        # communication thread (a one-chunk plan is reduced by the main thread).
        ("1:3:kill:allreduce", ("--strategy", "cadence-dp", "--threshold-mb", "0.05"), "SIGKILL"),
        ("0:3:abort:allreduce", ("--strategy", "cadence-dp", "--threshold-mb", "0.05"), "SIGABRT"),
    ],
)
def test_a_worker_dying_mid_step_stops_everyone_naming_it(tmp_path, spec, args, signal_name):
    rank = spec.split(":")[0]
    start = time.monotonic()
    proc = run_cadence(
        "train", "--model", "mlp", "--steps", "400", *args, "--out", str(tmp_path),
        cwd=tmp_path, env={"CADENCE_INJECT_FAILURE": spec}, timeout=2 * STOP_BOUND_S,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"cadence: error: rank {rank} died with signal {signal_name} before recording an error"
    ), proc.stderr
    if rank != "0":  # rank 0's output is the command's own
        assert f"rank{rank}.log" in last
    assert "Traceback" not in proc.stderr
    assert elapsed < STOP_BOUND_S
    assert _leftover_workers(tmp_path) == ""


def _server_of(run_dir: Path) -> int | None:
    """The pid of parameter server 0 (started by rank 0's worker) of the run in `run_dir`."""
    workers = subprocess.run(
        ["pgrep", "-f", f"{WORKER_COMMAND} .*{run_dir}"], capture_output=True, text=True
    )
    for worker in workers.stdout.split():
        children = subprocess.run(["pgrep", "-P", worker], capture_output=True, text=True)
        for child in children.stdout.split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"cadence.ps.server" in cmdline:
                return int(child)
    return None


def _version(checkpoint: Path) -> int:
    with np.load(checkpoint, allow_pickle=False) as data:
        return int(data[f"{int(data['keys'][0])}.meta"][0])


def _ps_run(run_dir: Path, steps: int, every: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.Popen(
        [sys.executable, "-m", "cadence", "train", "--model", "mlp", "--strategy", "ps",
         "--optimizer", "sgd", "--steps", str(steps), "--ps-checkpoint-dir",
         str(run_dir / "servers"), "--ps-checkpoint-every", str(every), "--out",
         str(run_dir / "out")],
        cwd=run_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_killed_parameter_server_stops_the_run_and_restarts_from_its_checkpoint(tmp_path):
    # bsp, one server (started by rank 0): the killed server's worker names it and the
    # supervisor stops the other; a new run with the same checkpoint directory starts the
    # server from its last periodic checkpoint and trains on from there.
    checkpoint = checkpoint_path(tmp_path / "servers", 0)
    proc = _ps_run(tmp_path, 100_000, 5)
    deadline = time.monotonic() + STOP_BOUND_S
    while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    server = _server_of(tmp_path / "out")
    assert checkpoint.exists() and server is not None, proc.stderr.read() if proc.stderr else ""
    os.kill(server, signal.SIGKILL)
    start = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"no stop within {STOP_BOUND_S} s of the server's death")
    assert time.monotonic() - start < STOP_BOUND_S
    assert proc.returncode == 1, stderr
    last = stderr.strip().splitlines()[-1]
    assert f"parameter server 0 (pid {server}) exited with code -9" in last, stderr
    assert "Traceback" not in stderr
    assert _leftover_workers(tmp_path / "out") == ""
    saved = _version(checkpoint)  # readable: written whole or not at all
    assert saved > 0 and saved % 5 == 0

    again = _ps_run(tmp_path, 10, 0)
    _, stderr = again.communicate(timeout=2 * STOP_BOUND_S)
    assert again.returncode == 0, stderr
    assert _version(checkpoint) == saved + 10  # trained on from the restored version
