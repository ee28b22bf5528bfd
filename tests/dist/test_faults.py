"""Workers that die natively mid-step (`cadence train`, world size 2): every process stops
within a bound, with one line naming the dead rank and its signal, and no worker is left."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_cadence

# A hang-detection deadline, not a timing: start-up plus the supervisor's 0.2 s poll and its
# 5 s grace before SIGKILL take seconds; a survivor stuck in a collective would take minutes.
STOP_BOUND_S = 90


def _leftover_workers(run_dir: Path) -> str:
    found = subprocess.run(
        ["pgrep", "-f", f"cadence.launch.worker .*{run_dir}"], capture_output=True, text=True
    )
    return found.stdout.strip()


@pytest.mark.parametrize(
    ("spec", "args", "signal_name"),
    [
        ("1:3:abort:forward", ("--strategy", "ddp"), "SIGABRT"),
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
    assert "Traceback" not in proc.stderr
    assert elapsed < STOP_BOUND_S
    assert _leftover_workers(tmp_path) == ""


def test_a_bad_injection_spec_is_one_line(tmp_path):
    proc = run_cadence(
        "train", "--model", "mlp", "--steps", "3", "--out", str(tmp_path), cwd=tmp_path,
        env={"CADENCE_INJECT_FAILURE": "1:3:explode"}, timeout=STOP_BOUND_S,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "expected RANK:STEP[:MODE[:PHASE]]" in proc.stderr.strip().splitlines()[-1]
