"""`cadence bench contention`: how much processor time communication takes from computation.

On a machine where each worker has about one core (2 workers on this 2-core machine; a GPU
host's input pipeline and gloo threads), a gradient all-reduce is not free for the compute
next to it: gloo's send, receive and reduce, the kernel's TCP and shaping work, and Python's
issue and wait all run on the same cores. The simulator charges that as CPU seconds on the
worker's processor per message and per byte (`SimOptions.comm_cpu_s_per_message` and
`comm_cpu_s_per_byte`); this probe measures the two constants on the real cluster.

Every rank trains a zoo model's forward + backward (its compute) for a fixed number of
iterations, alone and then with a background thread that all-reduces messages of one size back
to back through the capped link, alternating, several rounds. The compute's extra time under
traffic, against the messages and bytes reduced meanwhile, is fitted (least squares, both
constants >= 0) over the message sizes.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from cadence.errors import UserError

DEFAULT_SIZES: tuple[int, ...] = (64 << 10, 1 << 20, 4 << 20, 16 << 20)
"""All-reduce message sizes tried by default: 64 KB, 1 MB, 4 MB, 16 MB."""


@dataclass(frozen=True)
class ContentionConfig:
    """What `cadence bench contention` measures."""

    bandwidth: str = "400mbit"
    """Link cap per emulated host."""
    hosts: int = 2
    """Emulated hosts, one rank each (the data-parallel benchmark uses 2)."""
    model: str = "resnet32"
    """Zoo model whose forward + backward is the compute."""
    batch_size: int = 16
    """Per-rank batch of that compute."""
    iterations: int = 6
    """Forward + backward iterations per timed window."""
    rounds: int = 3
    """Alone / with-traffic pairs per size (medians reported)."""
    sizes: tuple[int, ...] = DEFAULT_SIZES
    """All-reduce message sizes in bytes."""
    threads: int = 1
    """Intra-op threads per rank, as in the benchmarks."""
    out: str = "results/contention.json"
    """Where the JSON goes."""

    def __post_init__(self) -> None:
        if self.hosts < 2:
            raise UserError(f"--hosts must be >= 2 (traffic needs a peer), got {self.hosts}")
        if self.iterations < 1 or self.rounds < 1 or self.batch_size < 1:
            raise UserError("--iterations, --rounds and --batch-size must be >= 1")
        if len(self.sizes) < 2 or min(self.sizes) < 1024:
            raise UserError("--sizes needs at least two sizes of >= 1KB (two constants are fitted)")


@dataclass(frozen=True)
class ContentionFit:
    """The fitted processor cost of communication, per worker."""

    cpu_s_per_message: float
    """Processor seconds one all-reduce call takes from compute, whatever its size."""
    cpu_s_per_byte: float
    """Processor seconds per byte of all-reduced message."""
    co_run_slowdown: float = 1.0
    """Compute time with every rank of the host computing at once over one rank computing
    alone (shared caches and memory bandwidth; 1 when each worker has a machine of its own)."""

    @classmethod
    def load(cls, path: str | Path) -> ContentionFit:
        """The fit saved in a `cadence bench contention` JSON, or a one-line UserError."""
        try:
            data = json.loads(Path(path).read_text())
            fit = data["fit"]
            return cls(
                float(fit["cpu_s_per_message"]),
                float(fit["cpu_s_per_byte"]),
                float(data.get("co_run_slowdown", 1.0)),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(
                f"cannot read {path}: not a `cadence bench contention` file ({exc})"
            ) from None


def fit_costs(rows: list[dict[str, Any]]) -> ContentionFit:
    """Least squares of extra_s = a * messages + b * bytes with a, b >= 0."""
    m = np.array([[r["messages"], r["bytes"]] for r in rows], dtype=float)
    y = np.array([r["extra_s"] for r in rows], dtype=float)
    best: tuple[float, float, float] | None = None
    candidates = []
    if np.linalg.matrix_rank(m) == 2:
        a, b = np.linalg.lstsq(m, y, rcond=None)[0]
        candidates.append((float(a), float(b)))
    # Constrained optima on each boundary (one constant at zero).
    msgs, nbytes = m[:, 0], m[:, 1]
    candidates.append((0.0, float(nbytes @ y / max(nbytes @ nbytes, 1e-30))))
    candidates.append((float(msgs @ y / max(msgs @ msgs, 1e-30)), 0.0))
    for a, b in candidates:
        if a < 0 or b < 0:
            continue
        residual = float(np.sum((m @ np.array([a, b]) - y) ** 2))
        if best is None or residual < best[2]:
            best = (a, b, residual)
    a, b = (best[0], best[1]) if best is not None else (0.0, 0.0)
    return ContentionFit(cpu_s_per_message=a, cpu_s_per_byte=b)


def summarise(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per size: medians over rounds and ranks of compute alone and with traffic, and the
    messages and bytes each rank reduced during the compute."""
    rows = []
    for size in sorted({r["size"] for r in raw}):
        mine = [r for r in raw if r["size"] == size]
        alone = float(np.median([r["alone_s"] for r in mine]))
        loaded = float(np.median([r["with_traffic_s"] for r in mine]))
        messages = float(np.median([r["messages"] for r in mine]))
        rows.append(
            {
                "size": size,
                "alone_s": alone,
                "with_traffic_s": loaded,
                "extra_s": loaded - alone,
                "messages": messages,
                "bytes": messages * size,
            }
        )
    return rows


def run_contention_bench(config: ContentionConfig, command: str) -> dict[str, Any]:
    """Measure in a fresh emulated cluster, fit, write the JSON, print a table."""
    from cadence.bench._launch import run_workers
    from cadence.netem import (
        EmulatedCluster,
        check_netem_available,
        cleanup_on_signals,
        parse_bandwidth,
    )

    bps = parse_bandwidth(config.bandwidth)
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    check_netem_available()
    with tempfile.TemporaryDirectory(prefix="cadence-contention-") as tmp:
        run_dir = Path(tmp)
        (run_dir / "config.json").write_text(json.dumps(asdict(config)))
        result = run_dir / "result.json"
        with cleanup_on_signals(), EmulatedCluster(config.hosts, bps) as cluster:
            args = [str(run_dir / "config.json"), str(result)]
            run_workers(cluster, "cadence.bench._contention_worker", args, run_dir,
                        config.threads, 900.0)  # fmt: skip
        raw = json.loads(result.read_text())
    rows = summarise(raw["rows"])
    fit = fit_costs(rows)
    solo = float(np.median(raw["solo_s"]))
    together = float(np.median([r["alone_s"] for r in raw["rows"]]))
    data = {
        "benchmark": "contention",
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "config": asdict(config),
        "rows": rows,
        "fit": asdict(fit),
        "solo_s": solo,
        "together_s": together,
        "co_run_slowdown": together / solo,
        "raw": raw,
    }
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{'size':>10}{'alone s':>10}{'traffic s':>11}{'extra s':>9}{'messages':>10}")
    for r in rows:
        print(
            f"{r['size'] / 2**20:>8.2f}MB{r['alone_s']:>10.3f}{r['with_traffic_s']:>11.3f}"
            f"{r['extra_s']:>9.3f}{r['messages']:>10.0f}"
        )
    print(
        f"fit: {fit.cpu_s_per_message * 1e3:.3f} ms per message + "
        f"{fit.cpu_s_per_byte * 1e9:.3f} ns per byte of processor time per worker"
    )
    print(
        f"compute with every rank computing: {together:.3f} s, one rank alone: {solo:.3f} s "
        f"(x{together / solo:.3f})"
    )
    print(f"wrote {out}")
    return data
