"""`cadence bench collectives`: cadence's collective algorithms against gloo's, in an emulated
cluster, each measurement next to the alpha-beta prediction calibrated in the same run.

The parent process builds the cluster, starts one worker per host inside its namespace
(`cadence.bench._collectives_worker`), and turns rank 0's raw table into rows with ratios
(ours / gloo, measured / predicted), a JSON file, a PNG and a printed table.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cadence.comm.calibrate_plan import DEFAULT_SIZES
from cadence.comm.cost import GLOO_ALGORITHMS, AlphaBeta
from cadence.comm.local_copy import LocalCopyTimes
from cadence.errors import UserError
from cadence.netem import format_bandwidth
from cadence.netem._bandwidth import link_bucket_bytes

SUPPORTED = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
DEFAULT_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
MAX_BYTES = 1 << 30
LATENCY_SIZES: tuple[int, ...] = (2048, 8192)
"""Sizes at which the calibration times all-gather and broadcast for their own alpha
(`CollectivesBenchConfig.alpha_per_collective`), between the default sizes, so no benchmark
row is a fitted point. A size whose wire term is over half its time is left out of the fit
(`cadence.comm.calibration.fit_latency`): on 2 hosts at 400mbit, broadcast's 8 KB."""
# gloo collectives whose latency the calibration fits on their own calls (`GLOO_ALGORITHMS` has
# their cost-model names); the others take all-reduce's.
LATENCY_FITTED = ("all_gather", "broadcast")

# cadence algorithm names per collective (cadence.comm.collectives.ALGORITHMS, repeated here so
# the CLI validates input without importing torch).
OURS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "halving_doubling", "tree"),
    "reduce_scatter": ("ring",),
    "all_gather": ("ring", "bruck"),
    "broadcast": ("binomial", "ring"),
    "all_to_all": ("pairwise",),
}
# cadence (collective, algorithm) -> cost model (collective, algorithm) where the names differ.
_OURS_MODEL: dict[tuple[str, str], tuple[str, str]] = {
    ("broadcast", "ring"): ("broadcast", "chain"),
}
_COST_NAME = {"all_reduce": "allreduce", "all_gather": "allgather"}
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_size(text: str) -> int:
    """'64KB' -> 65536 (KB, MB, GB are powers of 1024; a bare number is bytes)."""
    match = _SIZE.match(text.lower())
    if not match or match.group(2) not in _UNITS:
        raise UserError(f"bad size {text!r}: use e.g. 1KB, 256KB, 4MB or a number of bytes")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def parse_sizes(text: str) -> tuple[int, ...]:
    """Comma-separated sizes, e.g. '1KB,1MB,64MB', sorted and without duplicates."""
    return tuple(sorted({parse_size(part) for part in text.split(",") if part.strip()}))


def elements(nbytes: int, world_size: int) -> int:
    """float32 elements the benchmark times for a `nbytes` vector: a multiple of
    `world_size` (>= one per rank), so its rows' sizes can be a few bytes under `nbytes`."""
    return max(world_size, nbytes // 4 // world_size * world_size)


def format_size(nbytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{nbytes}B"


@dataclass(frozen=True, kw_only=True)
class CollectivesBenchConfig:
    """What `cadence bench collectives` measures and where it writes."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    """Message sizes in bytes, as the cost model counts them: the whole vector (all-gather:
    the gathered output; reduce-scatter and all-to-all: one rank's full input)."""
    collectives: tuple[str, ...] = DEFAULT_COLLECTIVES
    """Collectives to measure, each with gloo's and every cadence algorithm."""
    hosts: int = 4
    """Hosts (one rank each) of the emulated cluster."""
    bandwidth_bps: float = 1e9
    """Link cap of every host, bits per second."""
    repeats: int = 5
    """Timed rounds; every round times each (size, variant) 1-64 times (~1 MB), and the
    calibration's gloo calls beside them; medians are reported."""
    warmup: int = 1
    """Untimed rounds first (connections, allocator)."""
    threads: int = 1
    """Intra-op CPU threads per worker."""
    frame_bucket: bool = False
    """Shape links with GSO off and a token bucket of two frames
    (`EmulatedCluster(frame_bucket=True)`), so transfers smaller than the other benchmarks'
    ~5 ms bucket are serialised at the cap as on a real link. Off by default: on 2 shared
    cores the per-frame packets cost so much processor time that the calibration on 2 hosts
    at 400mbit found 30 MB/s for a 50 MB/s cap, one-way transfers running faster."""
    yield_io_thread: bool = True
    """Run gloo's polling I/O thread under SCHED_IDLE while calibrating and measuring, so a
    woken thread never waits out its time slice (`cadence.comm.gloo_threads`): the latency
    of small collectives is then the link's, not the scheduler's. False: leave it as is."""
    drain_bucket: bool = True
    """Before each timed block (calibration's and benchmark's), an untimed all-reduce of twice
    the links' token bucket, so every block starts with the bucket empty and runs at the
    link's steady state, which the token-bucket model prices. False: a block starts with
    whatever tokens the blocks before it left, up to a whole bucket after small ones."""
    pin_hosts: bool = True
    """Run each emulated host's worker on one processor, the hosts taking the machine's
    processors in turn, as a real host keeps its own (`_launch.run_workers`). False: the
    kernel places every host's threads, and small collectives scatter with where they land."""
    alpha_per_collective: bool = True
    """Fit gloo's all-gather and broadcast latency (alpha) on calls of their own, timed at
    `LATENCY_SIZES`, which the default sizes leave out, so every row stays a prediction; beta
    and reduce-scatter's alpha come from the all-reduce fit. False: every collective is
    priced with all-reduce's alpha."""
    out: str = "bench-out/bench-collectives.json"
    """JSON result file; the PNG goes next to it (same name, .png)."""

    def __post_init__(self) -> None:
        bad = [c for c in self.collectives if c not in SUPPORTED]
        if bad or not self.collectives:
            raise UserError(f"bad collectives {list(bad)}: choose from {', '.join(SUPPORTED)}")
        if not self.sizes or min(self.sizes) < 4 or max(self.sizes) > MAX_BYTES:
            raise UserError(f"bad sizes {list(self.sizes)}: use 4 B to 1 GB")
        if not 2 <= self.hosts <= 16:
            raise UserError(f"bad --workers {self.hosts}: use 2 to 16 emulated hosts")
        if self.repeats < 1 or self.warmup < 0 or self.threads < 1:
            raise UserError("repeats and threads must be >= 1, warmup >= 0")
        if not (self.bandwidth_bps > 0 and math.isfinite(self.bandwidth_bps)):
            raise UserError(f"bad bandwidth {self.bandwidth_bps}: must be positive and finite")

    @classmethod
    def from_json_dict(cls, raw: dict[str, Any]) -> CollectivesBenchConfig:
        """The config from its `asdict` form read back from JSON (lists become tuples)."""
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
        return cls(**fields)

    def bucket_bytes(self) -> int:
        """The token bucket the emulated cluster gives these links."""
        return link_bucket_bytes(self.bandwidth_bps, self.frame_bucket)

    def drain_bytes(self) -> int:
        """Bytes of the untimed all-reduce before each timed block (0: none): twice the token
        bucket the emulated cluster gives these links."""
        return 2 * self.bucket_bytes() if self.drain_bucket else 0

    def variants(self) -> list[tuple[str, str, str]]:
        """(collective, implementation, algorithm) in measuring order; gloo first."""
        return [
            (c, impl, alg)
            for c in self.collectives
            for impl, alg in [("gloo", "gloo"), *(("cadence", a) for a in OURS[c])]
        ]


def cost_key(collective: str, implementation: str, algorithm: str) -> tuple[str, str]:
    """The cost model's (collective, algorithm) that prices a measured variant."""
    if implementation == "gloo":
        return GLOO_ALGORITHMS[collective]
    if (collective, algorithm) in _OURS_MODEL:
        return _OURS_MODEL[(collective, algorithm)]
    return _COST_NAME.get(collective, collective), algorithm


@dataclass(frozen=True)
class BenchRow:
    """One measured (collective, variant, size) point."""

    collective: str
    """torch.distributed name, e.g. "reduce_scatter"."""
    implementation: str
    """"gloo" (torch.distributed on gloo) or "cadence" (cadence.comm.collectives)."""
    algorithm: str
    """cadence's algorithm name; "gloo" for gloo's own."""
    nbytes: int
    """Bytes of the whole vector (see `CollectivesBenchConfig.sizes`)."""
    measured_s: float
    """Median seconds per call, slowest rank's."""
    predicted_s: float
    """Alpha-beta prediction with this run's calibrated alpha and beta."""
    bound_s: float
    """Bandwidth-only time (alpha = 0, beta = 1 / link rate). Messages that fit in the tbf
    burst (~5 ms of traffic) can beat it; larger ones cannot."""
    measured_over_predicted: float
    """measured_s / predicted_s."""
    ours_over_gloo: float | None = field(default=None)
    """measured_s / gloo's measured_s at the same size; None for gloo's own rows."""


def gloo_local_s(collective: str, nbytes: int, hosts: int, local: LocalCopyTimes) -> float:
    """Seconds of memory work torch's gloo binding adds to one call around the network
    (`cadence.comm.local_copy`). Reduce-scatter clones the whole input before it all-reduces
    the clone, and copies one block out after. All-gather receives into a fresh flat tensor
    and copies all of it out after; its fresh pages fill while the rank waits on the link, so
    only the copy out is priced. The others work on the caller's tensors: 0."""
    if collective == "reduce_scatter":
        return local.fresh(nbytes) + local.warm(nbytes // hosts)
    if collective == "all_gather":
        return local.warm(nbytes)
    return 0.0


def build_rows(
    config: CollectivesBenchConfig,
    measured: list[dict[str, Any]],
    model: AlphaBeta,
    local: LocalCopyTimes | None = None,
    gloo_models: dict[str, AlphaBeta] | None = None,
) -> list[BenchRow]:
    """Rows with predictions and ratios from the workers' raw (variant, size, seconds) list.

    gloo's rows are priced with its binding's local copies added (`gloo_local_s`) when
    `local` holds the run's copy times; None prices the network alone. `gloo_models`: the
    model of each gloo collective with an alpha of its own (`collectives_fit.latency_models`);
    `model` prices the rest, and cadence's own algorithms."""
    local = local or LocalCopyTimes.none()
    gloo_models = gloo_models or {}
    wire = AlphaBeta.from_bandwidth(config.bandwidth_bps)
    gloo = {(m["collective"], m["nbytes"]): m["measured_s"] for m in measured
            if m["implementation"] == "gloo"}  # fmt: skip
    rows = []
    for m in measured:
        name, alg = cost_key(m["collective"], m["implementation"], m["algorithm"])
        gloo_model = gloo_models.get(m["collective"], model)
        priced = gloo_model if m["implementation"] == "gloo" else model
        predicted = priced.time(name, alg, m["nbytes"], config.hosts)
        if m["implementation"] == "gloo":
            predicted += gloo_local_s(m["collective"], m["nbytes"], config.hosts, local)
        base = gloo.get((m["collective"], m["nbytes"]))
        rows.append(
            BenchRow(
                collective=m["collective"],
                implementation=m["implementation"],
                algorithm=m["algorithm"],
                nbytes=m["nbytes"],
                measured_s=m["measured_s"],
                predicted_s=predicted,
                bound_s=wire.time(name, alg, m["nbytes"], config.hosts),
                measured_over_predicted=m["measured_s"] / predicted if predicted else math.nan,
                ours_over_gloo=None
                if m["implementation"] == "gloo" or not base
                else m["measured_s"] / base,
            )
        )
    return rows


def table(rows: list[BenchRow]) -> str:
    """The rows as a fixed-width table, grouped by collective and size."""
    head = (f"{'collective':<15}{'size':>7}  {'variant':<25}{'measured ms':>12}"
            f"{'predicted ms':>13}{'bound ms':>10}{'meas/pred':>10}{'ours/gloo':>10}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        variant = "gloo" if r.implementation == "gloo" else f"cadence {r.algorithm}"
        ratio = "" if r.ours_over_gloo is None else f"{r.ours_over_gloo:.2f}"
        lines.append(
            f"{r.collective:<15}{format_size(r.nbytes):>7}  {variant:<25}"
            f"{r.measured_s * 1e3:>12.3f}{r.predicted_s * 1e3:>13.3f}{r.bound_s * 1e3:>10.3f}"
            f"{r.measured_over_predicted:>10.2f}{ratio:>10}"
        )
    return "\n".join(lines)


def link_kind(config: CollectivesBenchConfig) -> str:
    """The model of the links this run shapes: "token-bucket" for tbf's usual ~5 ms bucket,
    which overlaps a message's latency and bytes (`AlphaBeta(overlap=True)`); "serialising"
    for the two-frame bucket, which pays both, as a real link does."""
    return "serialising" if config.frame_bucket else "token-bucket"


WITHIN = 0.10
"""The cost model's target: calibrated predictions within 10% of gloo's measured times."""


def within_target(ratio: float) -> bool:
    """Whether a ratio of two times (measured over predicted, or one half of a row's rounds
    over the other) is within `WITHIN` of 1. The 1e-9: a ratio printed as 1.10 is within,
    whatever its last float bits say."""
    return abs(ratio - 1) <= WITHIN + 1e-9


def accuracy(rows: list[BenchRow]) -> dict[str, Any]:
    """How gloo's own rows meet the cost model's target: the count within `WITHIN` of the
    prediction, and the worst row (largest |measured / predicted - 1|)."""
    gloo = [r for r in rows if r.implementation == "gloo"]
    if not gloo:
        return {"within": WITHIN, "rows": 0, "rows_within": 0, "worst": None}
    worst = max(gloo, key=lambda r: abs(r.measured_over_predicted - 1))
    return {
        "within": WITHIN,
        "rows": len(gloo),
        "rows_within": sum(within_target(r.measured_over_predicted) for r in gloo),
        "worst": {"collective": worst.collective, "nbytes": worst.nbytes,
                  "measured_over_predicted": worst.measured_over_predicted},  # fmt: skip
    }


def accuracy_line(summary: dict[str, Any]) -> str:
    """One line for the terminal, e.g. "gloo within 10% of the prediction: 20 of 36 rows;
    worst all_gather 64MB at 1.54x"."""
    head = f"gloo within {summary['within']:.0%} of the prediction: "
    head += f"{summary['rows_within']} of {summary['rows']} rows"
    worst = summary["worst"]
    if worst is None:
        return head
    size = format_size(worst["nbytes"])
    return f"{head}; worst {worst['collective']} {size} at {worst['measured_over_predicted']:.2f}x"


def plot(rows: list[BenchRow], path: str, title: str) -> None:
    """One panel per collective: measured (solid, dots) and predicted (dashed) time by size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    collectives = list(dict.fromkeys(r.collective for r in rows))
    fig, axes = plt.subplots(1, len(collectives), figsize=(4.2 * len(collectives), 3.8),
                             squeeze=False)  # fmt: skip
    for ax, coll in zip(axes[0], collectives, strict=True):
        mine = [r for r in rows if r.collective == coll]
        for i, variant in enumerate(dict.fromkeys((r.implementation, r.algorithm) for r in mine)):
            pts = [r for r in mine if (r.implementation, r.algorithm) == variant]
            label = "gloo" if variant[0] == "gloo" else variant[1]
            color = f"C{i}"
            xs = [r.nbytes for r in pts]
            ax.plot(xs, [r.measured_s for r in pts], "o-", color=color, label=label)
            ax.plot(xs, [r.predicted_s for r in pts], "--", color=color, alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(coll)
        ax.set_xlabel("bytes")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("seconds per call (dashed: alpha-beta prediction)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _check_writable(path: Path) -> None:
    """Fail before minutes of measuring, not after; leave no empty file behind."""
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        raise UserError(f"cannot write --out file '{path}': {exc.strerror or exc}") from None


def run_collectives_bench(config: CollectivesBenchConfig, command: str) -> dict[str, Any]:
    """Measure in a fresh emulated cluster; write JSON and PNG, print the table, return the JSON.

    Needs root and iproute2 (a one-line UserError otherwise).
    """
    from cadence.bench._collectives_worker import config_json
    from cadence.bench._launch import run_workers
    from cadence.bench.collectives_fit import fit_run
    from cadence.bench.collectives_halves import halves, halves_line, halves_summary
    from cadence.netem import EmulatedCluster, check_netem_available, cleanup_on_signals

    out = Path(config.out)
    _check_writable(out)
    check_netem_available()
    # Transfers of the measured data (the calibration's all-reduces move about as much as one
    # variant), times a generous factor for the slow algorithms and a loaded machine; only a
    # hung run should ever reach it.
    one_pass_s = sum(config.sizes) * 8 / config.bandwidth_bps
    traffic_s = one_pass_s * (len(config.variants()) + 1)
    timeout_s = 300 + 20 * traffic_s * (config.warmup + config.repeats)
    # The workers print nothing until the end: say what is coming and roughly how long.
    link_s = traffic_s * (config.warmup + config.repeats)
    cluster = EmulatedCluster(config.hosts, config.bandwidth_bps, frame_bucket=config.frame_bucket)
    print(
        f"timing {len(config.variants())} variants x {len(config.sizes)} sizes on "
        f"{config.hosts} emulated hosts at {format_bandwidth(config.bandwidth_bps)} (TCP "
        f"{cluster.congestion_control}, {cluster.port_queue} port queues), the "
        f"calibration's gloo calls in the same rounds ({config.warmup} warm-up and "
        f"{config.repeats} timed): at least ~{link_s:.0f} s on the links",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="cadence-bench-") as tmp:
        run_dir = Path(tmp)
        (run_dir / "config.json").write_text(config_json(config))
        result = run_dir / "result.json"
        with cleanup_on_signals(), cluster:
            args = [str(run_dir / "config.json"), str(result)]
            run_workers(cluster, "cadence.bench._collectives_worker", args, run_dir,
                        config.threads, timeout_s, pin_hosts=config.pin_hosts)  # fmt: skip
        raw = json.loads(result.read_text())
    local = LocalCopyTimes.from_dict(raw.get("local_copy"))
    measured = [t for t in raw["timed"] if t["role"] == "row"]
    fitted = fit_run(config, [t for t in raw["timed"] if t["role"] == "calibration"], local)
    kind = link_kind(config)
    kind = kind if kind in fitted.models else "serialising"
    model = fitted.models[kind]
    rows_by_kind = {k: build_rows(config, measured, m, local, fitted.by_collective[k])
                    for k, m in fitted.models.items()}  # fmt: skip
    rows = rows_by_kind[kind]
    by_kind = {k: accuracy(r) for k, r in rows_by_kind.items()}
    pairs = halves(measured)
    png = out.with_suffix(".png")
    data: dict[str, Any] = {
        "benchmark": "collectives",
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "system": platform.platform(),
                    "hosts_tcp_congestion_control": cluster.congestion_control,
                    "port_queue": cluster.port_queue},  # fmt: skip
        "torch_version": raw["torch_version"],
        "config": asdict(config),
        "calibration": {
            "link_model": kind,
            "alpha_s": model.alpha_s,
            "beta_s_per_byte": model.beta_s_per_byte,
            "objective": "regimes",
            "models": {k: asdict(m) for k, m in fitted.models.items()},
            # gloo collective -> the alpha its rows are priced with (this link's model)
            "alpha_s_by_collective": fitted.alphas(kind),
            # the timed gloo calls the models were fitted to, each with this link's prediction
            "rows": fitted.rows(kind),
        },
        "local_copy": asdict(local),  # seconds; added to gloo's reduce-scatter and all-gather
        "rows": [asdict(r) for r in rows],
        "accuracy": by_kind[kind],
        "accuracy_by_link_model": by_kind,
        # each gloo row's even rounds against its odd rounds: the noise floor
        "halves": {"pairs": pairs, **halves_summary(pairs)},
        "png": png.name,  # next to this file
    }
    out.write_text(json.dumps(data, indent=2) + "\n")
    rate_mb_s = 1e-6 / model.beta_s_per_byte if model.beta_s_per_byte else math.inf
    title = (
        f"{config.hosts} hosts at {format_bandwidth(config.bandwidth_bps)}, {kind} link model; "
        f"alpha {model.alpha_s * 1e6:.0f} us, 1/beta {rate_mb_s:.0f} MB/s"
        + (f", processor {model.cpu_s_per_byte * 1e9:.2f} ns/B" if model.cpu_s_per_byte else "")
    )
    plot(rows, str(png), title)
    sizes = ", ".join(format_size(n) for n in fitted.all_reduce_sizes)
    print(f"calibrated on gloo all_reduce at {sizes}: {title}")
    probe_sizes = ", ".join(map(format_size, LATENCY_SIZES))
    for c, alpha in fitted.alphas(kind).items():
        if c != "all_reduce":
            print(f"  {c}'s own alpha, from its calls at {probe_sizes}: {alpha * 1e6:.0f} us")
    if local.sizes:
        big = local.sizes[-1]
        print(f"gloo's local copies, priced into its reduce-scatter and all-gather: a "
              f"{format_size(big)} clone takes {local.fresh(big) * 1e3:.1f} ms, a copy into an "
              f"existing tensor {local.warm(big) * 1e3:.1f} ms (every rank at once)")  # fmt: skip
    print(table(rows))
    for k in sorted(by_kind, key=lambda k: k != kind):  # this link's model first
        print(f"{accuracy_line(by_kind[k])} ({k} link model)")
    print(halves_line(halves_summary(pairs)))
    print(f"wrote {out} and {png}")
    return data
