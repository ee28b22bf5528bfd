"""Does the probe after each run's steps track the machine, or only add noise? Every long
matrix that timed it (`variant_compute_runs_s`) scored as `cadence bench sim` does (each run
from its own probe), then with the probes pooled before pricing: per round (each run from the
median of the round's variants), per row (every run from the row's median), per variant
(every run of a variant from its median). X marks a miss of the target.

Run from the repository root:
    python results/pooled_probe_check.py > results/pooled-probe-check-DATE.txt
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import CHECKS, bench_sim, meets, score  # noqa: E402

COSTS = "results/costs-20261126"
MODES = ("round", "row", "variant")


def pooled(path: str, mode: str, out: Path) -> str:
    """A copy of the file with each row's probes pooled by `mode`."""
    data = json.loads(Path(path).read_text())
    for row in data["rows"]:
        runs = row["variant_compute_runs_s"]
        n = len(next(iter(runs.values())))
        if mode == "round":
            per_round = [statistics.median(runs[v][i] for v in runs) for i in range(n)]
            row["variant_compute_runs_s"] = {v: list(per_round) for v in runs}
        elif mode == "row":
            median = statistics.median(x for xs in runs.values() for x in xs)
            row["variant_compute_runs_s"] = {v: [median] * n for v in runs}
        else:
            row["variant_compute_runs_s"] = {
                v: [statistics.median(xs)] * n for v, xs in runs.items()
            }
    out.write_text(json.dumps(data))
    return str(out)


def main() -> None:
    print(f"# charges from {COSTS}; mean/worst |error| in %; X: target missed")
    print("| check | per run | pooled per round | per row | per variant |")
    print("| --- | --- | --- | --- | --- |")
    met = dict.fromkeys(("per run", *MODES), 0)
    with tempfile.TemporaryDirectory() as tmp:
        sim = Path(tmp) / "sim.json"
        for name, files in CHECKS.items():
            if not name.startswith("long") or "between" in name:
                continue
            reports = {"per run": bench_sim(files, COSTS, sim, ("--compute-basis", "in-run"))[1]}
            for mode in MODES:
                copy = pooled(files[0], mode, Path(tmp) / Path(files[0]).name)
                reports[mode] = bench_sim([copy], COSTS, sim, ("--compute-basis", "in-run"))[1]
            cells = []
            for key, report in reports.items():
                met[key] += meets(report)
                cells.append(score(report) + ("" if meets(report) else " X"))
            print(f"| {name} | {' | '.join(cells)} |", flush=True)
    print("met: " + ", ".join(f"{key} {count}" for key, count in met.items()))


if __name__ == "__main__":
    main()
