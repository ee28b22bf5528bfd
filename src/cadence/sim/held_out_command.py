"""The `cadence bench sim --held-out FILE` command: profile, train every row on the emulated
cluster (alternating), predict, and write the table, JSON and PNG (`cadence.sim.held_out`)."""

from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.held_out import HeldOutRow, load_held_out, measure, plot, score_row, summary
from cadence.sim.held_out import table_lines as held_out_table
from cadence.sim.held_out_predict import ProfileKey, predict, profile_key, take_profile
from cadence.sim.metrics import write_text
from cadence.sim.rankings import rank_cases, ranking_lines


def importable_beside(path: str) -> None:
    """Let the rows' `module:factory` names resolve next to the set's file, here and in the
    workers (which inherit PYTHONPATH)."""
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if folder not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([folder, *parts])


def train_runner(runs_dir: Path) -> Any:
    """A runner for `measure`: trains a row once, keeps its `--json` metrics as
    `<runs_dir>/<row>-<n>.json`, returns the median iteration."""
    import dataclasses

    from cadence.train.run import train

    def run(row: HeldOutRow, repeat: int) -> float:
        job = dataclasses.replace(
            row.config.job, out=str(runs_dir / "train"), name=f"{row.name}-{repeat + 1}"
        )
        metrics, _ = train(dataclasses.replace(row.config, job=job))
        write_text(runs_dir / f"{row.name}-{repeat + 1}.json", json.dumps(metrics, indent=2))
        return float(metrics["median_iteration_s"])

    return run


class RoundProfiles:
    """A profile per round for each profile key (`profile_key`), taken just before the round's
    first run of a row that uses it, so that the profiles sample the machine over the same
    minutes as the runs they predict: a profile lasts seconds, and this machine's speed moves
    by 20% for tens of seconds at a time."""

    def __init__(self) -> None:
        self.taken: dict[ProfileKey, list[Profile]] = {}

    def before(self, row: HeldOutRow, repeat: int) -> None:
        """Take round `repeat`'s profile for `row` unless it is taken."""
        key = profile_key(row.config)
        have = self.taken.setdefault(key, [])
        if len(have) <= repeat:
            have.append(take_profile(key))

    def then(self, runner: Any) -> Any:
        """`runner` (row, repeat) -> seconds, preceded by `before`."""

        def run(row: HeldOutRow, repeat: int) -> float:
            self.before(row, repeat)
            return float(runner(row, repeat))

        return run

    def of(self, row: HeldOutRow) -> list[Profile]:
        """Every profile taken for `row` (one now if none was: its runs all failed)."""
        key = profile_key(row.config)
        if not self.taken.get(key):
            self.before(row, 0)
        return self.taken[key]


def measured_before(
    path: str, rows: list[HeldOutRow]
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Each row's run figures and failure from an earlier `--held-out` JSON of the same set;
    a file that is not one, or lacks a row, is a one-line UserError."""
    try:
        data = json.loads(Path(path).read_text())
        earlier = {r["row"]: r for r in data["rows"]}
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path} is not a `cadence bench sim --held-out` result") from None
    missing = [r.name for r in rows if r.name not in earlier]
    if missing:
        raise UserError(f"{path} has no runs of {', '.join(missing)}: measure that set again")
    figures = {r.name: [float(x) for x in earlier[r.name]["runs_s"]] for r in rows}
    failed = {r.name: str(earlier[r.name]["failed"]) for r in rows if earlier[r.name].get("failed")}
    return figures, failed


Cluster = tuple[str, int]
"""(emulated cap, hosts) a row trains on."""


def cluster_of(row: HeldOutRow) -> Cluster | None:
    """The emulated links a row's job runs on (None without a cap: it is not predicted)."""
    cap = row.config.cluster.emulate_bandwidth
    return None if cap is None else (cap, row.config.cluster.workers)


def calibration_path(out: Path, cluster: Cluster) -> Path:
    cap, hosts = cluster
    return out.with_name(f"{out.stem}.{cap}.{hosts}w.calibration.json")


def cluster_links(
    rows: list[HeldOutRow], out: Path, calibration: str | None, latency: str
) -> dict[Cluster, tuple[str, AlphaBeta]]:
    """Each row cluster's calibration file and link: `calibration` for all of them where given, else
    `cadence calibrate` on each cluster now, before any run (as a user calibrates before
    planning), kept beside `out` (`calibration_path`) and reused from there."""
    from cadence.comm.calibrate_command import calibrate_cluster
    from cadence.comm.calibration import calibrated_link

    clusters = sorted({c for c in map(cluster_of, rows) if c is not None})
    links: dict[Cluster, tuple[str, AlphaBeta]] = {}
    for cluster in clusters:
        if calibration is not None:
            path = Path(calibration)
        else:
            path = calibration_path(out, cluster)
            if not path.exists():
                print(f"calibrating the links of {cluster[1]} hosts at {cluster[0]}", flush=True)
                calibrate_cluster(*cluster, path)
        links[cluster] = (str(path), calibrated_link(path, latency))
    return links


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def at_cap_line(rows: list[dict[str, Any]], rankings: list[dict[str, Any]]) -> str:
    """What the same profiles predict on the caps alone, without the calibrations."""
    counted = [
        abs(r["error_at_cap"]) for r in rows if r["scored"] and r["error_at_cap"] is not None
    ]
    errors = (
        f"mean |error| {statistics.fmean(counted):.1%}, worst {max(counted):.1%} over the same "
        f"{len(counted)} rows" if counted else "no scored rows"
    )  # fmt: skip
    cases = "; ".join(
        f"{c['case']} tau {c['kendall_tau']:.2f}, pick / best {c['pick_over_best']:.3f} "
        f"({c['verdict']})"
        for c in rankings
    )
    return f"on the caps alone (no calibration): {errors}" + (f"; {cases}" if cases else "")


def held_out_command(args: Any) -> int:
    """Run the held-out set `args.held_out`, `args.repeats` times; write `args.out` (+ .png)."""
    from cadence.train.run import validate

    path = args.held_out
    rows = load_held_out(path)
    importable_beside(path)
    for row in rows:  # every model, dataset and strategy known before minutes of training
        try:
            validate(row.config)
        except UserError as exc:
            raise UserError(f"held-out row {row.name}: {exc}") from None
    out = Path(args.out)
    runs_dir = out.with_name(f"{out.stem}-runs")
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make {runs_dir}: {exc.strerror or exc}") from None
    earlier = measured_before(args.measured, rows) if args.measured else None
    links = cluster_links(rows, out, args.calibration, args.calibration_latency)
    profiles = RoundProfiles()
    load_before = os.getloadavg()
    if earlier is not None:
        figures, failed = earlier
        for repeat in range(args.repeats):  # a profile per round, taken now
            for row in rows:
                profiles.before(row, repeat)
    else:
        runner = profiles.then(train_runner(runs_dir))
        figures, failed = measure(rows, args.repeats, runner, sys.stderr.isatty())
    scored = []
    for row in rows:
        taken = profiles.of(row)
        cluster = cluster_of(row)
        calibration, link = links[cluster] if cluster is not None else (None, None)
        guesses = [predict(row.config, p, args.payload_fraction, link) for p in taken]
        guess = guesses[0]
        predicted = [g.iteration_s for g in guesses if g.iteration_s is not None]
        # The same profiles on the cap alone, no per-message latency: what the calibration
        # changed, row by row.
        at_cap = [predict(row.config, p, args.payload_fraction).iteration_s for p in taken]
        at_cap_s = median_or_none([s for s in at_cap if s is not None])
        more: dict[str, Any] = {
            "note": guess.note, "conditions": guess.conditions,
            "profile_batch": taken[0].batch_size, "profile_threads": taken[0].threads,
            "profile_neighbours": taken[0].neighbours,
            # Each round's profile, its iteration and lockstep pace: the machine's speed
            # drifts on a shared VM, and a profile is a measurement taken at one moment.
            "predicted_runs_s": predicted,
            "profile_iteration_s": [p.iteration_s for p in taken],
            "profile_pace_factor": [p.pace_factor for p in taken],
            "config": row.config.to_flat(),
            "calibration": calibration,
            "predicted_at_cap_s": at_cap_s,
            "error_at_cap": None if at_cap_s is None or not figures[row.name]
            else at_cap_s / statistics.median(figures[row.name]) - 1,
        }  # fmt: skip
        if row.name in failed:
            more["failed"] = failed[row.name]
        scored.append(score_row(row.name, figures[row.name], predicted or None, **more))
    cases = {r.name: r.case for r in rows if r.case}
    rankings = rank_cases(cases, scored)
    uncalibrated = [{**r, "predicted_s": r["predicted_at_cap_s"]} for r in scored]
    rankings_at_cap = rank_cases(cases, uncalibrated)
    for line in [*held_out_table(scored), *ranking_lines(rankings)]:
        print(line)
    print(at_cap_line(scored, rankings_at_cap))
    data = {
        "command": "cadence " + shlex.join(sys.argv[1:]),
        "held_out": str(path),
        "measured_in": args.measured or "this run",
        "repeats": args.repeats,
        "rows": scored,
        **summary(scored),
        "rankings": rankings,
        "rankings_at_cap": rankings_at_cap,
        "link": "emulated cap x payload fraction, each message's latency from the row's "
        "calibration (`calibration`); `predicted_at_cap_s`: the cap alone",
        "payload_fraction": args.payload_fraction,
        "load_average_1m_before_after": [load_before[0], os.getloadavg()[0]],
        "cpu_count": os.cpu_count(),
    }
    write_text(out, json.dumps(data, indent=2) + "\n")
    plot(scored, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.png')} and the runs in {runs_dir}")
    return 0
