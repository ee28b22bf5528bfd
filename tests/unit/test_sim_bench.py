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


def test_a_run_that_timed_its_own_compute_is_predicted_from_it(tmp_path: Path) -> None:
    profiles = {"cnn": zoo_profile("cnn")}
    path = Path(write_run(tmp_path / "a.json", "ddp", 0.5, cap="100gbit"))
    plain = predict_runs([str(path)], profiles, payload_fraction=1.0, optimizer_step_s=0.0)
    assert plain[0]["compute_basis"] == "profile"
    data = json.loads(path.read_text())
    data["compute_probe"] = {"lockstep_median_s": 0.5, "slowest_rank_median_s": 0.5, "steps": 10}
    path.write_text(json.dumps(data))
    # On a 100 Gbit link compute decides: the step is the compute the run timed.
    rows = predict_runs([str(path)], profiles, payload_fraction=1.0, optimizer_step_s=0.0)
    assert rows[0]["compute_basis"] == "in-run"
    assert rows[0]["predicted_s"] == pytest.approx(0.5, rel=0.02)
    # The runtime's own cost multiplies that compute; the profile basis ignores the probe.
    slowed = predict_runs(
        [str(path)], profiles, payload_fraction=1.0, optimizer_step_s=0.0,
        runtime_slowdowns={"cnn": {"ddp": 1.2, "cadence-dp": 2.0}},
    )  # fmt: skip
    assert slowed[0]["predicted_s"] == pytest.approx(0.6, rel=0.02)
    profile_basis = predict_runs(
        [str(path)], profiles, payload_fraction=1.0, optimizer_step_s=0.0, in_run_compute=False
    )
    assert profile_basis[0]["predicted_s"] == pytest.approx(plain[0]["predicted_s"])
    with pytest.raises(UserError, match="no runtime cost of 'cnn'"):
        predict_runs([str(path)], profiles, runtime_slowdowns={"vgg16": {"ddp": 1.0}})
    with pytest.raises(UserError, match="timed no compute of its own"):
        bare = write_run(tmp_path / "b.json", "ddp", 0.5)
        predict_runs([bare], profiles, in_run_compute=True)


def test_the_interleaved_basis_takes_a_cadence_dp_runs_blocks_and_a_ddp_runs_probe_after(
    tmp_path: Path,
) -> None:
    profiles = {"cnn": zoo_profile("cnn")}
    probes = {
        "compute_probe": {"lockstep_median_s": 0.5, "slowest_rank_median_s": 0.5, "steps": 10},
        "interleaved_compute_probe": {"lockstep_median_s": 0.8, "steps": 10},
    }
    for strategy, compute, basis in (
        ("cadence-dp", 0.8, "in-run, interleaved"),
        ("ddp", 0.5, "in-run"),  # DDP's processes leave the heap dynamic: its blocks are off
    ):
        path = Path(write_run(tmp_path / f"{strategy}.json", strategy, 0.5, cap="100gbit"))
        path.write_text(json.dumps(json.loads(path.read_text()) | probes))
        (row,) = predict_runs(
            [str(path)], profiles, payload_fraction=1.0, optimizer_step_s=0.0,
            in_run_compute=True, probe="interleaved",
        )  # fmt: skip
        # On a 100 Gbit link compute decides: the step is the compute the run timed.
        assert row["compute_basis"] == basis
        assert row["predicted_s"] == pytest.approx(compute, rel=0.02)


@pytest.mark.parametrize("share", ["0", "1.2", "fast"])
def test_a_bad_share_of_the_link_while_computing_is_one_line(
    share: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from cadence.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["bench", "sim", "--comm-rate-while-computing", share, "x.json"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected a number in (0, 1]" in err[0], err


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
