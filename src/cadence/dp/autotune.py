"""Warm-up autotuning of the split/fuse threshold and the reorder point K.

Trials run on the real training iterations: each candidate is switched in at the start of an
iteration, settles for one iteration (its plan is rebuilt from that iteration's timings), then
is timed for `iterations_per_trial` iterations. Every rank runs the same candidate list; the
winner is chosen from rank 0's timings, broadcast once at the end, so all ranks agree.

- exhaustive (the published procedure): threshold grown by `growth` per trial for `trials`
  trials at the starting K, then every K for the best threshold.
- guided: the simulator ranks all those candidates from a profile of the model; only the few
  it predicts fastest are tried for real.
- Either way, when warm-up shows communication already hidden behind compute (the next
  forward never waited for it) or the probed wire too fast to matter, no schedule can gain
  much and only the host's own time is left: the running plan and the cheapest one (every
  gradient in one all-reduce, one optimizer call, autograd's order) are timed and the faster
  stays, so small models spend no more time on synchronisation than DDP does.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from cadence.comm import ops as comm
from cadence.comm.ops import wire_device


@dataclass(frozen=True)
class Candidate:
    """One setting tried during autotuning."""

    threshold_bytes: int
    """Split/fuse threshold."""
    reorder_k: int | None
    """Backward reordering point; None is autograd's order."""


@dataclass(frozen=True)
class TuneResult:
    """What autotuning chose, and what it saw; saved so a later run can skip tuning."""

    method: str
    """exhaustive, guided, hidden (communication hidden or cheap: the running plan and the
    one-all-reduce plan timed, the faster kept), skipped (hidden, nothing else to try) or
    loaded (from a file)."""
    threshold_bytes: int
    """Chosen threshold."""
    reorder_k: int | None
    """Chosen reorder point."""
    trials: int
    """Timed trials (a candidate timed again to confirm it counts once per timing)."""
    iterations: int
    """Training iterations spent tuning."""
    best_iteration_s: float
    """Median iteration time of the chosen candidate (rank 0); NaN when nothing was timed."""
    timings: tuple[tuple[int, int | None, float], ...] = ()
    """(threshold, K, median seconds) of every timed candidate, in trial order."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["timings"] = [list(t) for t in self.timings]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TuneResult:
        data = dict(data)
        data["timings"] = tuple(tuple(t) for t in data.get("timings", ()))
        return cls(**data)

    def save(self, path: str | Path) -> None:
        tmp = Path(path).with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(path)


def load_result(path: str | Path) -> TuneResult | None:
    try:
        return TuneResult.from_json(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        return None


def threshold_trials(start_bytes: int, trials: int, growth: float) -> list[int]:
    """`trials` thresholds from `start_bytes`, each `growth` times the previous (deduplicated)."""
    values: list[int] = []
    for i in range(trials):
        value = max(1, int(round(start_bytes * growth**i)))
        if value not in values:
            values.append(value)
    return values


def k_trials(num_layers: int) -> list[int | None]:
    """Every reorder point: None (= K at the last layer, the ordinary order), then 1..L-1."""
    return [None, *range(1, num_layers)]


class Autotuner:
    """Drives the trials from the engine's hook at the start of every training forward."""

    def __init__(
        self,
        method: str,
        initial: Candidate,
        thresholds: Sequence[Candidate] | Callable[[], Sequence[Candidate]],
        reorder_points: Callable[[Candidate], list[Candidate]],
        apply: Callable[[Candidate], None],
        waited_s: Callable[[], float],
        broadcast: bool,
        iterations_per_trial: int = 2,
        warmup_iterations: int = 2,
        on_done: Callable[[TuneResult], None] | None = None,
        hidden_fraction: float = 0.02,
        clock: Callable[[], float] = time.perf_counter,
        cheapest: Candidate | None = None,
        wire_s: float | None = None,
        cheap_wire_fraction: float = 0.0,
        confirm_rounds: int = 0,
    ):
        self.method = method
        self._initial = initial
        # What runs when communication is already hidden: the plan with the least work for
        # the host (one all-reduce, one optimizer call), as DDP would; None keeps `initial`.
        self._cheapest = cheapest
        self._wire_s = wire_s  # one all-reduce of every gradient at the probed link rate
        self._cheap_wire_fraction = cheap_wire_fraction
        # Listed when the trials start, after the warm-up: a guided ranking can then plan
        # from that warm-up's measured gradient order, and is not run when nothing is tried.
        self._thresholds = thresholds
        self._queue: list[Candidate] = []
        self._reorder_points: Callable[[Candidate], list[Candidate]] | None = reorder_points
        self._apply = apply
        self._waited_s = waited_s
        self._broadcast = broadcast
        self._per_trial = iterations_per_trial
        self._warmup = warmup_iterations
        self._on_done = on_done
        self._hidden_fraction = hidden_fraction
        self._clock = clock
        self._starts: list[float] = []
        self._trial: Candidate | None = None
        self._trial_start = 0  # index into _starts of the current trial's first iteration
        self._timings: list[tuple[Candidate, float]] = []
        self._wait_start = 0.0
        # Rounds of initial-vs-winner timings after the trials (not for exhaustive tuning).
        self._confirm_rounds = confirm_rounds
        self._finalists: tuple[Candidate, Candidate] | None = None
        self.result: TuneResult | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    def before_forward(self) -> None:
        """Called at the start of every training forward (main thread, between iterations)."""
        if self.done:
            return
        self._starts.append(self._clock())
        n = len(self._starts)
        if n == 1:
            self._wait_start = self._waited_s()
        if n < self._warmup + 1:
            return
        if n == self._warmup + 1:
            if not self._comm_hidden():
                thresholds = self._thresholds
                self._queue = list(thresholds() if callable(thresholds) else thresholds)
                self._next_trial()
            elif self._cheapest is None or self._cheapest == self._initial:
                self._finish("skipped", None)
            else:
                # Nothing for a schedule to win; what remains is the host's own time. One
                # all-reduce and one optimizer call cost the least Python per step but expose
                # the transfer a pipelined plan hides (vgg16: 1.27 s against 1.16 s at no cap),
                # so both are timed and the faster stays.
                self.method = "hidden"
                self._queue = [self._initial, self._cheapest]
                self._reorder_points = None
                self._next_trial()
            return
        # A trial: one settling iteration (its plan is rebuilt from it), then timed ones.
        if n - 1 - self._trial_start < 1 + self._per_trial:
            return
        starts = self._starts[self._trial_start + 1 :]
        periods = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert self._trial is not None
        self._timings.append((self._trial, statistics.median(periods)))
        self._next_trial()

    def _comm_hidden(self) -> bool:
        """Did warm-up forwards not wait for communication, or is the wire so fast that no
        schedule can gain much? Decided on rank 0's figures."""
        span = self._starts[-1] - self._starts[0]
        waited = self._waited_s() - self._wait_start
        period = span / max(1, len(self._starts) - 1)
        cheap = self._wire_s is not None and self._wire_s < self._cheap_wire_fraction * period
        hidden = torch.tensor(
            [1.0 if waited < self._hidden_fraction * span or cheap else 0.0], device=wire_device()
        )
        if self._broadcast:
            comm.broadcast(hidden, src=0)
        return bool(hidden.item())

    def _next_trial(self) -> None:
        if not self._queue and self._reorder_points is not None:
            # Thresholds done: enumerate K at the best one.
            best = self._agreed_best() if self._timings else self._initial
            tried = {c for c, _ in self._timings}
            self._queue = [c for c in self._reorder_points(best) if c not in tried]
            self._reorder_points = None
        if not self._queue:
            winner = self._agreed_best() if self._timings else None
            if winner is None or winner == self._initial or not self._confirm():
                self._finish(self.method, winner)
                return
            self._finalists = (self._initial, winner)
            self._queue = [self._initial, winner] * self._confirm_rounds
        self._trial = self._queue.pop(0)
        self._trial_start = len(self._starts) - 1
        self._apply(self._trial)

    def _confirm(self) -> bool:
        """Whether the winner is to be timed again against the starting setting."""
        return self._confirm_rounds > 0 and self._finalists is None and self.method != "exhaustive"

    def _median_s(self, candidate: Candidate) -> float:
        return statistics.median(t for c, t in self._timings if c == candidate)

    def _agreed_best(self) -> Candidate:
        """Rank 0's fastest candidate so far, by the median of its timings (every rank has the
        same candidate list)."""
        seconds = torch.tensor(
            [t for _, t in self._timings], dtype=torch.float64, device=wire_device()
        )
        if self._broadcast:
            comm.broadcast(seconds, src=0)
        self._timings = [(c, t) for (c, _), t in zip(self._timings, seconds.tolist(), strict=True)]
        # Once confirming, only the two timed again compete: another candidate's one lucky
        # trial must not win on a figure nobody checked.
        candidates = self._finalists or dict.fromkeys(c for c, _ in self._timings)
        return min(candidates, key=self._median_s)

    def _finish(self, method: str, best: Candidate | None) -> None:
        chosen = best or self._initial
        self._apply(chosen)
        timed = any(c == chosen for c, _ in self._timings)
        self.result = TuneResult(
            method=method,
            threshold_bytes=chosen.threshold_bytes,
            reorder_k=chosen.reorder_k,
            trials=len(self._timings),
            iterations=len(self._starts),
            best_iteration_s=self._median_s(chosen) if timed else math.nan,
            timings=tuple((c.threshold_bytes, c.reorder_k, t) for c, t in self._timings),
        )
        if self._on_done is not None:
            self._on_done(self.result)


def _rank0_then_broadcast(compute: Callable[[], Any], broadcast: bool) -> Any:
    """Compute on rank 0 only and hand the result to every rank (simulated timings differ per
    rank; the candidates tried must not)."""
    if not broadcast:
        return compute()
    box = [compute() if dist.get_rank() == 0 else None]
    comm.broadcast_object_list(box, src=0)
    return box[0]


class SimulatedRanking:
    """Guided tuning: ranks candidates by simulated iteration time (cadence.sim)."""

    def __init__(
        self,
        profile: Any,
        params: Sequence[Any],
        world_size: int,
        link_bytes_per_s: float,
        broadcast: bool,
        arrival_order: Callable[[], Sequence[int] | None] | None = None,
    ):
        self._profile = profile
        # Asked for when ranking: the order the runtime's hooks saw the gradients in (ties in
        # the simulated ready times, one block's gradients, are broken by it; see plan_dp).
        self._arrival_order = arrival_order
        self._params = list(params)
        self._gradient_bytes = sum(p.nbytes for p in self._params)
        self._world = world_size
        self._link = link_bytes_per_s
        self._broadcast = broadcast
        self.simulations = 0

    def predict(self, candidate: Candidate, arrival_order: Sequence[int] | None = None) -> float:
        from cadence.dp.plan import default_credit
        from cadence.sim import plan_dp, simulate_dp  # heavy; only guided tuning needs it

        plan = plan_dp(
            self._profile,
            self._params,
            candidate.threshold_bytes,
            default_credit(candidate.threshold_bytes, self._gradient_bytes),
            self._world,
            self._link,
            reorder_k=candidate.reorder_k,
            arrival_order=arrival_order,
        )
        self.simulations += 1
        return float(simulate_dp(self._profile, plan, self._world, self._link).iteration_s)

    def fastest(self, candidates: Sequence[Candidate], count: int) -> list[Candidate]:
        def rank() -> list[Candidate]:
            order = self._arrival_order() if self._arrival_order is not None else None
            scored = sorted(candidates, key=lambda c: (self.predict(c, order), c.threshold_bytes))
            return scored[:count]

        chosen: list[Candidate] = _rank0_then_broadcast(rank, self._broadcast)
        return chosen
