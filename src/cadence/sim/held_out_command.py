"""The `cadence bench sim --held-out FILE` command: profile, train every row on the emulated
cluster (alternating), predict, and write the table, JSON and PNG (`cadence.sim.held_out`)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

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


def held_out_command(args: Any) -> int:
    """Run the held-out set `args.held_out`, `args.repeats` times; write `args.out` (+ .png)."""
    from cadence.comm.calibrate import calibrated_link
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
    calibration = args.calibration
    calibrated = calibrated_link(calibration, args.calibration_latency) if calibration else None
    profiles = RoundProfiles()
    load_before = os.getloadavg()
    if args.measured:
        figures, failed = measured_before(args.measured, rows)
        for repeat in range(args.repeats):  # a profile per round, taken now
            for row in rows:
                profiles.before(row, repeat)
    else:
        runner = profiles.then(train_runner(runs_dir))
        figures, failed = measure(rows, args.repeats, runner, sys.stderr.isatty())
    scored = []
    for row in rows:
        taken = profiles.of(row)
        guesses = [predict(row.config, p, args.payload_fraction, calibrated) for p in taken]
        guess = guesses[0]
        predicted = [g.iteration_s for g in guesses if g.iteration_s is not None]
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
        }  # fmt: skip
        if row.name in failed:
            more["failed"] = failed[row.name]
        scored.append(score_row(row.name, figures[row.name], predicted or None, **more))
    rankings = rank_cases({r.name: r.case for r in rows if r.case}, scored)
    for line in [*held_out_table(scored), *ranking_lines(rankings)]:
        print(line)
    data = {
        "command": "cadence " + shlex.join(sys.argv[1:]),
        "held_out": str(path),
        "measured_in": args.measured or "this run",
        "repeats": args.repeats,
        "rows": scored,
        **summary(scored),
        "rankings": rankings,
        "link": "emulated cap x payload fraction, no per-message latency"
        if calibration is None
        else f"cap with the alphas of {calibration}",
        "payload_fraction": args.payload_fraction,
        "load_average_1m_before_after": [load_before[0], os.getloadavg()[0]],
        "cpu_count": os.cpu_count(),
    }
    write_text(out, json.dumps(data, indent=2) + "\n")
    plot(scored, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.png')} and the runs in {runs_dir}")
    return 0
