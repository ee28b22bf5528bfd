"""`cadence bench dp-paired` end to end on the loopback (no cap, so no root needed), bad input,
and how a row's ratios are formed from the rounds."""

import json

import pytest
import torch

from cadence.bench.dp_paired import (
    PairedDPConfig,
    cadence_settings,
    summarise,
    variant_names,
)
from tests.cli_helpers import assert_one_line_error, run_cadence


def test_dp_paired_times_every_variant_in_turns_and_writes_json_png_and_table(tmp_path):
    proc = run_cadence(
        "bench",
        "dp-paired",
        "--models",
        "mlp",
        "--caps",
        "none",
        "--block-steps",
        "4",
        "--block-seconds",
        "0.5",
        "--rounds",
        "2",
        "--ddp-buckets-mb",
        "1",
        "--cadence-thresholds-mb",
        "0.01",
        "--cadence-variants",
        "reorder_k=1,credit_mb=0.05",
        "--twins",
        "--aligned-compute",
        "--out",
        "out/paired.json",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out" / "paired.json").read_text())
    assert report["command"].startswith("cadence bench dp-paired")
    (row,) = report["rows"]
    assert (row["model"], row["cap"]) == ("mlp", "none")
    assert set(row["rounds_s"]) == {
        "compute", "ddp", "ddp-1mb", "cadence", "cadence-0.01mb",
        "cadence[reorder_k=1,credit_mb=0.05]", "ddp-twin", "cadence-twin", "compute-aligned",
    }  # fmt: skip
    # The A/A twins, each against what it copies round by round; not among the variants.
    for original, twin in (("ddp", "ddp-twin"), ("cadence", "cadence-twin")):
        expected = [t / o for t, o in zip(row["rounds_s"][twin], row["rounds_s"][original],
                                          strict=True)]  # fmt: skip
        assert row["twin_over_original_rounds"][original] == pytest.approx(expected)
        assert f"mlp @ none: A/A {twin}" in proc.stdout
    assert row["ddp_tuned"] in ("ddp", "ddp-1mb")
    assert set(row["variant_over_cadence_paired"]) == {
        "cadence-0.01mb", "cadence[reorder_k=1,credit_mb=0.05]"
    }  # fmt: skip
    assert all(len(times) == 2 for times in row["rounds_s"].values())
    assert all(0 < t < 5 for times in row["rounds_s"].values() for t in times)
    # Each step's slowest rank, averaged: never below the slowest rank's average.
    lockstep = row["lockstep_compute_rounds_s"]
    assert len(lockstep) == 2 and row["lockstep_compute_s"] == pytest.approx(sum(lockstep) / 2)
    for each_step, per_rank in zip(lockstep, row["rounds_s"]["compute"], strict=True):
        assert each_step >= per_rank * (1 - 1e-9)
    # And each round's optimizer step of compute alone, a part of its whole step.
    steps = row["compute_step_rounds_s"]
    assert len(steps) == 2
    assert all(0 < step < each_step for step, each_step in zip(steps, lockstep, strict=True))
    # The aligned compute turns (every rank's phases started together): per round, each
    # phase's slowest rank, with its optimizer step a part of it; priced by neither ratio.
    aligned, aligned_steps = row["aligned_compute_rounds_s"], row["aligned_compute_step_rounds_s"]
    assert aligned == row["rounds_s"]["compute-aligned"] and len(aligned_steps) == 2
    assert all(0 < step < whole for step, whole in zip(aligned_steps, aligned, strict=True))
    assert "mlp @ none: compute with the ranks' phases aligned" in proc.stdout
    # The bytes the main cadence-dp variant let in flight: its default for the model.
    from cadence.dp.config import DPConfig

    assert row["cadence_credit_bytes"] == DPConfig().credit_for(row["gradient_bytes"])
    # No cap: no wire to measure, so every round's bound is its compute time.
    assert row["wire_runs_s"] == [] and row["bound_rounds_s"] == row["rounds_s"]["compute"]
    assert row["gradient_bytes"] > 0
    # mlp's steps take milliseconds: turns are lengthened past --block-steps, to 0.5 s of
    # timed steps at the warm-up round's speed (not asserted in seconds: the first round of a
    # fresh process runs slower than the later ones).
    assert row["block_steps"] > 20
    assert (tmp_path / "out" / "paired.png").stat().st_size > 5_000
    assert "| mlp | none |" in proc.stdout
    # The further cadence-dp variant (10 KB chunks) against the main one, round by round.
    ratios = row["variant_over_cadence_rounds"]["cadence-0.01mb"]
    rounds = row["rounds_s"]
    assert ratios == pytest.approx(
        [a / b for a, b in zip(rounds["cadence-0.01mb"], rounds["cadence"], strict=True)]
    )
    assert "mlp @ none: cadence-0.01mb" in proc.stdout
    # By default the workers flushed subnormal floats to zero (where the CPU can).
    assert row["subnormals_flushed"] is torch.set_flush_denormal(False)


def test_ratios_are_taken_within_each_round_then_the_median():
    measured = {
        "gradient_bytes": 4_000,
        "block_steps": 8,
        # The machine is twice as slow in round 2: paired ratios do not move, medians do.
        "rounds_s": {
            "compute": [1.0, 2.0, 1.0],
            "ddp": [2.0, 4.0, 2.2],
            "ddp-5mb": [1.8, 3.6, 2.0],
            "cadence": [1.6, 3.2, 1.6],
        },
        "wire_runs_s": [1.5, 1.5, 1.5],
    }
    row = summarise("m", "400mbit", measured)
    assert row["ddp_tuned"] == "ddp-5mb"
    assert row["ratio_rounds"]["cadence_over_ddp"] == pytest.approx([0.8, 0.8, 1.6 / 2.2])
    assert row["cadence_over_ddp_paired"] == pytest.approx(0.8)
    assert row["cadence_over_ddp_tuned_paired"] == pytest.approx(1.6 / 1.8)
    # The bound of a round is the larger of its compute and its wire time.
    assert row["bound_rounds_s"] == [1.5, 2.0, 1.5]
    assert row["ratio_rounds"]["cadence_over_bound"] == pytest.approx([1.6 / 1.5, 1.6, 1.6 / 1.5])
    assert row["cadence_over_bound_paired"] == pytest.approx(1.6 / 1.5)
    assert row["ddp_over_bound_paired"] == pytest.approx(2.2 / 1.5)
    # Beside them, the ratio of the medians (as `cadence bench dp` reports).
    assert row["cadence_over_ddp"] == pytest.approx(1.6 / 2.2)
    assert (row["compute_s"], row["wire_s"], row["bound_s"]) == (1.0, 1.5, 1.5)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--models", "alexnet"], "unknown model 'alexnet'"),
        (["--caps", "fast"], "fast"),
        (["--block-steps", "2"], "--block-steps must be at least 3"),
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--block-seconds", "-1"], "--block-seconds must be >= 0"),
        (["--ddp-buckets-mb", "big"], "--ddp-buckets-mb must be numbers"),
        (["--cadence-thresholds-mb", "0"], "--cadence-thresholds-mb must be positive"),
        (["--cadence-variants", "k=1"], "'k=1' is not KEY=VALUE with KEY one of"),
        (["--cadence-variants", "reorder_k=first"], "reorder_k must be a number"),
        (["--cadence-variants", "credit_mb=-2"], "credit_mb must be positive"),
    ],
)
def test_dp_paired_bad_input_is_one_line(tmp_path, args, needle):
    assert_one_line_error(run_cadence("bench", "dp-paired", *args, cwd=tmp_path), needle)


def test_dp_paired_autotunes_in_the_warm_up_round_only(tmp_path):
    proc = run_cadence(
        "bench", "dp-paired", "--models", "mlp", "--caps", "none", "--block-steps", "3",
        "--block-seconds", "0", "--rounds", "1", "--ddp-buckets-mb", "", "--autotune",
        "guided", "--keep-subnormals", "--out", "out/tuned.json", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "out" / "tuned.json").read_text())["rows"]
    # What tuning chose is recorded; on the loopback communication is cheap, so it times the
    # running plan against one all-reduce (or skips) rather than trying every threshold.
    assert row["tuned"]["cadence"]["method"] in ("hidden", "skipped", "guided")
    assert row["tuned"]["cadence"]["threshold_bytes"] > 0
    assert len(row["rounds_s"]["cadence"]) == 1
    # --keep-subnormals: the workers' math kept them.
    assert row["subnormals_flushed"] is False


def test_each_size_given_twice_is_one_variant():
    config = PairedDPConfig(models=("mlp",), caps=("none",), ddp_buckets_mb=(5.0, 5.0, 25.0),
                            cadence_thresholds_mb=(2.0, 2.0))  # fmt: skip
    names = variant_names(config.case("mlp", "none", None))
    assert names == ["compute", "ddp", "ddp-5mb", "cadence", "cadence-2mb"]


def test_twins_go_last_and_are_neither_tuned_ddp_nor_a_cadence_variant():
    config = PairedDPConfig(models=("mlp",), caps=("none",), twins=True)
    names = variant_names(config.case("mlp", "none", None))
    assert names == ["compute", "ddp", "ddp-5mb", "cadence", "ddp-twin", "cadence-twin"]
    measured = {
        "gradient_bytes": 4_000,
        "block_steps": 8,
        "rounds_s": {
            "compute": [1.0, 1.0, 1.0],
            "ddp": [2.0, 2.0, 2.0],
            "ddp-5mb": [1.8, 1.9, 1.8],
            "cadence": [1.6, 1.6, 1.6],
            "ddp-twin": [1.5, 1.6, 1.7],  # the fastest DDP here: still not the "tuned" one
            "cadence-twin": [1.6, 1.7, 1.5],
        },
        "wire_runs_s": [1.5, 1.5, 1.5],
    }
    row = summarise("m", "400mbit", measured)
    assert row["ddp_tuned"] == "ddp-5mb"
    assert row["variant_over_cadence_paired"] == {}
    assert row["twin_over_original_rounds"]["ddp"] == pytest.approx([0.75, 0.8, 0.85])
    assert row["twin_over_original_paired"] == {
        "ddp": pytest.approx(0.8),
        "cadence": pytest.approx(1.0),
    }
    # Without twins, no twin fields.
    del measured["rounds_s"]["ddp-twin"], measured["rounds_s"]["cadence-twin"]
    assert "twin_over_original_paired" not in summarise("m", "400mbit", measured)


def test_cadence_variants_name_what_they_set():
    config = PairedDPConfig(
        models=("mlp",),
        caps=("none",),
        cadence_thresholds_mb=(2.0,),
        cadence_variants=("reorder_k=1,credit_mb=12", "warmup_iterations=3"),
    )
    settings = cadence_settings(config.case("mlp", "none", None))
    assert settings == {
        "cadence": {},
        "cadence-2mb": {"threshold_mb": 2.0},
        "cadence[reorder_k=1,credit_mb=12]": {"reorder_k": 1, "credit_mb": 12.0},
        "cadence[warmup_iterations=3]": {"warmup_iterations": 3},
    }
