"""The kept drained `cadence bench collectives` runs (2026-11-25), priced again with the
token-bucket model before and after it gave gloo's broadcast tree the links' burst
(`AlphaBeta.burst_bytes`): a rank that idled until its copy arrived forwards its first
bucket of bytes at once.

    python results/broadcast_burst.py > results/broadcast-burst.txt

Nothing is measured again: each run's own calibration fit and measured times are read back,
and only the model changes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from cadence.bench.collectives import CollectivesBenchConfig, accuracy, build_rows
from cadence.comm.cost import AlphaBeta

HERE = Path(__file__).parent
RUNS = [
    f"bench-collectives-{link}-drained-20261125{run}.json"
    for link in ("400mbit-2hosts", "400mbit-4hosts", "1gbit-4hosts")
    for run in "ab"
]


def main() -> None:
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    print()
    for name in RUNS:
        data = json.loads((HERE / name).read_text())
        config = CollectivesBenchConfig.from_json_dict(data["config"])
        before = AlphaBeta(**data["calibration"]["models"]["token-bucket"])
        bucket = config.bucket_bytes()
        after = replace(before, burst_bytes=bucket)
        measured = data["rows"]  # each row holds the fields `build_rows` reads
        print(f"{name} (bucket {bucket / 1e3:.0f} KB)")
        sizes = sorted({r["nbytes"] for r in measured})
        print(f"  {'size':<28}" + "".join(f"{s // 1024:>7}K" for s in sizes))
        for label, model in (("without the burst", before), ("with the burst", after)):
            rows = build_rows(config, measured, model)
            ratios = {
                r.nbytes: r.measured_over_predicted
                for r in rows
                if r.implementation == "gloo" and r.collective == "broadcast"
            }
            summary = accuracy(rows)
            print(
                f"  broadcast {label:<18}"
                + "".join(f"{ratios[s]:>8.2f}" for s in sizes)
                + f"   gloo rows within 10%: {summary['rows_within']} of {summary['rows']}"
            )
        print()


if __name__ == "__main__":
    main()
