"""How much each in-turns round's communication cost moved, matrix by matrix: for every row of
the `cadence bench dp-paired` checks of `results/halves_every_check.py`, DDP's and
cadence-dp's excess over that round's lockstep compute (iteration minus compute, in ms),
round by round, beside the all-reduce of all gradients timed alone in the same rounds. The
simulator predicts one excess per round from the round's compute; `sd / wire` is the
standard deviation of a row's excess over its rounds (not the range, which grows with the
number of rounds) in units of its wire time.

Run from the repository root:
    python results/excess_spread.py [COSTS_FOLDER] > results/excess-spread-DATE.txt
(the folder's runtime-cost.json gives each matrix's compute ratio, as in
`results/speed_vs_error.py`). Reads files only; a second.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from halves_every_check import CHECKS  # noqa: E402
from speed_vs_error import folder_compute  # noqa: E402

VARIANTS = {"ddp": "DDP", "cadence": "cadence-dp"}


def main_(costs: str) -> None:
    base = folder_compute(costs)
    print(f"# compute ratio: the rows' lockstep compute over {costs}'s; excess in ms per round")
    summary = []
    for name, files in CHECKS.items():
        if not name.startswith("in turns") or not all(Path(f).exists() for f in files):
            continue
        rows = [row for f in files for row in json.loads(Path(f).read_text())["rows"]]
        ratio = statistics.median(
            statistics.median(r["lockstep_compute_rounds_s"]) / base[r["model"]] for r in rows
        )
        print(f"\n## {name} (compute ratio {ratio:.2f})")
        print("| model | cap | wire alone | variant | excess per round | sd / wire |")
        print("| --- | --- | --- | --- | --- | --- |")
        spreads = []
        for row in rows:
            lockstep = row["lockstep_compute_rounds_s"]
            wire = statistics.median(row["wire_runs_s"])
            for key, label in VARIANTS.items():
                times = row["rounds_s"][key]
                excess = [1e3 * (t - c) for t, c in zip(times, lockstep, strict=True)]
                spread = statistics.stdev(excess) / (1e3 * wire)
                spreads.append(spread)
                print(f"| {row['model']} | {row['cap']} | {1e3 * wire:.1f} | {label} | "
                      f"{', '.join(f'{e:.0f}' for e in excess)} | {spread:.2f} |")  # fmt: skip
        summary.append((name, ratio, statistics.median(spreads), max(spreads)))
    print("\n| matrix | compute ratio | excess sd / wire, median over rows | largest |")
    print("| --- | --- | --- | --- |")
    for name, ratio, median, largest in summary:
        print(f"| {name} | {ratio:.2f} | {median:.2f} | {largest:.2f} |")


if __name__ == "__main__":
    main_(sys.argv[1] if len(sys.argv) > 1 else "results/costs-20261126")
