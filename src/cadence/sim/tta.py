"""Time to a target loss: `cadence plan tta` ranks methods by predicted steps x seconds.

The simulator prices a step of each method (`cadence.sim.methods.method_step_s`); how many
steps a method needs to reach the loss is not something it can know. That comes from a pilot
(a measured curve or count per method, `read_pilot`) or from the user (`parse_steps`). A
method whose update equals DDP's (cadence-dp without compression: parity with DDP is its
contract) takes DDP's count; any other method without data is shown as needing a pilot and
is not ranked: no convergence figure is ever invented.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cadence.errors import UserError
from cadence.sim.methods import StepEstimate, parse_method

PILOT = "pilot"
USER = "user"
AS_DDP = "= ddp (same update)"
NEEDS_PILOT = "needs pilot"
NOT_REACHED = "not reached in pilot"
SAME_AS_DDP = ("cadence-dp",)
"""Methods whose every update equals DDP's."""


@dataclass(frozen=True)
class Steps:
    """Steps one method needs to the target, and where that figure came from."""

    steps: int | None
    """None: not known (NEEDS_PILOT) or the pilot never got there (NOT_REACHED)."""
    source: str
    """PILOT, USER, AS_DDP, NEEDS_PILOT or NOT_REACHED."""


HOLD_WITHIN = 0.01
"""A run reaches the target loss at the first evaluation at or below it after which every
evaluation to the end stays within this share above it: a dip the run climbs back out of does
not count, so a method that reaches the target (DDP's final loss, in `cadence bench tta`) ends
within 1% of it."""


def reached_at(losses: Sequence[float], target: float) -> int | None:
    """Index of the first of `losses` (evaluations in order) at or below `target` from which
    all the rest stay at most `target` x (1 + `HOLD_WITHIN`); None if there is none."""
    bound = target * (1 + HOLD_WITHIN)
    start = len(losses)  # the evaluations from `start` on all hold the bound
    while start > 0 and math.isfinite(losses[start - 1]) and losses[start - 1] <= bound:
        start -= 1
    return next((i for i in range(start, len(losses)) if losses[i] <= target), None)


def steps_to_target(curve: Sequence[Sequence[float]], target: float) -> int | None:
    """The step of `curve` ((step, loss) pairs, in step order) where it reaches `target` and
    holds it (`reached_at`); None if it does not."""
    i = reached_at([loss for _, loss in curve], target)
    return None if i is None else int(curve[i][0])


FORECAST = "forecast from pilot"
TARGET_STEPS = "ddp (--target-steps)"
BEYOND_TARGET = "forecast past ddp's"
UNRESOLVED = "within the pilot's noise"
PILOT_TOO_SHORT = "pilot too short for it"


def forecast(
    curves: Mapping[str, Sequence[Sequence[float]]], target_steps: int
) -> tuple[float | None, dict[str, Steps]]:
    """Each method's steps to the loss DDP reaches in `target_steps` steps, from a pilot's
    curves ((step, loss) in step order, DDP's among them) that may stop short of it; and that
    loss where the pilot shows it (None where it is forecast).

    Where DDP's curve gets to `target_steps`, the target is its loss at its first evaluation
    there or after and every curve up to `target_steps` is read at it (`steps_to_target`).
    Otherwise each method's steps are forecast from its pace against DDP's at the pilot's end,
    where it is nearest the target. Over the pilot's second half, past the first steps'
    transients, each curve is fitted as a + b ln(step) (the least curve that bends as a falling
    loss slows; the fit averages the evaluations' noise); a method's pace is DDP's step at
    which DDP's fit reaches the method's fitted loss at the pilot's last step, over that step;
    it needs `target_steps` / pace steps (a method with one evaluation there: that one). A
    forecast within `HOLD_WITHIN` past `target_steps` is `target_steps`. One further past is
    not ranked: the target is DDP's loss from the same samples, and the pilot says nothing of
    the steps after them. Nor is one the pilot cannot tell from that: DDP's evaluations
    scatter about their fit (the root mean square of their relative residuals, the pilot's
    noise), and a method whose fitted loss raised by that share would need more steps has a
    pace the pilot did not resolve (`UNRESOLVED`). A method with DDP's update (`SAME_AS_DDP`)
    takes DDP's steps."""
    if "ddp" not in curves or not curves["ddp"]:
        raise UserError("--target-steps counts to ddp's loss: the pilot needs a ddp curve")
    ddp = [(float(s), float(loss)) for s, loss in curves["ddp"]]
    length = ddp[-1][0]
    if length >= target_steps:
        return _read_at_steps(curves, ddp, target_steps)
    late_ddp = [(s, loss) for s, loss in ddp if s >= length / 2]
    fit = _log_fit(late_ddp)
    if fit is None or fit[1] >= 0:
        raise UserError(
            f"the pilot is too short to forecast from: ddp's test loss must fall over its second "
            f"half (steps {length / 2:g}-{length:g}, two evaluations or more); run a longer "
            "pilot, or give --steps-to-target"
        )
    noise = _scatter(late_ddp, *fit)
    out: dict[str, Steps] = {}
    for name, curve in curves.items():
        if name == "ddp":
            out[name] = Steps(target_steps, TARGET_STEPS)
        elif name in SAME_AS_DDP:
            out[name] = Steps(target_steps, AS_DDP)
        else:
            late = [(float(s), float(loss)) for s, loss in curve if length / 2 <= s <= length]
            out[name] = _forecast_one(late, fit, noise, target_steps)
    return None, out


def _read_at_steps(
    curves: Mapping[str, Sequence[Sequence[float]]],
    ddp: Sequence[tuple[float, float]],
    target_steps: int,
) -> tuple[float, dict[str, Steps]]:
    """A pilot that gets to `target_steps`: DDP's loss at its first evaluation there or after,
    and each curve up to `target_steps` read at it."""
    target = next(loss for s, loss in ddp if s >= target_steps)
    out = {}
    for name, curve in curves.items():
        n = steps_to_target([p for p in curve if p[0] <= target_steps], target)
        out[name] = Steps(n, PILOT if n is not None else NOT_REACHED)
    return target, out


def _forecast_one(
    late: Sequence[tuple[float, float]],
    ddp_fit: tuple[float, float],
    noise: float,
    target_steps: int,
) -> Steps:
    """One method's forecast from its evaluations in the pilot's second half (`forecast`)."""
    if not late:
        return Steps(None, PILOT_TOO_SHORT)
    a, b = ddp_fit
    end = late[-1][0]
    own = _log_fit(late)
    loss = own[0] + own[1] * math.log(end) if own is not None else late[-1][1]

    def steps_at(loss: float) -> float:  # DDP's step at that loss, over `end`: the pace
        pace = math.exp(min((loss - a) / b, 700.0)) / end
        return target_steps / pace if pace > 0 else math.inf

    allowed = target_steps * (1 + HOLD_WITHIN)
    n = steps_at(loss)
    if n > allowed:
        return Steps(None, BEYOND_TARGET)
    if steps_at(loss * (1 + noise)) > allowed:
        return Steps(None, UNRESOLVED)
    return Steps(min(math.ceil(n), target_steps), FORECAST)


def _scatter(points: Sequence[tuple[float, float]], a: float, b: float) -> float:
    """Root mean square of `points`' losses relative to the fit a + b ln(step), over their
    degrees of freedom (0 where the fit's two parameters leave none)."""
    if len(points) <= 2:
        return 0.0
    squares = [((loss - (a + b * math.log(s))) / (a + b * math.log(s))) ** 2 for s, loss in points]
    return math.sqrt(sum(squares) / (len(points) - 2))


def _log_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(a, b) of the least-squares loss = a + b ln(step) through `points`; None with fewer
    than two distinct steps."""
    xs = [math.log(s) for s, _ in points if s > 0]
    ys = [loss for s, loss in points if s > 0]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def parse_steps(text: str) -> dict[str, int]:
    """`ddp=400,diloco:H16=520` as {method name: steps}; bad entries: a one-line UserError."""
    out: dict[str, int] = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, eq, count = item.rpartition("=")
        if not eq or not count.strip().isdigit() or int(count) < 1:
            raise UserError(
                f"--steps-to-target takes METHOD=N with N >= 1, comma-separated; got {item!r}"
            )
        out[parse_method(name).name] = int(count)
    return out


def read_pilot(
    data: Mapping[str, Any], target: float | None, target_steps: int | None = None
) -> tuple[float | None, dict[str, Steps]]:
    """The target and each method's steps from a pilot's JSON: `{"target_loss": L, "methods":
    {name: {"steps_to_target": N} or {"curve": [[step, loss], ...]}}}` (what `cadence bench
    tta` writes). `target` (the user's) overrides the pilot's; a count measured for another
    target is then refused, a curve is read at the new one. With `target_steps` the target is
    DDP's loss after that many steps, and the curves are read or forecast to it (`forecast`;
    the target is then None where the pilot stops short of it)."""
    methods = data.get("methods")
    if not isinstance(methods, Mapping) or not methods:
        raise UserError('the pilot names no methods: expected {"methods": {name: {...}}}')
    if target_steps is not None:
        if target is not None:
            raise UserError("give --target-loss or --target-steps, not both")
        curves = {}
        for name, entry in methods.items():
            if "curve" not in entry:
                raise UserError(f"--target-steps reads curves: the pilot's {name} has none")
            curves[parse_method(name).name] = entry["curve"]
        return forecast(curves, target_steps)
    own = data.get("target_loss")
    if target is None:
        if own is None:
            raise UserError("give --target-loss or --target-steps: the pilot states no target")
        target = float(own)
    out: dict[str, Steps] = {}
    for name, entry in methods.items():
        key = parse_method(name).name
        if "curve" in entry:
            n = steps_to_target(entry["curve"], target)
            out[key] = Steps(n, PILOT if n is not None else NOT_REACHED)
        elif "steps_to_target" in entry:
            if own is not None and float(own) != target:
                raise UserError(
                    f"the pilot's {name} steps are for loss {own}, not {target}: give its "
                    "curve, or drop --target-loss"
                )
            n = entry["steps_to_target"]
            out[key] = Steps(int(n), PILOT) if n is not None else Steps(None, NOT_REACHED)
        else:
            raise UserError(f"the pilot's {name} has neither steps_to_target nor curve")
    return target, out


def load_pilot(
    path: str, target: float | None, target_steps: int | None = None
) -> tuple[float | None, dict[str, Steps], int | None]:
    """`read_pilot` of the JSON file at `path` (unreadable: a one-line UserError), and the
    global batch the pilot ran at where it says (`global_batch`)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read the pilot {path}: {e}") from None
    if not isinstance(data, Mapping):
        raise UserError(f"the pilot {path} is not a JSON object")
    batch = data.get("global_batch")
    return (*read_pilot(data, target, target_steps), None if batch is None else int(batch))


def convergence(
    names: Sequence[str], pilot: Mapping[str, Steps], user: Mapping[str, int]
) -> dict[str, Steps]:
    """Each method's steps: the user's figure first, then the pilot's, then DDP's for a
    method with DDP's update, else NEEDS_PILOT."""
    out: dict[str, Steps] = {}
    for name in names:
        if name in user:
            out[name] = Steps(user[name], USER)
        elif name in pilot:
            out[name] = pilot[name]
        else:
            out[name] = Steps(None, NEEDS_PILOT)
    ddp = out.get("ddp")
    for name in names:
        if out[name].source == NEEDS_PILOT and name in SAME_AS_DDP and ddp and ddp.steps:
            out[name] = Steps(ddp.steps, AS_DDP)
    return out


@dataclass(frozen=True)
class Row:
    """One method's prediction."""

    estimate: StepEstimate
    steps: Steps

    @property
    def seconds(self) -> float | None:
        """Predicted seconds to the target; None where the steps are unknown."""
        if self.steps.steps is None:
            return None
        return self.estimate.seconds_for(self.steps.steps)

    def to_json(self) -> dict[str, Any]:
        e = self.estimate
        return {
            "method": e.method,
            "step_s": e.step_s,
            "wire_bytes_per_step": e.wire_bytes,
            "steps_to_target": self.steps.steps,
            "steps_source": self.steps.source,
            "seconds_to_target": self.seconds,
            "warmup_steps": e.warmup_steps,
            "assumed": e.assumed,
        }


KEEP_DDP_WITHIN = 0.05
"""DDP stays the pick unless another method is predicted faster by more than this share: the
simulator's mean error on cases it was not fitted to (docs/benchmarks.md, the held-out set),
so a smaller predicted gain is no reason to leave the baseline."""


def rank(estimates: Sequence[StepEstimate], steps: Mapping[str, Steps]) -> list[Row]:
    """Rows with a time to the target, fastest first (DDP first where it is within
    `KEEP_DDP_WITHIN` of the fastest), then those without, in given order."""
    rows = [Row(e, steps[e.method]) for e in estimates]
    known = sorted((r for r in rows if r.seconds is not None), key=lambda r: r.seconds or 0.0)
    ddp = next((r for r in known if r.estimate.method == "ddp"), None)
    if ddp is not None and _within_margin(ddp, known[0]):
        known.remove(ddp)
        known.insert(0, ddp)
    return known + [r for r in rows if r.seconds is None]


def _within_margin(ddp: Row, fastest: Row) -> bool:
    assert ddp.seconds is not None and fastest.seconds is not None
    return ddp.seconds <= fastest.seconds * (1 + KEEP_DDP_WITHIN)


def goal(target: float | None, target_steps: int | None = None) -> str:
    """The target in words: a loss, or DDP's loss after `target_steps` steps."""
    if target is not None:
        return f"loss {target:g}"
    return f"ddp's loss after {target_steps} steps"


def why(rows: Sequence[Row], target: float | str) -> str:
    """One line on the pick; `target` a loss or `goal`'s words."""
    known = [r for r in rows if r.seconds is not None]
    if not known:
        return (
            "no method has steps to the target: run a pilot (`cadence bench tta`, then "
            "--pilot FILE) or give --steps-to-target METHOD=N"
        )
    best = known[0]
    assert best.seconds is not None and best.steps.steps is not None
    text = (
        f"pick {best.estimate.method}: {best.steps.steps} steps x "
        f"{best.estimate.step_s * 1e3:.1f} ms = {best.seconds:.1f} s to "
        f"{goal(target) if isinstance(target, float | int) else target}"
    )
    ddp = next((r for r in known if r.estimate.method == "ddp"), None)
    if ddp is not None and ddp is not best:
        assert ddp.seconds is not None and ddp.steps.steps is not None
        step_gain = ddp.estimate.step_s / best.estimate.step_s
        more = best.steps.steps / ddp.steps.steps
        text += (
            f", {ddp.seconds / best.seconds:.2f}x faster than ddp: its steps are "
            f"{step_gain:.2f}x faster and it needs {more:.2f}x ddp's steps"
        )
    elif best is ddp and len(known) > 1:
        runner = known[1]
        assert runner.seconds is not None and best.seconds is not None
        if runner.seconds < best.seconds:
            gain = best.seconds / runner.seconds - 1
            text += (
                f": {runner.estimate.method} is predicted {gain:.1%} faster, within the "
                f"simulator's error ({KEEP_DDP_WITHIN:.0%}), so the baseline is kept"
            )
        else:
            text += ": no faster step pays for the extra steps it needs"
    waiting = [r.estimate.method for r in rows if r.steps.source == NEEDS_PILOT]
    if waiting:
        text += f"; not ranked without a pilot: {', '.join(waiting)}"
    return text


def table_lines(rows: Sequence[Row]) -> list[str]:
    width = max([14, *(len(r.estimate.method) + 2 for r in rows)])
    lines = [
        f"{'method':<{width}}{'step ms':>9}{'MB/step':>9}{'steps':>8}  {'source':<22}"
        f"{'time to target':>15}"
    ]
    for r in rows:
        e, s = r.estimate, r.steps
        steps = "-" if s.steps is None else str(s.steps)
        seconds = "-" if r.seconds is None else f"{r.seconds:.1f} s"
        lines.append(
            f"{e.method:<{width}}{e.step_s * 1e3:>9.1f}{e.wire_bytes / 1e6:>9.2f}{steps:>8}  "
            f"{s.source:<22}{seconds:>15}"
        )
    return lines
