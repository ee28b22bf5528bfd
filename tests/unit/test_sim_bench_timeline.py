"""`cadence bench sim --from-timeline`: replaying traced dp-timeline iterations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.sim.bench_timeline import (
    REPLAY_OPTIONS,
    predict_timelines,
    read_timeline,
    traced_profile,
)
from cadence.sim.options import SimOptions
from tests.unit.test_sim_cli import zoo_profile


def _timeline(tmp_path: Path, cap: str, forward: float, backward: float, measured: float) -> str:
    parts = {"forward_s": forward, "backward_s": backward, "updates_s": 0.0}
    runs = {name: {"iteration_s": measured, "breakdown": parts} for name in ("ddp", "cadence")}
    config = {"model": "cnn", "cap": cap, "workers": 2, "batch_size": 64, "threshold_mb": 4.0}
    path = tmp_path / f"tl-{cap}.json"
    path.write_text(json.dumps({"config": config, "runs": runs}))
    return str(path)


def test_profile_takes_the_traced_forward_and_backward() -> None:
    profile = zoo_profile("cnn")
    traced = traced_profile(profile, 0.3, 0.5)
    assert sum(b.forward_s for b in traced.blocks) + traced.loss_s == pytest.approx(0.3)
    assert sum(b.input_grad_s + b.weight_grad_s for b in traced.blocks) == pytest.approx(0.5)
    assert traced.param_bytes == profile.param_bytes


def test_compute_bound_step_is_its_compute_and_wire_bound_step_its_wire(tmp_path: Path) -> None:
    profile = {"cnn": zoo_profile("cnn")}
    # 116264 B of gradients; at 10gbit the wire is ~0.1 ms: the step is forward + backward.
    fast, skipped = predict_timelines([_timeline(tmp_path, "10gbit", 0.3, 0.5, 0.8)], profile)
    assert not skipped and [r["strategy"] for r in fast] == ["ddp", "cadence-dp"]
    for r in fast:
        assert r["predicted_s"] == pytest.approx(0.8, rel=0.01)
        assert r["error"] == pytest.approx((r["predicted_s"] - 0.8) / 0.8)
    # At 100kbit the wire (116264 B at 12.5 kB/s) dwarfs the compute.
    slow, _ = predict_timelines([_timeline(tmp_path, "100kbit", 0.3, 0.5, 10.0)], profile, 1.0)
    for r in slow:
        assert r["wire_s"] == pytest.approx(116264 / 12500, rel=1e-6)
        assert r["predicted_s"] >= r["wire_s"]


def test_the_slowest_ranks_compute_sets_the_step(tmp_path: Path) -> None:
    path = Path(_timeline(tmp_path, "10gbit", 0.3, 0.5, 1.0))
    data = json.loads(path.read_text())
    slow = {"forward_s": 0.4, "backward_s": 0.6, "updates_s": 0.0}
    for run in data["runs"].values():
        run["rank_breakdowns"] = [run["breakdown"], slow]
    path.write_text(json.dumps(data))
    rows, _ = predict_timelines([str(path)], {"cnn": zoo_profile("cnn")})
    for r in rows:
        assert r["compute_s"] == pytest.approx(1.0)
        assert r["predicted_s"] == pytest.approx(1.0, rel=0.01)


def test_uncapped_and_bad_files(tmp_path: Path) -> None:
    rows, skipped = predict_timelines(
        [_timeline(tmp_path, "none", 0.3, 0.5, 0.8)], {"cnn": zoo_profile("cnn")}
    )
    assert rows == [] and "without a cap" in skipped[0]
    bad = tmp_path / "x.json"
    bad.write_text('{"config": {"model": "cnn"}}')
    with pytest.raises(UserError, match="not a `cadence bench dp-timeline` file"):
        read_timeline(str(bad))
    with pytest.raises(UserError, match="no profile"):
        predict_timelines([_timeline(tmp_path, "1gbit", 0.3, 0.5, 0.8)], {})


def test_every_recorded_iteration_is_replayed_against_the_ranks_mean(tmp_path: Path) -> None:
    path = Path(_timeline(tmp_path, "10gbit", 0.3, 0.5, 1.0))
    data = json.loads(path.read_text())

    def part(forward: float, backward: float, window: float) -> dict[str, float]:
        return {"forward_s": forward, "backward_s": backward, "updates_s": 0.0,
                "iteration_s": window}  # fmt: skip

    # Two iterations; in the first, rank 1 computes longer and rank 0's window ends early
    # (it started the next forward and waited there), as wait-free steps do.
    iterations = [
        [part(0.3, 0.5, 0.7), part(0.4, 0.6, 1.1)],
        [part(0.3, 0.5, 0.9), part(0.3, 0.5, 0.9)],
    ]
    for run in data["runs"].values():
        run["iteration_breakdowns"] = iterations
    path.write_text(json.dumps(data))
    rows, _ = predict_timelines([str(path)], {"cnn": zoo_profile("cnn")})
    for r in rows:
        assert r["iterations"] == 2
        assert r["measured_s"] == pytest.approx((0.9 + 0.9) / 2)
        # The slowest rank's compute per iteration (1.0 s, then 0.8 s); the wire is ~0.1 ms.
        assert r["compute_s"] == pytest.approx(0.9)
        assert r["predicted_s"] == pytest.approx(0.9, rel=0.01)


def test_a_recorded_plan_is_replayed_as_run(tmp_path: Path) -> None:
    from cadence.comm.cost import AlphaBeta
    from cadence.dp.config import DPConfig
    from cadence.dp.plan import DPPlan, build_plan
    from cadence.sim.api import simulate_dp
    from cadence.sim.command import model_params

    params = model_params("cnn")
    plan = build_plan(params, 20_000, DPConfig(threshold_bytes=20_000).credit_for(0))
    assert DPPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    path = Path(_timeline(tmp_path, "100kbit", 0.3, 0.5, 10.0))
    data = json.loads(path.read_text())
    data["runs"]["cadence"]["plan"] = plan.to_json()
    path.write_text(json.dumps(data))
    rows, _ = predict_timelines([str(path)], {"cnn": zoo_profile("cnn")}, 1.0)
    # The prediction is that plan's, simulated on the traced compute (the file's own
    # threshold, 4 MB, would make a single chunk).
    assert len(plan.chunks) > 1
    direct = simulate_dp(
        traced_profile(zoo_profile("cnn"), 0.3, 0.5), plan, 2, AlphaBeta.from_bandwidth(100e3),
        3, REPLAY_OPTIONS,
    )  # fmt: skip
    assert rows[1]["strategy"] == "cadence-dp"
    assert rows[1]["predicted_s"] == pytest.approx(direct.iteration_s)
    other = dict(data)
    other["runs"]["cadence"]["plan"] = build_plan(params[:2], 20_000, 40_000).to_json()
    path.write_text(json.dumps(other))
    with pytest.raises(UserError, match="not of 'cnn'"):
        predict_timelines([str(path)], {"cnn": zoo_profile("cnn")})


def test_traced_updates_are_not_time_sliced_with_compute_again(tmp_path: Path) -> None:
    # The traced seconds already hold the sharing of the cores; replaying the updates on the
    # compute as well would count it twice.
    path = Path(_timeline(tmp_path, "10gbit", 0.3, 0.5, 1.0))
    data = json.loads(path.read_text())
    data["runs"]["cadence"]["breakdown"]["updates_s"] = 0.2
    path.write_text(json.dumps(data))
    profile = {"cnn": zoo_profile("cnn")}
    shared = SimOptions(ddp_first_bucket_bytes=None, updates_share_compute=True)
    for options in (None, shared):
        rows, _ = predict_timelines([str(path)], profile, options=options)
        cadence = rows[1]
        assert cadence["strategy"] == "cadence-dp" and cadence["optimizer_step_s"] == 0.2
        # Back layers' updates run beside the backward of the front ones: less than serial.
        assert 0.8 < cadence["predicted_s"] < 0.8 + 0.2 - 0.01
    assert predict_timelines([str(path)], profile, options=shared)[0] == rows


def test_the_recorded_matrix_replays_within_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 22 traced runs of results/timelines-7 (11 models x caps, DDP and cadence-dp) through
    the command line: a regression check of the simulator against real steps."""
    from cadence.cli import main

    root = Path(__file__).resolve().parents[2]
    files = sorted(str(p) for p in (root / "results" / "timelines-7").glob("*.json"))
    profiles = [
        arg
        for model in ("vgg16", "gpt_mini", "resnet32", "cnn_lstm")
        for arg in ("--profile", str(root / "results" / f"{model}-profile-b32.json"))
    ]
    out = tmp_path / "replay.json"
    assert main(["bench", "sim", "--from-timeline", *files, *profiles, "--json", str(out)]) == 0
    assert "over 22 runs" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert len(report["rows"]) == 22 and all(r["iterations"] == 3 for r in report["rows"])
    assert report["mean_abs_error"] <= 0.05 and report["worst_abs_error"] <= 0.10


def test_a_calibration_adds_its_latency_and_a_bad_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cadence.cli import main

    root = Path(__file__).resolve().parents[2]
    one = sorted(str(p) for p in (root / "results" / "timelines-7").glob("*cnn_lstm*.json"))[:1]
    args = ["bench", "sim", "--from-timeline", *one]
    args += ["--profile", str(root / "results" / "cnn_lstm-profile-b32.json")]
    calibration = str(root / "results" / "calibration-400mbit-2hosts-20261126.json")
    plain, timed = tmp_path / "plain.json", tmp_path / "timed.json"
    assert main([*args, "--json", str(plain)]) == 0
    assert main([*args, "--calibration", calibration, "--json", str(timed)]) == 0
    before, after = json.loads(plain.read_text()), json.loads(timed.read_text())
    assert (before["calibration"], after["calibration"]) == (None, calibration)
    for b, a in zip(before["rows"], after["rows"], strict=True):
        assert a["wire_s"] == pytest.approx(b["wire_s"])  # beta still from the cap
        assert a["predicted_s"] > b["predicted_s"]  # each message now costs its alpha
    capsys.readouterr()
    bad = tmp_path / "cal.json"
    bad.write_text("{}")
    assert main([*args, "--calibration", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot read calibration {bad}" in err[0], err


def _three_iterations(tmp_path: Path, probe: dict | None) -> Path:
    """A file whose cadence-dp run traced iterations 5-7 (starts 5-9), the first of them
    shorter, as cadence-dp's first chunked iteration after four one-chunk ones is."""
    path = Path(_timeline(tmp_path, "10gbit", 0.3, 0.5, 1.0))
    data = json.loads(path.read_text())

    def part(window: float) -> dict[str, float]:
        return {"forward_s": 0.3, "backward_s": 0.5, "updates_s": 0.0, "iteration_s": window}

    for run in data["runs"].values():
        run["starts_s"] = {str(i): float(i) for i in range(5, 10)}
        run["iteration_breakdowns"] = [[part(w)] * 2 for w in (0.8, 1.0, 1.2)]
    if probe is not None:
        data["runs"]["cadence"]["one_chunk_probe"] = probe
    path.write_text(json.dumps(data))
    return path


def test_the_first_chunked_iteration_after_the_one_chunk_probe_is_left_out(
    tmp_path: Path,
) -> None:
    profile = {"cnn": zoo_profile("cnn")}
    switched = _three_iterations(tmp_path, {"iterations": 4, "one_chunk": False})
    ddp, cadence = predict_timelines([str(switched)], profile)[0]
    assert (ddp["iterations"], ddp["measured_s"]) == (3, pytest.approx(1.0))  # DDP: no probe
    assert (cadence["iterations"], cadence["measured_s"]) == (2, pytest.approx(1.1))
    # A probe that kept one chunk changes no plan; a file without the record is replayed whole.
    for probe in ({"iterations": 4, "one_chunk": True}, None):
        rows, _ = predict_timelines([str(_three_iterations(tmp_path, probe))], profile)
        assert [r["iterations"] for r in rows] == [3, 3]


def test_a_trace_with_no_steady_iteration_is_a_one_line_error(tmp_path: Path) -> None:
    late = _three_iterations(tmp_path, {"iterations": 6, "one_chunk": False})
    with pytest.raises(UserError, match="no steady iteration traced.*--record-step` 8"):
        predict_timelines([str(late)], {"cnn": zoo_profile("cnn")})
