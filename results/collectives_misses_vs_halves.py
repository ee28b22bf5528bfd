"""For each gloo row of `cadence bench collectives` outside 10% of its calibrated prediction:
gloo's own odd-round and even-round medians, their ratio, and each half over the prediction,
to tell a miss that gloo's own rounds disagree on from one they agree on.

    python results/collectives_misses_vs_halves.py FILE.json ... > OUT.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20}MB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KB"


def main(paths: list[str]) -> None:
    print("| file | collective | size | meas/pred | odd/pred | even/pred | odd/even |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    misses = disagreeing = 0
    for path in paths:
        data = json.loads(Path(path).read_text())
        within = data["accuracy"]["within"]
        halves = {(p["collective"], p["nbytes"]): p for p in data["halves"]["pairs"]}
        for row in data["rows"]:
            if row["implementation"] != "gloo":
                continue
            ratio = row["measured_over_predicted"]
            if abs(ratio - 1) <= within:
                continue
            misses += 1
            pair = halves[(row["collective"], row["nbytes"])]
            odd, even = pair["odd_s"] / row["predicted_s"], pair["even_s"] / row["predicted_s"]
            if abs(pair["ratio"] - 1) > within:
                disagreeing += 1
            name = path.rsplit("/", 1)[-1]
            print(f"| {name} | {row['collective']} | {_size(row['nbytes'])} | {ratio:.2f} "
                  f"| {odd:.2f} | {even:.2f} | {pair['ratio']:.2f} |")  # fmt: skip
    print(f"\n{misses} rows outside {within:.0%}; on {disagreeing} of them gloo's own odd and "
          f"even rounds differ by more than {within:.0%}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
