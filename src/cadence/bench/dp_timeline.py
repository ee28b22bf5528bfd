"""`cadence bench dp-timeline`: one measured iteration of DDP and of cadence-dp, drawn one
above the other on the same time axis (compute, communication and update rows).

Each strategy trains for a few steps in the emulated cluster (or on the loopback with no cap);
rank 0 records real timestamps (`cadence.dp.trace`) around one steady-state iteration. The
picture spans from that iteration's first forward to the later of the next iteration's start
and the end of its own communication and updates; work of the neighbouring iterations that
falls inside the window is drawn faded, since that overlap is what the scheduling is about.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cadence.errors import UserError

NO_CAP = "none"
STRATEGIES = ("ddp", "cadence")
COMPUTE_ALONE = ("compute", "compute-after")
"""The runs with no synchronisation (`DPTimelineConfig.compute_alone`), recorded before and
after the strategies' so that a drift of the machine's speed over the recording falls on
both sides of them; recorded, not drawn."""
ROWS = ("compute", "comm", "update")
ROW_NAMES = {"compute": "compute\n(main thread)", "comm": "all-reduce", "update": "updates"}
COLOURS = {
    "forward-pass": "#c6dbef",
    "forward": "#4292c6",
    "backward": "#fd8d3c",
    "wait": "#d9d9d9",
    "allreduce": "#41ab5d",
    "update": "#807dba",
    "step": "#807dba",
}


@dataclass(frozen=True)
class DPTimelineConfig:
    """What `cadence bench dp-timeline` records."""

    model: str = "vgg16"
    """Model zoo name."""
    cap: str = "400mbit"
    """Link cap; `none` runs on the loopback without an emulated cluster."""
    workers: int = 2
    """Ranks (emulated hosts)."""
    batch_size: int = 64
    """Global batch per step."""
    steps: int = 10
    """Steps per run."""
    record_step: int = 6
    """0-based step pictured; the step before it and the two after are traced too. cadence-dp's
    default plan runs its first four steps (warm-up and `ONE_CHUNK_PROBE_ITERATIONS`) as one
    chunk, and the first chunked step after them starts without the previous step's transfers
    and updates to wait for: from step 6 the traced steps are all steady."""
    threshold_mb: float | None = None
    """cadence-dp threshold; None: cadence-dp's default."""
    reorder_k: int | None = None
    """cadence-dp reorder point."""
    ddp_bucket_mb: float = 25.0
    """DDP bucket size."""
    compute_alone: bool = False
    """Also trace the same steps with no synchronisation, before and after the strategies
    (`COMPUTE_ALONE`: each rank trains alone, all ranks at once, as the benchmarks'
    compute-only turns do): how much each strategy's communication and runtime slow the
    forward and backward passes beside them."""
    threads: int = 1
    """Intra-op threads per worker."""
    master_port: int | None = None
    """Rendezvous port for loopback runs (set by the launcher)."""
    out: str = "results/dp-timeline.png"
    """PNG output; the JSON events go next to it."""

    def __post_init__(self) -> None:
        from cadence.models import model_names
        from cadence.netem import parse_bandwidth

        if self.model not in model_names():
            raise UserError(f"unknown model '{self.model}': choose from {', '.join(model_names())}")
        if self.cap != NO_CAP:
            parse_bandwidth(self.cap)
        if not 1 <= self.record_step <= self.steps - 3:
            raise UserError(
                f"--record-step must be between 1 and --steps - 3 ({self.steps - 3}), "
                f"got {self.record_step}"
            )
        if self.workers < 2 or self.batch_size % self.workers:
            raise UserError("--workers must be >= 2 and divide --batch-size")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DPTimelineConfig:
        return cls(**data)


def _threshold_label(config: DPTimelineConfig, run: dict[str, Any]) -> str:
    """The threshold the run used: as given, or the default the engine chose (from its plan)."""
    if config.threshold_mb is not None:
        return f"{config.threshold_mb:g} MB"
    plan = run.get("plan")
    return f"{plan['threshold_bytes'] / 2**20:.2f} MB default" if plan else "default"


def _record(config: DPTimelineConfig, strategy: str, run_dir: Path) -> dict[str, Any]:
    from cadence.bench._launch import run_workers_on_link
    from cadence.netem import parse_bandwidth

    (run_dir / "config.json").write_text(json.dumps(asdict(config)))
    events = run_dir / f"events-{strategy}.json"
    args = [str(run_dir / "config.json"), str(events), strategy]
    bps = None if config.cap == NO_CAP else parse_bandwidth(config.cap)
    run_workers_on_link(
        bps, config.workers, "cadence.bench.dp_timeline_worker", args, run_dir / strategy,
        config.threads, 900,
    )  # fmt: skip
    from cadence.bench.dp_timeline_worker import peer_events_path

    result: dict[str, Any] = json.loads(events.read_text())
    peers = [json.loads(peer_events_path(events, r).read_text()) for r in range(1, config.workers)]
    # Rank 0's events are pictured; every rank's breakdown is kept (the slowest rank's compute
    # is what a synchronous step waits for).
    result["rank_breakdowns"] = [breakdown(run) for run in (result, *peers)]
    result["iteration_breakdowns"] = iteration_breakdowns([result, *peers])
    return result


def window(run: dict[str, Any]) -> tuple[float, float]:
    """(0, end): from the pictured iteration's start to the later of the next iteration's start
    and the end of the pictured iteration's own work."""
    own = [e["end"] for e in run["events"] if e["iteration"] == run["iteration"]]
    return 0.0, max([run["iteration_s"], *own])


def _union(spans: Sequence[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def breakdown(run: dict[str, Any], iteration: int | None = None) -> dict[str, float]:
    """Seconds of one iteration's work by kind (the main thread's compute, its waiting, the
    time at least one all-reduce was in flight, the updates) and the iteration: the pictured
    one by default, else any recorded one (a run with `starts_s`)."""
    it = run["iteration"] if iteration is None else iteration
    if it == run["iteration"]:
        begin, end = 0.0, run["iteration_s"]
    else:
        begin, end = run["starts_s"][str(it)], run["starts_s"][str(it + 1)]
    own = [e for e in run["events"] if e["iteration"] == it]

    def total(kind: str) -> float:
        return sum(e["end"] - e["start"] for e in own if e["kind"] == kind)

    waits = [e for e in run["events"] if e["kind"] == "wait" and begin <= e["start"] < end]
    in_forward = sum(  # cadence's layers wait for their update inside the forward pass
        w["end"] - w["start"]
        for w in waits
        for f in own
        if f["kind"] == "forward-pass" and f["start"] <= w["start"] < f["end"]
    )
    return {
        "iteration_s": end - begin,
        "forward_s": total("forward-pass") - in_forward,
        "backward_s": total("backward"),
        "wait_s": sum(e["end"] - e["start"] for e in waits),
        "allreduce_in_flight_s": _union(
            [(e["start"], e["end"]) for e in own if e["row"] == "comm"]
        ),
        "updates_s": total("update") + total("step"),
    }


def recorded_iterations(run: dict[str, Any]) -> list[int]:
    """The numbers of a run's fully recorded iterations, those `iteration_breakdowns` holds:
    the ones whose compute and updates all fall inside the recording (`starts_s` also holds
    the start of the last traced iteration, whose communication and updates run past it, and
    of the one after it)."""
    return sorted(int(i) for i in run.get("starts_s", {}))[:-2]


def iteration_breakdowns(ranks: Sequence[dict[str, Any]]) -> list[list[dict[str, float]]]:
    """Every fully recorded iteration's breakdown on every rank ([iteration][rank])."""
    return [[breakdown(run, i) for run in ranks] for i in recorded_iterations(ranks[0])]


PASSES = ("forward_s", "backward_s")
"""A breakdown's compute: its forward and backward passes."""


def slowest_mean_s(
    iterations: Sequence[Sequence[dict[str, float]]], keys: Sequence[str] = PASSES
) -> float:
    """The sum of `keys` on each iteration's slowest rank ([iteration][rank] breakdowns),
    averaged over the iterations (a synchronous step waits for the slowest rank)."""
    per_iteration = [max(sum(b[k] for k in keys) for b in ranks) for ranks in iterations]
    return sum(per_iteration) / len(per_iteration)


def alone_mean_s(runs: dict[str, dict[str, Any]], keys: Sequence[str] = PASSES) -> float:
    """`slowest_mean_s` of the compute-alone runs recorded among `runs` (before and after the
    strategies; files made before the second run have only the first), their mean."""
    alone = [slowest_mean_s(runs[name]["iteration_breakdowns"], keys) for name in COMPUTE_ALONE
             if name in runs]  # fmt: skip
    return sum(alone) / len(alone)


def lanes(spans: Sequence[tuple[float, float]]) -> list[int]:
    """A lane per span so overlapping spans (chunks in flight together) sit side by side."""
    ends: list[float] = []
    out = []
    for start, end in spans:
        lane = next((i for i, e in enumerate(ends) if e <= start + 1e-9), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        out.append(lane)
    return out


def draw(runs: dict[str, dict[str, Any]], titles: dict[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    right = max(window(run)[1] for run in runs.values())
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 2.3 * len(runs) + 0.8), sharex=True)
    axes = list(axes) if len(runs) > 1 else [axes]
    for ax, (name, run) in zip(axes, runs.items(), strict=True):
        it = run["iteration"]
        for row_index, row in enumerate(ROWS):
            events = [e for e in run["events"] if e["row"] == row and e["end"] > 0]
            events = [e for e in events if e["start"] < right]
            lane_of = lanes([(e["start"], e["end"]) for e in events]) if row == "comm" else None
            height = 0.8 / (max(lane_of) + 1) if lane_of else 0.8
            for i, e in enumerate(events):
                lane = lane_of[i] if lane_of else 0
                y = len(ROWS) - 1 - row_index - 0.4 + lane * height
                base = e["kind"] == "forward-pass"
                ax.broken_barh(
                    [(e["start"], e["end"] - e["start"])],
                    (y, height),
                    facecolors=COLOURS.get(e["kind"], "grey"),
                    edgecolors="white" if not base else "none",
                    linewidth=0.3,
                    alpha=1.0 if e["iteration"] == it else 0.35,
                    zorder=1 if base else 2,
                )
        ax.axvline(run["iteration_s"], color="black", linestyle="--", linewidth=1)
        ax.text(run["iteration_s"], len(ROWS) - 0.45, " next iteration", fontsize=8, va="bottom")
        ax.set_yticks(range(len(ROWS)), [ROW_NAMES[r] for r in reversed(ROWS)], fontsize=8)
        ax.set_ylim(-0.6, len(ROWS) - 0.2)
        ax.set_title(titles[name], fontsize=10, loc="left")
    axes[-1].set_xlim(-0.01 * right, 1.01 * right)
    axes[-1].set_xlabel("seconds from the start of the pictured iteration (rank 0)")
    kinds = ("forward", "backward", "wait", "allreduce", "update")
    legend = [Patch(color=COLOURS[k], label=k) for k in kinds]
    legend.append(Patch(color=COLOURS["allreduce"], alpha=0.35, label="neighbouring iterations"))
    fig.legend(handles=legend, loc="lower center", ncol=len(legend), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_dp_timeline(
    config: DPTimelineConfig, command: str, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    from cadence.bench.dp import prepare_out

    out = prepare_out(config.out, config.cap != NO_CAP)
    if config.cap == NO_CAP and config.master_port is None:
        from dataclasses import replace

        from cadence.launch.local import free_port

        config = replace(config, master_port=free_port())
    runs: dict[str, dict[str, Any]] = {}
    run_dir = Path(tempfile.mkdtemp(prefix="cadence-dp-timeline-"))  # kept on failure: logs
    before, after = COMPUTE_ALONE
    recorded = (before, *STRATEGIES, after) if config.compute_alone else STRATEGIES
    for strategy in recorded:
        echo(f"{config.model} @ {config.cap}: recording {strategy}")
        runs[strategy] = _record(config, strategy, run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    titles = {
        "ddp": f"DDP ({config.ddp_bucket_mb:g} MB buckets): iteration "
        f"{runs['ddp']['iteration_s']:.3f} s",
        "cadence": f"cadence-dp (threshold {_threshold_label(config, runs['cadence'])}, K "
        f"{config.reorder_k or 'off'}): iteration {runs['cadence']['iteration_s']:.3f} s",
    }
    for name in STRATEGIES:
        titles[name] = f"{config.model} @ {config.cap}, " + titles[name]
    for run in runs.values():
        run["breakdown"] = breakdown(run)
    report = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "config": asdict(config),
        "runs": runs,
    }
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    draw({name: runs[name] for name in STRATEGIES}, titles, out)
    for name in STRATEGIES:
        echo(titles[name])
        echo("  " + ", ".join(f"{k} {v:.3f}" for k, v in runs[name]["breakdown"].items()))
    if config.compute_alone:
        before_s, after_s = (slowest_mean_s(runs[n]["iteration_breakdowns"]) for n in COMPUTE_ALONE)
        alone = alone_mean_s(runs)
        echo(
            "forward + backward, slowest rank, mean of the traced iterations: alone "
            f"{alone:.3f} s (before {before_s:.3f}, after {after_s:.3f})"
            + "".join(
                f", {name} {slowest_mean_s(runs[name]['iteration_breakdowns']) / alone:.3f}x"
                for name in STRATEGIES
            )
        )
    echo(f"wrote {out} and {out.with_suffix('.json')}")
    return report
