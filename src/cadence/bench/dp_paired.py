"""`cadence bench dp-paired`: cadence-dp against torch DDP, timed in turns inside one run.

`cadence bench dp` starts a fresh training run per variant and repeat, so two variants it
compares are timed minutes apart; this machine's speed drifts by 15-35% over minutes, which
moves a ratio of medians by more than the targets' margins. Here one pair of worker processes
holds every variant at once, each on its own copy of the model with the same initial weights:
compute alone (each rank trains without synchronising, both at once, as they share the
machine), DDP with its default 25 MB buckets and with other bucket sizes, and cadence-dp. They
take turns in blocks of steps, in alternating order, round after round, and each round also
times one all-reduce of all gradients (the wire time; capped links only). Every ratio is taken
within a round, so drift between rounds cancels, and the median over rounds is reported.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from cadence.errors import UserError

NO_CAP = "none"
COMPUTE = "compute"
ALIGNED = "compute-aligned"
"""With `aligned_compute`: compute alone with each forward pass and optimizer step started
on every rank together."""
CADENCE = "cadence"
TWINS = {"ddp": "ddp-twin", CADENCE: "cadence-twin"}
"""With `twins`: the identical second copy of each variant, by the variant it copies."""


@dataclass(frozen=True)
class PairedSettings:
    """How each (model, cap) is measured: what the benchmark's config and its workers share."""

    batch_size: int = 64
    """Global batch per step."""
    block_steps: int = 8
    """Steps per turn of a variant, at least; all but the first and last are timed (steady
    state)."""
    block_seconds: float = 3.0
    """Timed seconds per turn, at least: blocks get longer for fast models (from the warm-up
    round's fastest variant), since a turn of a few short steps is mostly noise."""
    rounds: int = 3
    """Timed rounds (every variant takes one turn per round), after one untimed warm-up round."""
    ddp_buckets_mb: tuple[float, ...] = (5.0,)
    """Bucket sizes tried for "DDP tuned" besides DDP's default 25 MB."""
    threshold_mb: float | None = None
    """cadence-dp threshold; None: cadence-dp's default."""
    cadence_thresholds_mb: tuple[float, ...] = ()
    """Further cadence-dp variants, one per threshold (`cadence-<mb>mb`), each timed in the
    same rounds and compared with the main cadence-dp variant round by round."""
    cadence_variants: tuple[str, ...] = ()
    """Further cadence-dp variants as `KEY=VALUE[,KEY=VALUE]` over `SETTINGS` (named
    `cadence[<spec>]`), compared with the main one the same way."""
    reorder_k: int | None = None
    """cadence-dp reorder point."""
    autotune: str = "off"
    """cadence-dp warm-up autotuning (off, exhaustive, guided); its trials run in the
    warm-up round, which is extended until they end, so no timed round includes them."""
    threads: int = 1
    """Intra-op threads per worker."""
    aligned_compute: bool = False
    """Also time compute alone with every rank starting each forward pass and each optimizer
    step together (`ALIGNED`; a barrier before each, not timed), as a synchronous strategy's
    ranks start them after their collective: ranks in step contend for the machine's memory
    at once, which free-running compute turns average out. Saved per round as
    `aligned_compute_rounds_s` (each phase's slowest rank) for `bench sim --paired-compute`."""
    keep_subnormals: bool = False
    """Let the workers' float math keep subnormal numbers as IEEE 754 has them. False (the
    default): each worker flushes them to zero (`torch.set_flush_denormal`). The benchmark
    trains every variant for thousands of steps on a 2048-sample synthetic set, which the
    models memorise; cnn_lstm's LSTM gradients then turn subnormal after about 1000 steps
    and its LSTM backward slows about 5x on x86 (each variant at its own pace; its whole
    step 1.3-1.4x by 3000 steps: `results/subnormals_cnn_lstm.py`), a drift of the
    benchmark's own making that the profile, taken from fresh weights, does not share."""
    twins: bool = False
    """Also time an identical second copy of DDP and of cadence-dp (`TWINS`) in the same
    rounds: an A/A check of how far this benchmark's medians move between variants that
    differ in nothing but their turn, i.e. the noise floor of its own figures."""


@dataclass(frozen=True, kw_only=True)
class PairedDPConfig(PairedSettings):
    """What `cadence bench dp-paired` measures."""

    models: tuple[str, ...] = ("vgg16",)
    """Model zoo names."""
    caps: tuple[str, ...] = ("400mbit",)
    """Link caps; `none` runs on the loopback without an emulated cluster."""
    workers: int = 2
    """Ranks (emulated hosts)."""
    pin_hosts: bool = False
    """Run each emulated host's worker, all its threads, on one processor (`host_cpus`), as
    a host of a real cluster keeps its own; False: the kernel places every host's threads."""
    out: str = "results/bench-dp-paired.json"
    """JSON output; the PNG goes next to it."""

    def __post_init__(self) -> None:
        from cadence.models import model_names
        from cadence.netem import parse_bandwidth

        for model in self.models:
            if model not in model_names():
                raise UserError(f"unknown model '{model}': choose from {', '.join(model_names())}")
        for cap in self.caps:
            if cap != NO_CAP:
                parse_bandwidth(cap)
        if self.block_steps < 3:
            raise UserError(f"--block-steps must be at least 3, got {self.block_steps}")
        if not self.block_seconds >= 0:
            raise UserError(f"--block-seconds must be >= 0, got {self.block_seconds}")
        if self.rounds < 1:
            raise UserError(f"--rounds must be at least 1, got {self.rounds}")
        if self.workers < 2:
            raise UserError(f"--workers must be at least 2, got {self.workers}")
        if self.batch_size < self.workers:
            raise UserError(f"--batch-size must be at least --workers ({self.workers})")
        if any(mb <= 0 for mb in self.ddp_buckets_mb):
            raise UserError("--ddp-buckets-mb must be positive numbers")
        if self.autotune not in ("off", "exhaustive", "guided"):
            raise UserError(f"--autotune must be off, exhaustive or guided, got '{self.autotune}'")
        if any(mb <= 0 for mb in self.cadence_thresholds_mb):
            raise UserError("--cadence-thresholds-mb must be positive numbers")
        for spec in self.cadence_variants:
            parse_settings(spec)

    def case(self, model: str, cap: str, master_port: int | None) -> PairedCase:
        """What the workers of one (model, cap) run."""
        shared = {f.name: getattr(self, f.name) for f in fields(PairedSettings)}
        return PairedCase(
            **shared, model=model, measure_wire=cap != NO_CAP, master_port=master_port
        )


@dataclass(frozen=True, kw_only=True)
class PairedCase(PairedSettings):
    """One (model, cap) of the benchmark, as its workers read it."""

    model: str
    """Model zoo name."""
    measure_wire: bool
    """Time one all-reduce of all gradients per round (capped links)."""
    master_port: int | None
    """Rendezvous port for loopback runs."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PairedCase:
        keys = ("ddp_buckets_mb", "cadence_thresholds_mb", "cadence_variants")
        tuples = {k: tuple(data[k]) for k in keys}
        return cls(**{**data, **tuples})


SETTINGS: dict[str, type] = {
    "threshold_mb": float,
    "credit_mb": float,
    "reorder_k": int,
    "warmup_iterations": int,
}
"""What a `--cadence-variants` spec may set: `DPConfig`'s threshold and credit (MiB), reorder
point K and warm-up iterations before the plan is rebuilt from timings."""


def parse_settings(spec: str) -> dict[str, float]:
    """`threshold_mb=2,reorder_k=1` as a dict, or a one-line UserError."""
    settings: dict[str, float] = {}
    for item in spec.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or key not in SETTINGS:
            raise UserError(
                f"--cadence-variants: '{item}' is not KEY=VALUE with KEY one of "
                f"{', '.join(SETTINGS)}"
            )
        try:
            number = SETTINGS[key](value)
        except ValueError:
            raise UserError(f"--cadence-variants: {key} must be a number, got '{value}'") from None
        if number <= 0:
            raise UserError(f"--cadence-variants: {key} must be positive, got {value}")
        settings[key] = number
    return settings


def cadence_settings(case: PairedCase) -> dict[str, dict[str, float]]:
    """Every cadence-dp variant by name, with what it sets beyond the case's own settings."""
    variants: dict[str, dict[str, float]] = {CADENCE: {}}
    for mb in case.cadence_thresholds_mb:
        variants[f"{CADENCE}-{mb:g}mb"] = {"threshold_mb": mb}
    for spec in case.cadence_variants:
        variants[f"{CADENCE}[{spec}]"] = parse_settings(spec)
    return variants


def variant_names(case: PairedCase) -> list[str]:
    """Turn order within a round (reversed every other round); a size given twice is one
    variant."""
    extra = [f"ddp-{mb:g}mb" for mb in case.ddp_buckets_mb if mb != 25.0]
    # Twins go last, so the other variants keep their turns. A twin comes after its original
    # in one round and before it in the next, but always further from the compute turn: the
    # compute turns of two rounds are back to back, and DDP's copy is next to them.
    twins = list(TWINS.values()) if case.twins else []
    aligned = [ALIGNED] if case.aligned_compute else []
    return list(dict.fromkeys([COMPUTE, *aligned, "ddp", *extra, *cadence_settings(case), *twins]))


def summarise(model: str, cap: str, measured: dict[str, Any]) -> dict[str, Any]:
    """The row of one (model, cap): medians per variant and the ratios, each taken within a
    round and then the median over rounds (`*_paired`), beside the ratio of the medians."""
    rounds: dict[str, list[float]] = measured["rounds_s"]
    wire: list[float] = measured["wire_runs_s"]
    n = len(rounds[CADENCE])
    twins = {name: twin for name, twin in TWINS.items() if twin in rounds}
    compared = [name for name in rounds if name not in TWINS.values()]  # twins only A/A
    ddps = [name for name in compared if name.startswith("ddp")]
    others = [name for name in compared if name.startswith(CADENCE) and name != CADENCE]
    # The tuned bucket is the one fastest over all rounds, then compared round by round.
    tuned = min(ddps, key=lambda name: statistics.median(rounds[name]))
    bound = [max(rounds[COMPUTE][i], wire[i] if wire else 0.0) for i in range(n)]

    def per_round(num: list[float], den: list[float]) -> list[float]:
        return [a / b for a, b in zip(num, den, strict=True)]

    ratios = {
        "cadence_over_ddp": per_round(rounds[CADENCE], rounds["ddp"]),
        "cadence_over_ddp_tuned": per_round(rounds[CADENCE], rounds[tuned]),
        "cadence_over_bound": per_round(rounds[CADENCE], bound),
        "ddp_over_bound": per_round(rounds["ddp"], bound),
    }
    against_main = {name: per_round(rounds[name], rounds[CADENCE]) for name in others}
    # A/A: each twin against what it copies, round by round.
    twin_rounds = {name: per_round(rounds[twin], rounds[name]) for name, twin in twins.items()}
    medians = {name: statistics.median(times) for name, times in rounds.items()}
    compute = medians[COMPUTE]
    wire_s = statistics.median(wire) if wire else 0.0
    return {
        "model": model,
        "cap": cap,
        "gradient_bytes": measured["gradient_bytes"],
        "block_steps": measured["block_steps"],
        "tuned": measured.get("tuned", {}),
        # cadence-dp's bytes in flight, as it ran (older files lack it).
        **_given("cadence_credit_bytes", measured.get("credit_bytes", {}).get(CADENCE)),
        # cadence-dp's plan as it ran: chunks, threshold, the one-chunk probe (older files lack it).
        **_given("cadence_plan", measured.get("plans", {}).get(CADENCE)),
        "compute_s": compute,
        "wire_s": wire_s,
        "bound_s": max(compute, wire_s),
        "iteration_s": medians,
        "rounds_s": rounds,
        # Compute alone, each step's slowest rank (older files lack it).
        **_lockstep(measured.get("lockstep_compute_rounds_s")),
        # And its optimizer step, each round's slowest rank's mean (older files lack it).
        **_present("compute_step_rounds_s", measured.get("compute_step_rounds_s")),
        # The same with every rank's phases started together (`aligned_compute` runs only).
        **_present("aligned_compute_rounds_s", measured.get("aligned_compute_rounds_s")),
        **_present("aligned_compute_step_rounds_s", measured.get("aligned_compute_step_rounds_s")),
        "wire_runs_s": wire,
        # The same all-reduce while every rank computes beside it (older files lack it).
        **_present("wire_computing_runs_s", measured.get("wire_computing_runs_s")),
        "ddp_tuned": tuned,
        "bound_rounds_s": bound,
        "ratio_rounds": ratios,
        **{f"{key}_paired": statistics.median(values) for key, values in ratios.items()},
        "cadence_over_ddp": medians[CADENCE] / medians["ddp"],
        "cadence_over_bound": medians[CADENCE] / max(compute, wire_s),
        # Each further cadence-dp variant against the main one, round by round.
        "variant_over_cadence_rounds": against_main,
        "variant_over_cadence_paired": {
            name: statistics.median(values) for name, values in against_main.items()
        },
        **_twins(twin_rounds),
        # Whether the workers' math flushed subnormal floats to zero (older files lack it).
        **_given("subnormals_flushed", measured.get("subnormals_flushed")),
    }


def _twins(rounds: dict[str, list[float]]) -> dict[str, Any]:
    """Twin over original per round and their median, by original (`twins` runs only)."""
    if not rounds:
        return {}
    return {
        "twin_over_original_rounds": rounds,
        "twin_over_original_paired": {k: statistics.median(v) for k, v in rounds.items()},
    }


def _present(key: str, value: Any) -> dict[str, Any]:
    return {} if not value else {key: value}


def _given(key: str, value: Any) -> dict[str, Any]:
    """`{key: value}` unless the worker recorded nothing (older files); unlike `_present`,
    a recorded False or zero is kept."""
    return {} if value is None else {key: value}


def _lockstep(rounds: list[float] | None) -> dict[str, Any]:
    if not rounds:
        return {}
    return {"lockstep_compute_s": statistics.median(rounds), "lockstep_compute_rounds_s": rounds}


def _run_case(config: PairedDPConfig, model: str, cap: str, run_dir: Path) -> dict[str, Any]:
    from cadence.bench._launch import run_workers_on_link
    from cadence.launch.local import free_port
    from cadence.netem import parse_bandwidth

    case_dir = run_dir / f"{model}-{cap}"
    case_dir.mkdir(parents=True)
    bps = None if cap == NO_CAP else parse_bandwidth(cap)
    # Loopback runs share this machine's ports; in a fresh namespace 29500 is free.
    case = config.case(model, cap, free_port() if bps is None else None)
    (case_dir / "case.json").write_text(json.dumps(asdict(case)))
    result = case_dir / "result.json"
    timeout_s = 3600.0  # only a hung run reaches it; vgg16 at 400mbit takes ~5 minutes
    run_workers_on_link(
        bps, config.workers, "cadence.bench._dp_paired_worker",
        [str(case_dir / "case.json"), str(result)], case_dir, config.threads, timeout_s,
        pin_hosts=config.pin_hosts,
    )  # fmt: skip
    return summarise(model, cap, json.loads(result.read_text()))


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| model | cap | compute | wire | DDP | DDP tuned | cadence | cadence/DDP (per round) "
        "| cadence/DDP tuned | cadence/bound (per round) | DDP/bound |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        it = r["iteration_s"]
        per_round = " / ".join(f"{x:.2f}" for x in r["ratio_rounds"]["cadence_over_ddp"])
        bound_rounds = " / ".join(f"{x:.2f}" for x in r["ratio_rounds"]["cadence_over_bound"])
        lines.append(
            f"| {r['model']} | {r['cap']} | {r['compute_s']:.3f} s | {r['wire_s']:.3f} s "
            f"| {it['ddp']:.3f} s | {it[r['ddp_tuned']]:.3f} s ({r['ddp_tuned']}) "
            f"| {it[CADENCE]:.3f} s{_chunks(r)} | {r['cadence_over_ddp_paired']:.2f} ({per_round}) "
            f"| {r['cadence_over_ddp_tuned_paired']:.2f} "
            f"| {r['cadence_over_bound_paired']:.2f} ({bound_rounds}) "
            f"| {r['ddp_over_bound_paired']:.2f} |"
        )
    for r in rows:
        for name, ratios in r["variant_over_cadence_rounds"].items():
            each = " / ".join(f"{x:.2f}" for x in ratios)
            lines.append(
                f"{r['model']} @ {r['cap']}: {name} {r['iteration_s'][name]:.3f} s, "
                f"{r['variant_over_cadence_paired'][name]:.2f}x cadence ({each})"
            )
        if r.get("aligned_compute_rounds_s") and r.get("lockstep_compute_rounds_s"):
            each = " / ".join(
                f"{a / b:.3f}"
                for a, b in zip(
                    r["aligned_compute_rounds_s"], r["lockstep_compute_rounds_s"], strict=True
                )
            )
            lines.append(
                f"{r['model']} @ {r['cap']}: compute with the ranks' phases aligned "
                f"{statistics.median(r['aligned_compute_rounds_s']):.3f} s a step, over the "
                f"free-running compute's slowest ranks per round: {each}"
            )
        for name, ratios in r.get("twin_over_original_rounds", {}).items():
            each = " / ".join(f"{x:.2f}" for x in ratios)
            lines.append(
                f"{r['model']} @ {r['cap']}: A/A {TWINS[name]} "
                f"{r['twin_over_original_paired'][name]:.3f}x {name} ({each})"
            )
    return lines


def _chunks(row: dict[str, Any]) -> str:
    """How many chunks cadence-dp's plan had, where the file says."""
    plan = row.get("cadence_plan")
    if plan is None:
        return ""
    return f" ({plan['chunks']} chunk{'s' if plan['chunks'] != 1 else ''})"


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """cadence/DDP and cadence/bound of every round, one group per (model, cap)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(rows)), 4.0))
    for i, row in enumerate(rows):
        for offset, (key, colour) in enumerate(
            (("cadence_over_ddp", "#3182bd"), ("cadence_over_bound", "#e6550d"))
        ):
            values = row["ratio_rounds"][key]
            xs = [i + (offset - 0.5) * 0.3] * len(values)
            label = key.replace("_over_", "/") if i == 0 else None
            ax.scatter(xs, values, color=colour, label=label, s=18)
            ax.hlines(statistics.median(values), xs[0] - 0.1, xs[0] + 0.1, color=colour)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(rows)), [f"{r['model']}\n{r['cap']}" for r in rows])
    ax.set_ylabel("ratio within a round (dots), median (bar)")
    ax.set_title("cadence bench dp-paired: lower is better")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_paired_bench(
    config: PairedDPConfig, command: str, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    from cadence.bench.dp import prepare_out

    out = prepare_out(config.out, any(cap != NO_CAP for cap in config.caps))
    started = time.time()
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "config": asdict(config),
        "rows": rows,
    }
    run_dir = Path(tempfile.mkdtemp(prefix="cadence-bench-dp-paired-"))  # kept on failure: logs
    cases = [(model, cap) for model in config.models for cap in config.caps]
    for number, (model, cap) in enumerate(cases, 1):
        echo(f"[{number}/{len(cases)}] {model} @ {cap}: {config.rounds} rounds + warm-up")
        rows.append(_run_case(config, model, cap, run_dir))
        report["seconds"] = time.time() - started
        out.write_text(json.dumps(report, indent=2) + "\n")  # kept if a later case fails
    shutil.rmtree(run_dir, ignore_errors=True)
    plot(rows, out.with_suffix(".png"))
    for line in table_lines(rows):
        echo(line)
    echo(f"wrote {out} and {out.with_suffix('.png')} ({report['seconds']:.0f} s)")
    return report
