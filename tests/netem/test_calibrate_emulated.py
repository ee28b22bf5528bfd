"""`cadence calibrate --emulate-bandwidth CAP`: timed on emulated hosts, the fitted rate is the
cap's."""

from __future__ import annotations

from pathlib import Path

from cadence.comm.calibrate import Calibration
from cadence.netem._congestion import default_congestion_control
from cadence.netem.fair import default_port_queue
from tests.cli_helpers import run_cadence
from tests.conftest import needs_netem


@needs_netem
def test_emulated_links_calibrate_to_their_cap(tmp_path: Path) -> None:
    proc = run_cadence(
        "calibrate", "--workers", "3", "--emulate-bandwidth", "100mbit",
        "--sizes", "1KB,4KB,2MB,4MB",
        "--collectives", "all_reduce,all_gather", "--repeats", "1", "--warmup", "1",
        "--out", "c.json", cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    control, queue = default_congestion_control(), default_port_queue()
    assert f"3 emulated hosts at 100mbit (TCP {control}, {queue} port queues)" in proc.stdout
    cal = Calibration.load(tmp_path / "c.json")
    assert cal.world_size == 3 and cal.collectives() == ["all_reduce", "all_gather"]
    # Payload at 100mbit is 12.5 MB/s less TCP/IP framing: the fitted rate sits a little below.
    rate = 1 / cal.model.beta_s_per_byte
    assert 9e6 < rate < 12.5e6, cal.table()
    assert dict(cal.model.collective_alphas).keys() == {"allgather"}
