"""`cadence bench dp --ddp-fixed-heap`: DDP's processes get cadence-dp's heap thresholds
through their environment, and only for the run they belong to; the other DDP runs keep
glibc's own (`cadence train --no-keep-heap`)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from cadence.bench import dp
from cadence.bench._env import child_environment
from cadence.heap import FIXED_HEAP_ENV


def test_child_environment_restores_what_was_there_even_on_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CADENCE_TEST_KEPT", "before")
    monkeypatch.delenv("CADENCE_TEST_NEW", raising=False)
    with pytest.raises(RuntimeError), child_environment(
        {"CADENCE_TEST_KEPT": "during", "CADENCE_TEST_NEW": "during"}
    ):
        assert os.environ["CADENCE_TEST_KEPT"] == os.environ["CADENCE_TEST_NEW"] == "during"
        raise RuntimeError("a run failed")
    assert os.environ["CADENCE_TEST_KEPT"] == "before"
    assert "CADENCE_TEST_NEW" not in os.environ


def test_only_the_heap_variants_runs_start_with_the_fixed_thresholds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in FIXED_HEAP_ENV:
        monkeypatch.delenv(key, raising=False)
    seen: dict[str, dict[str, str | None]] = {}
    kept: dict[float | None, bool] = {}

    def fake_train(config: Any) -> dict[str, Any]:  # what the spawned workers would inherit
        seen[f"{config.job.strategy} {config.dp.bucket_mb}"] = {
            key: os.environ.get(key) for key in FIXED_HEAP_ENV
        }
        kept[config.dp.bucket_mb] = config.cluster.keep_heap  # what `cadence train` would do
        return {}

    monkeypatch.setattr("cadence.bench._train.train_for_bench", fake_train)
    config = dp.DPBenchConfig(models=("mlp",), caps=("none",), ddp_fixed_heap=True)
    variants = dp.variants(config)
    assert [v.name for v in variants] == ["ddp", "ddp-5mb", "ddp-100mb", "ddp-heap", "cadence"]
    assert [v.fixed_heap for v in variants] == [False, False, False, True, True]
    for variant in variants[:-1]:
        seen.clear()
        dp.train_variant("mlp", "none", variant, 2, config)
        (env,) = seen.values()
        assert env == (FIXED_HEAP_ENV if variant.name == "ddp-heap" else dict.fromkeys(env))
        # The peer runs as torch runs it: `cadence train` must not fix the thresholds itself.
        assert kept == {variant.settings["bucket_mb"]: variant.name == "ddp-heap"}
        kept.clear()
    assert all(key not in os.environ for key in FIXED_HEAP_ENV)  # restored after the run
    assert "ddp-heap" not in [v.name for v in dp.variants(dp.DPBenchConfig())]


def test_the_table_gives_the_heap_ratio_only_where_a_row_has_it() -> None:
    row: dict[str, Any] = {
        "model": "mlp", "cap": "1gbit", "compute_s": 0.1, "wire_s": 0.05, "line_wire_s": 0.04,
        "iteration_s": {"ddp": 0.2, "cadence": 0.15}, "ddp_tuned_s": 0.2,
        "cadence_over_ddp": 0.75, "cadence_over_ddp_tuned": 0.75, "cadence_over_bound": 1.5,
        "ddp_over_bound": 2.0, "cadence_over_line_bound": 1.5,
    }  # fmt: skip
    plain = dp.table_lines([row])
    assert "heap fixed" not in plain[0] and plain[1].count("---") == 13
    heap = {**row, "iteration_s": {**row["iteration_s"], "ddp-heap": 0.18},
            "cadence_over_ddp_heap": 0.15 / 0.18}  # fmt: skip
    header, rule, with_heap, without = dp.table_lines([heap, row])
    assert header.endswith("| DDP, heap fixed | cadence/DDP, heap fixed |")
    assert rule.count("---") == 15
    assert with_heap.endswith("| 0.180 s | 0.83 |") and without.endswith("| - | - |")
