"""Running the real `cadence` command in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
WORKER_COMMAND = "cadence.launch.(worker|fork_server)"
"""`pgrep -f` pattern of a local run's workers: forked from `cadence.launch.fork_server`, whose
command line they share (and the server's), or started as `cadence.launch.worker`."""


def run_cadence(
    *args: str, cwd: Path, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = SRC + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "cadence", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cadence: error:"), proc.stderr
    assert needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
