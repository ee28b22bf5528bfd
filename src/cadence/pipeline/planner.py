"""Choose a pipeline schedule and micro-batch split by simulating every candidate.

For each even split of the batch into M micro-batches, the candidates are GPipe and kFkB for
every K dividing M (K = 1 is 1F1B). Each is simulated (`sim.pipeline_adapter`) on the same
stage split under the given network (bandwidth and latency between neighbouring stages, given
or probed at plan time); a candidate fits when its simulated peak memory is within the limit on
every stage. The pick is the fastest that fits (ties: the first tried, i.e. fewer micro-batches,
then GPipe before smaller K). Among the kFkB candidates of one M, memory grows with K, so
"the largest K that fits" is among those tried; a smaller K can still be faster (a smaller
bubble), which is why all are simulated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.pipeline.memory import optimizer_state_factor
from cadence.pipeline.schedule import Schedule, build_schedule
from cadence.pipeline.stages import plan_stages
from cadence.profile import Profile
from cadence.sim.pipeline_adapter import (
    StageCosts,
    analyse_pipeline,
    batch_input_s,
    build_pipeline,
    stage_costs,
    stage_peaks,
)

MAX_MICROBATCHES = 32
"""Largest micro-batch count tried by default (more only adds per-message and per-op cost)."""


@dataclass(frozen=True)
class Candidate:
    """One simulated (schedule, micro-batch split)."""

    schedule: str
    """Schedule name: gpipe, 1f1b or kfkb:K."""
    microbatches: int
    """Micro-batches M per step."""
    microbatch_size: int
    """Samples per micro-batch (batch / M)."""
    predicted_s: float
    """Simulated step time."""
    peak_bytes: tuple[int, ...]
    """Simulated peak memory of each stage."""
    fits: bool
    """Every stage's peak is within the memory limit (True without a limit)."""
    messages: int
    """Point-to-point messages per step (all stages)."""


@dataclass(frozen=True)
class PipelinePlan:
    """Every candidate, fastest first, and the pick."""

    best: Candidate
    """The fastest candidate that fits."""
    candidates: tuple[Candidate, ...]
    """All candidates, fastest first."""
    ranges: tuple[tuple[int, int], ...]
    """Block range of each stage (the split every candidate was simulated on)."""
    batch_size: int
    """Samples per step of one pipeline."""
    bandwidth_bytes_per_s: float
    """Link rate between neighbouring stages used for the prediction."""
    latency_s: float
    """Per-message latency used for the prediction."""
    memory_limit: int | None
    """Bytes each stage may use, or None."""

    def why(self) -> str:
        """One line: the pick against the best of each other schedule family."""
        b = self.best
        parts = [
            f"pick {b.schedule} x {b.microbatches} micro-batches of {b.microbatch_size}: "
            f"{b.predicted_s * 1e3:.1f} ms predicted"
        ]
        for family in ("gpipe", "1f1b", "kfkb"):
            rivals = [
                c for c in self.candidates
                if c.fits and _family(c.schedule) == family and c != b
            ]
            if rivals:
                r = rivals[0]
                gain = 1 - b.predicted_s / r.predicted_s
                parts.append(
                    f"{gain * 100:.1f}% faster than the best {family} "
                    f"({r.schedule} x {r.microbatches}, {r.predicted_s * 1e3:.1f} ms)"
                )
        peak = max(b.peak_bytes)
        limit = f" of the {_fmt(self.memory_limit)} limit" if self.memory_limit else ""
        out = sum(not c.fits for c in self.candidates)
        tail = f"; {out} of {len(self.candidates)} candidates exceed the limit" if out else ""
        parts.append(f"peak {_fmt(peak)} per stage{limit}{tail}")
        return "; ".join(parts)

    def table_lines(self) -> list[str]:
        stages = len(self.ranges)
        head = f"{'schedule':<10}{'M':>4}{'mb':>5}{'msgs':>6}{'pred ms':>10}"
        head += "".join(f"{f'peak s{s}':>12}" for s in range(stages)) + f"{'fits':>6}"
        lines = [head]
        for c in self.candidates:
            row = f"{c.schedule:<10}{c.microbatches:>4}{c.microbatch_size:>5}{c.messages:>6}"
            row += f"{c.predicted_s * 1e3:>10.1f}"
            row += "".join(f"{_fmt(p):>12}" for p in c.peak_bytes)
            row += f"{'yes' if c.fits else 'no':>6}"
            lines.append(row + ("  <- pick" if c == self.best else ""))
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "best": asdict(self.best),
            "why": self.why(),
            "candidates": [asdict(c) for c in self.candidates],
            "ranges": [list(r) for r in self.ranges],
            "batch_size": self.batch_size,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "latency_s": self.latency_s,
            "memory_limit": self.memory_limit,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"


def _family(name: str) -> str:
    return "kfkb" if name.startswith("kfkb") else name


def _fmt(nbytes: float | None) -> str:
    value = float(nbytes or 0)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}B"


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def schedules_for(stages: int, microbatches: int, recompute: bool = False) -> list[Schedule]:
    """GPipe, then kFkB for every K dividing M in increasing K (K = 1: 1F1B). With one
    micro-batch all of them are the same schedule: GPipe alone."""
    if microbatches == 1:
        return [build_schedule("gpipe", stages, 1, recompute)]
    names = ["gpipe"] + ["1f1b" if k == 1 else f"kfkb:{k}" for k in divisors(microbatches)]
    return [build_schedule(n, stages, microbatches, recompute) for n in names]


def microbatch_counts(
    batch_size: int, requested: Sequence[int] | None = None, largest: int = MAX_MICROBATCHES
) -> list[int]:
    """The even splits tried: the requested counts (each must divide the batch), or every
    divisor of the batch up to `largest`."""
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {batch_size})")
    if requested:
        bad = [m for m in requested if m < 1 or batch_size % m]
        if bad:
            raise UserError(
                f"{bad[0]} micro-batches do not divide the batch of {batch_size}: use one of "
                f"{', '.join(map(str, divisors(batch_size)))}"
            )
        return sorted(set(requested))
    return [m for m in divisors(batch_size) if m <= largest]


def plan_pipeline(
    profile: Profile | Sequence[Profile],
    *,
    stages: int,
    batch_size: int,
    link: AlphaBeta,
    memory_limit: int | None = None,
    microbatches: Sequence[int] | None = None,
    recompute: bool = False,
    optimizer: str = "adam",
    update_s_per_byte: float = 0.0,
    ranges: tuple[tuple[int, int], ...] | None = None,
    costs: StageCosts | None = None,
) -> PipelinePlan:
    """Simulate every candidate and pick the fastest that fits `memory_limit` on every stage.

    `profile`: one profile, or several at different batch sizes (better for small micro-batches,
    see `sim.pipeline_adapter.stage_costs`); the stages are balanced on the first. `costs`:
    each stage's compute measured on the stage ranks (`pipeline.stage_probe`, for `ranges`)
    instead of the profiles' (which then give memory only). Raises a one-line UserError
    naming what is possible when no candidate fits.
    """
    if memory_limit is not None and memory_limit < 1:
        raise UserError(f"--memory-limit must be positive (got {memory_limit})")
    profiles = [profile] if isinstance(profile, Profile) else list(profile)
    plan = plan_stages(profiles[0], stages, ranges)
    if costs is not None and len(costs.forward) != stages:
        raise UserError(f"measured costs are for {len(costs.forward)} stages, not {stages}")
    costs = costs or stage_costs(profiles, plan.ranges)
    factor = optimizer_state_factor(optimizer)
    # Every rank reads the whole batch each step: the same for every candidate, so it moves
    # the predicted times, not their order.
    input_s = batch_input_s(profiles[0], batch_size)
    found: list[Candidate] = []
    for m in microbatch_counts(batch_size, microbatches):
        for schedule in schedules_for(stages, m, recompute):
            built = build_pipeline(
                plan, costs, schedule, batch_size // m, link,
                optimizer_factor=factor, update_s_per_byte=update_s_per_byte, input_s=input_s,
            )
            result = analyse_pipeline(built, schedule.name)
            peaks = stage_peaks(result)
            found.append(
                Candidate(
                    schedule=schedule.name,
                    microbatches=m,
                    microbatch_size=batch_size // m,
                    predicted_s=result.iteration_s,
                    peak_bytes=peaks,
                    fits=memory_limit is None or max(peaks) <= memory_limit,
                    messages=built.messages,
                )
            )
    ordered = tuple(sorted(found, key=lambda c: round(c.predicted_s, 9)))  # stable: ties keep order
    fitting = [c for c in ordered if c.fits]
    if not fitting:
        least = min(found, key=lambda c: max(c.peak_bytes))
        hint = "" if recompute else " or add --recompute"
        raise UserError(
            f"no schedule fits --memory-limit {_fmt(memory_limit)} per stage: the smallest "
            f"peak is {_fmt(max(least.peak_bytes))} ({least.schedule} x {least.microbatches} "
            f"micro-batches); use --memory-limit {max(least.peak_bytes)} or more, more "
            f"--stages{hint}"
        )
    return PipelinePlan(
        best=fitting[0],
        candidates=ordered,
        ranges=plan.ranges,
        batch_size=batch_size,
        bandwidth_bytes_per_s=1.0 / link.beta_s_per_byte if link.beta_s_per_byte else float("inf"),
        latency_s=link.alpha_s,
        memory_limit=memory_limit,
    )
