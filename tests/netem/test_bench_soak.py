"""`cadence bench soak` on the emulated cluster, short: the parameter server's run with
competing traffic on the link reports the server process beside the ranks, and no namespace
(hosts, competing transfers) is left behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cadence.bench.soak import SoakBenchConfig, run_soak_bench
from tests.conftest import needs_netem


def _cadence_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("cadence-")}


@needs_netem
def test_ps_soak_with_competing_traffic(tmp_path: Path) -> None:
    before = _cadence_namespaces()
    out = tmp_path / "soak.json"
    config = SoakBenchConfig(
        strategies=("ps",), cap="1gbit", steps=20, start_step=10, every=10, out=str(out),
        run_root=str(tmp_path / "runs"),
    )  # fmt: skip
    run_soak_bench(config, "cadence bench soak (test)", lambda line: None)
    report = json.loads(out.read_text())
    assert report["runs"]["ps"]["finished"]
    rows = report["rows"]
    assert [r["process"] for r in rows] == ["rank 0", "rank 0: cadence.ps.server", "rank 1"]
    assert rows[1]["sockets_start"] > 0 and rows[1]["end_step"] == 20
    assert _cadence_namespaces() == before
