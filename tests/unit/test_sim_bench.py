"""`cadence bench sim` on hand-made `cadence train --json` files (no training here)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.sim.bench import predict_runs, summary
from tests.unit.test_sim_cli import zoo_profile


def write_run(path: Path, strategy: str, median: float, cap: str | None = "1mbit") -> str:
    config = {
        "model": "cnn",
        "workers": 2,
        "batch_size": 64,
        "strategy": strategy,
        "optimizer": "sgd",
        "emulate_bandwidth": cap,
    }
    path.write_text(json.dumps({"config": config, "median_iteration_s": median}))
    return str(path)


def test_predictions_and_errors_against_measured_medians(tmp_path: Path) -> None:
    profiles = {"cnn": zoo_profile("cnn")}
    runs = [
        write_run(tmp_path / "a.json", "ddp", 2.0),
        write_run(tmp_path / "b.json", "cadence-dp", 1.0),
    ]
    rows = predict_runs(runs, profiles, payload_fraction=1.0)
    assert [r["strategy"] for r in rows] == ["ddp", "cadence-dp"]
    for row, measured in zip(rows, (2.0, 1.0), strict=True):
        # 116264 B of gradients, ring of 2 moves them once at 125 kB/s: at least 0.93 s.
        assert row["wire_s"] == pytest.approx(116264 / 125000)
        assert row["predicted_s"] >= row["wire_s"]
        assert row["error"] == pytest.approx((row["predicted_s"] - measured) / measured)
        assert row["optimizer_step_s"] > 0
    assert summary(rows)["worst_abs_error"] == max(abs(r["error"]) for r in rows)
    slower = predict_runs(runs[:1], profiles, payload_fraction=1.0, optimizer_step_s=0.5)
    assert slower[0]["optimizer_step_s"] == pytest.approx(0.5)
    # DDP steps after the last bucket: a given step time adds to the iteration one for one.
    added = slower[0]["predicted_s"] - rows[0]["predicted_s"]
    assert added == pytest.approx(0.5 - rows[0]["optimizer_step_s"])


def test_runs_that_cannot_be_predicted_are_user_errors(tmp_path: Path) -> None:
    profiles = {"cnn": zoo_profile("cnn")}
    with pytest.raises(UserError, match="no --emulate-bandwidth cap"):
        predict_runs([write_run(tmp_path / "a.json", "ddp", 1.0, cap=None)], profiles)
    with pytest.raises(UserError, match="used strategy 'pipeline'"):
        predict_runs([write_run(tmp_path / "a.json", "pipeline", 1.0)], profiles)
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(UserError, match="not a `cadence train --json` file"):
        predict_runs([str(tmp_path / "bad.json")], profiles)
    with pytest.raises(UserError, match="batch 16 per worker"):
        half = dataclasses.replace(zoo_profile("cnn"), batch_size=16)
        predict_runs([write_run(tmp_path / "a.json", "ddp", 1.0)], {"cnn": half})


def test_on_a_fast_link_the_profiles_compute_decides(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    path = write_run(tmp_path / "a.json", "ddp", 0.5, cap="100gbit")
    (row,) = predict_runs([path], {"cnn": profile}, payload_fraction=1.0, optimizer_step_s=0.0)
    assert row["predicted_s"] == pytest.approx(row["compute_s"], rel=0.05)
    assert row["compute_s"] == pytest.approx(profile.iteration_s, rel=0.05)


def test_the_removed_charges_are_not_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from cadence.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["bench", "sim", "--heap-cost", "x.json", "run.json"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --heap-cost" in capsys.readouterr().err


def test_a_zero_run_is_simulated_with_every_zero_setting_it_ran(tmp_path: Path) -> None:
    profiles = {"cnn": zoo_profile("cnn")}

    def zero_run(name: str, **settings: object) -> str:
        path = Path(write_run(tmp_path / name, "zero", 1.0))
        data = json.loads(path.read_text())
        data["config"].update(zero_stage=1, **settings)
        path.write_text(json.dumps(data))
        return str(path)

    fp32, bf16 = predict_runs(
        [zero_run("fp32.json"), zero_run("bf16.json", gather_dtype="bf16")], profiles, 1.0
    )
    # At 1mbit the parameter all-gather is a large part of the step: half its bytes, less time.
    assert bf16["predicted_s"] < fp32["predicted_s"]


def test_the_command_writes_json_and_png_and_prints_the_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cadence.cli import main

    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    run = write_run(tmp_path / "run.json", "ddp", 1.0)
    out = tmp_path / "out" / "sim.json"
    assert main(["bench", "sim", run, "--profile", str(profile), "--optimizer-step", "0",
                 "--out", str(out)]) == 0  # fmt: skip
    data = json.loads(out.read_text())
    assert data["command"].startswith("cadence ") and len(data["rows"]) == 1
    assert data["worst_abs_error"] == pytest.approx(abs(data["rows"][0]["error"]))
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    assert "mean |error|" in capsys.readouterr().out
