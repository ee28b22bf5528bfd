"""gloo's measured / predicted time in the runs of `cadence bench collectives` whose
calibration is timed in the rounds of the rows, at sizes of its own, with all-gather and
broadcast fitted their own alpha (2026-11-25 evening): each run's table, its count within
10%, the same rows priced with all-reduce's alpha alone, and its rows' odd rounds against
their even rounds.

    python results/collectives_interleaved.py > results/collectives-interleaved.txt

Runs: `cadence bench collectives --hosts H --bandwidth B --repeats 5 --out FILE`, the files
named below.
"""

from __future__ import annotations

import json
from pathlib import Path

from cadence.bench.collectives import CollectivesBenchConfig, accuracy, build_rows
from cadence.comm.cost import AlphaBeta
from cadence.comm.local_copy import LocalCopyTimes

HERE = Path(__file__).parent
RUNS = [
    f"bench-collectives-{link}-interleaved-20261125{tag}.json"
    for tag in ("", "b")
    for link in ("400mbit-2hosts", "400mbit-4hosts", "1gbit-4hosts")
]
SIZES = ("1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M")


def main() -> None:
    print("| run | collective | " + " | ".join(SIZES) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in SIZES) + " |")
    notes = []
    for name in (n for n in RUNS if (HERE / n).exists()):
        data = json.loads((HERE / name).read_text())
        config = CollectivesBenchConfig.from_json_dict(data["config"])
        run = "b" if name.endswith("b.json") else "a"
        label = f"{config.hosts} hosts, {name.split('-')[2]} ({run})"
        by_collective: dict[str, list[str]] = {}
        for r in data["rows"]:
            if r["implementation"] == "gloo":
                by_collective.setdefault(r["collective"], []).append(
                    f"{r['measured_over_predicted']:.2f}"
                )
        for collective, cells in by_collective.items():
            print(f"| {label} | {collective} | " + " | ".join(cells) + " |")
        cal = data["calibration"]
        shared = AlphaBeta(**cal["models"][cal["link_model"]])
        local = LocalCopyTimes.from_dict(data["local_copy"])
        one_alpha = accuracy(build_rows(config, data["rows"], shared, local))
        alphas = ", ".join(f"{c} {a * 1e6:.0f} us" for c, a in cal["alpha_s_by_collective"].items())
        worst = data["accuracy"]["worst"]
        notes.append(
            f"{label}: {data['accuracy']['rows_within']} of {data['accuracy']['rows']} within 10% "
            f"(worst {worst['collective']} {worst['nbytes']} B at "
            f"{worst['measured_over_predicted']:.2f}); with all-reduce's alpha for every "
            f"collective {one_alpha['rows_within']}; odd against even rounds within 10% at "
            f"{data['halves']['rows_within']} of {data['halves']['rows']}; alpha: {alphas}"
        )
    print()
    for line in notes:
        print(f"- {line}")


if __name__ == "__main__":
    main()
