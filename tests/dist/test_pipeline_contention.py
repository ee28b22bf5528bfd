"""`cadence netem load`: background traffic on a link takes bandwidth from a probe on it, which
is how pipeline schedules get compared under contention. Needs root and iproute2."""

import json
import subprocess
import sys
from pathlib import Path

from tests.cli_helpers import SRC, assert_one_line_error, run_cadence
from tests.conftest import needs_netem


@needs_netem
def test_load_takes_bandwidth_from_a_probe_on_the_same_link(tmp_path: Path) -> None:
    up = run_cadence("netem", "up", "--hosts", "2", "--emulate-bandwidth", "200mbit",
                     "--json", "up.json", cwd=tmp_path, timeout=60)
    assert up.returncode == 0, up.stderr
    cluster = json.loads((tmp_path / "up.json").read_text())["cluster_id"]
    load = None
    try:
        quiet = run_cadence("netem", "probe", cluster, "--seconds", "1.5", "--json", "quiet.json",
                            cwd=tmp_path, timeout=60)
        assert quiet.returncode == 0, quiet.stderr
        load = subprocess.Popen(
            [sys.executable, "-m", "cadence", "netem", "load", cluster, "--seconds", "8"],
            cwd=tmp_path, env={"PYTHONPATH": SRC, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert load.stdout is not None
        assert "loading h0 -> h1" in load.stdout.readline()
        busy = run_cadence("netem", "probe", cluster, "--seconds", "1.5", "--json", "busy.json",
                           cwd=tmp_path, timeout=60)
        assert busy.returncode == 0, busy.stderr
        _, err = load.communicate(timeout=30)
        assert load.returncode == 0, err  # it stops by itself after --seconds
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        run_cadence("netem", "down", cluster, cwd=tmp_path, timeout=60)
    alone = json.loads((tmp_path / "quiet.json").read_text())["achieved_bps"]
    shared = json.loads((tmp_path / "busy.json").read_text())["achieved_bps"]
    assert alone > 0.8 * 200e6
    assert shared < 0.75 * alone  # TCP shares the capped link with the load


@needs_netem
def test_load_without_that_cluster_is_one_line(tmp_path: Path) -> None:
    proc = run_cadence("netem", "load", "nosuch", "--seconds", "1", cwd=tmp_path, timeout=60)
    assert_one_line_error(proc, "no emulated cluster with id 'nosuch'")
