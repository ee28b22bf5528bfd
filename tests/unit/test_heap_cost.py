"""`cadence bench heap-cost` and its charge in `cadence bench sim`: DDP's runs whose processes
left glibc's heap thresholds dynamic are priced with the measured factor on their compute,
and no other run is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cadence.bench.heap_cost import factor_at, read_heap_factors, round_factor, summarise
from cadence.cli import main
from cadence.errors import UserError
from cadence.sim.bench import predict_runs
from cadence.sim.bench_dp import predict_bench_dp
from cadence.sim.bench_dp_records import dynamic_heap_variants
from tests.unit.test_sim_bench import write_run
from tests.unit.test_sim_cli import zoo_profile

# A separate-run row with DDP as users run it, DDP with the heap fixed and cadence-dp, each
# priced from its own runs' compute; and a dp-paired row, whose DDP shares cadence-dp's heap.
SEPARATE = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2,
            "iteration_s": {"ddp": 0.3, "ddp-heap": 0.27, "cadence": 0.25},
            "runs_s": {"ddp": [0.3, 0.3], "ddp-heap": [0.27, 0.27], "cadence": [0.25, 0.25]},
            "variant_compute_runs_s": {"ddp": [0.2, 0.2], "ddp-heap": [0.2, 0.2],
                                       "cadence": [0.2, 0.2]}}  # fmt: skip
PAIRED = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2,
          "rounds_s": {"compute": [0.2, 0.2], "ddp": [0.3, 0.3], "cadence": [0.25, 0.25]},
          "iteration_s": {"ddp": 0.3, "cadence": 0.25}}  # fmt: skip


def _write(path: Path, row: dict) -> str:
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": None}, "rows": [row]}))
    return str(path)


def _heap_file(path: Path, factor: float, cap: str = "100gbit") -> str:
    runs = {
        "dynamic": [{"iteration_s": 0.2 + (factor - 1) * 0.1, "compute_s": 0.1}],
        "fixed": [{"iteration_s": 0.2, "compute_s": 0.1}],
    }
    row = summarise("cnn", cap, runs)
    path.write_text(json.dumps({"benchmark": "heap-cost", "rows": [row]}))
    return str(path)


def test_a_rounds_factor_is_the_extra_time_over_the_fixed_runs_compute() -> None:
    assert round_factor(0.33, 0.3, 0.2) == pytest.approx(1.15)
    runs = {
        "dynamic": [{"iteration_s": t, "compute_s": 0.5} for t in (0.32, 0.35, 0.31)],
        "fixed": [{"iteration_s": 0.3, "compute_s": c} for c in (0.2, 0.25, 0.1)],
    }
    row = summarise("cnn", "1gbit", runs)
    assert row["round_factors"] == pytest.approx([1.1, 1.2, 1.1])
    # The median extra time (0.02 s) over the fixed runs' median compute (0.2 s).
    assert row["factor"] == pytest.approx(1.1)
    assert row["dynamic_compute_s"] == [0.5] * 3 and row["compute_s"] == [0.2, 0.25, 0.1]
    assert (row["model"], row["cap"]) == ("cnn", "1gbit")


def test_a_run_takes_the_factor_of_the_measured_cap_nearest_its_own() -> None:
    by_cap = {1e9: 1.05, 4e8: 1.2}
    assert factor_at(by_cap, 4e8) == 1.2 and factor_at(by_cap, 1e8) == 1.2
    assert factor_at(by_cap, 6e8) == 1.2 and factor_at(by_cap, 7e8) == 1.05  # 632 Mbit/s apart
    assert factor_at(by_cap, 1e10) == 1.05 and factor_at(by_cap, float("inf")) == 1.05


def test_which_variants_left_the_heap_dynamic() -> None:
    assert dynamic_heap_variants(SEPARATE) == {"ddp"}  # files before the rows recorded it
    assert dynamic_heap_variants(PAIRED) == set()
    recorded = SEPARATE | {"fixed_heap_variants": ["ddp-heap", "cadence", "ddp"]}
    assert dynamic_heap_variants(recorded) == set()


def test_only_ddps_own_separate_runs_take_the_heap_factor(tmp_path: Path) -> None:
    from cadence.bench.runtime_cost import summarise as runtime_summarise

    profiles = {"cnn": zoo_profile("cnn")}
    files = [_write(tmp_path / "separate.json", SEPARATE), _write(tmp_path / "paired.json", PAIRED)]
    factors = read_heap_factors(_heap_file(tmp_path / "heap.json", 1.1))
    assert factors == {"cnn": {1e11: pytest.approx(1.1)}}
    given = {"optimizer_step_s": 0.0, "in_run_compute": True}
    plain, _ = predict_bench_dp(files, profiles, 1.0, **given)
    charged, _ = predict_bench_dp(files, profiles, 1.0, heap_factors=factors, **given)
    # The same factor given as DDP's runtime cost slows every DDP row's compute alike.
    per_process = [{"compute": [0.1], "ddp": [0.11], "cadence": [0.1]}]
    as_runtime = {"cnn": runtime_summarise("cnn", per_process)["slowdown"]}
    slowed, _ = predict_bench_dp(files, profiles, 1.0, runtime_slowdowns=as_runtime, **given)
    labels = [(r["run"].split(":")[0], r.get("variant", r["strategy"])) for r in plain]
    assert labels == [("separate.json", "ddp"), ("separate.json", "ddp-heap"),
                      ("separate.json", "cadence-dp"), ("paired.json", "ddp"),
                      ("paired.json", "cadence-dp")]  # fmt: skip
    for label, before, after, runtime in zip(labels, plain, charged, slowed, strict=True):
        if label == ("separate.json", "ddp"):
            assert after["predicted_s"] == pytest.approx(runtime["predicted_s"], rel=1e-9)
            assert after["predicted_s"] > 1.05 * before["predicted_s"]
        else:
            assert after["predicted_s"] == pytest.approx(before["predicted_s"], rel=1e-12)
    with pytest.raises(UserError, match="no heap cost of 'cnn' given"):
        predict_bench_dp(files, profiles, 1.0, heap_factors={}, **given)
    # A file whose every DDP run fixed its heap needs no factor for its model.
    fixed = SEPARATE | {"fixed_heap_variants": ["ddp", "ddp-heap", "cadence"]}
    predict_bench_dp([_write(tmp_path / "fixed.json", fixed)], profiles, 1.0, heap_factors={},
                     **given)  # fmt: skip


def test_a_cadence_train_ddp_run_takes_the_heap_factor(tmp_path: Path) -> None:
    profiles = {"cnn": zoo_profile("cnn")}
    runs = [write_run(tmp_path / "ddp.json", "ddp", 0.5, cap="100gbit"),
            write_run(tmp_path / "cadence.json", "cadence-dp", 0.5, cap="100gbit")]  # fmt: skip
    plain = predict_runs(runs, profiles, 1.0, optimizer_step_s=0.0)
    factors = {"cnn": {1e11: 1.2}}
    charged = predict_runs(runs, profiles, 1.0, optimizer_step_s=0.0, heap_factors=factors)
    # Compute decides on a 100 Gbit link: DDP's prediction grows with its compute.
    assert charged[0]["predicted_s"] == pytest.approx(1.2 * plain[0]["predicted_s"], rel=0.02)
    assert charged[1]["predicted_s"] == pytest.approx(plain[1]["predicted_s"], rel=1e-12)
    with pytest.raises(UserError, match="no heap cost of 'cnn' given"):
        predict_runs(runs, profiles, 1.0, optimizer_step_s=0.0, heap_factors={})


def test_bench_sim_reads_the_heap_cost_from_its_flag_or_the_costs_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(__file__).resolve().parents[2] / "results" / "costs-20261126"
    folder = tmp_path / "costs"
    shutil.copytree(root, folder)  # a folder from before heap-cost: read without it
    from cadence.bench.runtime_cost import summarise as runtime_summarise

    cnn = runtime_summarise("cnn", [{"compute": [0.1], "ddp": [0.1], "cadence": [0.1]}])
    (folder / "runtime-cost.json").write_text(
        json.dumps({"benchmark": "runtime-cost", "rows": [cnn]})
    )  # the folder's runtime cost, for the zoo's cnn
    profile = tmp_path / "cnn.json"
    zoo_profile("cnn").save(profile)
    heap = _heap_file(tmp_path / "heap.json", 1.1)
    args = ["bench", "sim", "--from-bench-dp", _write(tmp_path / "separate.json", SEPARATE),
            "--profile", str(profile), "--optimizer-step", "0", "--costs", str(folder),
            "--json", str(tmp_path / "out.json")]  # fmt: skip
    reports = {}
    for name, extra in (("none", []), ("flag", ["--heap-cost", heap])):
        assert main([*args, *extra]) == 0
        reports[name] = json.loads((tmp_path / "out.json").read_text())
    shutil.copy(heap, folder / "heap-cost.json")
    assert main(args) == 0
    reports["folder"] = json.loads((tmp_path / "out.json").read_text())
    assert reports["none"]["heap_cost"] is None and reports["flag"]["heap_cost"] == heap
    assert reports["folder"]["heap_cost"] == str(folder / "heap-cost.json")
    ddp = [r["predicted_s"] for r in (reports[n]["rows"][0] for n in ("none", "flag", "folder"))]
    assert ddp[1] == pytest.approx(ddp[2], rel=1e-12) and ddp[1] > ddp[0]
    capsys.readouterr()
    assert main([*args[:-2], "--heap-cost", str(profile)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a `cadence bench heap-cost` file" in err[0], err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--models", "alexnet"], "alexnet"),
        (["--workers", "1"], "--workers must be at least 2, got 1"),
        (["--caps", "none"], "--caps takes link caps such as 400mbit, got 'none'"),
        (["--caps", "10gbps"], "10gbps"),
        (["--steps", "5"], "--steps must be at least 11"),
        (["--repeats", "0"], "--repeats must be at least 1, got 0"),
        (["--batch-size", "63"], "--batch-size 63 must divide by --workers"),
    ],
)
def test_bad_settings_are_one_line_before_anything_runs(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "heap-cost", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
