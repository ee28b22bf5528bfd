"""Re-plan `--schedule auto` during training: `--replan-every N` and `--replan-file PATH`.

Between two steps, identically on every rank, the trainer asks `Replanner.reason(step)` whether
to re-plan. Every N steps it is yes on every rank without any message (the step count is the
same everywhere). With a request file, rank 0 looks for the file before each step (and deletes
it: one touch, one re-plan) and a one-integer all-reduce tells the others; that collective is
only issued when `--replan-file` is given.

A re-plan probes the stage link again, runs the planner on the profiles and stage timings
measured at start (`PlanInputs`: measuring is the slow part and the compute has not changed,
the network has) and keeps the
stage ranges (the weights live on their stage), so only the schedule and the micro-batch count
may change. Rank 0 decides and broadcasts a `Replan`; every rank then switches its executor to
the new pick when it differs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from cadence.comm import all_reduce_sum, broadcast_object
from cadence.comm.cost import AlphaBeta
from cadence.config import TrainConfig
from cadence.pipeline.auto import LinkProbe, PlanInputs, plan_record
from cadence.pipeline.executor import PipelineExecutor
from cadence.pipeline.schedule import build_schedule


@dataclass(frozen=True)
class Replan:
    """One re-plan: what was probed, what ran before and what runs from the next step on."""

    step: int
    """Steps finished before this re-plan (the pick below runs from step `step` + 1 on)."""
    reason: str
    """`every N` (the period) or `requested` (the request file appeared)."""
    probed: bool
    """The link was measured (False with one stage or one rank: a free link is assumed)."""
    bandwidth_bytes_per_s: float
    """Probed link rate between stages 0 and 1 (inf when not probed)."""
    latency_s: float
    """Probed per-message latency."""
    old_schedule: str
    """Schedule that ran before."""
    old_microbatches: int
    """Micro-batch count that ran before."""
    old_predicted_s: float
    """Simulated step time of the old pick under the newly probed link (nan if the planner
    failed)."""
    new_schedule: str
    """Schedule picked now (the old one when the planner failed)."""
    new_microbatches: int
    """Micro-batch count picked now."""
    new_predicted_s: float
    """Simulated step time of the new pick under the newly probed link."""
    error: str | None = None
    """The planner's one-line error (the old pick then stays), else None."""

    @property
    def switched(self) -> bool:
        """The executor changes schedule or micro-batch count from the next step on."""
        return (self.old_schedule, self.old_microbatches) != (
            self.new_schedule, self.new_microbatches,
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "switched": self.switched}

    def line(self) -> str:
        """One line for rank 0's output."""
        head = f"pipeline re-plan at step {self.step} ({self.reason}): "
        if self.probed:
            head += (
                f"link {self.bandwidth_bytes_per_s / 1e6:.1f} MB/s, "
                f"latency {self.latency_s * 1e3:.2f} ms; "
            )
        else:
            head += "no link to probe; "
        old = f"{self.old_schedule} x {self.old_microbatches}"
        if self.error is not None:
            return head + f"keep {old}: {self.error}"
        if not self.switched:
            return head + f"keep {old} ({self.new_predicted_s * 1e3:.1f} ms predicted)"
        return head + (
            f"switch {old} ({self.old_predicted_s * 1e3:.1f} ms) -> {self.new_schedule} x "
            f"{self.new_microbatches} ({self.new_predicted_s * 1e3:.1f} ms predicted)"
        )


def decide(
    record: dict[str, Any] | str,
    step: int,
    reason: str,
    old: tuple[str, int],
    link: AlphaBeta | None,
) -> Replan:
    """The `Replan` from the planner's record (or its error line), the pick that ran and the
    probed link (None: not probed)."""
    beta = link.beta_s_per_byte if link is not None else 0.0
    rate, latency = (1.0 / beta if beta else float("inf")), (link.alpha_s if link else 0.0)
    if isinstance(record, str):
        nan = float("nan")
        return Replan(
            step=step, reason=reason, probed=link is not None, bandwidth_bytes_per_s=rate,
            latency_s=latency, old_schedule=old[0], old_microbatches=old[1],
            old_predicted_s=nan, new_schedule=old[0], new_microbatches=old[1],
            new_predicted_s=nan, error=record,
        )  # fmt: skip
    best = record["best"]
    before = [
        c["predicted_s"] for c in record["candidates"]
        if (c["schedule"], c["microbatches"]) == old
    ]
    return Replan(
        step=step,
        reason=reason,
        probed=link is not None,
        bandwidth_bytes_per_s=rate,
        latency_s=latency,
        old_schedule=old[0],
        old_microbatches=old[1],
        old_predicted_s=before[0] if before else float("nan"),
        new_schedule=best["schedule"],
        new_microbatches=best["microbatches"],
        new_predicted_s=best["predicted_s"],
    )


def consume_request(path: Path) -> bool:
    """Whether the request file exists; deletes it, so each touch asks once."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


class Replanner:
    """When to re-plan, and the re-planning itself (a collective: every rank calls both)."""

    def __init__(
        self,
        config: TrainConfig,
        *,
        replicas: int,
        is_main: bool,
        ranges: tuple[tuple[int, int], ...],
        inputs: PlanInputs | None,
        probe: LinkProbe,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self.is_main = is_main
        self.ranges = ranges
        self.inputs = inputs  # rank 0's, measured once at start
        self.probe = probe
        self.every = config.pipeline.replan_every
        self.request = Path(config.pipeline.replan_file) if config.pipeline.replan_file else None
        self.history: list[Replan] = []
        if self.request is not None and is_main:
            consume_request(self.request)  # a file left from before the start asks nothing

    def reason(self, step: int) -> str | None:
        """Why to re-plan before step `step` + 1 (`step` steps done), or None; the same on
        every rank."""
        if step == 0:  # the start's plan is fresh
            return None
        periodic = self.every > 0 and step % self.every == 0
        if self.request is None:
            return f"every {self.every}" if periodic else None
        asked = self.is_main and consume_request(self.request)
        if periodic:  # a request due now is served by this re-plan: no flag to send
            return f"every {self.every}"
        flag = all_reduce_sum(torch.tensor([1 if asked else 0]))
        return "requested" if int(flag.item()) else None

    def replan(self, step: int, reason: str, old: tuple[str, int]) -> Replan:
        """Probe, plan on the start's measurements with the stage ranges fixed, broadcast rank 0's
        `Replan`; recorded in `history` and printed by rank 0."""
        link = self.probe()
        found: Replan | None = None
        if self.is_main:
            assert self.inputs is not None
            record = plan_record(self.inputs, self.config, self.replicas, link, self.ranges)
            found = decide(record, step, reason, old, link)
        result: Replan = broadcast_object(found)
        self.history.append(result)
        if self.is_main:
            print(result.line(), flush=True)
        return result


def switch_executor(
    executor: PipelineExecutor, schedule: str, microbatches: int, recompute: bool
) -> PipelineExecutor:
    """A fresh executor on the same stage module, ranks and groups running the new pick
    (fresh, so both neighbours exchange the new micro-batch shape again)."""
    plan = build_schedule(schedule, executor.schedule.num_stages, microbatches, recompute)
    return PipelineExecutor(
        executor.module, plan, executor.stage, executor.loss_fn, ranks=executor.ranks,
        backend="cadence", pp_group=executor.pp_group, dp_group=executor.dp_group,
    )  # fmt: skip
