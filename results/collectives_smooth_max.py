"""Would a smooth maximum of latency and transfer price gloo's collectives better than the
token-bucket model's max(alpha x messages, beta x bytes)? An offline look at saved runs.

On the emulated links (`AlphaBeta.overlap`) a call costs the larger of its latency and its
transfer. Near where the two are equal the calls take longer than either: 4-host 16-64 KB
reduce-scatters and all-gathers came out 1.11-1.21x slow in every pass of 2026-11-29. This
refits every saved `cadence bench collectives` run that has the token-bucket model and
per-collective alphas (the fit itself does not use the combination), prices its gloo rows with
(latency^k + transfer^k)^(1/k) for several k (k = inf is the model as it is), and counts the
rows within 10% per run and in all.

    python results/collectives_smooth_max.py > results/collectives-smooth-max-DATE.txt
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

from cadence.bench.collectives import CollectivesBenchConfig, build_rows, within_target
from cadence.bench.collectives_fit import fit_run
from cadence.comm.cost import AlphaBeta, Terms
from cadence.comm.local_copy import LocalCopyTimes

ORIGINAL_COST = AlphaBeta._cost
KS = (float("inf"), 8.0, 6.0, 4.0, 3.0)


def smooth_cost(k: float):  # noqa: ANN201 - a replacement for AlphaBeta._cost
    def cost(self: AlphaBeta, t: Terms) -> float:
        if not self.overlap or k == float("inf"):
            return ORIGINAL_COST(self, t)
        latency, transfer = self.alpha_s * t.messages, self.beta_s_per_byte * t.wire_bytes
        link = (latency**k + transfer**k) ** (1 / k)
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


def gloo_within(data: dict, k: float) -> tuple[int, int]:
    AlphaBeta._cost = smooth_cost(k)  # type: ignore[method-assign]
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


def main() -> None:
    totals = {k: [0, 0] for k in KS}
    print("| run | " + " | ".join(f"k={k:g}" for k in KS) + " | saved |")
    print("| --- |" + " --- |" * (len(KS) + 1))
    for path in sorted(glob.glob("results/bench-collectives-*.json")):
        data = eligible(path)
        if data is None:
            continue
        cells = []
        for k in KS:
            hit, n = gloo_within(data, k)
            totals[k][0] += hit
            totals[k][1] += n
            cells.append(f"{hit}/{n}")
        saved = data["accuracy"]
        print(f"| {Path(path).name} | " + " | ".join(cells)
              + f" | {saved.get('rows_within', '?')}/{saved.get('rows', '?')} |")
    print("\nall runs: " + ", ".join(f"k={k:g} {h} of {n}" for k, (h, n) in totals.items()))


if __name__ == "__main__":
    main()
