"""`cadence bench sim --held-out FILE`: the simulator scored on a held-out set of training jobs.

The set (`benchmarks/held_out.toml`) is fixed before any fitting: each `[[row]]` is a `name`
(and optionally a `case`, see `cadence.sim.rankings`) and the `TrainConfig` flat keys of one
`cadence train` job on the emulated cluster. Every row
trains `repeats` times, the rows alternating (row 1 run 1, row 2 run 1, ..., row 1 run 2, ...)
so that drift of the machine spreads over all of them. A run's figure is its median
iteration; a row's measured value is the median of its runs and its spread
(max - min) / median. Each row is predicted from a profile taken in the conditions its
workers train in (`cadence.sim.held_out_predict`), one per round, just before the round's
first run that uses it: its prediction is the median of the rounds' predictions, their
spread reported beside the runs'.

Scoring: error = (predicted - measured) / measured. A row whose spread exceeds |error| is
undecided (neither hit nor miss: the measurement cannot tell). Otherwise |error| <= 5% is a
hit, <= 10% within the worst-case bound, else a miss. The summary's mean |error| and worst
are over predicted rows whose spread is under 5% (the targets: mean <= 5%, worst <= 10%).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadence.config import TrainConfig
from cadence.errors import UserError, WorkerFailed

REQUIRED = ("model", "strategy", "workers", "emulate_bandwidth", "batch_size", "steps")
"""Keys every row states: what the set is about is never left to a default."""
HIT = 0.05
"""|error| of a hit, and the largest spread a row may have to count in the summary."""
WORST = 0.10
"""|error| beyond which a (decided) row is a miss."""


@dataclass(frozen=True)
class HeldOutRow:
    """One job of the set."""

    name: str
    """The row's name in the file, unique."""
    config: TrainConfig
    """The job, as `cadence train` runs it."""
    case: str | None = None
    """Rows sharing a case are candidates for one job, ranked against each other
    (`cadence.sim.rankings`)."""


def load_held_out(path: str | Path) -> list[HeldOutRow]:
    """The rows of a held-out TOML file; a bad file or row is one UserError line naming it."""
    import tomllib

    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise UserError(f"cannot read held-out set {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"held-out set {path} is not valid TOML: {exc}") from None
    extra = sorted(set(raw) - {"row"})
    if extra or not isinstance(raw.get("row"), list) or not raw["row"]:
        raise UserError(f"held-out set {path}: give [[row]] tables only (found {extra or 'none'})")
    rows: list[HeldOutRow] = []
    for number, table in enumerate(raw["row"], 1):
        keys = dict(table)
        name = keys.pop("name", None)
        case = keys.pop("case", None)
        where = f"held-out set {path}, row {number}"
        if not isinstance(name, str) or not name:
            raise UserError(f'{where}: give it a name = "..."')
        where += f" ({name})"
        if case is not None and (not isinstance(case, str) or not case):
            raise UserError(f"{where}: case must be a non-empty string")
        if any(r.name == name for r in rows):
            raise UserError(f"{where}: the name is used by an earlier row")
        missing = [k for k in REQUIRED if k not in keys]
        if missing:
            raise UserError(f"{where}: missing {', '.join(missing)}")
        try:
            config = TrainConfig.from_flat(**keys)
        except (UserError, TypeError) as exc:
            raise UserError(f"{where}: {' '.join(str(exc).split())}") from None
        rows.append(HeldOutRow(name, config, case))
    return rows


def run_order(rows: int, repeats: int) -> list[tuple[int, int]]:
    """(row, repeat) of every run: each round runs every row once, rows in file order."""
    return [(row, repeat) for repeat in range(repeats) for row in range(rows)]


def spread(values: Sequence[float]) -> float:
    """(max - min) / median of the runs' figures (0 for one run)."""
    return (max(values) - min(values)) / statistics.median(values)


def verdict(error: float | None, row_spread: float | None) -> str:
    """hit, within 10%, miss or undecided (the spread exceeds the error); error None: the
    row was not predicted (or not measured)."""
    if error is None or row_spread is None:
        return "-"
    if row_spread > abs(error):
        return "undecided: spread > error"
    if abs(error) <= HIT:
        return "hit"
    return "within 10%" if abs(error) <= WORST else "miss"


def score_row(
    name: str, runs: Sequence[float], predicted: float | Sequence[float] | None, **more: Any
) -> dict[str, Any]:
    """A row's measured median and spread, prediction, error and verdict; `more` kept as is.
    `predicted` may be one prediction per profile taken: their median is the prediction,
    and their spread is kept beside the runs' (`predicted_spread`)."""
    measured = statistics.median(runs) if runs else None
    row_spread = spread(runs) if runs else None
    guesses = [predicted] if isinstance(predicted, (int, float)) else list(predicted or [])
    guess = statistics.median(guesses) if guesses else None
    error = None
    if measured is not None and guess is not None:
        error = (guess - measured) / measured
    scored = error is not None and row_spread is not None and row_spread < HIT
    return {
        "row": name, "runs_s": list(runs), "measured_s": measured, "spread": row_spread,
        "predicted_s": guess, "predicted_spread": spread(guesses) if guesses else None,
        "error": error, "verdict": verdict(error, row_spread), "scored": scored, **more,
    }  # fmt: skip


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and worst |error| over predicted rows whose spread is under 5%, and the counts."""
    counted = [r for r in rows if r["scored"]]
    errors = [abs(r["error"]) for r in counted]
    verdicts = [r["verdict"] for r in rows]
    return {
        "scored_rows": len(counted),
        "mean_abs_error": statistics.fmean(errors) if errors else None,
        "worst_abs_error": max(errors) if errors else None,
        "hits": verdicts.count("hit"),
        "within_10": verdicts.count("within 10%"),
        "misses": verdicts.count("miss"),
        "undecided": sum(v.startswith("undecided") for v in verdicts),
        "not_predicted": sum(r["predicted_s"] is None for r in rows),
    }


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The table: row, measured median and spread, predicted median and spread, error,
    verdict; notes below it."""
    width = max([len("row"), *(len(r["row"]) for r in rows)]) + 2
    lines = [
        f"{'row':<{width}}{'measured':>10}{'spread':>8}{'predicted':>11}{'spread':>8}{'error':>8}"
        "  verdict"
    ]
    for r in rows:
        lines.append(
            f"{r['row']:<{width}}{_secs(r['measured_s']):>10}{_pct(r['spread']):>8}"
            f"{_secs(r['predicted_s']):>11}{_pct(r.get('predicted_spread')):>8}"
            f"{_pct(r['error'], True):>8}  {r['verdict']}"
            + (" (not scored: spread >= 5%)" if r["error"] is not None and not r["scored"] else "")
        )
    for r in rows:
        note = r.get("note", "")
        if r.get("conditions") not in (None, "", "as trained"):
            note += f" [{r['conditions']}]"
        if r.get("failed"):
            note = f"run failed: {r['failed']}"
        if r["predicted_s"] is None or r.get("failed") or "[" in note:
            lines.append(f"  {r['row']}: {note}")
    s = summary(rows)
    lines.append(
        f"mean |error| {_pct(s['mean_abs_error'])}, worst {_pct(s['worst_abs_error'])} over the "
        f"{s['scored_rows']} predicted rows with spread < {HIT:.0%} (target: mean <= 5%, worst "
        f"<= 10%); {s['hits']} hit, {s['within_10']} within 10%, {s['misses']} miss, "
        f"{s['undecided']} undecided, {s['not_predicted']} not predicted"
    )
    return lines


def measure(
    rows: Sequence[HeldOutRow],
    repeats: int,
    runner: Callable[[HeldOutRow, int], float],
    progress: bool = True,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Run every row `repeats` times in `run_order`; (each row's run figures, the first
    failure of each row that failed; a failed row is not run again)."""
    from tqdm import tqdm

    figures: dict[str, list[float]] = {r.name: [] for r in rows}
    failed: dict[str, str] = {}
    order = run_order(len(rows), repeats)
    with tqdm(total=len(order), desc="held-out runs", unit="run", disable=not progress) as bar:
        for index, repeat in order:
            row = rows[index]
            bar.set_postfix_str(f"{row.name} #{repeat + 1}")
            if row.name not in failed:
                try:
                    figures[row.name].append(runner(row, repeat))
                except (UserError, WorkerFailed) as exc:  # the row is reported, the set goes on
                    failed[row.name] = " ".join(str(exc).split())
            bar.update()
    return figures, failed


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Measured (with the runs' range) and predicted median iteration of every row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = range(len(rows))
    measured = [r["measured_s"] or 0.0 for r in rows]
    low = [r["measured_s"] - min(r["runs_s"]) if r["runs_s"] else 0.0 for r in rows]
    high = [max(r["runs_s"]) - r["measured_s"] if r["runs_s"] else 0.0 for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(rows)), 4.8))
    ax.bar([x - 0.2 for x in xs], measured, 0.4, yerr=[low, high], capsize=3,
           label="measured (median, bars: min-max of runs)")  # fmt: skip
    guessed = [r["predicted_s"] or 0.0 for r in rows]
    each = [r.get("predicted_runs_s") or [g] for r, g in zip(rows, guessed, strict=True)]
    ax.bar([x + 0.2 for x in xs], guessed, 0.4, capsize=3,
           yerr=[[g - min(e) for g, e in zip(guessed, each, strict=True)],
                 [max(e) - g for g, e in zip(guessed, each, strict=True)]],
           label="predicted (median, bars: min-max over profiles)")  # fmt: skip
    ax.set_xticks(list(xs), [r["row"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("median iteration (s)")
    s = summary(rows)
    ax.set_title(
        f"held-out: mean |error| {_pct(s['mean_abs_error'])}, worst "
        f"{_pct(s['worst_abs_error'])} over {s['scored_rows']} rows with spread < 5%"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
