"""`cadence bench costs` and `cadence bench sim --costs DIR`: the simulator's charges measured
into one folder and read back from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cadence.bench import sim_costs
from cadence.bench.sim_costs import CostsConfig, costs_files, run_costs
from cadence.cli import main
from cadence.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
COMMITTED = {  # the charges measured on this machine type, as `cadence bench costs` names them
    "contention": RESULTS / "contention-gpt_mini-400mbit-defaults-20261126.json",
    "calibration": RESULTS / "calibration-400mbit-2hosts-20261126.json",
    "runtime-cost": RESULTS / "runtime-cost-keep-heap-20261125.json",
}


def _costs_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "costs"
    folder.mkdir()
    for part, path in COMMITTED.items():
        shutil.copy(path, folder / sim_costs.FILE_OF[part])
    return folder


def _one_row_matrix(tmp_path: Path) -> Path:
    """cnn_lstm at 400mbit from a committed long matrix whose runs timed their own compute."""
    data = json.loads((RESULTS / "bench-dp-small-long-probe-20261126c.json").read_text())
    data["rows"] = [r for r in data["rows"] if (r["model"], r["cap"]) == ("cnn_lstm", "400mbit")]
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(data))
    return path


def _bench_sim_args(matrix: Path) -> list[str]:
    """`cadence bench sim` of `matrix` with cnn_lstm's committed profile and a fixed step."""
    profile = str(RESULTS / "cnn_lstm-profile-b32-forward.json")
    return ["bench", "sim", "--from-bench-dp", str(matrix), "--optimizer-step", "0.001",
            "--profile", profile]  # fmt: skip


def test_one_profile_flag_takes_several_files_as_the_readmes_commands_give_them(
    tmp_path: Path,
) -> None:
    matrix = _one_row_matrix(tmp_path)
    args = _bench_sim_args(matrix)
    reports = []
    # `--profile results/{vgg16,cnn_lstm}-...json` as the shell expands it, then repeated.
    vgg16 = str(RESULTS / "vgg16-profile-b32-forward.json")
    for profiles in ([vgg16, args[-1]], [vgg16, "--profile", args[-1]]):
        out = tmp_path / f"sim{len(reports)}.json"
        assert main([*args[:-1], *profiles, "--json", str(out)]) == 0
        reports.append(json.loads(out.read_text())["rows"])
    assert reports[0] == reports[1] and len(reports[0]) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--parts", "contention,latency"], "unknown part 'latency': choose from contention"),
        (["--hosts", "1"], "--hosts must be at least 2, got 1"),
        (["--models", "cnn_lstm,alexnet"], "alexnet"),
        (["--bandwidth", "none"], "--bandwidth must be a cap"),
        (["--bandwidth", "fast"], "fast"),
    ],
)
def test_bad_settings_are_one_line_before_anything_runs(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "costs", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_costs_folder_must_hold_the_three_files_it_had_before_heap_cost(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such folder .*cadence bench costs"):
        costs_files(str(tmp_path / "nowhere"))
    folder = _costs_folder(tmp_path)
    files = costs_files(str(folder))
    expected = {p: str(folder / name) for p, name in sim_costs.FILE_OF.items()}
    assert files == expected | {"heap-cost": None}  # folders from before 2026-11-28 lack it
    (folder / "heap-cost.json").write_text("{}")
    assert costs_files(str(folder)) == expected
    (folder / "calibration.json").unlink()
    with pytest.raises(UserError, match=r"missing .*calibration\.json .*--out-dir"):
        costs_files(str(folder))


def test_bench_sim_reads_the_three_charges_from_a_costs_folder(tmp_path: Path) -> None:
    args, folder = _bench_sim_args(_one_row_matrix(tmp_path)), _costs_folder(tmp_path)
    flags = ["--contention", str(COMMITTED["contention"])]
    flags += ["--calibration", str(COMMITTED["calibration"])]
    flags += ["--runtime-cost", str(COMMITTED["runtime-cost"])]
    reports = {}
    for name, extra in (("plain", []), ("flags", flags), ("folder", ["--costs", str(folder)])):
        out = tmp_path / f"{name}.json"
        assert main([*args, *extra, "--json", str(out)]) == 0
        reports[name] = json.loads(out.read_text())
    folder_report = reports["folder"]
    assert folder_report["costs"] == str(folder)
    assert folder_report["contention"] == str(folder / "contention.json")
    assert folder_report["calibration"] == str(folder / "calibration.json")
    assert folder_report["runtime_cost"] == str(folder / "runtime-cost.json")
    for plain, flagged, read in zip(
        reports["plain"]["rows"], reports["flags"]["rows"], folder_report["rows"], strict=True
    ):
        assert read["predicted_s"] == pytest.approx(flagged["predicted_s"], rel=1e-9)
        assert read["predicted_s"] > plain["predicted_s"]  # the charges cost time
    # A flag given beside the folder wins over the folder's file.
    out = tmp_path / "override.json"
    other = tmp_path / "other-contention.json"
    shutil.copy(COMMITTED["contention"], other)
    overridden = ["--costs", str(folder), "--contention", str(other), "--json", str(out)]
    assert main([*args, *overridden]) == 0
    assert json.loads(out.read_text())["contention"] == str(other)


def test_bench_sim_prices_all_reduce_latency_by_size_unless_told_fitted(tmp_path: Path) -> None:
    # The fresh folder's calibration fitted 1.4 ms a message on its 1-4 KB calls; its calls
    # from 64 KB up, the sizes cnn_lstm's all-reduces are, took tens of microseconds more
    # than their bytes. By size (the default) prices those; fitted prices 1.4 ms.
    args = _bench_sim_args(_one_row_matrix(tmp_path))
    args += ["--calibration", str(RESULTS / "costs-20261126" / "calibration.json")]
    reports = {}
    for latency in ("by-size", "fitted"):
        out = tmp_path / f"{latency}.json"
        assert main([*args, "--calibration-latency", latency, "--json", str(out)]) == 0
        reports[latency] = json.loads(out.read_text())
        assert reports[latency]["calibration_latency"] == latency
    default = tmp_path / "default.json"
    assert main([*args, "--json", str(default)]) == 0
    assert json.loads(default.read_text())["rows"] == reports["by-size"]["rows"]
    for sized, fitted in zip(reports["by-size"]["rows"], reports["fitted"]["rows"], strict=True):
        # DDP: one all-reduce, 2 messages; cadence-dp: two chunks, 4 (less what overlaps).
        assert 2e-3 < fitted["predicted_s"] - sized["predicted_s"] < 6e-3


def test_bench_sim_prices_the_emulated_links_token_bucket_with_link_bucket_tbf(
    tmp_path: Path,
) -> None:
    args = _bench_sim_args(_one_row_matrix(tmp_path))
    reports = {}
    for bucket in ("none", "tbf"):
        out = tmp_path / f"{bucket}.json"
        assert main([*args, "--link-bucket", bucket, "--json", str(out)]) == 0
        reports[bucket] = json.loads(out.read_text())
        assert reports[bucket]["link_bucket"] == bucket
    # cnn_lstm's 1.4 MB starts each step on a link idle for the whole forward pass: the
    # bucket, 5 ms of traffic at the cap, passes at once, so each prediction is 5 ms shorter.
    for plain, burst in zip(reports["none"]["rows"], reports["tbf"]["rows"], strict=True):
        assert burst["predicted_s"] == pytest.approx(plain["predicted_s"] - 0.005, abs=2e-4)


def test_the_default_basis_is_each_runs_own_compute_where_the_file_has_it(tmp_path: Path) -> None:
    from cadence.sim.bench_dp import predict_bench_dp
    from tests.unit.test_sim_cli import zoo_profile

    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2,
           "iteration_s": {"ddp": 0.3, "cadence": 0.25},
           "runs_s": {"ddp": [0.3, 0.3], "cadence": [0.25, 0.25]},
           "variant_compute_runs_s": {"ddp": [0.3, 0.3], "cadence": [0.25, 0.25]}}  # fmt: skip
    files = {}
    for name, keep in (("probed", True), ("older", False)):
        r = row if keep else {k: v for k, v in row.items() if k != "variant_compute_runs_s"}
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps({"config": {"workers": 2}, "rows": [r]}))
    profiles = {"cnn": zoo_profile("cnn")}
    for name, basis in (("probed", "in-run"), ("older", "compute-only runs")):
        rows, _ = predict_bench_dp(
            [str(files[name])], profiles, 1.0, optimizer_step_s=0.0, in_run_compute=None
        )
        assert {r["compute_basis"] for r in rows} == {basis}


def test_a_failed_part_names_the_parts_it_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order and the bookkeeping of `run_costs`, with each part's measurement (minutes on
    the emulated cluster, covered by its own command's tests) replaced by writing its file."""
    ran: list[str] = []

    def writes(part: str):  # noqa: ANN202 - a part runner
        def run(config: CostsConfig, command: str) -> None:
            ran.append(part)
            config.path(part).write_text("{}")

        return run

    def fails(config: CostsConfig, command: str) -> None:
        raise UserError("links down")

    runners = {"contention": writes("contention"), "calibration": fails,
               "runtime-cost": writes("runtime-cost")}  # fmt: skip
    monkeypatch.setattr(sim_costs, "_RUNNERS", runners)
    monkeypatch.setattr("cadence.netem.check_netem_available", lambda: None)
    config = CostsConfig(out_dir=str(tmp_path / "costs"), models=("cnn_lstm",))
    with pytest.raises(UserError, match=r"calibration failed \(links down\); kept: .*contention"):
        run_costs(config, "test", echo=lambda _: None)
    assert ran == ["contention"] and (tmp_path / "costs" / "contention.json").exists()
    lines: list[str] = []
    only = CostsConfig(out_dir=str(tmp_path / "costs"), models=("cnn_lstm",),
                       parts=("runtime-cost",))  # fmt: skip
    seconds = run_costs(only, "test", echo=lines.append)
    assert list(seconds) == ["runtime-cost"] and ran == ["contention", "runtime-cost"]
    assert f"cadence bench sim --costs {tmp_path / 'costs'}" in lines[-1]


def test_a_bad_costs_folder_fails_before_any_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    args = ["bench", "sim", "--run", "--model", "cnn", "--out-dir", str(tmp_path / "runs")]
    assert main([*args, "--costs", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--costs {missing}: no such folder" in err[0], err
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written


def test_a_calibration_whose_small_all_reduces_disagree_is_flagged() -> None:
    from cadence.comm.calibrate import Calibration

    fresh = Calibration.load(RESULTS / "costs-20261126" / "calibration.json")
    line = sim_costs.latency_warning(fresh)
    # 1, 4 and 16 KB all-reduces took 2.85, 3.48 and 1.38 ms a call there.
    assert line is not None and "1.38-3.48 ms a call (2.5x apart)" in line and "1414 us" in line
    steady = Calibration.load(RESULTS / "calibration-small-sizes-loopback-20261126.json")
    assert sim_costs.latency_warning(steady) is None  # 0.34-0.38 ms on the loopback


def test_a_runtime_cost_measured_on_an_unsteady_machine_is_flagged() -> None:
    # Folder h's compute-only blocks spread 1.19-1.58x (its gpt_mini cadence-dp came out at
    # 0.983, faster than compute alone); the folder before it 1.01-1.08x.
    line = sim_costs.runtime_cost_warning(RESULTS / "costs-20261126h" / "runtime-cost.json")
    assert line is not None
    for model in ("cnn_lstm 1.19x", "resnet32 1.24x", "gpt_mini 1.58x", "vgg16 1.43x"):
        assert model in line
    assert sim_costs.runtime_cost_warning(RESULTS / "costs-20261126" / "runtime-cost.json") is None


def test_bench_sim_repeats_the_note_on_an_unsteady_runtime_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _bench_sim_args(_one_row_matrix(tmp_path))
    assert main([*args, "--costs", str(RESULTS / "costs-20261126h")]) == 0
    out = capsys.readouterr().out
    assert "note: compute alone moved between blocks" in out and "vgg16 1.43x" in out
    assert main([*args, "--costs", str(RESULTS / "costs-20261126")]) == 0
    assert "note: compute alone" not in capsys.readouterr().out

