"""Replay traced iterations (`cadence bench sim --from-timeline FILE...`): the simulator given
the compute a traced step really took, against that step's measured time.

`cadence bench dp-timeline` records one steady-state iteration of DDP and of cadence-dp with
its forward, backward (waiting excluded) and optimizer-update seconds on every rank. Here the
profile's per-block split is scaled so its forward and its backward equal that step's on the
slowest rank (a synchronous step waits for it; files with rank 0 only use rank 0), the update
cost is that step's, and the simulator predicts the iteration from there. Forward, backward and
the measured iteration come from the same step, so the machine's speed drifting between runs
(see `cadence bench steadiness`) cancels out; what is checked is the simulator's
communication, overlap and scheduling, not its compute estimate.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.dp.config import DPConfig
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.bench_dp import scaled_profile
from cadence.sim.command import Setup, model_params, run_strategy
from cadence.sim.options import SimOptions
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION

# dp-timeline run -> simulated strategy
_RUNS = {"ddp": "ddp", "cadence": "cadence-dp"}


def read_timeline(path: str) -> dict[str, Any]:
    """A `cadence bench dp-timeline` JSON file, or a one-line UserError."""
    try:
        data = json.loads(Path(path).read_text())
        data["config"]["model"], data["config"]["cap"]  # noqa: B018
        for run in data["runs"].values():
            run["iteration_s"], run["breakdown"]["forward_s"]  # noqa: B018
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(
            f"cannot read {path}: not a `cadence bench dp-timeline` file ({exc})"
        ) from None
    return data


def traced_profile(profile: Profile, forward_s: float, backward_s: float) -> Profile:
    """`profile` with its forward (and loss) scaled to `forward_s` and its input- plus
    weight-gradient time to `backward_s` (sizes unchanged)."""
    fwd = sum(b.forward_s for b in profile.blocks) + profile.loss_s
    bwd = sum(b.input_grad_s + b.weight_grad_s for b in profile.blocks)
    return scaled_profile(profile, forward_s / max(fwd, 1e-12), backward_s / max(bwd, 1e-12))


def predict_timelines(
    paths: Sequence[str],
    profiles: dict[str, Profile],
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    options: SimOptions | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows of traced vs predicted iteration, skipped files as text)."""
    from cadence.netem import parse_bandwidth

    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for path in paths:
        data = read_timeline(path)
        cfg = data["config"]
        model, cap = str(cfg["model"]), str(cfg["cap"])
        if cap == "none":
            skipped.append(f"{Path(path).name}: {model} without a cap (link unknown)")
            continue
        if model not in profiles:
            raise UserError(f"{path}: no profile of {model!r} given")
        bps = parse_bandwidth(cap)
        params = model_params(model)
        param_bytes = sum(p.nbytes for p in params)
        threshold = int(float(cfg.get("threshold_mb", 4.0)) * 2**20)
        bucket = int(float(cfg.get("ddp_bucket_mb", 25.0)) * 2**20)
        for run_name, strategy in _RUNS.items():
            run = data["runs"].get(run_name)
            if run is None:
                continue
            # Each rank's compute where recorded: the step waits for the slowest one's.
            ranks = run.get("rank_breakdowns") or [run["breakdown"]]
            parts = {k: max(b[k] for b in ranks) for k in ("forward_s", "backward_s", "updates_s")}
            setup = Setup(
                profile=traced_profile(profiles[model], parts["forward_s"], parts["backward_s"]),
                params=params,
                world_size=int(cfg.get("workers", 2)),
                link=AlphaBeta.from_bandwidth(bps * payload_fraction),
                description=f"{model} {cap}",
                update_s_per_byte=parts["updates_s"] / param_bytes,
            )
            result, _ = run_strategy(
                setup,
                strategy,
                threshold,
                DPConfig(threshold_bytes=threshold).credit,
                bucket,
                options or SimOptions(ddp_first_bucket_bytes=None),
                reorder_k=cfg.get("reorder_k"),
            )
            measured = float(run["iteration_s"])
            rows.append(
                {
                    "run": f"{Path(path).name}:{model}",
                    "model": model,
                    "strategy": strategy,
                    "bandwidth": cap,
                    "workers": setup.world_size,
                    "measured_s": measured,
                    "predicted_s": result.iteration_s,
                    "error": (result.iteration_s - measured) / measured,
                    "optimizer_step_s": parts["updates_s"],
                    "compute_s": parts["forward_s"] + parts["backward_s"],
                    "wire_s": result.wire_s,
                }
            )
    return rows, skipped
