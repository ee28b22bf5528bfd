"""Predict the DDP and cadence-dp rows of `cadence bench dp` result files (`cadence bench sim
--from-bench-dp FILE...`): the simulator's accuracy over that benchmark's models and caps.

Each row of a bench-dp file holds, for one model and cap, the measured compute-only iteration
(one worker, same per-worker batch, optimizer step included) and the medians of DDP and
cadence-dp. The profile gives the *shape* of the compute (per-block split); its times are
scaled so that profile iteration + optimizer step equals that run's measured compute-only
iteration, i.e. the prediction is calibrated to the machine as it was during the run, and
what remains to predict is communication, overlap and scheduling. Rows without a cap have no
known link and are skipped (listed in the output).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.dp.config import mb_to_bytes
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.api import DDP_BUCKET_BYTES
from cadence.sim.command import Setup, model_params, run_strategy, step_cost
from cadence.sim.options import SimOptions
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION

# bench-dp variant -> simulated strategy
_VARIANTS = {"ddp": "ddp", "cadence": "cadence-dp"}


def recorded_threshold(cfg: dict[str, Any]) -> int | None:
    """The cadence-dp threshold a benchmark file's config ran with: its `threshold_mb`, None
    where it ran cadence-dp's default (`run_strategy` then applies the same), 4 MiB for files
    from before the default depended on the model (they do not record it)."""
    if "threshold_mb" not in cfg:
        return 4 * 2**20
    mb = cfg["threshold_mb"]
    return mb_to_bytes(None if mb is None else float(mb))


def read_bench_dp(path: str) -> dict[str, Any]:
    """A `cadence bench dp --out` file, or a one-line UserError."""
    try:
        data = json.loads(Path(path).read_text())
        if not (isinstance(data, dict) and isinstance(data.get("rows"), list)):
            raise ValueError("no rows")
        for row in data["rows"]:
            row["model"], row["cap"], row["compute_s"], row["iteration_s"]["ddp"]  # noqa: B018
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"cannot read {path}: not a `cadence bench dp` file ({exc})") from None
    return data


def scaled_profile(
    profile: Profile, factor: float, backward_factor: float | None = None
) -> Profile:
    """`profile` with every time multiplied by `factor` (sizes unchanged); with
    `backward_factor`, the gradient times by that instead, and the whole iteration becomes
    the sum of the scaled parts."""
    g = factor if backward_factor is None else backward_factor
    blocks = tuple(
        dataclasses.replace(
            b,
            forward_s=b.forward_s * factor,
            input_grad_s=b.input_grad_s * g,
            weight_grad_s=b.weight_grad_s * g,
        )
        for b in profile.blocks
    )
    loss_s = profile.loss_s * factor
    iteration_s = profile.iteration_s * factor
    if backward_factor is not None:
        iteration_s = loss_s + sum(b.forward_s + b.input_grad_s + b.weight_grad_s for b in blocks)
    return dataclasses.replace(profile, blocks=blocks, iteration_s=iteration_s, loss_s=loss_s)


def predict_bench_dp(
    paths: Sequence[str],
    profiles: dict[str, Profile],
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    optimizer_step_s: float | None = None,
    options: SimOptions | None = None,
    co_run_slowdown: float = 1.0,
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows of measured vs predicted, skipped rows as text). The measured compute-only
    iteration ran one worker alone; `co_run_slowdown` scales it for workers sharing a host."""
    from cadence.netem import parse_bandwidth

    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for path in paths:
        data = read_bench_dp(path)
        cfg = data.get("config", {})
        workers = int(cfg.get("workers", 2))
        threshold = recorded_threshold(cfg)
        for row in data["rows"]:
            model, cap = row["model"], row["cap"]
            try:
                bps = parse_bandwidth(str(row.get("cap_bandwidth", cap)))
            except UserError:
                bps = None
            if bps is None or cap == "none" or bps == float("inf"):
                skipped.append(f"{Path(path).name}: {model} at cap {cap} (link unknown)")
                continue
            if model not in profiles:
                raise UserError(f"{path}: no profile of {model!r} given")
            params = model_params(model)
            update = step_cost(model, "adam", optimizer_step_s, params)
            step = update * sum(p.nbytes for p in params)
            base = profiles[model]
            factor = co_run_slowdown * max(row["compute_s"] - step, 1e-6) / base.iteration_s
            setup = Setup(
                profile=scaled_profile(base, factor),
                params=params,
                world_size=workers,
                link=AlphaBeta.from_bandwidth(bps * payload_fraction),
                description=f"{model} {cap}",
                update_s_per_byte=update,
            )
            for variant, strategy in _VARIANTS.items():
                measured = row["iteration_s"].get(variant)
                if measured is None:
                    continue
                result, _ = run_strategy(
                    setup,
                    strategy,
                    threshold,
                    None,  # 2 x the threshold, what the runtime runs with
                    DDP_BUCKET_BYTES,
                    options or SimOptions(),
                    reorder_k=cfg.get("reorder_k"),
                )
                rows.append(
                    {
                        "run": f"{Path(path).name}:{model}",
                        "model": model,
                        "strategy": strategy,
                        "bandwidth": cap,
                        "workers": workers,
                        "measured_s": float(measured),
                        "predicted_s": result.iteration_s,
                        "error": (result.iteration_s - measured) / measured,
                        "optimizer_step_s": step,
                        "compute_s": row["compute_s"],
                        "wire_s": result.wire_s,
                    }
                )
    return rows, skipped
