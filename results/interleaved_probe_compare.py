"""The compute probe after a run's steps against the one in blocks between them: a
`cadence bench dp` file made with `--interleaved-probe-every` has both for its runs, so the
same runs are predicted from each (`cadence bench sim --compute-basis in-run` and
`--compute-basis interleaved`, which takes the blocks of the runs whose heap thresholds were
fixed: cadence-dp's and `ddp-heap`'s) under one folder of charges. Matrix o (2026-11-27) timed
blocks in DDP's own runs too: the last table shows them, and this script's version at d9e0f83
also scored them.

Printed: the scores with their alternate-run halves; each row's error under each; how far a
row's runs scatter around its error (the median over a row's runs of |run error - row
error|, then the median over rows; and for cadence-dp's rows alone, with their mean
|error|); and the two probes side by side (the median over runs of
between / after, and each probe's run-to-run spread).

Run from the repository root:
    python results/interleaved_probe_compare.py FILE [COSTS] > results/interleaved-probe-X.txt
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import bench_sim, meets, score  # noqa: E402

BETWEEN = "variant_interleaved_compute_runs_s"
BASES = {"after the steps": "in-run", "between the steps (cadence-dp)": "interleaved"}


def label(row: dict) -> str:
    """A row's variant as shown: its strategy, or `ddp-heap` (`--ddp-fixed-heap`)."""
    return row.get("variant", row["strategy"])


def scatter(report: dict, shown: str | None = None) -> float:
    """The median over rows (shown as `shown`, or all) of the median |run error - row error|,
    in %."""
    per_row = [
        statistics.median(abs(e - row["error"]) for e in row["run_errors"])
        for row in report["rows"]
        if shown is None or label(row) == shown
    ]
    return 100 * statistics.median(per_row)


def mean_abs(report: dict, shown: str) -> float:
    """The mean |error| of the rows shown as `shown`, in %."""
    rows = [r for r in report["rows"] if label(r) == shown]
    return 100 * statistics.mean(abs(r["error"]) for r in rows)


def spread(values: list[float]) -> float:
    """Run-to-run spread: population standard deviation over the mean, in %."""
    return 100 * statistics.pstdev(values) / statistics.mean(values)


def main(path: str, costs: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sim = Path(tmp) / "sim.json"
        reports = {
            name: bench_sim([path], costs, sim, ("--compute-basis", basis))[1]
            for name, basis in BASES.items()
        }
    print(f"# {path}, charges from {costs}; mean/worst |error| in %")
    shown = list(dict.fromkeys(label(row) for row in next(iter(reports.values()))["rows"]))
    print("| probe | all runs | odd runs | even runs | target | run scatter | "
          + " | ".join(f"{name} rows: mean, run scatter" for name in shown) + " |")  # fmt: skip
    print("| --- " * (6 + len(shown)) + "|")
    for name, r in reports.items():
        h = r["halves"]
        by_variant = " | ".join(f"{mean_abs(r, v):.1f}, {scatter(r, v):.1f}" for v in shown)
        target = "met" if meets(r) else "missed"
        print(f"| {name} | {score(r)} | {score(h['odd_samples'])} | {score(h['even_samples'])} "
              f"| {target} | {scatter(r):.1f} | {by_variant} |")  # fmt: skip
    print()
    print(f"| model | strategy | cap | {' | '.join(reports)} |")
    print("| --- | --- | --- |" + " --- |" * len(reports))
    for rows in zip(*(r["rows"] for r in reports.values()), strict=True):
        first = rows[0]
        errors = " | ".join(f"{row['error'] * 100:+.1f}" for row in rows)
        print(f"| {first['model']} | {label(first)} | {first['bandwidth']} | {errors} |")
    print()
    print("| model | cap | variant | between / after (run median) | spread after | between |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in json.loads(Path(path).read_text())["rows"]:
        after, between = row["variant_compute_runs_s"], row[BETWEEN]
        for variant in between:
            pairs = zip(after[variant], between[variant], strict=True)
            ratio = statistics.median(b / a for a, b in pairs)
            spreads = f"{spread(after[variant]):.1f}% | {spread(between[variant]):.1f}%"
            print(f"| {row['model']} | {row['cap']} | {variant} | {ratio:.3f} | {spreads} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "results/costs-20261126")
