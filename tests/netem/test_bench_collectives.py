"""`cadence bench collectives`: a tiny run in a real emulated cluster writes JSON and PNG with
the right fields and sane numbers; bad input and a missing iproute2 end in one line, exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.netem._congestion import default_congestion_control
from cadence.netem.fair import default_port_queue
from tests.cli_helpers import assert_one_line_error, run_cadence
from tests.conftest import needs_netem


@needs_netem
def test_tiny_run_writes_sane_results(tmp_path: Path) -> None:
    # 3 hosts (not a power of two) at 100mbit: 512KB all-reduces take ~56 ms on the wire.
    proc = run_cadence(
        "bench", "collectives", "--sizes", "4KB,512KB", "--collectives",
        "all_reduce,reduce_scatter", "--workers", "3", "--caps", "100mbit", "--repeats", "2",
        "--warmup", "0", "--out", "out/b.json",
        cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out/b.json").read_text())
    assert data["command"].startswith("cadence bench collectives --sizes 4KB,512KB")
    assert data["config"]["hosts"] == 3 and data["config"]["bandwidth_bps"] == 100e6
    # Defaults: gloo's I/O thread yields while timing; the links keep the usual bucket; each
    # host runs on one processor; each timed block starts with the bucket drained.
    assert data["config"]["yield_io_thread"] is True and data["config"]["frame_bucket"] is False
    assert data["config"]["pin_hosts"] is True and data["config"]["drain_bucket"] is True
    cal = data["calibration"]
    assert cal["alpha_s"] >= 0 and cal["beta_s_per_byte"] > 0
    rows = data["rows"]
    variants = {(r["collective"], r["implementation"], r["algorithm"]) for r in rows}
    assert variants == {
        ("all_reduce", "gloo", "gloo"), ("all_reduce", "cadence", "ring"),
        ("all_reduce", "cadence", "halving_doubling"), ("all_reduce", "cadence", "tree"),
        ("reduce_scatter", "gloo", "gloo"), ("reduce_scatter", "cadence", "ring"),
    }  # fmt: skip
    # float32 vectors split evenly over 3 ranks: 4KB -> 1023 elements, 512KB -> 131070.
    assert sorted({r["nbytes"] for r in rows}) == [4092, 524280]
    gloo = {(r["collective"], r["nbytes"]): r["measured_s"] for r in rows
            if r["implementation"] == "gloo"}  # fmt: skip
    for r in rows:
        assert 0 < r["measured_s"] < 10 and r["predicted_s"] > 0 and r["bound_s"] > 0
        assert r["measured_over_predicted"] == pytest.approx(r["measured_s"] / r["predicted_s"])
        if r["implementation"] == "gloo":
            assert r["ours_over_gloo"] is None
        else:
            base = gloo[(r["collective"], r["nbytes"])]
            assert r["ours_over_gloo"] == pytest.approx(r["measured_s"] / base)
    big = next(r for r in rows if r["nbytes"] == 524280 and r["algorithm"] == "gloo"
               and r["collective"] == "all_reduce")  # fmt: skip
    # The link cap applies: gloo's ring needs at least the wire time, less the tbf burst.
    assert big["measured_s"] > 0.8 * big["bound_s"] > 0.04
    assert (tmp_path / "out" / data["png"]).read_bytes().startswith(b"\x89PNG")
    assert "ours/gloo" in proc.stdout and "reduce_scatter" in proc.stdout
    summary = data["accuracy"]  # gloo's 4 rows (2 collectives x 2 sizes) against the target
    assert summary["rows"] == 4 and 0 <= summary["rows_within"] <= 4
    assert f"{summary['rows_within']} of 4 rows" in proc.stdout
    # tbf's usual bucket: priced as a token-bucket link where the run's timings reach both
    # regimes (latency and bandwidth, `link_models`; on a loaded machine the small calls may
    # not), else with the serialising fit, which is kept beside it either way.
    models = data["calibration"]["models"]
    kind = "token-bucket" if "token-bucket" in models else "serialising"
    assert data["calibration"]["link_model"] == kind
    assert kind == "serialising" or models["token-bucket"]["overlap"] is True
    assert data["accuracy_by_link_model"][kind] == summary
    assert data["accuracy_by_link_model"]["serialising"]["rows"] == 4
    assert f"({kind} link model)" in proc.stdout and "(serialising link model)" in proc.stdout
    assert proc.stdout.startswith("timing 6 variants x 2 sizes on 3 emulated hosts at 100mbit")
    # The hosts' TCP congestion control and port queue are said up front and kept.
    control, queue = default_congestion_control(), default_port_queue()
    assert f"at 100mbit (TCP {control}, {queue} port queues)" in proc.stdout
    assert data["machine"]["hosts_tcp_congestion_control"] == control
    assert data["machine"]["port_queue"] == queue
    # gloo's local copies are timed at the run's sizes and priced into its reduce-scatter.
    local = data["local_copy"]
    assert local["sizes"] == [4096, 524288] and all(t >= 0 for t in local["fresh_s"])
    assert "gloo's local copies" in proc.stdout
    # The calibration: gloo's all-reduce between and beside the rows' sizes (never on one),
    # timed in the same rounds; all-reduce's alpha prices reduce-scatter too.
    points = [(r["collective"], r["nbytes"]) for r in cal["rows"]]
    assert points == [("all_reduce", 2040), ("all_reduce", 46332), ("all_reduce", 1048572)]
    assert set(cal["alpha_s_by_collective"]) == {"all_reduce"}
    assert "cpu_s_per_byte" in cal["models"]["token-bucket"]  # the processor time per byte fitted
    assert "calibrated on gloo all_reduce at 2.0KB, 45.2KB, 1024.0KB" in proc.stdout
    # The noise floor: each gloo row's odd round against its even round.
    noise = data["halves"]
    assert noise["rows"] == 4 and len(noise["pairs"]) == 4
    for pair in noise["pairs"]:
        assert pair["ratio"] == pytest.approx(pair["odd_s"] / pair["even_s"])
    assert f"within 10% at {noise['rows_within']} of 4 rows" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--sizes", "4XB"], "bad size '4XB'"),
        (["--collectives", "all_reduce,allreduce"], "bad collectives ['allreduce']"),
        (["--workers", "1"], "bad --workers 1"),
        (["--caps", "10mbps"], "mbps"),
        (["--out", "/proc/no/such.json"], "cannot write --out file '/proc/no/such.json'"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "collectives", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cadence: error:") and needle in err[0], err


def test_without_iproute2_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {"PATH": str(Path(sys.executable).parent)}  # hides ip and tc
    proc = run_cadence("bench", "collectives", "--sizes", "4KB", cwd=tmp_path, env=env, timeout=60)
    assert_one_line_error(proc, "needs root and iproute2")
    assert not list((tmp_path / "bench-out").iterdir())  # the write test left nothing behind
