"""Is the forward slower beside DDP than alone because of DDP, or because the ranks compute in
step (2026-11-29)? Runs results/forward_beside_worker.py on 2 emulated hosts and prints, per
variant, the slowest rank's mean forward and backward per round, as medians over the rounds
and as ratios to the free-running compute of the same round.

    PYTHONPATH=results python results/forward_beside_check.py MODEL CAP ROUNDS BLOCK_STEPS OUT.json
    python results/forward_beside_check.py --report OUT.json [...]

FORWARD_BESIDE_KEEP_HEAP=1 fixes glibc's heap thresholds in the workers (`keep_heap`, as
cadence-dp does, and so as every variant of `dp-paired` runs). The files of 2026-11-29 were
made one after another with nothing else running, the worker gaining a field as it went:
`...-{vgg16 8 6, resnet32 10 15}-400mbit-20261129a` time the phases only; `gpt_mini` and
`cnn_lstm` `...-20261129a` (10 15, 10 30) and `cnn_lstm-...-heap1-20261129b` add page faults;
`cnn_lstm-...-heap0-20261129b` and `vgg16-...-heap1-20261129b` (8 6) the forward's processor
time; `vgg16-...-heap1-20261129c` (8 6) the `aligned` variant. The report of them all:
    for f in results/forward-beside-*.json; do python results/forward_beside_check.py \
        --report $f; done > results/forward-beside-check-20261129.txt
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

VARIANTS = ("free", "synced", "aligned", "ddp", "ddp-nobuf")


def record(model: str, cap: str, rounds: int, block_steps: int, out: Path) -> None:
    from cadence.bench._launch import run_workers_on_link
    from cadence.netem import parse_bandwidth

    run_dir = Path(tempfile.mkdtemp(prefix="forward-beside-"))
    args = [model, str(rounds), str(block_steps), str(run_dir / "times.json")]
    run_workers_on_link(parse_bandwidth(cap), 2, "forward_beside_worker", args, run_dir, 1, 3000)
    ranks = [json.loads((run_dir / f"times.json.rank{r}").read_text()) for r in range(2)]
    keep_heap = os.environ.get("FORWARD_BESIDE_KEEP_HEAP") == "1"
    out.write_text(
        json.dumps(
            {
                "model": model,
                "cap": cap,
                "block_steps": block_steps,
                "keep_heap": keep_heap,
                "ranks": ranks,
            }
        )
        + "\n"
    )


def report(path: Path) -> None:
    data = json.loads(path.read_text())
    ranks = data["ranks"]
    rounds = len(ranks[0]["free"])
    heap = "fixed (keep_heap)" if data.get("keep_heap") else "glibc's dynamic thresholds"
    print(
        f"{path.name}: {data['model']} @ {data['cap']}, {rounds} rounds of "
        f"{data['block_steps']} steps (first step of each block left out), heap: {heap}"
    )
    # per round, per variant: the slowest rank's mean (forward, backward, step)
    means: dict[str, list[tuple[float, ...]]] = {v: [] for v in VARIANTS if v in ranks[0]}
    variants = [v for v in VARIANTS if v in ranks[0]]
    for v in variants:
        for r in range(rounds):
            per_rank = [
                [statistics.fmean(s[k] for s in rank[v][r][1:]) for k in range(3)] for rank in ranks
            ]
            means[v].append(tuple(max(col) for col in zip(*per_rank, strict=True)))
    print(
        "| variant | forward (ms) | backward (ms) | step (ms) | forward / free | backward / free "
        "| forward above free in |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for v in variants:
        med = [statistics.median(m[k] for m in means[v]) * 1e3 for k in range(3)]
        fr = [means[v][r][0] / means["free"][r][0] for r in range(rounds)]
        br = [means[v][r][1] / means["free"][r][1] for r in range(rounds)]
        above = sum(x > 1 for x in fr)
        print(
            f"| {v} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} | {statistics.median(fr):.3f} "
            f"| {statistics.median(br):.3f} | {above} of {rounds} |"
        )
    if len(ranks[0]["free"][0][0]) > 4:  # minor page faults recorded
        print()
        print("| variant | page faults a step, forward | backward | step |")
        print("| --- | --- | --- | --- |")
        for v in variants:
            f = [
                statistics.fmean(s[k] for rank in ranks for blk in rank[v] for s in blk[1:])
                for k in (4, 5, 6)
            ]
            print(f"| {v} | {f[0]:.0f} | {f[1]:.0f} | {f[2]:.0f} |")
    if len(ranks[0]["free"][0][0]) > 7:  # the forward's processor time recorded
        print()
        print(
            "| variant | forward wall (ms) | its main thread's processor time (ms) "
            "| whole process's (ms) |"
        )
        print("| --- | --- | --- | --- |")
        for v in variants:
            f = [
                statistics.fmean(s[k] for rank in ranks for blk in rank[v] for s in blk[1:]) * 1e3
                for k in (0, 7, 8)
            ]
            print(f"| {v} | {f[0]:.1f} | {f[1]:.1f} | {f[2]:.1f} |")
    print()


def main(argv: list[str]) -> None:
    if argv[0] == "--report":
        for p in argv[1:]:
            report(Path(p))
        return
    model, cap, rounds, block_steps, out = (
        argv[0],
        argv[1],
        int(argv[2]),
        int(argv[3]),
        Path(argv[4]),
    )
    record(model, cap, rounds, block_steps, out)
    report(out)


if __name__ == "__main__":
    main(sys.argv[1:])
