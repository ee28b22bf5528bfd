"""Replay traced iterations (`cadence bench sim --from-timeline FILE...`): the simulator given
the compute traced steps really took, against those steps' measured time.

`cadence bench dp-timeline` records a few steady-state iterations of DDP and of cadence-dp,
with each one's forward, backward (waiting excluded) and optimizer-update seconds on every
rank. For each iteration the profile's per-block split is scaled so its forward and its
backward equal that iteration's on the slowest rank (a synchronous step waits for it), the
update cost is that iteration's, and the simulator predicts it; the row compares the mean
prediction with the mean measured iteration (over iterations and ranks: one iteration's
boundaries shift between ranks, as a fast rank starts its next forward and waits there).
Compute and measurement come from the same steps, so the machine's speed drifting between runs
(see `cadence bench steadiness`) cancels out; what is checked is the simulator's
communication, overlap and scheduling, not its compute estimate. Files from before the
per-iteration record replay the pictured iteration against rank 0's time. cadence-dp's first
chunked iteration after its one-chunk probe is no steady state and is left out where the file
records the probe (`steady_iterations`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadence.bench.dp_timeline import recorded_iterations
from cadence.comm.cost import AlphaBeta
from cadence.dp.plan import DPPlan
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.bench_dp import scaled_profile
from cadence.sim.bench_dp_records import recorded_threshold
from cadence.sim.command import Setup, model_params, run_strategy, zoo_arrival_order
from cadence.sim.compute import cap_link, emulated_options
from cadence.sim.metrics import SimResult
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


_COMPUTE = ("forward_s", "backward_s", "updates_s")
# The traced seconds are wall-clock seconds with the processor sharing already in them (the
# main thread's compute beside the communication thread's updates on shared cores), so the
# replay gives the updates a processor of their own rather than time-slicing them with compute
# a second time.
REPLAY_OPTIONS = SimOptions(ddp_first_bucket_bytes=None, updates_share_compute=False)


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items)


def _iterations(run: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The traced iterations to replay, each as its ranks' breakdowns: every fully recorded
    iteration where the file has them, else the pictured one (rank 0's alone in older files)."""
    if run.get("iteration_breakdowns"):
        return list(run["iteration_breakdowns"])
    ranks = run.get("rank_breakdowns") or [run["breakdown"]]
    # Older files: the pictured iteration measured on rank 0.
    return [[{**b, "iteration_s": run["iteration_s"]} for b in ranks]]


def steady_iterations(run: dict[str, Any], where: str = "") -> list[list[dict[str, Any]]]:
    """`_iterations(run)` less those that are not steady state: where cadence-dp's default
    plan ran one chunk for `one_chunk_probe["iterations"]` iterations and then switched to
    chunks, the first chunked iteration starts with nothing left to wait for (the one-chunk
    iteration before it waited for its all-reduce and updates), so it is shorter than the
    iterations after it. Files that do not record the probe are replayed whole."""
    iterations = _iterations(run)
    probe = run.get("one_chunk_probe")
    if not probe or probe.get("one_chunk") or not run.get("iteration_breakdowns"):
        return iterations
    numbers = recorded_iterations(run)
    first_chunked = int(probe["iterations"]) + 1  # 1-based, as the file numbers them
    kept = [it for n, it in zip(numbers, iterations, strict=True) if n > first_chunked]
    if not kept:
        raise UserError(
            f"{where}: no steady iteration traced: cadence-dp's first chunked iteration was "
            f"{first_chunked}; trace later steps (`dp-timeline --record-step` "
            f"{first_chunked + 1} or more)"
        )
    return kept


@dataclass(frozen=True)
class ReplayedIteration:
    """One traced iteration of a run and the simulator's prediction of it."""

    strategy: str
    """Simulated strategy ("ddp" or "cadence-dp")."""
    ranks: list[dict[str, Any]]
    """The iteration's breakdown on every rank, as traced."""
    slowest: dict[str, float]
    """The slowest rank's forward, backward and update seconds, which the prediction takes."""
    result: SimResult
    """The simulation of it."""


def replay_file(
    path: str,
    data: dict[str, Any],
    profile: Profile,
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    options: SimOptions | None = None,
    calibrated: AlphaBeta | None = None,
    link_bucket: bool = False,
) -> Iterator[ReplayedIteration]:
    """Every steady traced iteration of the capped dp-timeline file `data` (read from `path`),
    run by run, simulated from the compute its slowest rank took, with `profile`'s split over
    blocks; `calibrated` gives the links their alphas (`cap_link`), `link_bucket` their token
    bucket (`emulated_options`)."""
    from cadence.netem import parse_bandwidth

    cfg = data["config"]
    model, cap = str(cfg["model"]), str(cfg["cap"])
    bps = parse_bandwidth(cap)
    params = model_params(model)
    param_bytes = sum(p.nbytes for p in params)
    arrival_order = zoo_arrival_order(model)  # one backward pass of the model: once per file
    link = cap_link(bps, payload_fraction, calibrated)
    replay_options = dataclasses.replace(options or REPLAY_OPTIONS, updates_share_compute=False)
    sim_options = emulated_options(replay_options, bps, payload_fraction, link_bucket)
    bucket = int(float(cfg.get("ddp_bucket_mb", 25.0)) * 2**20)
    for run_name, strategy in _RUNS.items():
        run = data["runs"].get(run_name)
        if run is None:
            continue
        # The plan the run's cadence-dp engine ran (files from before it was recorded: the
        # simulator plans as the runtime would).
        plan = DPPlan.from_json(run["plan"]) if "plan" in run else None
        if plan is not None and len(plan.params) != len(params):
            raise UserError(f"{path}: its plan is not of {model!r}'s parameters")
        for ranks in steady_iterations(run, path):
            # Each rank's compute where recorded: the step waits for the slowest one's.
            slowest = {k: max(b[k] for b in ranks) for k in _COMPUTE}
            # No buffer broadcast: the traced forward already holds DDP's.
            setup = Setup(
                profile=traced_profile(profile, slowest["forward_s"], slowest["backward_s"]),
                params=params,
                world_size=int(cfg.get("workers", 2)),
                link=link,
                description=f"{model} {cap}",
                update_s_per_byte=slowest["updates_s"] / param_bytes,
                arrival_order=arrival_order,
            )
            result, _ = run_strategy(
                setup,
                strategy,
                recorded_threshold(cfg),
                None,
                bucket,
                sim_options,
                reorder_k=cfg.get("reorder_k"),
                dp_plan=plan,
            )
            yield ReplayedIteration(strategy, ranks, slowest, result)


def predict_timelines(
    paths: Sequence[str],
    profiles: dict[str, Profile],
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    options: SimOptions | None = None,
    calibrated: AlphaBeta | None = None,
    link_bucket: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows of traced vs predicted iteration, skipped files as text); `calibrated` gives the
    links their alphas (`cap_link`), `link_bucket` their token bucket (`emulated_options`)."""
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
        replayed = list(replay_file(path, data, profiles[model], payload_fraction, options,
                                    calibrated, link_bucket))  # fmt: skip
        for strategy in dict.fromkeys(r.strategy for r in replayed):
            mine = [r for r in replayed if r.strategy == strategy]
            mean_predicted = _mean(r.result.iteration_s for r in mine)
            # A rank's iteration boundaries shift against another's (a fast rank starts its
            # next forward and waits there): the ranks' mean is the step.
            mean_measured = _mean(_mean(float(b["iteration_s"]) for b in r.ranks) for r in mine)
            rows.append(
                {
                    "run": f"{Path(path).name}:{model}",
                    "model": model,
                    "strategy": strategy,
                    "bandwidth": cap,
                    "workers": int(cfg.get("workers", 2)),
                    "iterations": len(mine),
                    "measured_s": mean_measured,
                    "predicted_s": mean_predicted,
                    "error": (mean_predicted - mean_measured) / mean_measured,
                    "optimizer_step_s": _mean(r.slowest["updates_s"] for r in mine),
                    "compute_s": _mean(
                        r.slowest["forward_s"] + r.slowest["backward_s"] for r in mine
                    ),  # fmt: skip
                    "wire_s": mine[-1].result.wire_s,
                }
            )
    return rows, skipped
