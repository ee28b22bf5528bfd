"""DDP with and without its buffer broadcast, each run over the compute it timed after its steps.

Made with a throwaway patch (no-broadcast-5mb.patch: the 5 MB DDP variant built with
broadcast_buffers=False, in `cadence train` and in dp-paired's worker; for cnn_lstm's 1.4 MB of
gradients its one bucket is the same as the 25 MB variant's), applied in a scratch worktree:
separate runs twice, then every variant in turns inside one run:

    X_NO_BCAST_5MB=1 cadence bench dp --models cnn_lstm --caps 400mbit,1gbit --steps 30 \
        --repeats 5 --ddp-buckets-mb 5 --out bench-dp-{a,b}.json
    X_NO_BCAST_5MB=1 cadence bench dp-paired --models cnn_lstm --caps 400mbit,1gbit \
        --rounds 7 --ddp-buckets-mb 5 --out bench-dp-paired.json

    python results/ddp-buffer-broadcast-20261126/summary.py > results/ddp-buffer-broadcast-20261126/summary.txt
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
NAMES = {"ddp": "DDP", "ddp-5mb": "DDP without buffer broadcast", "cadence": "cadence-dp"}
gaps: dict[tuple[str, str], list[float]] = {}
for name in ("bench-dp-a.json", "bench-dp-b.json"):
    for row in json.loads((HERE / name).read_text())["rows"]:
        for variant in NAMES:
            runs, probes = row["runs_s"][variant], row["variant_compute_runs_s"][variant]
            gaps.setdefault((row["cap"], variant), []).extend(
                (run - probe) * 1e3 for run, probe in zip(runs, probes, strict=True)
            )
print("iteration minus the run's own compute, ms, over 10 runs (two files x 5 repeats)")
for (cap, variant), values in sorted(gaps.items()):
    print(
        f"{cap:8s} {NAMES[variant]:30s} median {statistics.median(values):5.1f} "
        f"mean {statistics.mean(values):5.1f}  runs " + " ".join(f"{v:.0f}" for v in values)
    )

print()
print("in turns (bench-dp-paired.json): DDP minus DDP without buffer broadcast, ms, per round")
for row in json.loads((HERE / "bench-dp-paired.json").read_text())["rows"]:
    rounds = row["rounds_s"]
    diffs = [(a - b) * 1e3 for a, b in zip(rounds["ddp"], rounds["ddp-5mb"], strict=True)]
    print(
        f"{row['cap']:8s} median {statistics.median(diffs):4.1f} mean {statistics.mean(diffs):4.1f}"
        "  rounds " + " ".join(f"{d:.1f}" for d in diffs)
    )
