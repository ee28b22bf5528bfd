"""The optimizer step as a share of a model's compute, read from benchmark runs that timed both.

`cadence bench sim` scales a profile so that its iteration plus one optimizer step equals the
compute a run timed; rows that timed no step of their own (benchmark files from before
2026-11-27) need the step from somewhere else. An absolute step timed at scoring moves with the
scoring machine (its speed, its heap) while the run's did not. The step's *share* of the
compute is steadier: files from days whose compute took 1x to 2.6x as long time it within
about a point of each other (cnn_lstm 4.1-5.0%, vgg16 4.5-5.2%), so `--step-shares FILE...`
prices those rows' step as the share other runs of the same model measured, at the speed of
the row's own compute.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from cadence.errors import UserError


def row_step_shares(row: dict[str, Any]) -> list[float]:
    """Each sample's optimizer step over its compute (step included) in one row of a `cadence
    bench dp` or `dp-paired` file: per round (`compute_step_rounds_s` over the lockstep compute
    where the file has it) or per run and variant (the probe after the steps); empty where the
    row timed no step beside its compute."""
    from cadence.sim.bench_dp_records import probe_samples, round_computes

    if "rounds_s" in row:
        steps = row.get("compute_step_rounds_s") or []
        return _ratios(zip(steps, round_computes(row), strict=False))
    computes, run_steps, _ = probe_samples(row, "after")
    pairs = (p for v in computes for p in zip(run_steps.get(v, []), computes[v], strict=False))
    return _ratios(pairs)


def _ratios(pairs: Iterable[tuple[float, float]]) -> list[float]:
    return [float(step) / float(compute) for step, compute in pairs if compute > 0]


def step_shares(paths: Sequence[str]) -> dict[str, float]:
    """Model -> the median share of the optimizer step in the compute over every sample of
    `paths` (`cadence bench dp` / `dp-paired` JSON files) that timed one; a one-line UserError
    for an unreadable file or where none of them timed a step."""
    samples: dict[str, list[float]] = {}
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
            rows = data["rows"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"--step-shares {path}: not a `cadence bench dp` file ({exc})") from exc
        for row in rows:
            samples.setdefault(row["model"], []).extend(row_step_shares(row))
    shares = {model: statistics.median(s) for model, s in samples.items() if s}
    if not shares:
        raise UserError(
            "--step-shares: none of the files timed an optimizer step beside its compute "
            "(`cadence bench dp` and `dp-paired` files since 2026-11-27 do)"
        )
    return shares
