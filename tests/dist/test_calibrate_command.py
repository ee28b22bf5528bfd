"""`cadence calibrate`: on the loopback and under torchrun it writes a calibration that
`cadence simulate --calibration` reads, with all-gather's and broadcast's own alphas; bad
input is one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadence.comm.calibrate import Calibration
from tests.cli_helpers import SRC, assert_one_line_error, run_cadence
from tests.unit.test_sim_cli import zoo_profile

SIZES = "1KB,4KB,1MB,4MB"


def _check(path: Path, world_size: int) -> Calibration:
    cal = Calibration.load(path)
    assert cal.world_size == world_size and cal.backend == "gloo"
    ring = ["ring_all_reduce", "ring_reduce_scatter", "ring_all_gather"]
    assert cal.collectives() == ["all_reduce", "all_gather", "broadcast", *ring]
    # cadence's own collectives only at the sizes up to 64 KB.
    assert [r.nbytes for r in cal.rows] == [1024, 4096, 1 << 20, 4 << 20] * 3 + [1024, 4096] * 3
    assert all(r.measured_s > 0 and r.predicted_s > 0 for r in cal.rows)
    assert cal.model.beta_s_per_byte > 0
    # 1 KB on the loopback is latency-bound: every other collective gets an alpha of its own.
    assert {c for c, _ in cal.model.collective_alphas} == {"allgather", "broadcast"}
    assert {c for c, _ in cal.model.p2p_alphas} == {"allreduce", "reduce_scatter", "allgather"}
    return cal


def test_loopback_calibration_feeds_simulate(tmp_path: Path) -> None:
    proc = run_cadence(
        "calibrate", "--sizes", SIZES, "--repeats", "1", "--warmup", "1", "--out", "cal/c.json",
        cwd=tmp_path, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "this machine's loopback" in proc.stdout and "wrote cal/c.json" in proc.stdout
    assert "allgather alpha" in proc.stdout  # the table's header names the own alphas
    _check(tmp_path / "cal/c.json", 2)
    assert not list((tmp_path / "cal").glob("*.tmp"))
    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    out = tmp_path / "sim.json"
    proc = run_cadence(
        "simulate", "--model", "cnn", "--profile", str(profile), "--workers", "4",
        "--calibration", "cal/c.json", "--optimizer", "none", "--strategy", "zero",
        "--zero-stage", "3", "--json", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "allgather alpha" in proc.stdout
    assert json.loads(out.read_text())["iteration_time_s"] > 0


def test_joins_a_torchrun_launch(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=SRC, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "cadence", "calibrate", "--sizes", SIZES, "--repeats", "1", "--warmup", "0",
         "--collectives", "all_reduce", "--out", "c.json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wrote c.json") == 1  # rank 0 alone writes and reports
    cal = Calibration.load(tmp_path / "c.json")  # the loopback test checks the table's content
    assert cal.world_size == 2 and cal.collectives() == ["all_reduce"]
    assert [r.nbytes for r in cal.rows] == [1024, 4096, 1 << 20, 4 << 20]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--emulate-bandwidth", "10gbps"], "10gbps"),
        (["--collectives", "all_reduce,alltoall"], "unknown collective 'alltoall'"),
        (["--workers", "1"], "--workers must be at least 2"),
        (["--sizes", "1KB"], "at least two sizes"),
        (["--sizes", "1KB,fast"], "bad size 'fast'"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--out", "/proc/nope/c.json"], "cannot write --out"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    assert_one_line_error(run_cadence("calibrate", *args, cwd=tmp_path, timeout=60), needle)


def test_defaults_time_1kb_to_64mb_and_announce_the_links_floor() -> None:
    from cadence.bench.collectives import parse_sizes
    from cadence.cli import build_parser
    from cadence.comm.calibrate_command import CalibrateConfig
    from cadence.comm.calibrate_plan import DEFAULT_SIZES
    from cadence.config_flags import resolve_flags

    args = build_parser().parse_args(["calibrate"])
    resolve_flags(args)
    assert parse_sizes(args.sizes) == DEFAULT_SIZES and args.emulate_bandwidth is None
    assert CalibrateConfig().link_seconds() == 0.0  # the loopback has no cap to wait on
    # One 64 MB all-reduce round at 400mbit on 2 hosts: 3 calls of 64 MB each way, 1.34 s each.
    one = CalibrateConfig(bandwidth="400mbit", collectives=("all_reduce",), sizes=(4, 64 << 20),
                          repeats=1, warmup=0)  # fmt: skip
    assert one.link_seconds() == pytest.approx(3 * (64 << 20) * 8 / 400e6, rel=1e-3)
    assert CalibrateConfig(bandwidth="400mbit", repeats=4).link_seconds() == pytest.approx(
        2 * CalibrateConfig(bandwidth="400mbit", repeats=1, warmup=2).link_seconds()
    )
