"""Where the pipeline predictions' error came from: the same candidates predicted from three
compute-cost sources, against the same measured steps (2 emulated hosts at 200mbit, quiet).

Run as root, under the shared lock:
    PYTHONPATH=src:results python results/bench-pipeline-v3-cost-sources.py gpt_mini 10
The worker probes the link, profiles at every candidate size (both ranks at once), times each
stage on its rank (`pipeline.stage_probe`), predicts every candidate with (a) the stage probe
(v3), (b) the profiles at every size, (c) a least-squares line through the profiles at 1, 2 and
16 samples (the pre-v3 fit; 5 iterations here instead of 3), (d) the stage probe with
messages free (no latency, no bandwidth limit: what compute alone explains), then times 7 candidates on our
runtime (median over rounds of the slower rank, 2 warm-up steps) with the bench's allocator
setting. Prints predicted/measured - 1 and Kendall tau per source.
"""

import json
import os
import sys
import tempfile
from pathlib import Path

from cadence.bench._launch import run_workers
from cadence.bench.pipeline import MALLOC_ENV, kendall_tau
from cadence.netem import EmulatedCluster, cleanup_on_signals, parse_bandwidth

model, rounds = sys.argv[1], int(sys.argv[2])
os.environ.update(MALLOC_ENV)
with (
    cleanup_on_signals(),
    EmulatedCluster(2, parse_bandwidth("200mbit")) as cluster,
    tempfile.TemporaryDirectory() as tmp,
):
    d = Path(tmp)
    (d / "c.json").write_text(json.dumps({"model": model, "rounds": rounds}))
    run_workers(cluster, "bench-pipeline-v3-cost-sources-worker", [str(d / "c.json"), str(d / "r.json")],
                d, 1, 900)  # fmt: skip
    out = json.loads((d / "r.json").read_text())
print(f"{model}, 200mbit quiet, {rounds} rounds; probed link alpha {out['link'][0] * 1e3:.2f} ms, "
      f"beta {out['link'][1]:.3g} s/B")  # fmt: skip
names = list(out["measured"])
print("candidate      measured ms  " + "  ".join(f"[{k}]" for k in out["predicted"]))
for n in names:
    cells = [f"{out['predicted'][k][n] * 1e3:7.1f} ({out['predicted'][k][n] / out['measured'][n] - 1:+.0%})"
             for k in out["predicted"]]  # fmt: skip
    print(f"{n:13} {out['measured'][n] * 1e3:9.1f}    " + "   ".join(cells))
for k, pred in out["predicted"].items():
    tau = kendall_tau([pred[n] for n in names], [out["measured"][n] for n in names])
    print(f"Kendall tau, {k}: {tau:.2f}")
