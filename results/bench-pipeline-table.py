"""Print the README's pipeline table from `cadence bench pipeline` JSON files.

    python results/bench-pipeline-table.py results/bench-pipeline-200mbit.json [...]
"""

import json
import sys
from pathlib import Path

print("| run | model | contention | pick: predicted / measured ms | best that fits (ms) "
      "| pick / best that fits | Kendall tau | peak of fitting runs, measured / limit MiB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for path in sys.argv[1:]:
    report = json.loads(Path(path).read_text())
    cfg = report["config"]
    run = f"batch {cfg['batch_size']}, M {cfg['microbatches']}"
    for sc in report["scenarios"]:
        fitting = [r for r in sc["rows"] if r["fits"]]
        peak = max(max(r["measured_peak_bytes"]) for r in fitting) / 2**20
        # Files from before the bench reported it: the fastest measured row that fits.
        best_row = min(fitting, key=lambda r: r["measured_s"])
        best, best_s = best_row["name"], best_row["measured_s"]
        ratio = sc["pick_measured_s"] / best_s
        print(
            f"| {run} | {sc['model']} | {'yes' if sc['contention'] else 'no'} "
            f"| {sc['pick']}: {sc['pick_predicted_s'] * 1e3:.0f} / "
            f"{sc['pick_measured_s'] * 1e3:.0f} | {best} {best_s * 1e3:.0f} "
            f"| {ratio:.3f} | {sc['kendall_tau']:.2f} "
            f"| {peak:.1f} / {sc['memory_limit'] / 2**20:.1f} |"
        )
