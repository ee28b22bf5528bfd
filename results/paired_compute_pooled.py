"""The matrices timed with aligned compute turns (2026-11-29: kk-tt; 2026-11-30: uu-ww;
2026-12-01: xx, yy, zz), each row's error priced from the free-running turns (lockstep,
`bench sim`'s default) and from the aligned ones, per matrix and pooled: mean |error|, mean
signed error, rows over 5% and over 10%, and the same per strategy.
`results/paired-compute-pooled-20261129.txt` is the same for kk-oo,
`results/paired-compute-pooled-20261129b.txt` for kk-qq, `...20261129c.txt` for kk-rr,
`...20261129d.txt` for kk-ss, `...20261129e.txt` for kk-tt, `...20261130.txt` for kk-uu,
`...20261130b.txt` for kk-vv, `...20261130c.txt` for kk-ww, `...20261201.txt` for kk-xx,
`...20261201b.txt` for kk-yy.

    python results/paired_compute_pooled.py > results/paired-compute-pooled-20261201c.txt
"""

import json
import statistics as st

MATRICES = ("kk", "ll", "mm", "nn", "oo", "pp", "qq", "rr", "ss", "tt", "uu", "vv", "ww", "xx",
            "yy", "zz")
DATES = {"uu": "20261130", "vv": "20261130", "ww": "20261130", "xx": "20261201", "yy": "20261201",
         "zz": "20261201"}
"""The day each matrix was scored where it is not 2026-11-29."""
BASES = ("lockstep", "aligned")


def errors(matrix: str, basis: str) -> list[tuple[str, float]]:
    date = DATES.get(matrix, "20261129")
    path = f"results/sim-bench-dp-paired-aligned-{matrix}-{basis}-{date}.json"
    return [(row["strategy"], row["error"]) for row in json.load(open(path))["rows"]]


def line(label: str, errs: list[float]) -> str:
    over5 = sum(abs(e) > 0.05 for e in errs)
    over10 = sum(abs(e) > 0.10 for e in errs)
    return (f"{label}: {len(errs)} rows, mean |error| {100 * st.mean(map(abs, errs)):.1f}%, "
            f"mean signed {100 * st.mean(errs):+.1f}%, worst {100 * max(map(abs, errs)):.1f}%, "
            f"over 5% {over5}, over 10% {over10}")


for basis in BASES:
    pooled: list[tuple[str, float]] = []
    for matrix in MATRICES:
        rows = errors(matrix, basis)
        pooled += rows
        print(line(f"{basis} {matrix}", [e for _, e in rows]))
    print(line(f"{basis} pooled", [e for _, e in pooled]))
    for strategy in ("ddp", "cadence-dp"):
        print(line(f"{basis} pooled {strategy}", [e for s, e in pooled if s == strategy]))
    print()
