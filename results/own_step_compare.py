"""Benchmark files that timed the optimizer step beside their compute (since 2026-11-27),
scored by `cadence bench sim` twice: each round or run priced at its own step (the default)
and, as before, at one step timed now in this process (the same files with the steps taken
out). Also printed: each model's own steps against the one timed now.

Run from the repository root, with nothing else running (the step timed now is a timing):
    python results/own_step_compare.py OUT_PREFIX FILE... [--costs FOLDER]
writes OUT_PREFIX-own-step.json and OUT_PREFIX-timed-now.json (the `--json` of each call).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import bench_sim  # noqa: E402

from cadence.sim.bench_dp_records import own_step_samples  # noqa: E402

STEP_KEYS = ("compute_step_rounds_s", "variant_step_runs_s")


def _scored(files: list[str], costs: str, out: Path) -> dict:
    """The call's report, after printing its last two lines (halves, then score)."""
    text, report = bench_sim(files, costs, out)
    print("\n".join(text.rstrip().splitlines()[-2:]))
    return report


def _without_steps(files: list[str], tmp: Path) -> list[str]:
    out = []
    for f in files:
        data = json.loads(Path(f).read_text())
        for row in data["rows"]:
            for key in STEP_KEYS:
                row.pop(key, None)
        copy = tmp / Path(f).name  # the same name, so the rows read the same
        copy.write_text(json.dumps(data))
        out.append(str(copy))
    return out


def main_(prefix: str, files: list[str], costs: str) -> None:
    print(f"# {' '.join(files)}; charges from {costs}")
    print("## each round or run at the optimizer step timed beside its compute")
    _scored(files, costs, Path(f"{prefix}-own-step.json"))
    with tempfile.TemporaryDirectory() as tmp:
        print("## every round or run at one step timed now (as before 2026-11-27)")
        now = _scored(_without_steps(files, Path(tmp)), costs, Path(f"{prefix}-timed-now.json"))
    timed_now = {(r["run"], r["bandwidth"]): r["optimizer_step_s"] for r in now["rows"]}
    print("## optimizer step, ms: median of the file's own (their range) | timed now")
    for f in files:
        for row in json.loads(Path(f).read_text())["rows"]:
            steps = own_step_samples(row)
            run = f"{Path(f).name}:{row['model']}"
            print(f"{run} {row['cap']}: {statistics.median(steps) * 1e3:.1f} "
                  f"({min(steps) * 1e3:.1f}-{max(steps) * 1e3:.1f}) | "
                  f"{timed_now[run, row['cap']] * 1e3:.1f}")  # fmt: skip


if __name__ == "__main__":
    argv = sys.argv[1:]
    costs = "results/costs-20261126"
    if "--costs" in argv:
        i = argv.index("--costs")
        costs = argv[i + 1]
        del argv[i : i + 2]
    main_(argv[0], argv[1:], costs)
