"""What a compression costs inside the training loop, measured on this machine.

The simulator prices a compressed method by its smaller bytes; the rest of what compressing
costs a step (the codec's arithmetic, its Python, the copies into and out of its buffers, its
error feedback, the extra rounds of collectives) is not in a profile. Pricing the factors'
matrix products alone missed most of it: cnn on two hosts without a cap, cadence-dp's PowerSGD
measured 9.7 ms a step against 8.0 ms uncompressed, where the products take 0.1 ms.

So it is measured where it runs: each compressed method and its uncompressed strategy train a
few steps on `workers` local processes over the loopback (no cap, so the wire takes next to
nothing), one thread each, in `PROBE_ROUNDS` rounds that alternate their order (the machine
drifts from run to run); a method's step is the median over the rounds of each run's median
step, and its in-loop cost that minus its strategy's (never below zero). The loopback's own
transfer time is not separated from it: it is small beside the codec's, and compressing only
shortens it. `cadence plan tta --loop-costs FILE` measures once and reuses the file
(`cadence.sim.methods.method_step_s`).

A probe's step is also a floor (`floor_s`): a cap only adds wire time to what the loopback
took, so where the cluster runs as many workers per host as the probes ran processes, no
method is predicted faster than its probe measured. It matters where the profile leaves out
what a step costs beside its blocks: on 4 processes sharing 2 cores, cnn's DDP step took 16 ms
on the loopback and 16.4 ms at 400 mbit, where the simulator priced it at 10.4 ms.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cadence.errors import UserError
from cadence.sim.methods import Method, StepEstimate, parse_method

MEASURED = ("powersgd", "fp16")
"""Compressions whose loop is probed: PowerSGD (both) and the fp16 hook."""
ADDED = ("powersgd",)
"""Compressions whose in-loop cost is added to the simulated step (`overhead_s`): PowerSGD's
work sits between its dependent rounds of all-reduce, so a step pays it in full. The fp16
hook's casts and half-precision sums are only a floor (`floor_s`): on a slow link they hide
behind the transfer (cnn at 20 mbit: its step measured 24.9 ms, about its wire time alone)."""
PROBE_STEPS = 40
"""Steps each probe trains; its median is taken after the uncompressed start."""
PROBE_ROUNDS = 3
"""Runs of every probe, alternating their order."""


@dataclass(frozen=True)
class LoopCosts:
    """Median seconds per step of methods trained briefly over the loopback."""

    model: str
    workers: int
    batch_size: int
    """Global batch the probes trained (the plan's workers x micro-batch)."""
    step_s: dict[str, float]
    """Method name -> median step seconds (the uncompressed strategies among them)."""
    runs_s: dict[str, list[float]] = field(default_factory=dict)
    """Method name -> each round's median step seconds, for their spread."""

    def overhead_s(self, method: Method) -> float | None:
        """Seconds per step `method`'s compression adds in the loop (`ADDED`); None if not
        measured or not added."""
        plain = Method(method.strategy).name
        if method.compression not in ADDED:
            return None
        if method.name not in self.step_s or plain not in self.step_s:
            return None
        return max(0.0, self.step_s[method.name] - self.step_s[plain])

    def floor_s(self, method: Method, workers_per_host: int) -> float | None:
        """The step `method`'s probe took on the loopback: no capped step is faster. Only
        where the probes ran as many processes as the cluster runs workers per host (else
        None, as for a method not probed)."""
        if workers_per_host != self.workers:
            return None
        return self.step_s.get(method.name)


def with_floor(
    estimate: StepEstimate, method: Method, costs: LoopCosts, workers_per_host: int
) -> StepEstimate:
    """`estimate` raised to what `method`'s probe took (`LoopCosts.floor_s`), its warm-up
    steps (PowerSGD's uncompressed start) to its strategy's probe; as it was where neither
    is higher or the probes ran in other conditions."""
    floor = costs.floor_s(method, workers_per_host)
    warm = costs.floor_s(Method(method.strategy), workers_per_host)
    step = max(estimate.step_s, floor or 0.0)
    warmup = estimate.warmup_step_s
    if estimate.warmup_steps:
        warmup = max(warmup, warm or 0.0)
    if step == estimate.step_s and warmup == estimate.warmup_step_s:
        return estimate
    note = estimate.assumed
    if floor is not None and step > estimate.step_s:
        note += f"; raised to the {floor * 1e3:.1f} ms its loop took on the loopback"
    return dataclasses.replace(estimate, step_s=step, warmup_step_s=warmup, assumed=note)


def measured_methods(methods: Sequence[Method]) -> list[Method]:
    """The methods whose in-loop cost is measured, each after its uncompressed strategy."""
    out: list[Method] = []
    for m in methods:
        if m.strategy in ("ddp", "cadence-dp") and m.compression in MEASURED:
            for probe in (Method(m.strategy), m):
                if probe not in out:
                    out.append(probe)
    return out


def probe_step_s(metrics: dict[str, Any], skip: int) -> float:
    """Median of a run's step times after its first `skip` steps (and the loop's own
    untimed warm-up)."""
    times = metrics["iteration_times_s"][max(skip, int(metrics.get("timed_from_step", 0))) :]
    if not times:
        raise UserError(f"a loop-cost probe timed no step after {skip}: give it more steps")
    return float(statistics.median(times))


def train_probe(model: str, method: Method, workers: int, batch_size: int, steps: int) -> Any:
    """One probe: `method` on `workers` local processes, no cap, one thread each."""
    from cadence.bench._train import train_for_bench
    from cadence.config import TrainConfig

    config = TrainConfig.from_flat(
        model=model, workers=workers, batch_size=batch_size, steps=steps, threads=1,
        eval_every_epoch=False, **method.train_flags(),
    )  # fmt: skip
    return train_for_bench(config)


def measure_loop_costs(
    model: str,
    methods: Sequence[Method],
    workers: int,
    batch_size: int,
    *,
    start_step: int = 10,
    steps: int = PROBE_STEPS,
    rounds: int = PROBE_ROUNDS,
    echo: Callable[[str], None] = print,
    train: Callable[[str, Method, int, int, int], Any] = train_probe,
) -> LoopCosts:
    """Probe every method of `measured_methods(methods)` `rounds` times, alternating the
    order; PowerSGD's first `start_step` steps run uncompressed, so each run's median is
    taken after them."""
    probes = measured_methods(methods)
    runs: dict[str, list[float]] = {m.name: [] for m in probes}
    done, total = 0, rounds * len(probes)
    for r in range(rounds):
        for m in probes if r % 2 == 0 else probes[::-1]:
            done += 1
            echo(f"loop cost {done}/{total}: {m.name}, {steps} steps on {workers} processes")
            metrics = train(model, m, workers, batch_size, steps)
            runs[m.name].append(probe_step_s(metrics, start_step + 2))
    found = {name: float(statistics.median(times)) for name, times in runs.items()}
    return LoopCosts(model, workers, batch_size, found, runs)


def save_loop_costs(costs: LoopCosts, path: str | Path) -> None:
    Path(path).write_text(json.dumps(asdict(costs), indent=2) + "\n")


def load_loop_costs(path: str | Path) -> LoopCosts:
    """A saved `LoopCosts`; anything else is a one-line UserError."""
    try:
        data = json.loads(Path(path).read_text())
        runs = data.get("runs_s", {})
        costs = LoopCosts(
            str(data["model"]), int(data["workers"]), int(data["batch_size"]),
            {parse_method(k).name: float(v) for k, v in data["step_s"].items()},
            {parse_method(k).name: [float(x) for x in v] for k, v in runs.items()},
        )  # fmt: skip
    except OSError as exc:
        raise UserError(f"cannot read loop costs {path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UserError(f"{path} is not a `cadence plan tta --loop-costs` file") from None
    return costs


def loop_costs_for(
    path: str | Path,
    model: str,
    methods: Sequence[Method],
    workers: int,
    batch_size: int,
    start_step: int,
    echo: Callable[[str], None] = print,
    train: Callable[[str, Method, int, int, int], Any] = train_probe,
) -> LoopCosts:
    """The loop costs saved at `path` if it exists (for the same model, workers and batch,
    else a one-line UserError) and probes every method that `methods` needs, else measured
    now and saved there."""
    if Path(path).exists():
        costs = load_loop_costs(path)
        if (costs.model, costs.workers, costs.batch_size) != (model, workers, batch_size):
            raise UserError(
                f"{path} holds loop costs of {costs.model} on {costs.workers} processes at "
                f"batch {costs.batch_size}, not {model} on {workers} at {batch_size}: give "
                "another file to measure them"
            )
        missing = [m.name for m in measured_methods(methods) if m.name not in costs.step_s]
        if not missing:
            return costs
        # Probes are compared within one measurement (drift): all of them again.
        echo(f"{path} has no probe of {', '.join(missing)}: measuring the loop costs again")
    costs = measure_loop_costs(
        model, methods, workers, batch_size, start_step=start_step, echo=echo, train=train
    )
    save_loop_costs(costs, path)
    echo(f"saved the loop costs to {path}")
    return costs
