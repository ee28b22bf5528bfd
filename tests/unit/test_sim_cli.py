"""`cadence simulate` and `cadence plan dp` on saved profiles; bad input; simulator speed."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cadence.cli import main
from cadence.comm.cost import AlphaBeta
from cadence.dp.layers import model_layout
from cadence.models import get_model_spec
from cadence.profile import BlockProfile, Profile
from cadence.sim import SimOptions, plan_dp, simulate_dp
from tests.cli_helpers import assert_one_line_error, run_cadence


def zoo_profile(model: str, block_s: float = 0.01) -> Profile:
    """A profile of zoo `model` with real sizes and made-up, equal block times."""
    net = get_model_spec(model).build()
    blocks = tuple(
        BlockProfile(
            name,
            block_s,
            block_s if i else 0.0,
            block_s,
            sum(p.nbytes for p in block.parameters()),
            1000,
            100,
            0,
        )
        for i, (name, block) in enumerate(zip(net.block_names(), net.blocks(), strict=True))
    )
    total = sum(b.total_s for b in blocks) + 0.001
    return Profile(
        model, 32, (1,), blocks, total, 0.001, 1, 0, "cpu", 1, torch.__version__, 0, "cpu_accounted"
    )


@pytest.fixture(scope="module")
def cnn_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prof") / "cnn.json"
    zoo_profile("cnn").save(path)
    return path


def test_simulate_writes_json_trace_and_png(
    cnn_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    args = [
        "simulate",
        "--model",
        "cnn",
        "--profile",
        str(cnn_profile),
        "--workers",
        "8",
        "--bandwidth",
        "100kbit",
        "--threshold-mb",
        "0.015625",  # 16 KiB
        "--payload-fraction",
        "1",
        "--optimizer",
        "none",
        "--json",
        str(out),
        "--trace",
        str(tmp_path / "t.json"),
        "--png",
        str(tmp_path / "t.png"),
    ]
    assert main(args) == 0
    data = json.loads(out.read_text())
    assert data["strategy"] == "cadence-dp" and data["world_size"] == 8
    # 116264 B of gradients; a ring on 8 workers moves 7/4 of them at 12.5 kB/s: wire-bound.
    assert data["wire_s"] == pytest.approx(116264 * 7 / 4 / 12500, rel=1e-6)
    assert data["wire_s"] <= data["iteration_time_s"] < 1.2 * data["wire_s"]
    assert "traceEvents" in json.loads((tmp_path / "t.json").read_text())
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    assert "predicted iteration" in capsys.readouterr().out
    assert main([*args[:-6], "--strategy", "ddp", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["iteration_time_s"] > data["iteration_time_s"]
    # By default --bandwidth is the line rate: TCP over Ethernet carries 1448 of 1514 bytes.
    base = args[: args.index("--payload-fraction")]
    assert main([*base, "--optimizer", "none", "--json", str(out)]) == 0
    default = json.loads(out.read_text())["wire_s"]
    assert default == pytest.approx(data["wire_s"] * 1514 / 1448, rel=1e-6)


def test_plan_ranks_strategies_and_names_the_best(
    cnn_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    assert (
        main(
            [
                "plan",
                "dp",
                "--model",
                "cnn",
                "--profile",
                str(cnn_profile),
                "--workers",
                "4",
                "--bandwidth",
                "1mbit",
                "--thresholds",
                "4kib,64kib",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    times = [r["iteration_time_s"] for r in data["rows"]]
    assert times == sorted(times) and len(times) == 3
    assert {r["strategy"] for r in data["rows"]} == {"ddp", "cadence-dp"}
    assert data["best"] == data["rows"][0]
    printed = capsys.readouterr().out
    assert "best: " in printed or "ddp is fastest" in printed


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--workers", "0"], "--workers must be at least 1 (got 0)"),
        (["--bandwidth", "fast"], "bad bandwidth 'fast'"),
        (["--model", "resnet9000"], "unknown model 'resnet9000'"),
        (["--threshold-mb", "0"], "--threshold-mb must be positive (got 0.0)"),
        (["--model", "mlp"], "is of model 'cnn', expected 'mlp'"),
        (["--reorder-k", "0"], "--reorder-k must be at least 1 (got 0)"),
        (["--replicas", "0"], "--replicas must be >= 1, got 0"),
    ],
)
def test_bad_input_is_one_line(
    cnn_profile: Path, extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--model", "cnn", "--profile", str(cnn_profile), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_unreadable_profile_from_the_real_command(tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text("{not json")
    proc = run_cadence("simulate", "--model", "cnn", "--profile", str(bad), cwd=tmp_path)
    assert_one_line_error(proc, f"cannot read profile {bad}")


def test_vgg16_on_64_workers_simulates_fast() -> None:
    profile = zoo_profile("vgg16", block_s=0.03)
    params = model_layout(get_model_spec("vgg16").build()).infos
    link = AlphaBeta.from_bandwidth(10e9, alpha_s=20e-6)
    plan = plan_dp(profile, params, 1 << 20, 2 << 20, 64, link)
    assert len(plan.chunks) > 50  # chunk-level: ~60 MB of gradients in 1 MiB pieces
    start = time.perf_counter()
    one = simulate_dp(profile, plan, 64, link, iterations=1)
    assert time.perf_counter() - start < 1.0  # the simulator's own cost, generous bound
    start = time.perf_counter()
    every = simulate_dp(
        profile, plan, 64, link, iterations=1, options=SimOptions(replicas=64, warmup_iterations=0)
    )
    elapsed = time.perf_counter() - start
    assert len(every.busy_s) == 3 * 64
    assert elapsed < 10.0  # all 64 workers one by one; about 0.4 s on an idle core
    assert one.iteration_s > 0


def test_calibrated_link_replaces_bandwidth_and_latency(
    cnn_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cadence.comm.calibrate import Calibration, CalibrationRow

    fitted = AlphaBeta(alpha_s=1e-3, beta_s_per_byte=1e-6)
    cal = Calibration(fitted, 2, "gloo", 1, "minimax", (), torch.__version__)
    cal.save(tmp_path / "cal.json")
    out = tmp_path / "r.json"
    args = ["simulate", "--model", "cnn", "--profile", str(cnn_profile), "--workers", "8"]
    args += ["--calibration", str(tmp_path / "cal.json"), "--optimizer", "none"]
    assert main([*args, "--calibration-latency", "fitted", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["wire_s"] == pytest.approx(116264 * 7 / 4 * 1e-6)
    # One chunk (4 MiB threshold), a ring of 2 x 7 messages at 1 ms; nothing overlaps it.
    assert data["serial_s"] == pytest.approx(data["compute_s"] + data["wire_s"] + 14e-3)
    assert data["iteration_time_s"] == pytest.approx(data["serial_s"])
    assert data["efficiency"] == 0.0
    # By size (the default): the calls the calibration timed from 64 KB up were bare wire, so
    # the 116 KB all-reduce pays no latency; only 1 KB calls carried the 1 ms.
    rows = []
    for n in (1 << 10, 1 << 16, 1 << 20, 1 << 24):
        t = AlphaBeta(1e-3 * (n == 1 << 10), 1e-6).time("allreduce", "ring", n, 2)
        rows.append(CalibrationRow("all_reduce", n, t, t))
    Calibration(fitted, 2, "gloo", 1, "regimes", tuple(rows), torch.__version__).save(
        tmp_path / "cal.json"
    )
    assert main([*args, "--json", str(out)]) == 0
    sized = json.loads(out.read_text())
    assert sized["serial_s"] == pytest.approx(sized["compute_s"] + sized["wire_s"])
    assert "all-reduce latency by size" in capsys.readouterr().out


def test_the_optimizer_step_comes_from_the_profile_where_it_was_timed(tmp_path: Path) -> None:
    # A GPU profile's step, not this machine's CPU's; --optimizer-step still wins.
    path = tmp_path / "gpu.json"
    steps = {"sgd": 0.0002, "adam": 0.0005, "adamw": 0.0006}
    replace(zoo_profile("cnn"), device="cuda:0", optimizer_step_s=steps).save(path)
    out = tmp_path / "r.json"
    base = [
        "simulate",
        "--model",
        "cnn",
        "--profile",
        str(path),
        "--workers",
        "2",
        "--bandwidth",
        "1gbit",
        "--strategy",
        "ddp",
        "--json",
        str(out),
    ]
    for optimizer, expected in [("adam", 0.0005), ("sgd", 0.0002)]:
        assert main([*base, "--optimizer", optimizer]) == 0
        assert json.loads(out.read_text())["update_s"] == pytest.approx(expected, rel=1e-9)
    assert main([*base, "--optimizer-step", "0.003"]) == 0
    assert json.loads(out.read_text())["update_s"] == pytest.approx(0.003, rel=1e-9)


def test_without_model_a_saved_profile_names_it(
    cnn_profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--profile", str(cnn_profile), "--workers", "2"]) == 0
    assert capsys.readouterr().out.startswith("cadence-dp: cnn, ")
