"""`bench sim --step-shares`: the optimizer step of rows that timed none, priced as the share
of the compute that other runs of the model measured (hand-made benchmark files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.errors import UserError
from cadence.sim.bench import predict_runs
from cadence.sim.bench_dp import predict_bench_dp
from cadence.sim.step_share import row_step_shares, step_shares
from tests.unit.test_sim_bench import write_run
from tests.unit.test_sim_cli import zoo_profile

ROUNDS = {"compute": [0.2, 0.4], "ddp": [0.3, 0.5], "cadence": [0.25, 0.45]}
PAIRED = {"model": "cnn", "cap": "10mbit", "compute_s": 0.3, "rounds_s": ROUNDS,
          "iteration_s": {"ddp": 0.4, "cadence": 0.35}}  # fmt: skip


def _write(path: Path, *rows: dict) -> str:
    # cadence-dp in chunks of 10 KB, so that the step's length moves its prediction.
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": 0.01}, "rows": rows}))
    return str(path)


def test_a_rows_shares_pair_each_step_with_the_compute_it_was_timed_with() -> None:
    assert row_step_shares(PAIRED) == []
    timed = PAIRED | {"compute_step_rounds_s": [0.01, 0.04]}
    assert row_step_shares(timed) == pytest.approx([0.05, 0.1])
    # The lockstep compute (each step's slowest rank) where the file has it.
    lockstep = timed | {"lockstep_compute_rounds_s": [0.25, 0.5]}
    assert row_step_shares(lockstep) == pytest.approx([0.04, 0.08])
    runs = {"variant_compute_runs_s": {"ddp": [0.2, 0.4], "cadence": [0.5]},
            "variant_step_runs_s": {"ddp": [0.02, 0.02], "cadence": [0.1]}}  # fmt: skip
    assert row_step_shares(runs) == pytest.approx([0.1, 0.05, 0.2])


def test_the_share_is_the_median_over_every_file_and_a_file_without_steps_is_one_line(
    tmp_path: Path,
) -> None:
    a = _write(tmp_path / "a.json", PAIRED | {"compute_step_rounds_s": [0.01, 0.04]})
    b = _write(tmp_path / "b.json", PAIRED | {"compute_step_rounds_s": [0.06, 0.02]},
               PAIRED | {"model": "mlp", "compute_step_rounds_s": [0.02, 0.02]})  # fmt: skip
    # cnn: 0.05, 0.1, 0.3, 0.05 -> 0.075; mlp: 0.1, 0.05 -> 0.075; a model of no steps: absent.
    none = _write(tmp_path / "none.json", PAIRED | {"model": "vgg16"})
    assert step_shares([a, b, none]) == pytest.approx({"cnn": 0.075, "mlp": 0.075})
    with pytest.raises(UserError, match="none of the files timed an optimizer step"):
        step_shares([none])
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(UserError, match=f"--step-shares {bad}: not a `cadence bench dp` file"):
        step_shares([str(bad)])


def test_each_round_is_priced_at_the_share_of_its_own_compute(tmp_path: Path) -> None:
    profile = {"cnn": zoo_profile("cnn")}
    untimed = _write(tmp_path / "untimed.json", PAIRED)
    rows, _ = predict_bench_dp([untimed], profile, 1.0, step_shares={"cnn": 0.25})
    assert {r["optimizer_step_basis"] for r in rows} == {"share of the compute"}
    assert all(r["optimizer_step_s"] == pytest.approx(0.25 * 0.3) for r in rows)
    # Round i predicts what a one-round file predicts with --optimizer-step 0.25 x its compute.
    for i, compute in enumerate(ROUNDS["compute"]):
        one = _write(tmp_path / f"r{i}.json", PAIRED | {"rounds_s": {k: [v[i]] for k, v in
                                                                     ROUNDS.items()}})  # fmt: skip
        given, _ = predict_bench_dp([one], profile, 1.0, optimizer_step_s=0.25 * compute)
        for r, g in zip(rows, given, strict=True):
            assert r["round_errors"][i] == pytest.approx(g["round_errors"][0])
    # The share moves the prediction: cadence-dp's updates overlap its later chunks here.
    small, _ = predict_bench_dp([untimed], profile, 1.0, step_shares={"cnn": 0.01})
    assert small[1]["round_errors"] != pytest.approx(rows[1]["round_errors"], abs=1e-3)
    # A row's own steps and --optimizer-step win over the share; other models keep theirs.
    own = _write(tmp_path / "own.json", PAIRED | {"compute_step_rounds_s": [0.01, 0.01]})
    for path, given, basis in ((own, None, "timed with the compute"), (untimed, 0.0, "given")):
        rows, _ = predict_bench_dp(
            [path], profile, 1.0, optimizer_step_s=given, step_shares={"cnn": 0.25}
        )
        assert {r["optimizer_step_basis"] for r in rows} == {basis}
    rows, _ = predict_bench_dp([untimed], profile, 1.0, step_shares={"mlp": 0.25})
    assert {r["optimizer_step_basis"] for r in rows} == {"timed now"}


def test_a_training_run_with_its_own_compute_takes_the_share_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cadence.sim.command as command

    profiles = {"cnn": zoo_profile("cnn")}
    path = Path(write_run(tmp_path / "a.json", "cadence-dp", 0.5, cap="10mbit"))
    data = json.loads(path.read_text())
    data["compute_probe"] = {"lockstep_median_s": 0.4, "slowest_rank_median_s": 0.4, "steps": 5}
    sgd = tmp_path / "sgd.json"
    sgd.write_text(json.dumps(data))
    data["config"]["optimizer"] = "adam"  # the shares are of Adam's step, as bench dp trains
    path.write_text(json.dumps(data))
    with monkeypatch.context() as patch:  # the share prices it: no step is timed now
        patch.setattr(command, "step_s_per_byte", lambda *_: pytest.fail("timed a step"))
        (shared,) = predict_runs([str(path)], profiles, 1.0, step_shares={"cnn": 0.2})
    (given,) = predict_runs([str(path)], profiles, 1.0, optimizer_step_s=0.08)
    assert shared["optimizer_step_s"] == pytest.approx(0.08)
    assert shared["predicted_s"] == pytest.approx(given["predicted_s"])
    # An SGD run keeps the profile's SGD step: a share of Adam's would price the wrong one.
    from dataclasses import replace

    recorded = {"cnn": replace(profiles["cnn"], optimizer_step_s={"sgd": 0.003, "adam": 0.05})}
    (sgd_shared,) = predict_runs([str(sgd)], recorded, 1.0, step_shares={"cnn": 0.2})
    assert sgd_shared["optimizer_step_s"] == pytest.approx(0.003)


def test_the_command_prints_the_shares_and_rejects_a_file_without_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    timed = _write(tmp_path / "timed.json", PAIRED | {"compute_step_rounds_s": [0.02, 0.04]})
    untimed = _write(tmp_path / "untimed.json", PAIRED)
    args = ["bench", "sim", "--from-bench-dp", untimed, "--profile", str(profile),
            "--json", str(tmp_path / "out.json")]  # fmt: skip
    assert main([*args, "--step-shares", timed]) == 0
    assert "optimizer step where a row timed none: cnn 10.00% of its compute" in (
        capsys.readouterr().out
    )
    report = json.loads((tmp_path / "out.json").read_text())
    assert {r["optimizer_step_basis"] for r in report["rows"]} == {"share of the compute"}
    assert report["step_shares"] == {"files": [timed], "shares": {"cnn": pytest.approx(0.1)}}
    # Without them the rows take a step timed now, and the command says how to pin it.
    assert main(args) == 0
    assert "2 rows timed no optimizer step" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())["step_shares"] is None
    assert main([*args, "--step-shares", untimed]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none of the files timed an optimizer step" in err[0], err
