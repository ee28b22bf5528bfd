"""The wire time of `cadence bench dp`, measured: one gloo all-reduce of all of a model's
gradients as a single message, on the same emulated cluster (hosts, cap) the training runs use.

This is the wire term of the benchmark's bound max(compute, wire): the fastest any data-parallel
schedule on this stack could synchronise one step's gradients, with TCP/IP framing and gloo's
own ring protocol included. The line-rate figure (payload bytes at the cap, no framing) is
kept beside it as a stricter reference.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path


def measure_wire(gradient_bytes: int, workers: int, cap: str) -> float:
    """Median seconds of one all-reduce of `gradient_bytes` (float32) over `workers` emulated
    hosts whose links are capped at `cap` (tc syntax). Needs root, like every capped run."""
    from cadence.bench._launch import run_workers
    from cadence.comm.calibrate_plan import calls_per_round
    from cadence.comm.cost import ring_allreduce_wire_s
    from cadence.netem import EmulatedCluster, cleanup_on_signals, parse_bandwidth

    bps = parse_bandwidth(cap)
    elements = max(workers, gradient_bytes // 4)
    # A generous multiple of the line-rate time of every call (the worker's untimed one and
    # one round of `measure_s`): only a hung run should reach it.
    calls = 1 + calls_per_round(4 * elements)
    timeout_s = 120 + 20 * calls * ring_allreduce_wire_s(4 * elements, workers, bps)
    with tempfile.TemporaryDirectory(prefix="cadence-bench-wire-") as tmp:
        run_dir = Path(tmp)
        result = run_dir / "result.json"
        with cleanup_on_signals(), EmulatedCluster(workers, bps) as cluster:
            args = [str(elements), str(result)]
            run_workers(cluster, "cadence.bench._allreduce_worker", args, run_dir, 1, timeout_s)
        return float(json.loads(result.read_text())["seconds"])
