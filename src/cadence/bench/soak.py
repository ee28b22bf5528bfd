"""`cadence bench soak`: long runs stay flat.

Each strategy trains a small zoo model for many steps (bounded by `--steps` and by
`--time-limit`), on an emulated cluster whose links also carry competing TCP traffic (a bulk
transfer each way between hosts 0 and 1). Every rank samples itself and the processes it
started (the parameter servers under `ps`) through the training loop
(`cadence.train.resources`): resident memory, threads, open descriptors and sockets, at the
start step (after warm-up, so one-off allocations are not counted as growth), every few steps
and at the last step. The report is each process's growth from start to end.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from cadence.errors import UserError

NO_CAP = "none"
STRATEGIES = ("cadence-dp", "zero", "ps")
MEMORY_GROWTH_LIMIT = 0.05
"""Resident memory may grow by this fraction from start to end and still count as flat;
threads, descriptors and sockets may not grow at all."""


@dataclass(frozen=True)
class SoakBenchConfig:
    """What `cadence bench soak` runs."""

    strategies: tuple[str, ...] = STRATEGIES
    """`--strategy` values, each one run."""
    model: str = "cnn"
    """Zoo model (small, so thousands of steps take minutes)."""
    cap: str = "1gbit"
    """Link cap of the emulated cluster; `none`: this machine's loopback, no competing
    traffic (no root needed)."""
    contention: bool = True
    """Competing bulk TCP traffic both ways between hosts 0 and 1 (capped links only)."""
    workers: int = 2
    """Ranks (emulated hosts)."""
    batch_size: int = 32
    """Global batch per step."""
    steps: int = 2000
    """Steps per strategy."""
    start_step: int = 100
    """Step of the start sample: allocations that happen once (first epoch, first checkpoint)
    come before it."""
    every: int = 20
    """Steps between samples for the picture."""
    time_limit_s: float = 900.0
    """Wall-clock bound per strategy: a run still going is stopped and reported with the
    steps it reached."""
    out: str = "bench-out/bench-soak.json"
    """JSON output; the PNG goes next to it."""
    run_root: str = "/tmp/cadence-bench-soak"
    """Where the training runs keep their outputs and samples."""

    def __post_init__(self) -> None:
        from cadence.config import check_strategy_name
        from cadence.models import model_names
        from cadence.netem import parse_bandwidth

        for strategy in self.strategies:
            check_strategy_name(strategy)
        if not self.strategies:
            raise UserError("--strategies names no strategy")
        if self.model not in model_names():
            raise UserError(f"unknown model '{self.model}': choose from {', '.join(model_names())}")
        if self.cap != NO_CAP:
            parse_bandwidth(self.cap)
        if self.workers < 2:
            raise UserError(f"--workers must be at least 2, got {self.workers}")
        if self.batch_size % self.workers:
            raise UserError(f"--batch-size {self.batch_size} must divide by --workers")
        if not 1 <= self.start_step < self.steps:
            raise UserError(
                f"--start-step must be between 1 and --steps - 1, got {self.start_step}"
            )
        if self.every < 1 or self.time_limit_s <= 0:
            raise UserError("--every and --time-limit must be positive")


class _TimeUp(Exception):
    """The strategy's time limit passed."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise `_TimeUp` in this (main) thread after `seconds`: the launcher's clean-up then
    stops the workers and the cluster."""

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _train(strategy: str, config: SoakBenchConfig, samples: Path) -> bool:
    """One training run of `strategy` with every rank sampling into `samples`; False where
    the time limit stopped it."""
    from cadence.bench._env import child_environment
    from cadence.config import TrainConfig
    from cadence.launch import launch_local
    from cadence.train.resources import SAMPLES_ENV, encode
    from cadence.train.run import make_run_dir, validate

    train_config = TrainConfig.from_flat(
        model=config.model,
        workers=config.workers,
        batch_size=config.batch_size,
        steps=config.steps,
        strategy=strategy,
        out=config.run_root,
        eval_every_epoch=False,
        threads=1,
    )
    validate(train_config)
    run_dir = make_run_dir(train_config)
    env = {SAMPLES_ENV: encode(samples, config.every, config.start_step)}
    try:
        with ExitStack() as stack:
            stack.enter_context(child_environment(env))
            stack.enter_context(_time_limit(config.time_limit_s))
            if config.cap == NO_CAP:
                launch_local(train_config, run_dir)
            else:
                from cadence.netem import EmulatedCluster, cleanup_on_signals, parse_bandwidth

                stack.enter_context(cleanup_on_signals())
                cluster = stack.enter_context(
                    EmulatedCluster(config.workers, parse_bandwidth(config.cap))
                )
                if config.contention:
                    _compete(cluster, stack)
                launch_local(train_config, run_dir, cluster)
    except _TimeUp:
        return False
    finally:
        (run_dir / "checkpoint.pt").unlink(missing_ok=True)  # only the samples matter here
    return True


def _compete(cluster: Any, stack: ExitStack) -> None:
    """Bulk TCP transfers 1 -> 0 and 0 -> 1 for as long as the run lasts."""
    from cadence.netem import start_background_load

    for src, dst in ((1, 0), (0, 1)):
        stack.enter_context(start_background_load(cluster, src, dst))


def _process_rows(strategy: str, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Start-to-end growth of every rank and of every process a rank started (by pid: a
    process that is new at the end, or gone, shows as such)."""
    rows = []
    for record in records:
        start, end = record["start"], record["end"]
        if start is None or end is None:
            continue
        rows.append(_growth(strategy, f"rank {record['rank']}", start, end))
        for pid, child in start["children"].items():
            late = end["children"].get(pid)
            label = f"rank {record['rank']}: {_short(child['command'])}"
            if late is not None:
                rows.append(_growth(strategy, label, {**child, "step": start["step"]},
                                    {**late, "step": end["step"]}))  # fmt: skip
        for pid, child in end["children"].items():
            if pid not in start["children"]:  # a process started after the start sample
                label = f"rank {record['rank']}: new {_short(child['command'])}"
                empty = {"rss_bytes": 0, "threads": 0, "fds": 0, "sockets": 0}
                rows.append(_growth(strategy, label, {**empty, "step": start["step"]},
                                    {**child, "step": end["step"]}))  # fmt: skip
    return rows


def _short(command: str) -> str:
    """`-m cadence.ps.server` -> `cadence.ps.server`."""
    words = command.split()
    if "-m" in words and words.index("-m") + 1 < len(words):
        return words[words.index("-m") + 1]
    return words[0] if words else "?"


def _growth(
    strategy: str, process: str, start: dict[str, Any], end: dict[str, Any]
) -> dict[str, Any]:
    rss0, rss1 = start["rss_bytes"], end["rss_bytes"]
    row = {
        "strategy": strategy,
        "process": process,
        "start_step": start["step"],
        "end_step": end["step"],
        "rss_start_bytes": rss0,
        "rss_end_bytes": rss1,
        "rss_growth": (rss1 - rss0) / rss0 if rss0 else float("inf"),
        **{f"{k}_start": start[k] for k in ("threads", "fds", "sockets")},
        **{f"{k}_delta": end[k] - start[k] for k in ("threads", "fds", "sockets")},
    }
    row["flat"] = row["rss_growth"] < MEMORY_GROWTH_LIMIT and all(
        row[f"{k}_delta"] <= 0 for k in ("threads", "fds", "sockets")
    )
    return row


def _series(strategy: str, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rank's samples, for the picture: step, resident MiB, descriptors."""
    return [
        {
            "strategy": strategy,
            "process": f"rank {r['rank']}",
            "steps": [s["step"] for s in r["series"]],
            "rss_mib": [s["rss_bytes"] / 2**20 for s in r["series"]],
            "threads": [s["threads"] for s in r["series"]],
            "fds": [s["fds"] for s in r["series"]],
        }
        for r in records
    ]


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| strategy | process | steps | RSS start | RSS end | RSS growth | threads | fds "
        "| sockets | flat |",
        "| --- " * 10 + "|",
    ]
    for r in rows:
        counts = " | ".join(
            f"{r[f'{k}_start']} ({r[f'{k}_delta']:+d})" for k in ("threads", "fds", "sockets")
        )
        lines.append(
            f"| {r['strategy']} | {r['process']} | {r['start_step']}-{r['end_step']} "
            f"| {r['rss_start_bytes'] / 2**20:.1f} MiB | {r['rss_end_bytes'] / 2**20:.1f} MiB "
            f"| {100 * r['rss_growth']:+.2f}% | {counts} | {'yes' if r['flat'] else 'NO'} |"
        )
    return lines


def plot(series: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rss, ax_fds) = plt.subplots(1, 2, figsize=(11, 4))
    for s in series:
        label = f"{s['strategy']}, {s['process']}"
        ax_rss.plot(s["steps"], s["rss_mib"], lw=1, label=label)
        ax_fds.plot(s["steps"], [t + f for t, f in zip(s["threads"], s["fds"], strict=True)],
                    lw=1, label=label)  # fmt: skip
    ax_rss.set_xlabel("step")
    ax_rss.set_ylabel("resident memory (MiB)")
    ax_fds.set_xlabel("step")
    ax_fds.set_ylabel("threads + open descriptors")
    if series:  # none where every run stopped before its start step
        ax_rss.legend(fontsize=7)
    fig.suptitle("cadence bench soak: per-rank resources over a long run, flat is good")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_soak_bench(
    config: SoakBenchConfig, command: str, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    from cadence.bench.dp import prepare_out

    out = prepare_out(config.out, config.cap != NO_CAP, config.run_root)
    started = time.time()
    rows: list[dict[str, Any]] = []
    series: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "config": asdict(config),
        "memory_growth_limit": MEMORY_GROWTH_LIMIT,
        "runs": {},
        "rows": rows,
        "series": series,
    }
    for strategy in config.strategies:
        load = " with competing traffic" if config.cap != NO_CAP and config.contention else ""
        echo(f"{strategy}: {config.steps} steps of {config.model} at {config.cap}{load}")
        samples = Path(config.run_root) / f"samples-{strategy}-{time.strftime('%H%M%S')}"
        samples.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        finished = _train(strategy, config, samples)
        records = [
            json.loads(path.read_text()) for path in sorted(samples.glob("rank*.json"))
        ]
        reached = max((r["end"]["step"] for r in records if r["end"]), default=0)
        if not finished:
            echo(f"  stopped by --time-limit at step {reached}")
        report["runs"][strategy] = {
            "finished": finished, "steps_reached": reached, "seconds": time.time() - t0,
        }  # fmt: skip
        rows.extend(_process_rows(strategy, records))
        series.extend(_series(strategy, records))
        report["seconds"] = time.time() - started
        tmp = out.with_suffix(".tmp")  # after every strategy: an interrupted run keeps its own
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        tmp.replace(out)
    plot(series, out.with_suffix(".png"))
    for line in table_lines(rows):
        echo(line)
    echo(f"wrote {out} and {out.with_suffix('.png')}")
    return report
