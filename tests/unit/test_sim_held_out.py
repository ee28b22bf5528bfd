"""`cadence bench sim --held-out`: the set's loader, the run order, the scoring and the table,
and the command end to end with the training runs and the profiling replaced (no training)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from cadence.comm.calibrate import Calibration
from cadence.comm.cost import AlphaBeta
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.models import get_model_spec
from cadence.sim.held_out import (
    HeldOutRow,
    load_held_out,
    measure,
    run_order,
    score_row,
    summary,
    table_lines,
    verdict,
)
from cadence.sim.held_out_predict import predict, profile_key
from tests.unit.test_sim_cli import zoo_profile

REPO = Path(__file__).resolve().parents[2]
ROW = """
[[row]]
name = "{name}"
model = "cnn"
strategy = "{strategy}"
workers = 2
emulate_bandwidth = "1mbit"
batch_size = 64
steps = 12
{extra}
"""


def write_set(path: Path, *rows: tuple[str, str, str]) -> str:
    text = "".join(ROW.format(name=n, strategy=s, extra=e) for n, s, e in rows)
    path.write_text(text)
    return str(path)


def test_the_committed_set_loads_and_covers_every_strategy() -> None:
    rows = load_held_out(REPO / "benchmarks" / "held_out.toml")
    strategies = {r.config.job.strategy for r in rows}
    assert strategies == {"ddp", "cadence-dp", "zero", "pipeline", "ps"}
    assert len({r.name for r in rows}) == len(rows)
    assert any(":" in r.config.model.name for r in rows)  # the public-library model
    assert all(r.config.cluster.emulate_bandwidth for r in rows)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[[row]]\nname = "a"\nmodel = "cnn"\n', "row 1 \\(a\\): missing strategy"),
        (ROW.format(name="a", strategy="ddp", extra="bukket_mb = 1.0"), "unknown TrainConfig key"),
        (ROW.format(name="a", strategy="fsdp", extra=""), "unknown strategy 'fsdp'"),
        (ROW.format(name="a", strategy="ddp", extra="") * 2, "row 2 \\(a\\): the name is used"),
        ('[[row]]\nmodel = "cnn"\n', "row 1: give it a name"),
        (ROW.format(name="a", strategy="ddp", extra="case = 3"), "case must be a non-empty"),
        ("[defaults]\nworkers = 2\n", "give \\[\\[row\\]\\] tables only"),
        ("[[row]\n", "not valid TOML"),
    ],
)
def test_a_bad_set_is_refused_in_one_line(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "set.toml"
    path.write_text(text)
    with pytest.raises(UserError, match=match) as caught:
        load_held_out(path)
    assert "\n" not in str(caught.value)


def test_runs_alternate_over_rows() -> None:
    assert run_order(3, 2) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]


def test_measure_runs_in_that_order_and_keeps_a_failed_row_out(tmp_path: Path) -> None:
    path = write_set(tmp_path / "s.toml", ("a", "ddp", ""), ("b", "ddp", ""), ("c", "ddp", ""))
    rows = load_held_out(path)
    calls: list[tuple[str, int]] = []

    def runner(row: HeldOutRow, repeat: int) -> float:
        calls.append((row.name, repeat))
        if row.name == "b":
            raise UserError("rank 1 failed:\n  boom")
        return 1.0 + repeat

    figures, failed = measure(rows, 2, runner, progress=False)
    assert calls == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("c", 1)]
    assert figures == {"a": [1.0, 2.0], "b": [], "c": [1.0, 2.0]}
    assert failed == {"b": "rank 1 failed: boom"}


def test_spread_error_and_verdicts() -> None:
    row = score_row("r", [1.0, 1.01, 0.99], 1.03)
    assert row["measured_s"] == 1.0
    assert row["spread"] == pytest.approx(0.02)
    assert row["error"] == pytest.approx(0.03)
    assert row["verdict"] == "hit"
    assert verdict(0.03, 0.04) == "undecided: spread > error"
    assert verdict(-0.08, 0.01) == "within 10%"
    assert verdict(0.2, 0.01) == "miss"
    assert verdict(None, 0.01) == "-"
    assert score_row("n", [1.0], None)["verdict"] == "-"


def test_summary_counts_only_predicted_rows_with_spread_under_5_percent() -> None:
    rows = [
        score_row("tight", [1.0, 1.0, 1.0], 1.02),  # 2%: counted
        score_row("off", [1.0, 1.01, 1.0], 1.2),  # 20%, spread 1%: counted, a miss
        score_row("noisy", [1.0, 1.5, 0.9], 1.3),  # spread 60% > error 30%: left out
        score_row("none", [1.0, 1.0], None),  # not predicted
    ]
    s = summary(rows)
    assert s["scored_rows"] == 2
    assert s["mean_abs_error"] == pytest.approx(0.11)
    assert s["worst_abs_error"] == pytest.approx(0.2)
    assert (s["hits"], s["misses"], s["undecided"], s["not_predicted"]) == (1, 1, 1, 1)


def test_the_table_shows_every_row_and_why_one_was_not_predicted() -> None:
    rows = [
        score_row("a-row", [0.5, 0.52], [0.49, 0.5, 0.52], note="ddp", conditions="as trained"),
        score_row("b-row", [1.0], None, note="not predicted: bsp only", conditions="x"),
    ]
    lines = table_lines(rows)
    header = ["row", "measured", "spread", "predicted", "spread", "error", "verdict"]
    assert lines[0].split() == header
    assert lines[1].split()[:6] == ["a-row", "0.510s", "3.9%", "0.500s", "6.0%", "-2.0%"]
    assert "undecided" in lines[1]
    assert lines[2].split()[1:] == ["1.000s", "0.0%", "-", "-", "-", "-"]
    assert "b-row: not predicted: bsp only [x]" in lines[3]
    assert lines[-1].startswith("mean |error| 2.0%, worst 2.0% over the 1 predicted rows")
    noisy = table_lines([score_row("c-row", [1.0, 1.2], 1.5)])
    assert noisy[1].endswith("miss (not scored: spread >= 5%)")


def _config(**keys: Any) -> TrainConfig:
    base = {"model": "cnn", "workers": 2, "emulate_bandwidth": "1mbit", "batch_size": 64}
    return TrainConfig.from_flat(**(base | keys))


def test_each_strategy_is_predicted_or_says_why_not() -> None:
    profile = zoo_profile("cnn")
    for strategy, more in [("ddp", {}), ("cadence-dp", {}), ("zero", {"zero_stage": 3}),
                           ("pipeline", {"microbatches": 2}), ("ps", {})]:  # fmt: skip
        guess = predict(_config(strategy=strategy, **more), profile, payload_fraction=1.0)
        assert guess.iteration_s is not None and guess.iteration_s > 0, strategy
    # 116264 B of gradients in a ring of 2 at 125 kB/s: DDP cannot beat the wire.
    plain = predict(_config(strategy="ddp"), profile, 1.0).iteration_s
    assert plain is not None and plain > 116264 / 125000
    # Each pipeline is predicted on the runtime `cadence train` runs it on: torch's where it
    # can (no BatchNorm, one micro-batch per message), else ours.
    pipeline = predict(_config(strategy="pipeline", microbatches=2), profile, 1.0)
    has_bn = "BatchNorm" in repr(get_model_spec("cnn").build())
    assert pipeline.note.endswith("cadence's runtime" if has_bn else "torch's runtime")
    ours = predict(
        _config(strategy="pipeline", microbatches=2, pipeline_backend="cadence"), profile, 1.0
    )
    assert ours.note.endswith("cadence's runtime")
    builtin = predict(_config(strategy="pipeline", pipeline_backend="torch-builtin"), profile, 1.0)
    assert builtin.iteration_s is None and "torch-builtin" in builtin.note
    asp = predict(_config(strategy="ps", consistency="asp"), profile)
    assert asp.iteration_s is None and "bsp only" in asp.note
    replicas = predict(_config(strategy="pipeline", workers=4), profile)
    assert replicas.iteration_s is None and "2 pipeline replicas" in replicas.note


def test_a_pipeline_is_priced_with_the_emulated_links_token_bucket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each message that starts on an idle link passes the tbf's bucket at once: at 1 mbit
    # (a 68.6 KB bucket) cnn's messages cross faster than at the cap alone.
    config = _config(strategy="pipeline", microbatches=2, pipeline_backend="cadence")
    with_bucket = predict(config, zoo_profile("cnn"), 1.0).iteration_s
    monkeypatch.setattr("cadence.netem.link_bucket_bytes", lambda bps: 0)
    without = predict(config, zoo_profile("cnn"), 1.0).iteration_s
    assert with_bucket is not None and without is not None and with_bucket < without


def test_profiles_are_taken_at_the_workers_batch_and_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    # Each of the 2 workers computes beside the other: 1 neighbour.
    assert profile_key(_config(strategy="ddp")) == ("cnn", None, 32, 4, 1)
    key = profile_key(_config(strategy="ddp", threads=2, grad_accum=2))
    assert key == ("cnn", None, 16, 2, 1)
    # A pipeline worker runs micro-batches of the whole batch.
    assert profile_key(_config(strategy="pipeline", microbatches=4))[2] == 16
    profile = zoo_profile("cnn")  # 1 thread
    assert (
        "profiled at 1 threads, workers train at 4"
        in predict(_config(strategy="ddp"), profile).conditions
    )
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    shared = predict(_config(strategy="ddp", workers=4, batch_size=64), profile).conditions
    assert shared == "profiled beside 0 training process(es), each worker computes beside 3"
    beside = dataclasses.replace(profile, neighbours=3)
    assert predict(_config(strategy="ddp", workers=4, batch_size=64), beside).conditions == (
        "as trained"
    )


def test_the_command_writes_json_png_and_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cadence.cli import main

    path = write_set(tmp_path / "s.toml", ("dp", "ddp", ""), ("ps", "ps", 'consistency = "asp"'))
    runs: list[str] = []

    def fake_runner(runs_dir: Path) -> Any:
        def run(row: HeldOutRow, repeat: int) -> float:
            runs.append(row.name)
            return 1.0 + 0.01 * repeat

        return run

    monkeypatch.setattr("cadence.sim.held_out_command.train_runner", fake_runner)
    profiled: list[str] = []

    def take(key: Any) -> Any:
        profiled.append(f"{key[0]} before {runs[-1] if runs else '-'}")
        return dataclasses.replace(zoo_profile(key[0]), iteration_s=len(profiled))

    monkeypatch.setattr("cadence.sim.held_out_command.take_profile", take)
    calibrated: list[tuple[str, int]] = []
    trained_before: list[int] = []

    def calibrate(cap: str, hosts: int, where: Path) -> Path:
        calibrated.append((cap, hosts))
        trained_before.append(len(runs))
        Calibration(
            model=AlphaBeta(alpha_s=2e-3, beta_s_per_byte=1e-9), world_size=hosts,
            backend="gloo", repeats=3, objective="regimes", rows=(), torch_version="x",
        ).save(where)  # fmt: skip
        return where

    monkeypatch.setattr("cadence.comm.calibrate_command.calibrate_cluster", calibrate)
    out = tmp_path / "out" / "held.json"
    assert main(["bench", "sim", "--held-out", path, "--repeats", "2", "--out", str(out)]) == 0
    assert runs == ["dp", "ps", "dp", "ps"]
    assert calibrated == [("1mbit", 2)]  # one cluster: both rows train on it
    assert trained_before == [0]  # its links timed before any training
    # A profile per round for the rows' one profile key, taken before the round's first run.
    model = "cnn"
    assert profiled == [f"{model} before -", f"{model} before ps"]
    data = json.loads(out.read_text())
    assert [r["row"] for r in data["rows"]] == ["dp", "ps"]
    assert data["rows"][0]["runs_s"] == [1.0, 1.01] and data["rows"][0]["predicted_s"] > 0
    assert data["rows"][1]["predicted_s"] is None and data["not_predicted"] == 1
    first = data["rows"][0]  # each round's profile, as it said, and its prediction
    assert first["profile_iteration_s"] == [1, 2]
    assert first["profile_pace_factor"] == [zoo_profile(model).pace_factor] * 2
    assert len(first["predicted_runs_s"]) == 2 and first["predicted_spread"] >= 0
    assert first["predicted_s"] == statistics.median(first["predicted_runs_s"])
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    printed = capsys.readouterr().out
    assert "ps: not predicted: the simulator models bsp only, not asp" in printed
    assert "mean |error|" in printed
    # Each message priced with the cluster's calibrated latency; the cap alone beside it.
    where = out.with_name("held.1mbit.2w.calibration.json")
    assert first["calibration"] == str(where) and where.exists()
    assert first["predicted_at_cap_s"] < first["predicted_s"]
    assert first["error_at_cap"] == pytest.approx(first["predicted_at_cap_s"] / 1.005 - 1)
    assert "on the caps alone (no calibration): mean |error|" in printed
    # --measured re-scores those runs with profiles and predictions made now: no training.
    again = tmp_path / "again.json"
    args = ["bench", "sim", "--held-out", path, "--measured", str(out), "--out", str(again)]
    assert main(args) == 0
    assert runs == ["dp", "ps", "dp", "ps"] and len(profiled) == 2 + 3  # a profile a round
    assert calibrated == [("1mbit", 2)] * 2  # its own, beside its --out
    assert main(args) == 0 and len(calibrated) == 2  # and kept there
    assert json.loads(again.read_text())["rows"][0]["runs_s"] == [1.0, 1.01]
    other = write_set(tmp_path / "o.toml", ("zz", "ddp", ""))
    capsys.readouterr()
    assert main(["bench", "sim", "--held-out", other, "--measured", str(out), "--out", str(again)])
    assert "has no runs of zz" in capsys.readouterr().err


def test_simulate_says_what_it_assumed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cadence.cli import main

    path = tmp_path / "cnn.json"
    zoo_profile("cnn").save(path)  # 1 thread, batch 32
    common = ["simulate", "--profile", str(path), "--model", "cnn", "--workers", "2",
              "--bandwidth", "1gbit", "--strategy", "ddp"]  # fmt: skip
    assert main(common) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("assumed: "))
    assert "link alpha-beta: 1gbit x payload fraction 0.956, no per-message latency" in line
    assert "cadence calibrate" in line
    assert f"compute: from {path} (saved " in line and "1 thread(s), batch 32 per worker" in line
    assert "threads per worker not given" in line
    assert main([*common, "--threads", "2"]) == 0
    assert "NOT the training's conditions: its workers run 2 thread(s)" in capsys.readouterr().out
    assert main([*common, "--threads", "1"]) == 0
    assert "NOT" not in capsys.readouterr().out


@pytest.mark.parametrize(("factory", "blocks"), [("small_net", 3), ("two_tower", 1)])
def test_a_users_model_is_profiled_per_module_of_a_sequential_else_whole(
    factory: str, blocks: int
) -> None:
    from cadence.sim.held_out_profile import profile_user_model

    profile = profile_user_model(f"tests.user_parts:{factory}", "tests.user_parts:blobs", 8, 3, 1)
    assert len(profile.blocks) == blocks
    assert (profile.batch_size, profile.threads) == (8, 1)
    facts = profile.model_facts
    assert facts is not None
    assert sum(p.nbytes for p in facts.params) == profile.param_bytes
    assert sorted(facts.arrival_order) == list(range(len(facts.params)))
    # and the predictor takes it as it takes a zoo model's
    config = _config(model=f"tests.user_parts:{factory}", dataset="tests.user_parts:blobs",
                     strategy="cadence-dp", batch_size=16)  # fmt: skip
    assert predict(config, profile).iteration_s is not None


def test_held_out_is_refused_beside_other_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cadence.cli import main

    path = write_set(tmp_path / "s.toml", ("a", "ddp", ""))
    out = str(tmp_path / "o.json")
    assert main(["bench", "sim", "--held-out", path, "--run", "--out", out]) != 0
    assert "--held-out trains and profiles its own rows" in capsys.readouterr().err
