"""`cadence bench tta`: time to a target test loss, the figure users care about.

For each model x link cap x host count, every method (`cadence.sim.methods` names: DDP, DDP
with torch's fp16 and PowerSGD comm hooks, cadence-dp's compressions, local SGD and DiLoCo
at a few H, ZeRO + 1-bit Adam) trains the same steps at the same global batch (the same
samples) on the emulated cluster, evaluating the test split every `--eval-every-steps` steps
(`metrics.json`'s `evals`: training seconds without the evaluations; local SGD and DiLoCo at
the next multiple of H, right after a sync). The target is DDP's final test loss; each
method's time to it is the training seconds of its first evaluation at or below it after
which the test loss stays within 1% above it to the end (`cadence.sim.tta.reached_at`).
Reported: time-to-target and its ratio to DDP's, final test loss and accuracy, bytes each
rank handed to the collectives (counted by the strategies; plain DDP: every gradient byte
each step) and bytes rank 0's interface sent (the kernel's count on an emulated host:
headers and retransmissions included), a loss-vs-wall-clock PNG, and how `cadence plan tta`
fared in each cell. The plan sees a short pilot, never the cells' curves: per model and host
count, every method first trains `pilot_steps` steps on the loopback
(`<out>.<model>.<n>h.pilot.json`), and the plan forecasts each method's steps to the loss DDP
reaches in the cells' full run from its pace against DDP's there (`cadence.sim.tta.forecast`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from cadence.comm.calibrate_command import calibrate_cluster
from cadence.errors import UserError

NO_CAP = "none"
BENCH_METHODS = (
    "ddp", "ddp+fp16", "ddp+powersgd",
    "cadence-dp", "cadence-dp+bf16", "cadence-dp+sign", "cadence-dp+powersgd",
    "local-sgd:H16", "local-sgd:H32", "local-sgd+bf16:H16:K4",
    "diloco:H16", "diloco:H64", "diloco:H16:K4", "zero+onebit",
)  # fmt: skip


@dataclass(frozen=True)
class TTABenchConfig:
    """What `cadence bench tta` runs."""

    models: tuple[str, ...] = ("gpt_mini", "cnn")
    """Zoo models, each on its own bundled data (gpt_mini: the stdlib text corpus; cnn: digits)."""
    caps: tuple[str, ...] = ("20mbit", "100mbit", "400mbit")
    """Link caps of the emulated cluster; `none`: the loopback (no root needed)."""
    hosts: tuple[int, ...] = (2, 4)
    """Emulated host counts."""
    methods: tuple[str, ...] = BENCH_METHODS
    """Method names; ddp among them (the target is its final test loss)."""
    batch_size: int = 64
    """Global batch per step, the same for every method and host count."""
    steps: int = 400
    """Steps per run (the same samples for every method)."""
    eval_every: int = 20
    """Steps between test evaluations."""
    pilot_steps: int | None = None
    """Steps of the pilot each model and host count first runs on the loopback (every method,
    no cap: the seeds make a method's losses the same at any cap), from which `cadence plan
    tta` forecasts each method's steps to the cells' target; none: a quarter of --steps, at
    least two evaluations."""
    pilot_only: bool = False
    """Run the pilots only (for `cadence plan tta --pilot` on a cluster of one's own): no
    cells, no caps, no root."""
    out: str = "bench-out/bench-tta.json"
    """JSON output; the PNG and the pilot files go next to it."""
    run_root: str = "/tmp/cadence-bench-tta"
    """Where the training runs keep their outputs."""

    def __post_init__(self) -> None:
        from cadence.models import model_names
        from cadence.netem import parse_bandwidth
        from cadence.sim.methods import parse_method

        names = [parse_method(m).name for m in self.methods]
        if "ddp" not in names:
            raise UserError("--methods must include ddp: its final test loss is the target")
        if len(set(names)) != len(names):
            raise UserError("--methods names a method twice")
        for model in self.models:
            if model not in model_names():
                raise UserError(f"unknown model '{model}': choose from {', '.join(model_names())}")
        for cap in self.caps:
            if cap != NO_CAP:
                parse_bandwidth(cap)
        if not self.hosts or min(self.hosts) < 2:
            raise UserError(f"--workers needs counts of at least 2, got {self.hosts}")
        for n in self.hosts:
            if self.batch_size % n:
                raise UserError(f"--batch-size {self.batch_size} must divide by every --workers")
        if not 1 <= self.eval_every <= self.steps:
            raise UserError("--eval-every-steps must be between 1 and --steps")
        if self.pilot_steps is not None and not 1 <= self.pilot_steps <= self.steps:
            raise UserError("--pilot-steps must be between 1 and --steps")
        if self.pilot_length < 2 * self.eval_every:
            raise UserError(
                f"a pilot of {self.pilot_length} steps evaluates fewer than twice (every "
                f"{self.eval_every} steps): give a longer --pilot-steps or a smaller "
                "--eval-every-steps"
            )

    @property
    def pilot_length(self) -> int:
        """Steps of each pilot run."""
        if self.pilot_steps is not None:
            return self.pilot_steps
        return max(self.steps // 4, min(self.steps, 2 * self.eval_every))


# --- pure: results of one cell -----------------------------------------------------------
def time_to_target(evals: Sequence[Mapping[str, Any]], target: float) -> float | None:
    """Training seconds of the first evaluation at or below `target` after which the test loss
    stays within 1% above it to the end (`cadence.sim.tta.reached_at`); None if none is."""
    curve = [(e.get("step"), e["seconds"], e.get("test_loss")) for e in evals]
    at = _reached(curve, target)
    return None if at is None else float(at[1])


def _reached(curve: Sequence[Sequence[Any]], target: float) -> Sequence[Any] | None:
    """The (step, seconds, loss) of `curve` where it reaches `target` (`reached_at`)."""
    from cadence.sim.tta import reached_at

    losses = [math.nan if loss is None else float(loss) for _, _, loss in curve]
    i = reached_at(losses, target)
    return None if i is None else curve[i]


def wire_bytes(method: str, metrics: Mapping[str, Any]) -> int:
    """Bytes one rank handed to the collectives in the run: the strategy's own count, or for
    plain DDP every gradient byte in every step."""
    if "wire_bytes_total" in metrics:
        return int(metrics["wire_bytes_total"])
    if method == "ddp":
        return int(metrics["gradient_bytes"]) * int(metrics["steps"])
    raise ValueError(f"{method}'s run has no wire_bytes_total")


def cell_rows(runs: Mapping[str, Mapping[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    """(target, one row per method) of one cell from each method's `metrics.json`, or from
    {"error": line} where a run failed; the target is ddp's final test loss."""
    ddp = runs["ddp"]
    if "error" in ddp:
        raise UserError(f"ddp failed, so there is no target: {ddp['error']}")
    target = float(ddp["final_test_loss"])
    rows = []
    for method, m in runs.items():
        if "error" in m:
            rows.append({"method": method, "error": m["error"]})
            continue
        rows.append({
            "method": method,
            "final_test_loss": m["final_test_loss"],
            "final_test_accuracy": m["final_test_accuracy"],
            "train_seconds": m["evals"][-1]["seconds"] if m["evals"] else None,
            "median_iteration_s": m["median_iteration_s"],
            "wire_bytes": wire_bytes(method, m),
            "iface_tx_bytes": m.get("iface_tx_bytes"),
            "steps": m["steps"],
            "curve": [[e["step"], e["seconds"], e["test_loss"]] for e in m["evals"]],
        })  # fmt: skip
    return target, scored(target, rows)


def scored(target: float, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`rows` (their `curve`s of [step, seconds, loss]) with each method's step and seconds to
    `target` and its time over DDP's; a failed run's row as it is."""
    out = []
    for r in rows:
        row = dict(r)
        if "error" not in r:
            at = _reached(r["curve"], target)
            row["steps_to_target"] = None if at is None else int(at[0])
            row["time_to_target_s"] = None if at is None else float(at[1])
        out.append(row)
    ddp_s = next((r["time_to_target_s"] for r in out if r["method"] == "ddp"), None)
    for row in out:
        if "error" not in row:
            seconds = row["time_to_target_s"]
            row["ratio_to_ddp"] = None if seconds is None or not ddp_s else seconds / ddp_s
    return out


def pilot(
    runs: Mapping[str, Mapping[str, Any]], steps: int, global_batch: int | None = None
) -> dict[str, Any]:
    """A pilot as `cadence plan tta --pilot` reads it: each method's (step, test loss) curve
    from its run's `metrics.json` (`runs`; a failed one as {"error": line}), `steps` long, at
    `global_batch` samples per step."""
    methods = {
        name: {"curve": [[e["step"], e["test_loss"]] for e in m["evals"]]}
        for name, m in runs.items()
        if "error" not in m
    }
    failed = {name: m["error"] for name, m in runs.items() if "error" in m}
    return {"steps": steps, "global_batch": global_batch, "methods": methods, "failed": failed}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else (
        format(value, spec)
    )


def _mb(nbytes: float | None) -> float | None:
    return None if nbytes is None else nbytes / 1e6


def table_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for cell in cells:
        lines.append(
            f"{cell['model']} @ {cell['cap']}, {cell['hosts']} hosts: target = ddp's final "
            f"test loss {cell['target_loss']:.4f}"
        )
        lines.append(
            f"  {'method':<22}{'to target s':>12}{'x ddp':>8}{'final loss':>11}{'acc %':>7}"
            f"{'MB sent':>10}{'MB on wire':>12}"
        )
        for r in cell["rows"]:
            if "error" in r:
                lines.append(f"  {r['method']:<22}failed: {r['error']}")
                continue
            acc = r["final_test_accuracy"]
            lines.append(
                f"  {r['method']:<22}{_fmt(r['time_to_target_s'], '.1f'):>12}"
                f"{_fmt(r['ratio_to_ddp'], '.2f'):>8}{r['final_test_loss']:>11.4f}"
                f"{_fmt(None if acc is None else 100 * acc, '.1f'):>7}"
                f"{r['wire_bytes'] / 1e6:>10.1f}"
                f"{_fmt(_mb(r.get('iface_tx_bytes')), '.1f'):>12}"
            )
        planned = cell.get("plan")
        if planned is not None:
            if "error" in planned:
                lines.append(f"  plan tta: {planned['error']}")
            else:
                lines.append(
                    f"  plan tta picks {planned['pick']}; fastest measured {planned['fastest']}; "
                    f"pick / fastest {_fmt(planned['pick_over_fastest'], '.2f')}"
                )
    return lines


def plot(cells: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Test loss vs training seconds, one panel per cell, one line per method, the target
    dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, max(1, len(cells)))
    rows = math.ceil(len(cells) / cols) if cells else 1
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.8 * rows), squeeze=False)
    for ax, cell in zip(axes.flat, cells, strict=False):
        for r in cell["rows"]:
            if "error" in r or not r["curve"]:
                continue
            ax.plot([c[1] for c in r["curve"]], [c[2] for c in r["curve"]], label=r["method"])
        ax.axhline(cell["target_loss"], color="black", linestyle="--", linewidth=0.8)
        ax.set_title(f"{cell['model']} @ {cell['cap']}, {cell['hosts']} hosts", fontsize=9)
        ax.set_xlabel("training seconds")
        ax.set_ylabel("test loss")
    for ax in list(axes.flat)[len(cells) :]:
        ax.axis("off")
    if cells:
        axes.flat[0].legend(fontsize=6)
    fig.suptitle("bench tta: test loss vs training seconds (dashed: ddp's final)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plan_score(
    planned: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """How `cadence plan tta`'s rows (`planned`: {"method", "steps", "source", "ranked"},
    fastest predicted first) fared in the cell's measured `rows`: its pick, the fastest method
    to the target, the pick's measured time over the fastest's (target: <= 1.10), and each
    method's forecast steps to the target beside the measured ones."""
    measured = {
        r["method"]: r["time_to_target_s"]
        for r in rows
        if "error" not in r and r["time_to_target_s"] is not None
    }
    order = [p["method"] for p in planned if p["ranked"]]
    fastest = min(measured, key=measured.__getitem__) if measured else None
    pick = order[0] if order else None
    ratio = None
    if pick is not None and fastest is not None and pick in measured:
        ratio = measured[pick] / measured[fastest]
    measured_steps = {r["method"]: r.get("steps_to_target") for r in rows if "error" not in r}
    steps = {
        p["method"]: {"forecast": p["steps"], "source": p["source"],
                      "measured": measured_steps.get(p["method"]),
                      "predicted_step_s": p.get("step_s"), "predicted_s": p.get("seconds")}
        for p in planned
    }  # fmt: skip
    return {"order": order, "pick": pick, "fastest": fastest, "pick_over_fastest": ratio,
            "steps": steps}  # fmt: skip


def plan_cell(
    model: str,
    cap: str,
    hosts: int,
    pilot_path: Path,
    config: TTABenchConfig,
    calibration: Path | None = None,
    loop_costs: Path | None = None,
    profile: Path | None = None,
) -> Any:
    """`cadence plan tta` for one cell (the pilot at `pilot_path` forecast to the cell's
    `steps`, the cell's cluster and batch, the links from `calibration`, else `cap` with no
    latency, the compressions' in-loop costs from `loop_costs`, measured there first if the
    file is missing, the model's profile from `profile`, else taken now): the plan's rows,
    {"method", "steps", "source", "ranked"}, fastest predicted first.

    A missing `profile` file is made as the cell trains: one worker's batch on one thread,
    beside `hosts - 1` processes training the same model, since the emulated hosts share
    this machine's cores (timed alone, four hosts' steps are priced at half what they take)."""
    from cadence.cli import build_parser
    from cadence.config_flags import resolve_flags
    from cadence.profile import profile_command
    from cadence.sim.tta_command import plan_tta

    micro = config.batch_size // hosts
    if profile is not None and not profile.exists():
        profile_command(
            model, batch_size=micro, out=profile, threads=1, echo=lambda _: None,
            neighbours=hosts - 1,
        )  # fmt: skip
    link = ["--calibration", str(calibration)] if calibration else ["--bandwidth", cap]
    costs = ["--loop-costs", str(loop_costs)] if loop_costs else []
    saved = ["--profile", str(profile)] if profile else []
    argv = [
        "plan", "tta", "--model", model, "--workers", str(hosts), *link, *costs, *saved,
        "--micro-batch-size", str(micro), "--pilot", str(pilot_path),
        "--target-steps", str(config.steps), "--methods", ",".join(config.methods),
    ]  # fmt: skip
    args = build_parser().parse_args(argv)
    resolve_flags(args)
    plan = plan_tta(args)
    return [
        {"method": r.estimate.method, "steps": r.steps.steps, "source": r.steps.source,
         "ranked": r.seconds is not None, "step_s": r.estimate.step_s, "seconds": r.seconds}
        for r in plan.rows
    ]  # fmt: skip


def read_reports(paths: Sequence[str]) -> dict[str, Any]:
    """Earlier `cadence bench tta` JSONs as one: their cells in order, the first's config
    with every model, cap, host count and method any of them ran ("sources": each file's
    command and date). They must share the batch, steps and evaluations; a file that is not
    such a JSON, or differs, is a one-line UserError."""
    configs, cells, sources = [], [], []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read the benchmark {path}: {e}") from None
        if not isinstance(data, dict) or "cells" not in data or "config" not in data:
            raise UserError(f"{path} is not a `cadence bench tta` JSON (no config and cells)")
        configs.append(data["config"])
        cells.extend(data["cells"])
        sources.append({"file": path, "command": data.get("command"), "date": data.get("date")})
    if not cells:
        raise UserError("no benchmark to rescore: give --rescore FILE[,FILE...]")
    first = dict(configs[0])
    for key in ("batch_size", "steps", "eval_every"):
        if any(c.get(key) != first.get(key) for c in configs):
            raise UserError(f"the benchmarks to rescore differ in {key}: rescore them apart")
    for key in ("models", "caps", "hosts", "methods"):
        first[key] = list(dict.fromkeys(v for c in configs for v in c.get(key, [])))
    return {"config": first, "cells": cells, "sources": sources}


def rescore_config(earlier: Mapping[str, Any], given: TTABenchConfig) -> TTABenchConfig:
    """`given` (this command's output and pilot length) with the earlier runs' models, caps,
    host counts, methods, batch, steps and evaluations: their cells are what is scored."""
    keys = ("models", "caps", "hosts", "methods", "batch_size", "steps", "eval_every")
    try:
        kept: dict[str, Any] = {
            k: tuple(earlier[k]) if isinstance(earlier[k], list) else earlier[k] for k in keys
        }
    except KeyError as e:
        raise UserError(f"the benchmark to rescore has no {e.args[0]} in its config") from None
    return replace(given, **kept)


# --- runs ---------------------------------------------------------------------------------
def eval_every_for(method: str, every: int) -> int:
    """Steps between evaluations of `method`: `every`, rounded up to a multiple of H for
    local SGD / DiLoCo, whose replicas are one model only right after a sync."""
    from cadence.sim.methods import parse_method

    h = parse_method(method).sync_every
    return every if h is None else -(-every // h) * h


def train_method(model: str, cap: str, hosts: int, method: str, config: TTABenchConfig) -> Any:
    """One training run of `method`, `config.steps` long: rank 0's metrics."""
    from cadence.bench._train import train_for_bench
    from cadence.config import TrainConfig
    from cadence.sim.methods import parse_method

    train_config = TrainConfig.from_flat(
        model=model,
        workers=hosts,
        batch_size=config.batch_size,
        steps=config.steps,
        emulate_bandwidth=None if cap == NO_CAP else cap,
        out=config.run_root,
        eval_every_epoch=False,
        eval_every_steps=eval_every_for(method, config.eval_every),
        threads=1,
        **parse_method(method).train_flags(),
    )
    return train_for_bench(train_config)


def _first_line(exc: Exception) -> str:
    """What a failed run or plan said, as one short line for the report."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def run_pilot(
    model: str,
    hosts: int,
    config: TTABenchConfig,
    path: Path,
    train: Callable[[str, str, int, str, TTABenchConfig], Any] = train_method,
    echo: Callable[[str], None] = print,
) -> Path:
    """Every method trained `config.pilot_length` steps on the loopback, its curve written to
    `path` as `cadence plan tta --pilot` reads it (a failed method's line under "failed").
    A pilot already at `path` of the same steps and batch that ran every method is kept."""
    length = config.pilot_length
    if _pilot_done(path, length, config):
        echo(f"{model}, {hosts} hosts: the pilot in {path} ran these methods; kept")
        return path
    short = replace(config, steps=length, pilot_steps=length)
    runs = _train_cell(model, NO_CAP, hosts, short, train, echo, f"pilot, {length} steps")
    path.write_text(json.dumps(pilot(runs, length, config.batch_size), indent=2) + "\n")
    return path


def _pilot_done(path: Path, length: int, config: TTABenchConfig) -> bool:
    try:
        done = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    ran = {*done.get("methods", {}), *done.get("failed", {})}
    same = done.get("steps") == length and done.get("global_batch") == config.batch_size
    return bool(same and ran >= set(config.methods))


def _train_cell(
    model: str,
    cap: str,
    hosts: int,
    config: TTABenchConfig,
    train: Callable[[str, str, int, str, TTABenchConfig], Any],
    echo: Callable[[str], None],
    what: str = "",
) -> dict[str, Any]:
    """Each method's metrics in one cell (ddp first: the target), or {"error": line}; `what`
    names the runs in the progress lines (a pilot's)."""
    runs: dict[str, Any] = {}
    for method in ("ddp", *(m for m in config.methods if m != "ddp")):
        echo(f"{model} @ {cap}, {hosts} hosts{f' ({what})' if what else ''}: {method}")
        try:
            runs[method] = train(model, cap, hosts, method, config)
        except Exception as exc:  # noqa: BLE001 - one failed method, not the bench
            runs[method] = {"error": _first_line(exc)}
            echo(f"  failed: {runs[method]['error']}")
    return runs


def run_tta_bench(
    config: TTABenchConfig,
    command: str,
    echo: Callable[[str], None] = print,
    train: Callable[[str, str, int, str, TTABenchConfig], Any] = train_method,
    plan: Callable[..., Any] = plan_cell,
    calibrate: Callable[[str, int, Path], Path | None] = calibrate_cluster,
    measured: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every cell, written after each one (an interrupted benchmark keeps what it measured).
    Each model and host count first runs its pilot (`run_pilot`,
    `<out>.<model>.<n>h.pilot.json`). Each cell is planned from that pilot on its links as
    `calibrate` measured them, once per cap and host count
    (`<out>.<cap>.<n>h.calibration.json`), with the compressions' in-loop costs and the
    model's profile measured once per model and host count (`<out>.<model>.<n>h.loop-costs.json`,
    `<out>.<model>.<n>h.profile.json`). With `measured` (`read_reports` of earlier runs), their
    cells are scored again and planned from new pilots, calibrations and profiles, not
    trained again. A cell is planned over the methods it measured."""
    from cadence.bench.dp import prepare_out

    out = prepare_out(
        config.out, not config.pilot_only and any(cap != NO_CAP for cap in config.caps)
    )
    started = time.time()
    cells: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "config": asdict(config),
        "cells": cells,
    }
    if measured is not None:
        report["measured"] = measured["sources"]
    planned_cells = (
        [(c["model"], c["cap"], c["hosts"], c) for c in measured["cells"]]
        if measured is not None
        else [(m, c, n, None) for m in config.models for c in config.caps for n in config.hosts]
    )
    if config.pilot_only:
        planned_cells = []
        for model in config.models:
            for hosts in config.hosts:
                where = out.parent / f"{out.stem}.{model}.{hosts}h.pilot.json"
                run_pilot(model, hosts, config, where, train, echo)
                echo(f"wrote the pilot {where}")
    links: dict[tuple[str, int], Path | None] = {}
    pilots: dict[tuple[str, int], Path | str] = {}
    for model, cap, hosts, old in planned_cells:
        if (model, hosts) not in pilots:
            where = out.parent / f"{out.stem}.{model}.{hosts}h.pilot.json"
            try:
                pilots[model, hosts] = run_pilot(model, hosts, config, where, train, echo)
            except Exception as exc:  # noqa: BLE001 - its cells go unplanned, not the bench
                pilots[model, hosts] = f"pilot failed: {_first_line(exc)}"
        if old is not None:
            target = float(old["target_loss"])
            rows = scored(target, old["rows"])
        else:
            target, rows = cell_rows(_train_cell(model, cap, hosts, config, train, echo))
        cell = {"model": model, "cap": cap, "hosts": hosts, "target_loss": target, "rows": rows}
        cells.append(cell)
        try:
            pilot_path = pilots[model, hosts]
            if isinstance(pilot_path, str):
                raise RuntimeError(pilot_path)
            if (cap, hosts) not in links:
                where = out.parent / f"{out.stem}.{cap}.{hosts}h.calibration.json"
                if not where.exists():
                    echo(f"calibrating the links at {cap}, {hosts} hosts")
                links[cap, hosts] = calibrate(cap, hosts, where)
            costs = out.parent / f"{out.stem}.{model}.{hosts}h.loop-costs.json"
            profile = out.parent / f"{out.stem}.{model}.{hosts}h.profile.json"
            own = replace(config, methods=tuple(r["method"] for r in rows))
            planned = plan(model, cap, hosts, pilot_path, own, links[cap, hosts], costs, profile)
            cell["plan"] = plan_score(planned, rows)
        except Exception as exc:  # noqa: BLE001 - one cell's plan, not the bench
            failure = _first_line(exc)
            cell["plan"] = {"error": failure}
            echo(f"  plan failed: {failure}")
        report["seconds"] = time.time() - started
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        tmp.replace(out)
    if config.pilot_only:
        return report
    plot(cells, out.with_suffix(".png"))
    for line in table_lines(cells):
        echo(line)
    echo(f"wrote {out}, {out.with_suffix('.png')} and a pilot per model and host count "
         f"({out.stem}.*.pilot.json)")  # fmt: skip
    return report
