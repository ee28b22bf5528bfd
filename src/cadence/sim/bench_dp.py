"""Predict the DDP and cadence-dp rows of `cadence bench dp` result files (`cadence bench sim
--from-bench-dp FILE...`): the simulator's accuracy over that benchmark's models and caps.

Each row of a bench-dp file holds, for one model and cap, the measured compute-only iteration
(one worker, same per-worker batch, optimizer step included) and the medians of DDP and
cadence-dp. The profile gives the *shape* of the compute (per-block split); its times are
scaled so that profile iteration + optimizer step equals the row's measured compute-only
iteration, so the prediction is calibrated to the machine as it was during the run and what
remains to predict is communication, overlap and scheduling. Rows without a cap have no known
link and are skipped (listed in the output).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.dp.config import mb_to_bytes
from cadence.dp.plan import DEFAULT_CREDIT_CHUNKS, default_threshold
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.profile.record import scaled_profile
from cadence.sim.api import DDP_BUCKET_BYTES
from cadence.sim.command import (
    Setup,
    run_strategy,
    step_cost,
    zoo_arrival_order,
    zoo_buffer_broadcasts,
    zoo_layout,
)
from cadence.sim.compute import cap_link
from cadence.sim.options import SimOptions
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION, chosen_step_s

VARIANTS = {"ddp": "ddp", "cadence": "cadence-dp"}
"""A bench-dp row's variant -> the strategy the simulator runs for it."""


def compute_scale(profile: Profile, compute_s: float, step_s: float) -> float:
    """The factor on `profile`'s times that makes its iteration plus an optimizer step of
    `step_s` take `compute_s` (a step measured without communication)."""
    return max(compute_s - step_s, 1e-6) / profile.iteration_s


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


def _threshold(cfg: dict[str, Any]) -> int | None:
    """The cadence-dp threshold the file ran with; None: cadence-dp's default."""
    mb = cfg.get("threshold_mb")
    return mb_to_bytes(None if mb is None else float(mb))


def _credit(row: dict[str, Any], threshold: int | None, gradient_bytes: int) -> int:
    """The bytes cadence-dp let in flight in the row (recorded), else its default."""
    if "cadence_credit_bytes" in row:
        return int(row["cadence_credit_bytes"])
    chunk = threshold if threshold is not None else default_threshold(gradient_bytes)
    return DEFAULT_CREDIT_CHUNKS * chunk


def _default_plan(row: dict[str, Any]) -> str:
    """cadence-dp's default plan in the row: "one chunk" or "chunked", as most runs chose;
    "choose" (as the runtime does) where the row records no choice."""
    plans = row.get("cadence_plans") or []
    probes = [p["one_chunk_probe"] for p in plans if p.get("one_chunk_probe") is not None]
    if not probes:
        return "choose"
    kept = sum(1 for p in probes if p["one_chunk"])
    return "one chunk" if 2 * kept > len(probes) else "chunked"


def predict_bench_dp(
    paths: Sequence[str],
    profiles: dict[str, Profile],
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    optimizer_step_s: float | None = None,
    options: SimOptions | None = None,
    calibrated: AlphaBeta | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows of measured vs predicted, skipped rows as text). `calibrated` gives the links
    their alphas (`cap_link`)."""
    from cadence.netem import parse_bandwidth

    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for path in paths:
        data = read_bench_dp(path)
        cfg = data.get("config", {})
        workers = int(cfg.get("workers", 2))
        threshold = _threshold(cfg)
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
            profile = profiles[model]
            params, buffer_bytes = zoo_layout(model)
            gradient_bytes = sum(p.nbytes for p in params)
            step_s = chosen_step_s("adam", optimizer_step_s, profile.optimizer_step_s)
            update = step_cost(model, "adam", step_s, params)
            compute_s = float(row["compute_s"])
            factor = compute_scale(profile, compute_s, update * gradient_bytes)
            setup = Setup(
                profile=scaled_profile(profile, factor),
                params=params,
                buffer_bytes=buffer_bytes,
                buffer_broadcasts=zoo_buffer_broadcasts(model),
                world_size=workers,
                link=cap_link(bps, payload_fraction, calibrated),
                description=f"{model} {cap}",
                update_s_per_byte=update,
                arrival_order=zoo_arrival_order(model),
            )
            for variant, strategy in VARIANTS.items():
                measured = row["iteration_s"].get(variant)
                if measured is None:
                    continue
                result, _ = run_strategy(
                    setup,
                    strategy,
                    threshold,
                    _credit(row, threshold, gradient_bytes),
                    DDP_BUCKET_BYTES,
                    options or SimOptions(),
                    reorder_k=cfg.get("reorder_k"),
                    default_plan=_default_plan(row),
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
                        "optimizer_step_s": update * gradient_bytes,
                        "compute_s": compute_s,
                        "wire_s": result.wire_s,
                    }
                )
    return rows, skipped
