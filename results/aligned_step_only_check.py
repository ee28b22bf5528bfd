"""Matrices kk and ll (2026-11-29) priced three ways: from the free-running compute turns
(lockstep, `bench sim`'s default), from the aligned turns, and -- after the fact, in sample --
from the free-running passes with the aligned turns' optimizer step (the step, a pass over
every parameter and Adam's state, is where ranks in step slowed most: 1.05-1.23x). The third
is built as copies of the files whose aligned figures are lockstep - free step + aligned step.

Run from the repository root (about a minute):
    python results/aligned_step_only_check.py > results/aligned-step-only-check-20261129.txt
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, "results")
from halves_every_check import bench_sim, score, share_files  # noqa: E402

COSTS = "results/costs-20261126"
MATRICES = {
    s: [f"results/bench-dp-paired-small-twins-10rounds-aligned-20261129{s}.json",
        f"results/bench-dp-paired-vgg16-400mbit-twins-aligned-20261129{s}.json"]
    for s in ("kk", "ll")
}  # fmt: skip


def step_only(path: str, out_dir: Path) -> str:
    """A copy of `path` whose aligned turns are its free-running passes plus the aligned step."""
    data = json.loads(Path(path).read_text())
    for row in data["rows"]:
        row["aligned_compute_rounds_s"] = [
            lock - free + aligned
            for lock, free, aligned in zip(
                row["lockstep_compute_rounds_s"], row["compute_step_rounds_s"],
                row["aligned_compute_step_rounds_s"], strict=True,
            )
        ]  # fmt: skip
    out = out_dir / Path(path).name
    out.write_text(json.dumps(data))
    return str(out)


def main() -> None:
    shares = ("--step-shares", *share_files())
    print("| matrix | lockstep | aligned | lockstep passes + aligned step | its rows (%) |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for suffix, files in MATRICES.items():
            scores = []
            for basis, these in (("lockstep", files), ("aligned", files),
                                 ("aligned", [step_only(f, Path(tmp)) for f in files])):  # fmt: skip
                _, report = bench_sim(these, COSTS, Path(tmp) / "sim.json",
                                      (*shares, "--paired-compute", basis))  # fmt: skip
                scores.append(score(report))
            rows = ", ".join(f"{r['model']} {r['strategy']} {r['bandwidth']} {r['error'] * 100:+.1f}"
                             for r in report["rows"])  # fmt: skip
            print(f"| {suffix} | {' | '.join(scores)} | {rows} |")


if __name__ == "__main__":
    main()
