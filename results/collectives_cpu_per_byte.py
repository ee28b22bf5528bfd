"""Would processor time per byte that the link cannot hide price gloo's collectives better than
the token-bucket model's max(alpha x messages, beta x bytes)? An offline look at saved runs.

On the emulated links (`AlphaBeta.overlap`) a call costs the larger of its latency and its
transfer. Near where the two are equal the calls take longer than either: 4-host 16-64 KB
all-reduces, reduce-scatters and all-gathers came out 1.11-1.21x slow in every pass of
2026-11-29 while every row from 256 KB up was within 10%. One reading: each byte also costs the
sending and receiving processes some processor time (copies through the socket layers, four
processes on two cores). While the link is the bottleneck that time passes as the rank waits for
tokens; while latency is, it adds to it. So a call costs

    max(alpha x messages + c x bytes, beta x bytes) (+ gamma x reduced bytes)

This refits every saved `cadence bench collectives` run that has the token-bucket model and
per-collective alphas (the fit does not use the combination, so c = 0 reproduces every run's
saved count), prices its gloo rows at several c, and counts the rows within 10% per run and in
all. Any c picked from this table is picked in sample; `bench costs`' contention fit measures a
per-byte processor time of its own (1.56 ns/B on 2026-11-26, 2.21 on 2026-12-01).

    python results/collectives_cpu_per_byte.py > results/collectives-cpu-per-byte-DATE.txt
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

from cadence.bench.collectives import CollectivesBenchConfig, build_rows, within_target
from cadence.bench.collectives_fit import fit_run
from cadence.comm.cost import AlphaBeta, Terms
from cadence.comm.local_copy import LocalCopyTimes

ORIGINAL_COST = AlphaBeta._cost
CS = (0.0, 0.5e-9, 1.0e-9, 1.5e-9, 2.21e-9, 3.0e-9)
"""Seconds of processor time per byte on the wire; 2.21 ns/B is the contention fit of
`results/costs-20261201`."""


def cpu_cost(c: float):  # noqa: ANN201 - a replacement for AlphaBeta._cost
    def cost(self: AlphaBeta, t: Terms) -> float:
        if not self.overlap or c == 0.0:
            return ORIGINAL_COST(self, t)
        latency = self.alpha_s * t.messages + c * t.wire_bytes
        link = max(latency, self.beta_s_per_byte * t.wire_bytes)
        return link + self.gamma_s_per_byte * t.reduce_bytes

    return cost


def eligible(path: str) -> dict | None:
    data = json.loads(Path(path).read_text())
    cal = data.get("calibration")
    if not isinstance(cal, dict) or cal.get("link_model") != "token-bucket":
        return None
    if "local_copy" not in data:
        return None
    return data if data["config"].get("alpha_per_collective") else None


def gloo_within(data: dict, c: float) -> tuple[int, int]:
    AlphaBeta._cost = cpu_cost(c)  # type: ignore[method-assign]
    try:
        config = CollectivesBenchConfig.from_json_dict(data["config"])
        local = LocalCopyTimes.from_dict(data["local_copy"])
        fitted = fit_run(config, list(data["calibration"]["rows"]), local)
        measured = [r for r in data["rows"] if r["implementation"] == "gloo"]
        rows = build_rows(config, measured, fitted.models["token-bucket"], local,
                          fitted.by_collective["token-bucket"])  # fmt: skip
    finally:
        AlphaBeta._cost = ORIGINAL_COST  # type: ignore[method-assign]
    return sum(within_target(r.measured_over_predicted) for r in rows), len(rows)


def main(paths: list[str]) -> None:
    totals = {c: [0, 0] for c in CS}
    print("| run | " + " | ".join(f"c={c * 1e9:g} ns/B" for c in CS) + " | saved |")
    print("| --- |" + " --- |" * (len(CS) + 1))
    for path in paths:
        data = eligible(path)
        if data is None:
            continue
        cells = []
        for c in CS:
            hit, n = gloo_within(data, c)
            totals[c][0] += hit
            totals[c][1] += n
            cells.append(f"{hit}/{n}")
        saved = data["accuracy"]
        print(f"| {Path(path).name} | " + " | ".join(cells)
              + f" | {saved.get('rows_within', '?')}/{saved.get('rows', '?')} |")
    counts = (f"c={c * 1e9:g} ns/B {h} of {n}" for c, (h, n) in totals.items())
    print("\nall runs: " + ", ".join(counts))


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(glob.glob("results/bench-collectives-*.json")))
