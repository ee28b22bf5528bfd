"""What a `cadence bench dp` or `dp-paired` result file recorded, read as the simulator prices
it (`cadence.sim.bench_dp`): the settings each row ran with, which of its variants fixed glibc's
heap thresholds, and the compute and optimizer-step samples its runs or rounds timed. Files
from older versions of the benchmarks record less; each reader says what it assumes for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cadence.bench.dp import DDP_FIXED_HEAP
from cadence.dp.config import mb_to_bytes
from cadence.dp.plan import DEFAULT_CREDIT_CHUNKS, default_threshold
from cadence.errors import UserError

# bench-dp variant -> simulated strategy
VARIANTS = {"ddp": "ddp", "cadence": "cadence-dp"}
# With DDP in processes with cadence-dp's heap (`bench dp --ddp-fixed-heap`): priced from
# those runs' own compute only, as the compute-only runs and dp-paired's rounds do not have it.
IN_RUN_VARIANTS = {"ddp": "ddp", DDP_FIXED_HEAP: "ddp", "cadence": "cadence-dp"}


def recorded_threshold(cfg: dict[str, Any]) -> int | None:
    """The cadence-dp threshold a benchmark file's config ran with: its `threshold_mb`, None
    where it ran cadence-dp's default (`run_strategy` then applies the same), 4 MiB for files
    from before the default depended on the model (they do not record it)."""
    if "threshold_mb" not in cfg:
        return 4 * 2**20
    mb = cfg["threshold_mb"]
    return mb_to_bytes(None if mb is None else float(mb))


def recorded_credit(row: dict[str, Any], threshold: int | None, gradient_bytes: int) -> int:
    """The bytes cadence-dp let in flight in a benchmark row: its `cadence_credit_bytes`, or
    for files from before the default depended on the model (they do not record it) two
    chunks' worth, the default they ran with."""
    if "cadence_credit_bytes" in row:
        return int(row["cadence_credit_bytes"])
    chunk = threshold if threshold is not None else default_threshold(gradient_bytes)
    return DEFAULT_CREDIT_CHUNKS * chunk


def recorded_default_plan(row: dict[str, Any]) -> str:
    """What cadence-dp's default plan was in a benchmark row: "one chunk" or "chunked" after
    its one-chunk iterations (the choice most of the row's runs made), or "unprobed" for files
    from before the runtime chose (they record no plan)."""
    plans = row.get("cadence_plans") or ([row["cadence_plan"]] if "cadence_plan" in row else [])
    probes = [p["one_chunk_probe"] for p in plans if p.get("one_chunk_probe") is not None]
    if not probes:
        return "unprobed"
    kept = sum(1 for p in probes if p["one_chunk"])
    return "one chunk" if 2 * kept > len(probes) else "chunked"


def read_bench_dp(path: str) -> dict[str, Any]:
    """A `cadence bench dp --out` file, or a one-line UserError."""
    try:
        data = json.loads(Path(path).read_text())
        if not (isinstance(data, dict) and isinstance(data.get("rows"), list)):
            raise ValueError("no rows")
        for row in data["rows"]:
            row["model"], row["cap"], row["compute_s"], row["iteration_s"]["ddp"]  # noqa: B018
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"cannot read {path}: not a `cadence bench dp` file ({exc})") from None
    return data


PROBE_KEYS = {
    "after": ("variant_compute_runs_s", "variant_step_runs_s"),
    "interleaved": ("variant_interleaved_compute_runs_s", "variant_interleaved_step_runs_s"),
}
"""A `cadence bench dp` row's keys for each kind of in-run probe: (each run's compute, each
run's optimizer step). "after": timed after the run's steps; "interleaved": in blocks between
them (`--interleaved-probe-every`, files since 2026-11-27)."""

HEAP_KEPT_STRATEGIES = ("cadence-dp",)
"""The strategies whose runs are priced from their blocks between the steps: cadence-dp's
processes fix glibc's heap thresholds. DDP's leave them dynamic, and there the blocks time a
model's steps 1.10-1.43x slower than the probe after the steps (`results/interleaved-heap-*`);
the first file with blocks (matrix o, 2026-11-27) timed them in DDP's runs too, and they are
not used. `bench dp`'s `ddp-heap` runs (`--ddp-fixed-heap`) fix them through their
environment, and are priced from their blocks too (`heap_kept`)."""


def heap_kept(variant: str, row: dict[str, Any] | None = None) -> bool:
    """Whether a `bench dp` variant's processes ran with glibc's heap thresholds fixed, so its
    blocks between the steps time its steps: as the row records it (`fixed_heap_variants`,
    files since 2026-11-28), else by its strategy (`HEAP_KEPT_STRATEGIES`)."""
    if row is not None and "fixed_heap_variants" in row:
        return variant in row["fixed_heap_variants"]
    return variant == DDP_FIXED_HEAP or VARIANTS.get(variant) in HEAP_KEPT_STRATEGIES


def dynamic_heap_variants(row: dict[str, Any]) -> frozenset[str]:
    """The DDP variants of a `cadence bench dp` row whose processes left glibc's heap
    thresholds dynamic (DDP as users run it); none for `dp-paired` rows, whose DDP runs in
    the processes where cadence-dp fixed them."""
    if "rounds_s" in row:
        return frozenset()
    return frozenset(
        variant
        for variant, strategy in IN_RUN_VARIANTS.items()
        if strategy == "ddp" and not heap_kept(variant, row)
    )


def probe_samples(
    row: dict[str, Any], probe: str = "after"
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, str]]:
    """A `cadence bench dp` row's in-run samples per variant: (each run's compute, each run's
    optimizer step, which probe timed them). With `probe` "interleaved" the variants of
    `HEAP_KEPT_STRATEGIES` whose runs timed blocks between their steps are taken from them, the
    others from the probe after."""
    after_computes, after_steps = (row.get(key) or {} for key in PROBE_KEYS["after"])
    computes, steps = dict(after_computes), dict(after_steps)
    basis = dict.fromkeys(computes, "in-run")
    if probe == "interleaved":
        between_computes, between_steps = (row.get(key) or {} for key in PROBE_KEYS[probe])
        for variant, samples in between_computes.items():
            if not heap_kept(variant, row):
                continue
            computes[variant] = samples
            steps[variant] = between_steps.get(variant, [])
            basis[variant] = "in-run, interleaved"
    return computes, steps, basis


def own_step_samples(row: dict[str, Any], probe: str = "after") -> list[float]:
    """The optimizer steps a benchmark row's compute timed beside itself: each round's of
    `dp-paired` (`compute_step_rounds_s`), each run's of `bench dp` (`probe_samples`);
    empty for files from before 2026-11-27, which have neither."""
    if "rounds_s" in row:
        return list(row.get("compute_step_rounds_s") or [])
    runs = probe_samples(row, probe)[1]
    return [step for steps in runs.values() for step in steps]


def step_source(given_s: float | None, chosen_s: float | None) -> str:
    """Where a row's optimizer step came from when the row timed none of its own."""
    if given_s is not None:
        return "given"
    return "profile" if chosen_s is not None else "timed now"


def has_in_run_compute(data: dict[str, Any], probe: str = "after") -> bool:
    """Whether every separate-run row of a `cadence bench dp` file timed its variants' compute
    inside their runs with `probe` (`PROBE_KEYS`; after the steps: files since 2026-11-26)."""
    rows = [row for row in data.get("rows", []) if "rounds_s" not in row]
    return bool(rows) and all(row.get(PROBE_KEYS[probe][0]) for row in rows)


def file_probe(data: dict[str, Any], probe: str) -> str:
    """The probe a file's runs are priced from: `probe`, or for "auto" the blocks between
    the steps where every row timed them, else the probe after the steps."""
    if probe != "auto":
        return probe
    return "interleaved" if has_in_run_compute(data, "interleaved") else "after"


PAIRED_COMPUTES = ("lockstep", "aligned", "auto")
"""What a `dp-paired` row's rounds are priced from: the free-running compute turns, each
step's slowest rank (lockstep), or the turns whose ranks started each forward pass and each
optimizer step together (aligned; files made with `--aligned-compute`); auto: aligned where
the row has them, else lockstep."""


def paired_view(row: dict[str, Any], paired_compute: str, where: str) -> dict[str, Any]:
    """A `dp-paired` row as `paired_compute` (`PAIRED_COMPUTES`) prices it."""
    has_aligned = bool(row.get("aligned_compute_rounds_s"))
    if paired_compute == "aligned" or (paired_compute == "auto" and has_aligned):
        return aligned_view(row, where)
    return row


def aligned_view(row: dict[str, Any], where: str) -> dict[str, Any]:
    """A `dp-paired` row whose compute and optimizer step per round are its aligned compute
    turns' (`round_computes` and `own_step_samples` then read those), or a one-line
    UserError where the row timed none."""
    computes = row.get("aligned_compute_rounds_s")
    steps = row.get("aligned_compute_step_rounds_s")
    if not computes or not steps:
        raise UserError(
            f"{where}: no aligned compute turns (made without `dp-paired --aligned-compute`); "
            "use --paired-compute lockstep"
        )
    return {
        **row,
        "lockstep_compute_rounds_s": computes,
        "compute_step_rounds_s": steps,
        "compute_basis": "aligned",
    }


def round_computes(row: dict[str, Any]) -> list[float]:
    """The compute each round of a `cadence bench dp-paired` row is priced against: the
    lockstep figure (each step's slowest rank) where the file has it, else each rank's mean."""
    return list(row.get("lockstep_compute_rounds_s") or row["rounds_s"].get("compute") or [])
