"""For each gloo row of `cadence bench collectives` outside 10% of its calibrated prediction:
gloo's own odd-round and even-round medians, their ratio, and each half over the prediction,
to tell a miss that gloo's own rounds disagree on from one they agree on. Rows are judged by
the benchmark's own rule (`within_target`), so the misses are the ones its count leaves out.

    python results/collectives_misses_vs_halves.py FILE.json ... > OUT.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cadence.bench.collectives import WITHIN, format_size, within_target


def main(paths: list[str]) -> None:
    print("| file | collective | size | meas/pred | odd/pred | even/pred | odd/even |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    misses = disagreeing = 0
    for path in paths:
        data = json.loads(Path(path).read_text())
        halves = {(p["collective"], p["nbytes"]): p for p in data["halves"]["pairs"]}
        for row in data["rows"]:
            ratio = row["measured_over_predicted"]
            if row["implementation"] != "gloo" or within_target(ratio):
                continue
            misses += 1
            pair = halves[(row["collective"], row["nbytes"])]
            odd, even = pair["odd_s"] / row["predicted_s"], pair["even_s"] / row["predicted_s"]
            disagreeing += not within_target(pair["ratio"])
            print(f"| {Path(path).name} | {row['collective']} | {format_size(row['nbytes'])} "
                  f"| {ratio:.2f} | {odd:.2f} | {even:.2f} | {pair['ratio']:.2f} |")  # fmt: skip
    print(f"\n{misses} rows outside {WITHIN:.0%}; on {disagreeing} of them gloo's own odd and "
          f"even rounds differ by more than {WITHIN:.0%}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
