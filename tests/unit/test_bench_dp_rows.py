"""`cadence bench dp`'s rows from its runs (`measure_case`, `run_dp_bench`), with the training
runs replaced by fixed figures: which runs happen in which order, and the ratios made of them.
tests/dist/test_bench_dp.py runs the benchmark itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cadence.bench import dp

TIMES = {"compute": 0.10, "ddp": 0.40, "ddp-1mb": 0.30, "ddp-heap": 0.25, "cadence": 0.20}


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every training run the benchmark asks for, by variant name, answered from `TIMES`."""
    calls: list[str] = []

    def fake(model: str, cap: str, variant: dp.Variant, workers: int, _c: Any) -> dict[str, Any]:
        calls.append(variant.name)
        metrics = {"median_iteration_s": TIMES[variant.name], "gradient_bytes": 4096}
        if variant.name == "cadence":
            metrics.update(dp_chunks=3, dp_threshold_bytes=1024)
        return metrics

    monkeypatch.setattr(dp, "train_variant", fake)
    return calls


def test_a_case_alternates_its_variants_and_takes_the_ratios_from_their_medians(
    runs: list[str],
) -> None:
    config = dp.DPBenchConfig(
        models=("mlp",), caps=("none",), repeats=2, ddp_buckets_mb=(1.0,), ddp_fixed_heap=True
    )
    row = dp.measure_case("mlp", "none", None, config, echo=lambda _: None)
    order = ["ddp", "ddp-1mb", "ddp-heap", "cadence"]
    assert runs == ["compute", *order, "compute", *reversed(order)]
    # Without a measurement before the case, its first round's compute run stands for it.
    assert row["model_compute_s"] == row["compute_s"] == TIMES["compute"]
    assert row["gradient_bytes"] == 4096 and row["compute_runs_s"] == [0.10, 0.10]
    assert row["ddp_tuned_s"] == TIMES["ddp-1mb"]  # the heap variant is not a bucket setting
    assert row["cadence_over_ddp"] == pytest.approx(0.5)
    assert row["cadence_over_ddp_tuned"] == pytest.approx(0.2 / 0.3)
    assert row["cadence_over_ddp_heap"] == pytest.approx(0.2 / 0.25)
    assert row["bound_s"] == row["compute_s"] and row["wire_s"] == 0.0  # the loopback: no wire
    assert row["fixed_heap_variants"] == ["ddp-heap", "cadence"]
    assert len(row["cadence_plans"]) == 2


def test_only_a_balanced_cap_measures_compute_before_the_cases(
    runs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dp, "plot", lambda rows, path: None)
    monkeypatch.setattr("cadence.bench.dp_wire.measure_wire", lambda *_a: 0.1)  # no cluster
    out = str(tmp_path / "b.json")
    plain = dp.DPBenchConfig(models=("mlp",), caps=("none",), repeats=1, ddp_buckets_mb=(),
                             out=out)  # fmt: skip
    dp.run_dp_bench(plain, "cadence bench dp", echo=lambda _: None)
    assert runs == ["compute", "ddp", "cadence"]
    runs.clear()
    seen: list[tuple[str, Any]] = []
    measure_case = dp.measure_case

    def spy(model: str, cap: str, model_compute: Any, *rest: Any) -> dict[str, Any]:
        seen.append((cap, model_compute))
        return measure_case(model, cap, model_compute, *rest)

    monkeypatch.setattr(dp, "measure_case", spy)
    balanced = dp.DPBenchConfig(models=("mlp",), caps=("balanced",), repeats=1,
                                ddp_buckets_mb=(), out=out)  # fmt: skip
    dp.run_dp_bench(balanced, "cadence bench dp", echo=lambda _: None)
    # One compute run before the case, to size the cap, then the case's own runs.
    assert runs == ["compute", "compute", "ddp", "cadence"]
    assert seen == [(dp.balanced_cap(TIMES["compute"], 4096, 2), (TIMES["compute"], 4096))]
