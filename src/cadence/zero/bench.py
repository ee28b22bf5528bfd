"""ZeRO stages with and without 1-bit Adam against DDP + Adam in an emulated 2-host cluster.

    python -m cadence.zero.bench --model gpt_mini --bandwidth 200mbit --steps 40 \\
        --freeze-steps 10 --out results/zero-bench-gpt_mini-200mbit

Each job is a real `cadence train --emulate-bandwidth` run; the iteration time is the median
over the steps after 1-bit Adam's switch-over (the same window for every job). Bytes per step
are cadence's exact per-rank payload (`comm_bytes_per_step`, which the tests check against the
counted sends); DDP's is its ring all-reduce. FSDP2 and DeepSpeed are not run here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cadence.config import TrainConfig
from cadence.models import get_model_spec
from cadence.netem import parse_bandwidth
from cadence.train.run import train
from cadence.zero.layout import bucket_params, build_layout, comm_bytes_per_step

JOBS: tuple[tuple[str, int, str], ...] = (
    ("ddp", 0, "none"),
    ("zero", 1, "none"),
    ("zero", 1, "onebit"),
    ("zero", 2, "none"),
    ("zero", 2, "onebit"),
    ("zero", 3, "none"),
    ("zero", 3, "onebit"),
)


def _bytes(model: str, workers: int, strategy: str, stage: int, compression: str) -> int:
    net = get_model_spec(model).build()
    if strategy == "ddp":
        grad = sum(p.numel() * 4 for p in net.parameters() if p.requires_grad)
        return 2 * (workers - 1) * grad // workers
    entries = [e for e in bucket_params(net) if e[2]]
    layout = build_layout(
        [(n, [(k, tuple(p.shape)) for k, p in params]) for n, _, params in entries], workers
    )
    return comm_bytes_per_step(layout, stage, compression, compressed_phase=True)["total"]


def run_bench(
    model: str, bandwidth: str, steps: int, freeze_steps: int, workers: int, out: Path
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    runs_dir = tempfile.mkdtemp(prefix="cadence-zero-bench-")
    bps = parse_bandwidth(bandwidth)
    rows = []
    for strategy, stage, compression in JOBS:
        name = "ddp" if strategy == "ddp" else f"zero{stage}-{compression}"
        config = TrainConfig(
            model=model,
            strategy=strategy,
            zero_stage=max(stage, 1),
            compression=compression,
            freeze_steps=freeze_steps,
            steps=steps,
            workers=workers,
            emulate_bandwidth=bandwidth,
            out=runs_dir,
            name=name,
            threads=1,
        )
        metrics, _ = train(config)
        window = metrics["iteration_times_s"][freeze_steps + 2 :]
        sent = _bytes(model, workers, strategy, stage, compression)
        rows.append(
            {
                "job": name,
                "median_iteration_s": statistics.median(window),
                "bytes_per_step_per_rank": sent,
                "wire_s": sent * 8 / bps,
                "final_train_loss": metrics["step_loss"][-1],
            }
        )
        print(
            f"{name:<14} {rows[-1]['median_iteration_s'] * 1000:8.1f} ms  "
            f"{sent / 1e6:8.2f} MB/step  wire {rows[-1]['wire_s'] * 1000:7.1f} ms",
            flush=True,
        )
    ddp = rows[0]["median_iteration_s"]
    for row in rows:
        row["vs_ddp"] = row["median_iteration_s"] / ddp
    summary = {
        "command": " ".join(["python -m cadence.zero.bench", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "model": model,
        "bandwidth": bandwidth,
        "workers": workers,
        "steps": steps,
        "freeze_steps": freeze_steps,
        "rows": rows,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt_mini")
    p.add_argument("--bandwidth", default="200mbit")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--freeze-steps", type=int, default=10)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    run_bench(
        args.model, args.bandwidth, args.steps, args.freeze_steps, args.workers, Path(args.out)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
