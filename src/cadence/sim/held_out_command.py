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
    profiles: dict[ProfileKey, Profile] = {}
    for row in rows:
        key = profile_key(row.config)
        if key not in profiles:
            model, _, batch, threads, beside = key
            print(
                f"profiling {model} at batch {batch}, {threads} thread(s), beside {beside} "
                f"training process(es) ({row.name})"
            )
            profiles[key] = take_profile(key)
    load_before = os.getloadavg()
    if args.measured:
        figures, failed = measured_before(args.measured, rows)
    else:
        figures, failed = measure(rows, args.repeats, train_runner(runs_dir), sys.stderr.isatty())
    scored = []
    for row in rows:
        profile = profiles[profile_key(row.config)]
        guess = predict(row.config, profile, args.payload_fraction, calibrated)
        more: dict[str, Any] = {
            "note": guess.note, "conditions": guess.conditions,
            "profile_batch": profile.batch_size, "profile_threads": profile.threads,
            "profile_neighbours": profile.neighbours,
            # The profile's iteration and lockstep pace: rows predicted from one profile share
            # its moment's machine speed, which drifts on a shared VM.
            "profile_iteration_s": profile.iteration_s, "profile_pace_factor": profile.pace_factor,
            "config": row.config.to_flat(),
        }  # fmt: skip
        if row.name in failed:
            more["failed"] = failed[row.name]
        scored.append(score_row(row.name, figures[row.name], guess.iteration_s, **more))
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
