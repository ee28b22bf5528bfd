"""`cadence bench tta` from recorded curves: time to ddp's final loss, ratios, bytes, the
table, the JSON, the PNG and the pilot files `cadence plan tta` reads (mock runs)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cadence.bench.tta import (
    TTABenchConfig,
    cell_rows,
    eval_every_for,
    pilot,
    plan_cell,
    plan_score,
    read_reports,
    rescore_config,
    run_tta_bench,
    scored,
    table_lines,
    time_to_target,
    wire_bytes,
)
from cadence.errors import UserError
from cadence.sim.tta import FORECAST, PILOT, Steps, read_pilot
from tests.cli_helpers import assert_one_line_error, run_cadence


def _metrics(losses: list[float], step_s: float, **extra: Any) -> dict[str, Any]:
    evals = [
        {"step": 10 * (i + 1), "seconds": 10 * (i + 1) * step_s, "test_loss": loss,
         "test_accuracy": 0.5}
        for i, loss in enumerate(losses)
    ]  # fmt: skip
    return {"evals": evals, "final_test_loss": losses[-1], "final_test_accuracy": 0.5,
            "median_iteration_s": step_s, "steps": 10 * len(losses), "gradient_bytes": 1000,
            **extra}  # fmt: skip


def test_time_to_target_is_where_the_loss_reaches_it_and_holds() -> None:
    evals = _metrics([3.0, 2.0, 2.5, 1.0], 1.0)["evals"]
    assert time_to_target(evals, 2.0) == 40.0  # the dip at 20 s climbs out again at 30 s
    assert time_to_target(evals, 2.5) == 20.0
    assert time_to_target(evals, 0.5) is None
    ends_above = _metrics([3.0, 1.9, 2.1], 1.0)["evals"]  # a dip, then 5% above: not reached
    assert time_to_target(ends_above, 2.0) is None
    within = _metrics([3.0, 1.9, 2.015, 2.01], 1.0)["evals"]  # stays within 1% above: held
    assert time_to_target(within, 2.0) == 20.0
    close = _metrics([3.0, 2.01, 2.005], 1.0)["evals"]  # within 1%, but never at the target
    assert time_to_target(close, 2.0) is None
    assert time_to_target([{"seconds": 1.0, "test_loss": float("nan")}], 9.0) is None


def test_semi_synchronous_methods_are_evaluated_right_after_a_sync() -> None:
    assert eval_every_for("ddp", 20) == 20
    assert eval_every_for("diloco:H16", 20) == 32 and eval_every_for("local-sgd:H4", 20) == 20
    assert eval_every_for("diloco:H64:K4", 20) == 64


def test_cell_rows_compare_every_method_with_ddps_final_loss() -> None:
    runs = {
        "ddp": _metrics([3.0, 2.0, 1.5], 1.0),  # target 1.5, reached at 30 s
        "diloco:H16": _metrics([2.5, 1.4, 1.2], 0.5, wire_bytes_total=77),  # 10 s
        "cadence-dp+sign": _metrics([3.0, 2.9, 2.8], 0.4, wire_bytes_total=5),  # never
        "zero+onebit": {"error": "boom"},
    }
    target, rows = cell_rows(runs)
    assert target == 1.5
    by = {r["method"]: r for r in rows}
    assert by["ddp"]["time_to_target_s"] == 30.0 and by["ddp"]["ratio_to_ddp"] == 1.0
    assert by["ddp"]["steps_to_target"] == 30 and by["diloco:H16"]["steps_to_target"] == 20
    assert by["diloco:H16"]["ratio_to_ddp"] == pytest.approx(1 / 3)
    assert by["cadence-dp+sign"]["time_to_target_s"] is None
    assert by["ddp"]["wire_bytes"] == 30 * 1000  # every gradient byte in each of 30 steps
    assert by["diloco:H16"]["wire_bytes"] == 77
    assert by["zero+onebit"] == {"method": "zero+onebit", "error": "boom"}
    lines = table_lines([{"model": "m", "cap": "none", "hosts": 2, "target_loss": target,
                          "rows": rows}])  # fmt: skip
    assert lines[0].startswith("m @ none, 2 hosts: target = ddp's final test loss 1.5000")
    assert any("failed: boom" in line for line in lines)
    sign = next(line for line in lines if "cadence-dp+sign" in line)
    assert sign.split()[1:3] == ["-", "-"]  # no time to target, no ratio
    with pytest.raises(ValueError):
        wire_bytes("zero+onebit", _metrics([1.0], 1.0))
    written = pilot(runs, 30, 64)
    assert written["failed"] == {"zero+onebit": "boom"} and written["steps"] == 30
    assert written["methods"]["diloco:H16"]["curve"] == [[10, 2.5], [20, 1.4], [30, 1.2]]
    _, read = read_pilot(written, None, 30)  # the pilot reaches ddp's 30 steps: read, not forecast
    assert read["diloco:H16"] == Steps(20, PILOT) and read["ddp"] == Steps(30, PILOT)
    assert scored(target, rows) == rows  # the rows' curves give the same scores again
    with pytest.raises(UserError, match="no target"):
        cell_rows({"ddp": {"error": "x"}})


def test_run_writes_json_png_and_pilots(tmp_path: Path) -> None:
    seen: list[tuple[str, str, int, str, int]] = []

    def fake(model: str, cap: str, hosts: int, method: str, config: TTABenchConfig) -> Any:
        seen.append((model, cap, hosts, method, config.steps))
        if method == "local-sgd:H4":
            raise RuntimeError("no luck\nmore")
        losses = [3.0, 2.0, 1.0 if method == "ddp" else 0.9][: config.steps // 10]
        return _metrics(losses, 1.0 / hosts, wire_bytes_total=10)

    calibrated: list[tuple[str, int, str]] = []
    stem = ["tta"]

    def calibrate(cap: str, hosts: int, path: Path) -> Path:
        calibrated.append((cap, hosts, path.name))
        return path

    def plan(model: str, cap: str, hosts: int, pilot_path: Path, config: TTABenchConfig,
             calibration: Path | None, loop_costs: Path | None,
             profile: Path | None) -> list[dict[str, Any]]:  # fmt: skip
        assert pilot_path == tmp_path / f"{stem[0]}.{model}.{hosts}h.pilot.json"
        assert calibration == tmp_path / f"{stem[0]}.{cap}.{hosts}h.calibration.json"
        assert loop_costs == tmp_path / f"{stem[0]}.{model}.{hosts}h.loop-costs.json"
        assert profile == tmp_path / f"{stem[0]}.{model}.{hosts}h.profile.json"
        if hosts == 4:
            raise RuntimeError("no plan\nmore")
        return [{"method": "ddp", "steps": 30, "source": "x", "ranked": True},
                {"method": "local-sgd:H4", "steps": None, "source": "y", "ranked": False}]

    out = tmp_path / "tta.json"
    methods = ("local-sgd:H4", "ddp")
    config = TTABenchConfig(models=("cnn", "mlp"), caps=("none",), hosts=(2, 4), steps=30,
                            eval_every=10, methods=methods, out=str(out))  # fmt: skip
    assert config.pilot_length == 20  # a quarter of 30 steps holds fewer than 2 evaluations
    report = run_tta_bench(config, "cadence bench tta", echo=lambda _: None, train=fake,
                           plan=plan, calibrate=calibrate)  # fmt: skip
    # Each link is calibrated once, for every model's cell on it; the loopback's too.
    assert calibrated == [("none", 2, "tta.none.2h.calibration.json"),
                          ("none", 4, "tta.none.4h.calibration.json")]  # fmt: skip
    score = report["cells"][0]["plan"]
    assert score["pick"] == "ddp" and score["order"] == ["ddp"]
    assert score["steps"]["ddp"] == {"forecast": 30, "source": "x", "measured": 30,
                                     "predicted_step_s": None, "predicted_s": None}  # fmt: skip
    assert report["cells"][1]["plan"] == {"error": "no plan"}  # one cell's failure, kept
    # The pilot's short runs on the loopback come first, ddp first (the target), then the cell.
    assert seen[:4] == [("cnn", "none", 2, "ddp", 20), ("cnn", "none", 2, "local-sgd:H4", 20),
                        ("cnn", "none", 2, "ddp", 30), ("cnn", "none", 2, "local-sgd:H4", 30)]
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(report))
    assert [(c["hosts"], c["target_loss"]) for c in data["cells"][:2]] == [(2, 1.0), (4, 1.0)]
    assert data["cells"][0]["rows"][1]["error"] == "no luck"
    assert out.with_suffix(".png").stat().st_size > 0
    pilot_file = json.loads((tmp_path / "tta.cnn.4h.pilot.json").read_text())
    assert pilot_file["methods"]["ddp"]["curve"] == [[10, 3.0], [20, 2.0]]
    assert pilot_file["failed"] == {"local-sgd:H4": "no luck"} and pilot_file["steps"] == 20

    # Rescored: the same cells planned again from new pilots, their runs not trained again.
    seen.clear()
    again = tmp_path / "again.json"
    merged = read_reports([str(out), str(out)])
    assert len(merged["cells"]) == 8 and merged["config"]["hosts"] == [2, 4]
    rescored = rescore_config(merged["config"], replace(config, out=str(again), models=("mlp",)))
    assert rescored.models == ("cnn", "mlp") and rescored.out == str(again)
    stem[0] = "again"
    report = run_tta_bench(rescored, "again", echo=lambda _: None, train=fake, plan=plan,
                           calibrate=calibrate, measured=merged)  # fmt: skip
    assert {s[4] for s in seen} == {20}  # pilots only
    seen.clear()
    run_tta_bench(rescored, "again", echo=lambda _: None, train=fake, plan=plan,
                  calibrate=calibrate, measured=merged)  # fmt: skip
    assert seen == []  # the pilots it ran are kept: nothing trains
    assert report["cells"][0]["plan"]["pick"] == "ddp" and len(report["cells"]) == 8
    assert report["measured"][0]["command"] == "cadence bench tta"
    with pytest.raises(UserError, match="differ in steps"):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**data, "config": {**data["config"], "steps": 40}}))
        read_reports([str(out), str(bad)])
    with pytest.raises(UserError, match="not a `cadence bench tta` JSON"):
        read_reports([str(tmp_path / "tta.cnn.4h.pilot.json")])


def test_pilot_only_runs_the_pilots_and_nothing_else(tmp_path: Path) -> None:
    seen: list[tuple[str, int, str, int]] = []

    def fake(model: str, cap: str, hosts: int, method: str, config: TTABenchConfig) -> Any:
        seen.append((cap, hosts, method, config.steps))
        return _metrics([3.0, 2.0, 1.0, 0.9][: config.steps // 10], 0.1)

    def never(*args: Any) -> Any:
        raise AssertionError("a pilot-only run calibrates and plans nothing")

    out = str(tmp_path / "p.json")
    config = TTABenchConfig(models=("mlp",), caps=("20mbit",), hosts=(2,), steps=400,
                            eval_every=10, pilot_steps=40, pilot_only=True,
                            methods=("ddp", "local-sgd:H4"), out=out)  # fmt: skip
    report = run_tta_bench(config, "pilot", echo=lambda _: None, train=fake, plan=never,
                           calibrate=never)  # fmt: skip
    assert report["cells"] == []
    assert seen == [("none", 2, "ddp", 40), ("none", 2, "local-sgd:H4", 40)]
    written = json.loads((tmp_path / "p.mlp.2h.pilot.json").read_text())
    assert written["steps"] == 40 and set(written["methods"]) == {"ddp", "local-sgd:H4"}


def test_bad_settings_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="include ddp"):
        TTABenchConfig(methods=("diloco:H16",))
    with pytest.raises(UserError, match="divide"):
        TTABenchConfig(batch_size=6, hosts=(4,))
    with pytest.raises(UserError, match="--pilot-steps must be between"):
        TTABenchConfig(steps=100, pilot_steps=200)
    with pytest.raises(UserError, match="evaluates fewer than twice"):
        TTABenchConfig(steps=100, pilot_steps=30, eval_every=20)
    proc = run_cadence("bench", "tta", "--methods", "ddp,warp", cwd=tmp_path)
    assert_one_line_error(proc, "unknown method 'warp'")
    proc = run_cadence("bench", "tta", "--workers", "2,x", cwd=tmp_path)
    assert_one_line_error(proc, "--workers")


def test_plan_score_compares_the_pick_with_the_fastest_measured() -> None:
    runs = {
        "ddp": _metrics([3.0, 2.0, 1.5], 1.0),  # 30 s to the target
        "diloco:H16": _metrics([2.5, 1.4, 1.2], 0.5, wire_bytes_total=77),  # 10 s
        "ddp+fp16": _metrics([2.9, 1.5, 1.2], 0.6, wire_bytes_total=7),  # 12 s
        "zero+onebit": {"error": "boom"},
    }
    _, rows = cell_rows(runs)
    def planned(*names: str) -> list[dict[str, Any]]:
        return [{"method": n, "steps": 10, "source": "s", "ranked": True} for n in names]

    score = plan_score(planned("ddp+fp16", "diloco:H16", "ddp"), rows)
    assert score["pick"] == "ddp+fp16" and score["fastest"] == "diloco:H16"
    assert score["pick_over_fastest"] == pytest.approx(1.2)
    assert score["steps"]["diloco:H16"]["forecast"] == 10
    assert score["steps"]["diloco:H16"]["measured"] == 20
    assert plan_score(planned("diloco:H16"), rows)["pick_over_fastest"] == 1.0
    # A pick that failed or never reached the target has no ratio: never a silent pass.
    assert plan_score(planned("zero+onebit"), rows)["pick_over_fastest"] is None
    lines = table_lines([{"model": "m", "cap": "100mbit", "hosts": 2, "target_loss": 1.5,
                          "rows": rows, "plan": score}])  # fmt: skip
    assert lines[-1].split() == ["plan", "tta", "picks", "ddp+fp16;", "fastest", "measured",
                                 "diloco:H16;", "pick", "/", "fastest", "1.20"]  # fmt: skip


def test_plan_cell_ranks_the_cells_methods_from_its_pilot(tmp_path: Path) -> None:
    # A 30-step pilot of a 60-step cell says local SGD keeps ddp's pace: its far cheaper
    # step must win, at ddp's 60 steps, forecast.
    runs = {
        "ddp": _metrics([3.0, 2.0, 1.5], 1.0),
        "local-sgd:H4": _metrics([3.0, 2.0, 1.5], 1.0, wire_bytes_total=1),
    }
    path = tmp_path / "pilot.json"
    path.write_text(json.dumps(pilot(runs, 30, 64)))
    config = TTABenchConfig(models=("mlp",), caps=("20mbit",), hosts=(2,), steps=60,
                            eval_every=10, methods=("ddp", "local-sgd:H4"))  # fmt: skip
    rows = plan_cell("mlp", "20mbit", 2, path, config)
    assert [(r["method"], r["steps"], r["ranked"]) for r in rows] == [
        ("local-sgd:H4", 60, True), ("ddp", 60, True)]  # fmt: skip
    assert rows[0]["source"] == FORECAST


def test_plan_cell_prices_the_links_a_calibration_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cadence.sim.tta_command as tta_command

    seen: list[Any] = []

    def capture(args: Any) -> Any:
        seen.append(args)
        raise UserError("stop here")

    monkeypatch.setattr(tta_command, "plan_tta", capture)
    config = TTABenchConfig(models=("mlp",), caps=("20mbit",), hosts=(2,), steps=30,
                            eval_every=10, methods=("ddp", "local-sgd:H4"))  # fmt: skip
    links = tmp_path / "links.json"
    for calibration in (links, None):
        with pytest.raises(UserError, match="stop here"):
            plan_cell("mlp", "20mbit", 2, tmp_path / "pilot.json", config, calibration)
    with_links, without = seen
    assert with_links.calibration == str(links)
    assert without.calibration is None and without.bandwidth == "20mbit"
    assert with_links.loop_costs is None
    with pytest.raises(UserError, match="stop here"):
        plan_cell("mlp", "20mbit", 2, tmp_path / "p.json", config, links, tmp_path / "c.json")
    assert seen[-1].loop_costs == str(tmp_path / "c.json")


def test_plan_cell_profiles_beside_the_other_hosts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cadence.profile as profile_module
    import cadence.sim.tta_command as tta_command

    made: list[dict[str, Any]] = []

    def fake_profile(model: str, **kwargs: Any) -> None:
        made.append({"model": model, **kwargs})
        Path(kwargs["out"]).write_text("{}")

    seen: list[Any] = []

    def capture(args: Any) -> Any:
        seen.append(args)
        raise UserError("stop here")

    monkeypatch.setattr(profile_module, "profile_command", fake_profile)
    monkeypatch.setattr(tta_command, "plan_tta", capture)
    config = TTABenchConfig(models=("mlp",), caps=("20mbit",), hosts=(4,), steps=30,
                            eval_every=10, methods=("ddp", "local-sgd:H4"))  # fmt: skip
    saved = tmp_path / "mlp.4h.profile.json"
    for _ in range(2):
        with pytest.raises(UserError, match="stop here"):
            plan_cell("mlp", "20mbit", 4, tmp_path / "p.json", config, None, None, saved)
    # Four emulated hosts share this machine's cores: three neighbours, one worker's batch.
    assert [(m["model"], m["neighbours"], m["batch_size"], m["threads"]) for m in made] == [
        ("mlp", 3, config.batch_size // 4, 1)
    ]
    assert [a.profile for a in seen] == [str(saved)] * 2
