"""The same gloo all-reduce timed twice in one run of `cadence bench collectives`, by the
calibration and by the benchmark, for every kept run since the emulated hosts were pinned to
processors and every timed block starts with the links' bucket drained: how far one call's
time moves within a run, the floor under the cost model's 10% target.

    python results/collectives_same_call.py > results/collectives-same-call.txt

Runs: `cadence bench collectives --hosts H --bandwidth B --repeats 3 --out FILE` (2026-11-25),
the files named below.
"""

from __future__ import annotations

import json
from pathlib import Path

from cadence.bench.collectives import elements, format_size

HERE = Path(__file__).parent
RUNS = [
    f"bench-collectives-{link}-{tag}.json"
    for tag in ("drained-20261125a", "drained-20261125b", "burst-20261125a",
                "buffers-20261125a", "localcopy-20261125b")
    for link in ("400mbit-2hosts", "400mbit-4hosts", "1gbit-4hosts")
]  # fmt: skip
SMALL = 16 << 10  # up to here latency decides; from 64 KB the link's rate does


def pairs_of(name: str) -> list[dict[str, float]]:
    """gloo's all-reduce at every size both timed: the benchmark's seconds over the
    calibration's (runs before 2026-11-25 evening timed the calibration at the rows' sizes;
    the benchmark's vector is the size cut to a multiple of the ranks, `elements`)."""
    data = json.loads((HERE / name).read_text())
    hosts = data["config"]["hosts"]
    timed = {4 * elements(r["nbytes"], hosts): r["measured_s"]
             for r in data["calibration"]["rows"] if r["collective"] == "all_reduce"}  # fmt: skip
    return [
        {"nbytes": r["nbytes"], "ratio": r["measured_s"] / timed[r["nbytes"]]}
        for r in sorted(data["rows"], key=lambda r: r["nbytes"])
        if r["implementation"] == "gloo" and r["collective"] == "all_reduce"
        and r["nbytes"] in timed
    ]  # fmt: skip


def main() -> None:
    present = [name for name in RUNS if (HERE / name).exists()]
    bands: dict[str, list[float]] = {"1-16 KB": [], "64 KB-64 MB": []}
    for name in present:
        pairs = pairs_of(name)
        cells = " ".join(f"{format_size(int(p['nbytes']))}:{p['ratio']:.2f}" for p in pairs)
        print(f"{name}\n  benchmark / calibration: {cells}")
        for p in pairs:
            bands["1-16 KB" if p["nbytes"] <= SMALL else "64 KB-64 MB"].append(p["ratio"])
    print(f"\n{len(present)} runs; the same call, benchmark over calibration:")
    for band, ratios in bands.items():
        within = sum(abs(r - 1) <= 0.10 + 1e-9 for r in ratios)
        print(f"  {band}: {min(ratios):.2f}-{max(ratios):.2f}, within 10% in {within} of "
              f"{len(ratios)}")  # fmt: skip


if __name__ == "__main__":
    main()
