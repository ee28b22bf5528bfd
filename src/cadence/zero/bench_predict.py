"""The simulator's prediction of each `cadence bench zero` job, beside what the job measured.

The bench profiles the model at the per-worker batch in its own process before the runs (one
thread, as each worker runs) and simulates every job as its executor runs it: a ZeRO job from
the plan its `JobSpec` configures (`sim_plan`, 1-bit Adam's codec priced from the profile),
DDP with its own adapter, on links of the cap's TCP payload rate. FSDP2 and DeepSpeed have no
adapter and get no prediction. The predictions assume a core per rank; on a machine whose
ranks share cores the measured jobs are slower.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadence.zero.bench_worker import JobSpec

if TYPE_CHECKING:
    from cadence.sim.zero_graph import ZeroSimPlan


def sim_plan(spec: JobSpec) -> ZeroSimPlan:
    """The `ZeroSimPlan` of a ZeRO job: what its `ZeroConfig` tells the executor to do."""
    from cadence.sim.zero_graph import ZeroSimPlan

    return ZeroSimPlan.from_config(spec.zero_config())


def predict_jobs(
    specs: list[JobSpec], profile_path: str | Path, workers: int, bandwidth: str
) -> dict[str, float | None]:
    """Each job's predicted iteration, None where it has no simulator adapter. The bench asks
    before its runs, so a job the simulator cannot take fails before minutes of training."""
    from cadence.sim.api import DDP_BUCKET_BYTES
    from cadence.sim.command import make_setup, run_strategy
    from cadence.sim.options import SimOptions

    setup = make_setup(
        model=specs[0].model, workers=workers, bandwidth=bandwidth,
        profile_path=str(profile_path), echo=lambda _: None,
    )  # fmt: skip
    predicted: dict[str, float | None] = {}
    for spec in specs:
        predicted[spec.name] = None
        if spec.kind in ("ddp", "zero"):
            zero = sim_plan(spec) if spec.kind == "zero" else None
            result, _ = run_strategy(
                setup, spec.kind, None, None, DDP_BUCKET_BYTES, SimOptions(), zero=zero
            )
            predicted[spec.name] = result.iteration_s
    return predicted


def attach_predictions(rows: list[dict[str, Any]], predicted: dict[str, float | None]) -> None:
    """Add `predicted_iteration_s` and `prediction_error` (predicted / measured - 1) to every
    row, None where the job has no prediction."""
    for row in rows:
        guess = predicted[row["job"]]
        row["predicted_iteration_s"] = guess
        row["prediction_error"] = None if guess is None else guess / row["median_iteration_s"] - 1
