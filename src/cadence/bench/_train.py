"""One training run inside a benchmark, without keeping its checkpoint.

A benchmark trains many runs only to time them; each run's directory keeps its metrics, plot
and logs, but its checkpoint (60 MB for vgg16) is dropped: left in place they filled 22 GB of
/tmp on the development machine over a few days of benchmarks.
"""

from __future__ import annotations

from typing import Any


def train_for_bench(config: Any) -> dict[str, Any]:
    """`cadence.train.run.train(config)`'s metrics; the run's checkpoint is deleted."""
    from cadence.train.run import train

    metrics, run_dir = train(config)
    if run_dir is not None:
        (run_dir / "checkpoint.pt").unlink(missing_ok=True)
    return metrics
