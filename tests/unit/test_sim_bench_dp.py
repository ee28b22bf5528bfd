"""`cadence bench sim --from-bench-dp`: predicting the rows of a `cadence bench dp` file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.sim.bench import table_lines
from cadence.sim.bench_dp import predict_bench_dp, scaled_profile
from cadence.sim.bench_dp_records import read_bench_dp
from tests.unit.test_sim_cli import zoo_profile


def _bench_file(tmp_path: Path) -> Path:
    rows = [
        {"model": "cnn", "cap": cap, "compute_s": 0.2, "iteration_s": {"ddp": t, "cadence": t}}
        for cap, t in (("none", 0.25), ("100kbit", 30.0))
    ]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": 4.0}, "rows": rows}))
    return path


def test_rows_with_a_cap_are_predicted_and_uncapped_ones_skipped(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    rows, skipped = predict_bench_dp(
        [str(_bench_file(tmp_path))], {"cnn": profile}, 1.0, optimizer_step_s=0.0
    )
    assert [r["strategy"] for r in rows] == ["ddp", "cadence-dp"]
    assert len(skipped) == 1 and "none" in skipped[0]
    for r in rows:
        assert r["compute_s"] == 0.2 and r["bandwidth"] == "100kbit"
        # 116264 B of gradients on a 2-worker ring at 12.5 kB/s: the wire dominates.
        assert r["wire_s"] == pytest.approx(116264 / 12500, rel=1e-6)
        assert r["predicted_s"] >= r["wire_s"]
        assert r["error"] == pytest.approx((r["predicted_s"] - 30.0) / 30.0)


def test_profile_times_are_scaled_to_the_runs_compute() -> None:
    profile = zoo_profile("cnn")
    twice = scaled_profile(profile, 2.0)
    assert twice.iteration_s == pytest.approx(2 * profile.iteration_s)
    assert twice.blocks[1].forward_s == pytest.approx(2 * profile.blocks[1].forward_s)
    assert twice.param_bytes == profile.param_bytes


def test_a_file_that_is_not_a_bench_dp_result_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": [{"model": "cnn"}]}')
    with pytest.raises(UserError, match="not a `cadence bench dp` file"):
        read_bench_dp(str(bad))


def test_charged_communication_and_co_running_workers_slow_the_prediction(tmp_path: Path) -> None:
    from cadence.sim.options import SimOptions

    profile, files = zoo_profile("cnn"), [str(_bench_file(tmp_path))]
    plain, _ = predict_bench_dp(files, {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    charged, _ = predict_bench_dp(
        files, {"cnn": profile}, 1.0, optimizer_step_s=0.0,
        options=SimOptions(comm_cpu_s_per_message=20.0),  # more than the 9.3 s transfer
    )  # fmt: skip
    for p, c in zip(plain, charged, strict=True):
        assert c["predicted_s"] > 20.0 > p["predicted_s"] + 10.0  # one message per iteration
    # On a fast link compute decides: 0.2 s measured alone, x1.5 with both workers computing.
    fast = tmp_path / "fast.json"
    data = json.loads(Path(files[0]).read_text())
    data["rows"] = [dict(data["rows"][1], cap="100gbit")]
    fast.write_text(json.dumps(data))
    alone, _ = predict_bench_dp([str(fast)], {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    shared, _ = predict_bench_dp(
        [str(fast)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, co_run_slowdown=1.5
    )
    for a, s in zip(alone, shared, strict=True):
        assert a["predicted_s"] == pytest.approx(0.2, rel=0.02)
        assert s["predicted_s"] == pytest.approx(0.3, rel=0.02)


def test_recorded_threshold_reads_what_the_run_used():
    from cadence.sim.bench_dp_records import recorded_threshold

    assert recorded_threshold({"threshold_mb": 0.5}) == 2**19
    assert recorded_threshold({"threshold_mb": None}) is None  # cadence-dp's own default
    assert recorded_threshold({}) == 4 * 2**20  # files from when 4 MiB was the default


def test_recorded_credit_reads_what_the_run_used():
    from cadence.sim.bench_dp_records import recorded_credit

    mib = 2**20
    assert recorded_credit({"cadence_credit_bytes": 16 * mib}, 4 * mib, 61 * mib) == 16 * mib
    # Files from before the default depended on the model ran with two chunks.
    assert recorded_credit({}, 4 * mib, 61 * mib) == 8 * mib
    assert recorded_credit({}, None, 61 * mib) == 8 * mib  # the default threshold: 4 MiB
    assert recorded_credit({}, None, 3 * mib) == 2 * mib  # and 1 MiB for a small model


def test_paired_rows_are_predicted_round_by_round_from_that_rounds_compute(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    rounds = {
        "compute": [0.2, 0.4],  # the machine ran twice as slow in the second round
        "ddp": [0.3, 0.6],
        "cadence": [0.25, 0.5],
    }
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.3, "rounds_s": rounds,
           "iteration_s": {"ddp": 0.45, "cadence": 0.375}}  # fmt: skip
    path = tmp_path / "paired.json"
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": None}, "rows": [row]}))
    # A co-run factor is not applied to paired rows: their compute already ran beside the other.
    rows, _ = predict_bench_dp(
        [str(path)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, co_run_slowdown=3.0
    )
    assert [r["strategy"] for r in rows] == ["ddp", "cadence-dp"]
    for r, name in zip(rows, ("ddp", "cadence"), strict=True):
        # On a 100 Gbit link compute decides: each round predicts about its own compute.
        expected = [(c - m) / m for c, m in zip(rounds["compute"], rounds[name], strict=True)]
        assert r["round_errors"] == pytest.approx(expected, rel=0.05)
        assert r["error"] == pytest.approx(sum(expected) / 2, rel=0.05)  # median of two
        assert r["measured_s"] == pytest.approx(sum(rounds[name]) / 2)


def test_paired_rows_are_predicted_from_the_lockstep_compute_where_the_file_has_it(
    tmp_path: Path,
) -> None:
    profile = zoo_profile("cnn")
    rounds = {"compute": [0.2, 0.2], "ddp": [0.3, 0.3], "cadence": [0.25, 0.25]}
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2, "rounds_s": rounds,
           "iteration_s": {"ddp": 0.3, "cadence": 0.25}}  # fmt: skip
    files = {}
    for name, extra in (("mean", {}), ("lockstep", {"lockstep_compute_rounds_s": [0.24, 0.24]})):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(
            json.dumps({"config": {"workers": 2, "threshold_mb": None}, "rows": [row | extra]})
        )
    per_rank, _ = predict_bench_dp(
        [str(files["mean"])], {"cnn": profile}, 1.0, optimizer_step_s=0.0
    )
    lockstep, _ = predict_bench_dp(
        [str(files["lockstep"])], {"cnn": profile}, 1.0, optimizer_step_s=0.0
    )
    assert {r["compute_basis"] for r in per_rank} == {"per-rank"}
    assert {r["compute_basis"] for r in lockstep} == {"lockstep"}
    # On a 100 Gbit link compute decides: the slowest ranks' steps make every strategy slower.
    for a, b in zip(per_rank, lockstep, strict=True):
        assert b["predicted_s"] == pytest.approx(1.2 * a["predicted_s"], rel=0.02)


def test_paired_rows_can_be_priced_from_their_aligned_compute_turns(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    rounds = {"compute": [0.2, 0.2], "ddp": [0.3, 0.3], "cadence": [0.25, 0.25]}
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2, "rounds_s": rounds,
           "iteration_s": {"ddp": 0.3, "cadence": 0.25}, "lockstep_compute_rounds_s": [0.24, 0.24],
           "compute_step_rounds_s": [0.01, 0.01]}  # fmt: skip
    aligned = {"aligned_compute_rounds_s": [0.288, 0.288],
               "aligned_compute_step_rounds_s": [0.02, 0.02]}  # fmt: skip
    path = tmp_path / "paired.json"
    path.write_text(json.dumps({"config": {"workers": 2}, "rows": [row | aligned]}))

    def predict(basis: str, step: float | None) -> list[dict]:
        rows, _ = predict_bench_dp(
            [str(path)], {"cnn": profile}, 1.0, optimizer_step_s=step, paired_compute=basis
        )
        return rows

    lockstep, by_aligned = predict("lockstep", 0.0), predict("aligned", 0.0)
    assert {r["compute_basis"] for r in lockstep} == {"lockstep"}
    assert {r["compute_basis"] for r in by_aligned} == {"aligned"}
    # On a 100 Gbit link compute decides: 1.2x the compute, 1.2x every prediction.
    for a, b in zip(lockstep, by_aligned, strict=True):
        assert b["predicted_s"] == pytest.approx(1.2 * a["predicted_s"], rel=0.02)
    # The optimizer step priced is the aligned turns' own, not the free-running ones'.
    for basis, step in (("aligned", 0.02), ("lockstep", 0.01)):
        priced = [r["optimizer_step_s"] for r in predict(basis, None)]
        assert priced == pytest.approx([step] * len(priced))
    # auto: the aligned turns where a row has them, the lockstep where it has none.
    path.write_text(json.dumps({"config": {"workers": 2}, "rows": [row | aligned, row]}))
    assert {r["compute_basis"] for r in predict("auto", 0.0)} == {"aligned", "lockstep"}
    # A file made without the aligned turns: one line saying what to do.
    path.write_text(json.dumps({"config": {"workers": 2}, "rows": [row]}))
    with pytest.raises(UserError, match="--aligned-compute.*--paired-compute lockstep"):
        predict("aligned", 0.0)


def test_a_runtime_cost_slows_only_its_own_strategys_compute(tmp_path: Path) -> None:
    from cadence.bench.runtime_cost import read_slowdowns, summarise

    profile = zoo_profile("cnn")
    rounds = {"compute": [0.2, 0.2], "ddp": [0.3, 0.3], "cadence": [0.25, 0.25]}
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2, "rounds_s": rounds,
           "iteration_s": {"ddp": 0.3, "cadence": 0.25}}  # fmt: skip
    paired = tmp_path / "paired.json"
    paired.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": None}, "rows": [row]}))
    # What `cadence bench runtime-cost` writes, from two processes' rounds.
    measured = summarise(
        "cnn",
        [
            {"compute": [0.1, 0.1], "ddp": [0.1, 0.1], "cadence": [0.12, 0.12]},
            {"compute": [0.2, 0.2], "ddp": [0.2, 0.2], "cadence": [0.24, 0.24]},
        ],
    )
    assert measured["slowdown"] == pytest.approx({"ddp": 1.0, "cadence-dp": 1.2})
    cost = tmp_path / "cost.json"
    cost.write_text(json.dumps({"benchmark": "runtime-cost", "rows": [measured]}))
    slowdowns = read_slowdowns(str(cost))
    plain, _ = predict_bench_dp([str(paired)], {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    slowed, _ = predict_bench_dp(
        [str(paired)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, runtime_slowdowns=slowdowns
    )
    assert slowed[0]["predicted_s"] == pytest.approx(plain[0]["predicted_s"])  # DDP: 1.0
    # On a 100 Gbit link compute decides: cadence-dp's prediction grows with its compute.
    assert slowed[1]["predicted_s"] == pytest.approx(1.2 * plain[1]["predicted_s"], rel=0.02)
    with pytest.raises(UserError, match="no runtime cost of 'cnn'"):
        predict_bench_dp(
            [str(paired)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, runtime_slowdowns={}
        )
    with pytest.raises(UserError, match="not a `cadence bench runtime-cost` file"):
        read_slowdowns(str(paired))


def test_rows_with_in_run_compute_are_predicted_run_by_run_from_each_runs_own(
    tmp_path: Path,
) -> None:
    profile = zoo_profile("cnn")
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2,
           "iteration_s": {"ddp": 0.3, "cadence": 0.25},
           "runs_s": {"ddp": [0.3, 0.3, 0.3], "cadence": [0.25, 0.25, 0.25]},
           "variant_compute_runs_s": {"ddp": [0.3, 0.33, 0.6], "cadence": [0.25, 0.25, 0.2]},
           "variant_compute_s": {"ddp": 0.33, "cadence": 0.25}}  # fmt: skip
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": None}, "rows": [row]}))
    beside, _ = predict_bench_dp(
        [str(path)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, co_run_slowdown=1.5
    )
    in_run, _ = predict_bench_dp(
        [str(path)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, co_run_slowdown=1.5,
        in_run_compute=True,
    )  # fmt: skip
    assert {r["compute_basis"] for r in beside} == {"compute-only runs"}
    assert {r["compute_basis"] for r in in_run} == {"in-run"}
    # On a 100 Gbit link compute decides: the compute-only run times the co-running factor,
    # or each run's own compute as it was timed, with both workers computing (no factor).
    for r in beside:
        assert r["compute_s"] == 0.2 and r["predicted_s"] == pytest.approx(0.3, rel=0.02)
    ddp, cadence = in_run
    assert ddp["run_errors"] == pytest.approx([0.0, 0.1, 1.0], abs=0.02)
    assert ddp["error"] == pytest.approx(0.1, abs=0.02)  # the median run, not a median's
    assert cadence["run_errors"] == pytest.approx([0.0, 0.0, -0.2], abs=0.02)
    assert cadence["error"] == pytest.approx(0.0, abs=0.02)


def test_the_interleaved_basis_takes_cadence_dps_blocks_between_the_steps(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2,
           "iteration_s": {"ddp": 0.3, "cadence": 0.25},
           "runs_s": {"ddp": [0.3, 0.3, 0.3], "cadence": [0.25, 0.25, 0.25]},
           # After the steps: each run's compute 1.2x or 2x what it ran at.
           "variant_compute_runs_s": {"ddp": [0.36, 0.36, 0.36], "cadence": [0.5, 0.5, 0.5]},
           # Between them: cadence-dp's as it ran; DDP's blocks (as in matrix o) not used.
           "variant_interleaved_compute_runs_s": {"ddp": [0.9, 0.9, 0.9],
                                                  "cadence": [0.25, 0.25, 0.2]}}  # fmt: skip
    path = tmp_path / "bench.json"

    def predict(probe: str, in_run: bool | None = True) -> list[dict]:
        path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": None},
                                    "rows": [row]}))  # fmt: skip
        return predict_bench_dp(
            [str(path)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, in_run_compute=in_run,
            probe=probe,
        )[0]  # fmt: skip

    for probe in ("interleaved", "auto"):
        ddp, cadence = predict(probe, None if probe == "auto" else True)
        assert (ddp["compute_basis"], cadence["compute_basis"]) == (
            "in-run", "in-run, interleaved"
        )  # fmt: skip
        # On a 100 Gbit link compute decides: DDP from the probe after its steps.
        assert ddp["run_errors"] == pytest.approx([0.2, 0.2, 0.2], abs=0.02)
        assert cadence["run_errors"] == pytest.approx([0.0, 0.0, -0.2], abs=0.02)
    after = predict("after")
    assert after[1]["error"] == pytest.approx(1.0, abs=0.02)  # the probe after the steps
    # A file whose runs timed no blocks: auto takes the probe after the steps, and asking
    # for the blocks is one line.
    del row["variant_interleaved_compute_runs_s"]
    assert {r["compute_basis"] for r in predict("auto", None)} == {"in-run"}
    with pytest.raises(UserError, match="no in-run compute .*--interleaved-probe-every"):
        predict("interleaved")


def test_ddp_with_a_fixed_heap_is_priced_from_its_own_blocks_in_a_row_of_its_own(
    tmp_path: Path,
) -> None:
    profile = zoo_profile("cnn")
    runs = {"ddp": [0.3] * 3, "ddp-heap": [0.28] * 3, "cadence": [0.25] * 3}
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2,
           "iteration_s": {k: v[0] for k, v in runs.items()}, "runs_s": runs,
           # After the steps: 1.5x what each ran at.
           "variant_compute_runs_s": {k: [v[0] * 1.5] * 3 for k, v in runs.items()},
           # Between them: as each ran; DDP's own blocks (dynamic heap) are not used.
           "variant_interleaved_compute_runs_s": {"ddp": [0.9] * 3, "ddp-heap": [0.28] * 3,
                                                  "cadence": [0.25] * 3}}  # fmt: skip
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": None}, "rows": [row]}))
    rows, _ = predict_bench_dp(
        [str(path)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, in_run_compute=None,
        probe="auto",
    )  # fmt: skip
    ddp, heap, cadence = rows
    assert [r["strategy"] for r in rows] == ["ddp", "ddp", "cadence-dp"]
    assert "variant" not in ddp and heap["variant"] == "ddp-heap"
    assert [r["compute_basis"] for r in rows] == ["in-run", *["in-run, interleaved"] * 2]
    # On a 100 Gbit link compute decides.
    assert ddp["error"] == pytest.approx(0.5, abs=0.02)
    assert heap["error"] == pytest.approx(0.0, abs=0.02)
    assert cadence["error"] == pytest.approx(0.0, abs=0.02)
    assert "ddp-heap" in "\n".join(table_lines(rows))
    # Priced from compute-only runs (no in-run compute), the heap variant has no row.
    beside, _ = predict_bench_dp([str(path)], {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    assert [r["strategy"] for r in beside] == ["ddp", "cadence-dp"]


def test_a_row_that_records_its_fixed_heap_variants_is_priced_as_it_says(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    runs = {"ddp": [0.3] * 3, "ddp-heap": [0.28] * 3, "cadence": [0.25] * 3}
    row = {"model": "cnn", "cap": "100gbit", "compute_s": 0.2,
           "iteration_s": {k: v[0] for k, v in runs.items()}, "runs_s": runs,
           "variant_compute_runs_s": {k: [v[0] * 1.5] * 3 for k, v in runs.items()},
           "variant_interleaved_compute_runs_s": {k: list(v) for k, v in runs.items()}}
    path = tmp_path / "bench.json"

    def bases(fixed: list[str] | None) -> list[str]:
        recorded = {} if fixed is None else {"fixed_heap_variants": fixed}
        data = {"config": {"workers": 2, "threshold_mb": None}, "rows": [{**row, **recorded}]}
        path.write_text(json.dumps(data))
        rows, _ = predict_bench_dp(
            [str(path)], {"cnn": profile}, 1.0, optimizer_step_s=0.0, in_run_compute=True,
            probe="interleaved",
        )
        return [r["compute_basis"] for r in rows]

    # Without the record (files before 2026-11-28), the rule by strategy decides.
    assert bases(None) == ["in-run", "in-run, interleaved", "in-run, interleaved"]
    # With it, the record: here only cadence-dp's runs had the thresholds fixed.
    assert bases(["cadence"]) == ["in-run", "in-run", "in-run, interleaved"]
    assert bases(["ddp", "ddp-heap", "cadence"]) == ["in-run, interleaved"] * 3


def test_in_run_compute_from_a_file_without_it_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no in-run compute .* use --compute-basis beside"):
        predict_bench_dp(
            [str(_bench_file(tmp_path))], {"cnn": zoo_profile("cnn")}, 1.0,
            optimizer_step_s=0.0, in_run_compute=True,
        )  # fmt: skip


def test_a_calibration_gives_the_caps_links_their_alphas(tmp_path: Path) -> None:
    from cadence.comm.cost import AlphaBeta
    from cadence.sim.compute import cap_link

    fitted = AlphaBeta(
        alpha_s=1.0, beta_s_per_byte=1e-3, gamma_s_per_byte=1e-9,
        collective_alphas=(("broadcast", 0.25),),
    )  # fmt: skip
    link = cap_link(100e3, 1.0, fitted)
    assert link.beta_s_per_byte == pytest.approx(8e-5)  # the cap's, not the calibration's
    assert (link.alpha_s, link.gamma_s_per_byte) == (1.0, 1e-9)
    assert link.alpha_for("broadcast") == 0.25
    assert cap_link(100e3, 1.0) == AlphaBeta(alpha_s=0.0, beta_s_per_byte=8e-5)
    profile, files = zoo_profile("cnn"), [str(_bench_file(tmp_path))]
    plain, _ = predict_bench_dp(files, {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    timed, _ = predict_bench_dp(
        files, {"cnn": profile}, 1.0, optimizer_step_s=0.0, calibrated=fitted
    )
    for p, t in zip(plain, timed, strict=True):
        assert t["wire_s"] == pytest.approx(p["wire_s"])
        # At least the all-reduce's two messages of 1 s each on the critical path.
        assert t["predicted_s"] >= p["predicted_s"] + 2.0


def test_zoo_models_report_the_buffers_ddp_broadcasts() -> None:
    from torch import nn

    from cadence.models import get_model_spec
    from cadence.sim.command import zoo_layout

    params, buffers = zoo_layout("cnn_lstm")
    model = get_model_spec("cnn_lstm").build()
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    # Running mean and variance (float32 per channel) and a batch counter (int64) each.
    assert norms and buffers == sum(8 * m.num_features + 8 for m in norms)
    assert len(params) > 0
    assert zoo_layout("gpt_mini")[1] == 0
    from cadence.sim.command import zoo_buffer_broadcasts

    # torch broadcasts buffers one dtype at a time: float statistics, then the int64 counters.
    assert zoo_buffer_broadcasts("cnn_lstm") == 2
    assert zoo_buffer_broadcasts("gpt_mini") == 1  # nothing to send; one call at most


def test_the_emulated_links_token_bucket_shortens_predictions_only_when_asked(
    tmp_path: Path,
) -> None:
    from cadence.netem._bandwidth import link_bucket_bytes
    from cadence.sim.compute import emulated_options
    from cadence.sim.options import SimOptions

    base = SimOptions()
    assert emulated_options(base, 400e6, 0.5, link_bucket=False) is base
    bucketed = emulated_options(base, 400e6, 0.5, link_bucket=True)
    assert bucketed.link_bucket_bytes == pytest.approx(link_bucket_bytes(400e6) * 0.5)
    with pytest.raises(ValueError, match="link_bucket_bytes"):
        SimOptions(link_bucket_bytes=-1.0)
    profile, files = zoo_profile("cnn"), [str(_bench_file(tmp_path))]
    plain, _ = predict_bench_dp(files, {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    burst, _ = predict_bench_dp(
        files, {"cnn": profile}, 1.0, optimizer_step_s=0.0, link_bucket=True
    )
    for p, b in zip(plain, burst, strict=True):
        # The link idles while the workers compute (0.2 s here), and the tokens it gathers
        # then pass at once: at most the compute's worth of bytes, never the whole bucket.
        assert p["predicted_s"] - 0.2 - 1e-6 <= b["predicted_s"] < p["predicted_s"] - 0.05


def test_a_profiles_recorded_optimizer_step_is_priced_unless_a_step_is_given(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    # Recorded with the profile, the step gives the same prediction whenever it is made;
    # --optimizer-step still wins; a profile without one has its step timed now (> 0).
    recorded = replace(zoo_profile("cnn"), optimizer_step_s={"adam": 0.05})
    bench = str(_bench_file(tmp_path))
    for profile, given, expected in ((recorded, None, 0.05), (recorded, 0.001, 0.001)):
        rows, _ = predict_bench_dp([bench], {"cnn": profile}, 1.0, optimizer_step_s=given)
        assert [r["optimizer_step_s"] for r in rows] == pytest.approx([expected, expected])
    rows, _ = predict_bench_dp([bench], {"cnn": zoo_profile("cnn")}, 1.0)
    assert all(0 < r["optimizer_step_s"] != 0.05 for r in rows)


def _write(path: Path, row: dict) -> str:
    # cadence-dp in chunks of 10 KB, so that its updates overlap its later chunks' transfers
    # and the length of the optimizer step moves its prediction.
    path.write_text(json.dumps({"config": {"workers": 2, "threshold_mb": 0.01}, "rows": [row]}))
    return str(path)


def test_each_round_is_priced_at_the_optimizer_step_its_own_compute_timed(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    rounds = {"compute": [0.2, 0.2], "ddp": [0.3, 0.3], "cadence": [0.25, 0.25]}
    row = {"model": "cnn", "cap": "10mbit", "compute_s": 0.2, "rounds_s": rounds,
           "iteration_s": {"ddp": 0.3, "cadence": 0.25}}  # fmt: skip
    steps = [0.01, 0.15]
    own = _write(tmp_path / "own.json", row | {"compute_step_rounds_s": steps})
    rows, _ = predict_bench_dp([own], {"cnn": profile}, 1.0)
    assert {r["optimizer_step_basis"] for r in rows} == {"timed with the compute"}
    assert all(r["optimizer_step_s"] == pytest.approx(0.08) for r in rows)  # their median
    # Round i predicts what a one-round file predicts with --optimizer-step steps[i].
    for i, step in enumerate(steps):
        one_round = {k: [v[i]] for k, v in rounds.items()}
        alone = _write(tmp_path / f"round{i}.json", row | {"rounds_s": one_round})
        given, _ = predict_bench_dp([alone], {"cnn": profile}, 1.0, optimizer_step_s=step)
        for r, g in zip(rows, given, strict=True):
            assert r["round_errors"][i] == pytest.approx(g["round_errors"][0])
    # The steps matter to cadence-dp's chunked plan here (DDP sends one bucket after the
    # backward, so its step only moves within the compute it is scaled to).
    assert rows[1]["round_errors"][0] != pytest.approx(rows[1]["round_errors"][1], abs=0.01)
    # --optimizer-step still wins over the file's own.
    given, _ = predict_bench_dp([own], {"cnn": profile}, 1.0, optimizer_step_s=0.0)
    assert {(r["optimizer_step_basis"], r["optimizer_step_s"]) for r in given} == {("given", 0.0)}


def test_each_separate_run_is_priced_at_the_optimizer_step_its_probe_timed(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    row = {
        "model": "cnn", "cap": "10mbit", "compute_s": 0.2,
        "iteration_s": {"ddp": 0.3, "cadence": 0.25},
        "runs_s": {"ddp": [0.3, 0.3], "cadence": [0.25, 0.25]},
        "variant_compute_runs_s": {"ddp": [0.2, 0.2], "cadence": [0.2, 0.2]},
        "variant_step_runs_s": {"ddp": [0.01, 0.15], "cadence": [0.02, 0.12]},
    }  # fmt: skip
    rows, _ = predict_bench_dp([_write(tmp_path / "own.json", row)], {"cnn": profile}, 1.0,
                               in_run_compute=True)  # fmt: skip
    assert {r["optimizer_step_basis"] for r in rows} == {"timed with the compute"}
    for r, variant in zip(rows, ("ddp", "cadence"), strict=True):
        for i, step in enumerate(row["variant_step_runs_s"][variant]):
            one_run = row | {
                key: {v: [row[key][v][i]] for v in ("ddp", "cadence")}
                for key in ("runs_s", "variant_compute_runs_s")
            }
            del one_run["variant_step_runs_s"]
            given, _ = predict_bench_dp(
                [_write(tmp_path / f"run{i}.json", one_run)], {"cnn": profile}, 1.0,
                optimizer_step_s=step, in_run_compute=True,
            )  # fmt: skip
            (g,) = [x for x in given if x["strategy"] == r["strategy"]]
            assert r["run_errors"][i] == pytest.approx(g["run_errors"][0])
    assert rows[1]["run_errors"][0] != pytest.approx(rows[1]["run_errors"][1], abs=0.01)


def test_a_row_without_steps_of_its_own_takes_the_profiles_or_times_one() -> None:
    from cadence.sim.bench_dp_records import own_step_samples, step_source

    assert own_step_samples({"rounds_s": {}}) == []
    assert own_step_samples({"variant_step_runs_s": {"ddp": [0.1], "cadence": [0.2]}}) == [0.1, 0.2]
    # Interleaved: each variant from its blocks where its runs timed them, else from after.
    both = {"variant_compute_runs_s": {"ddp": [0.5], "cadence": [0.5]},
            "variant_step_runs_s": {"ddp": [0.1], "cadence": [0.2]},
            "variant_interleaved_compute_runs_s": {"cadence": [0.5]},
            "variant_interleaved_step_runs_s": {"cadence": [0.4]}}  # fmt: skip
    assert own_step_samples(both, "interleaved") == [0.1, 0.4]
    assert own_step_samples(both) == [0.1, 0.2]
    assert step_source(0.5, 0.5) == "given"
    assert step_source(None, 0.07) == "profile"
    assert step_source(None, None) == "timed now"


def test_transfers_slow_while_computing_at_the_share_a_paired_row_measured(tmp_path: Path) -> None:
    profile = zoo_profile("cnn")
    rounds = {"compute": [0.2, 0.2], "ddp": [9.0, 9.0], "cadence": [9.0, 9.0]}
    row = {"model": "cnn", "cap": "100kbit", "compute_s": 0.2, "rounds_s": rounds,
           "iteration_s": {"ddp": 9.0, "cadence": 9.0}, "wire_runs_s": [9.0, 9.5]}  # fmt: skip
    measured = row | {"wire_computing_runs_s": [12.0, 13.0]}  # medians 9.25 / 12.5 = 0.74
    faster = row | {"wire_computing_runs_s": [8.0, 8.0]}  # no slower beside compute: 1, not more
    files = {}
    for name, content in (("alone", row), ("measured", measured), ("faster", faster)):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(
            json.dumps({"config": {"workers": 2, "threshold_mb": 0.01}, "rows": [content]})
        )

    def predict(name: str, **kw: object) -> list[dict]:
        return predict_bench_dp([str(files[name])], {"cnn": profile}, 1.0, optimizer_step_s=0.0,
                                **kw)[0]  # type: ignore[arg-type]  # fmt: skip

    alone, slowed, faster_rows = predict("alone"), predict("measured"), predict("faster")
    assert {r["comm_rate_while_computing"] for r in alone} == {1.0}
    assert [r["comm_rate_while_computing"] for r in slowed] == pytest.approx([9.25 / 12.5] * 2)
    assert {r["comm_rate_while_computing"] for r in faster_rows} == {1.0}
    for a, s, f in zip(alone, slowed, faster_rows, strict=True):
        # 9.3 s on the wire beside 0.2 s of compute: cadence-dp's 10 KB chunks slow while the
        # backward pass runs; DDP's one bucket leaves after it, unslowed.
        if a["strategy"] == "cadence-dp":
            assert a["predicted_s"] < s["predicted_s"] < a["predicted_s"] + 0.2
        else:
            assert s["predicted_s"] == a["predicted_s"]
        assert f["predicted_s"] == a["predicted_s"]
    # Told not to read the rows' measurement: the options' share (1 unless given) stands.
    unread = predict("measured", measured_rates=False)
    assert [r["predicted_s"] for r in unread] == [r["predicted_s"] for r in alone]
