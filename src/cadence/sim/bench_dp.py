"""Predict the DDP and cadence-dp rows of `cadence bench dp` result files (`cadence bench sim
--from-bench-dp FILE...`): the simulator's accuracy over that benchmark's models and caps.

Each row of a bench-dp file holds, for one model and cap, the measured compute-only iteration
(one worker, same per-worker batch, optimizer step included) and the medians of DDP and
cadence-dp. The profile gives the *shape* of the compute (per-block split); its times are
scaled so that profile iteration + optimizer step equals that run's measured compute-only
iteration, i.e. the prediction is calibrated to the machine as it was during the run, and
what remains to predict is communication, overlap and scheduling. Rows without a cap have no
known link and are skipped (listed in the output).

Rows of `cadence bench dp-paired` files are predicted round by round: each round's compute was
timed with both workers computing at once, seconds from that round's DDP and cadence-dp, so
each round is predicted from its own compute and compared with its own measurement, and the
median error over rounds is reported.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cadence.bench.dp import DDP_FIXED_HEAP
from cadence.bench.dp_paired import TWINS
from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.profile import Profile
from cadence.sim.api import DDP_BUCKET_BYTES
from cadence.sim.bench_dp_records import (
    IN_RUN_VARIANTS,
    PROBE_KEYS,
    VARIANTS,
    dynamic_heap_variants,
    file_probe,
    has_in_run_compute,
    own_step_samples,
    paired_view,
    probe_samples,
    read_bench_dp,
    recorded_credit,
    recorded_default_plan,
    recorded_threshold,
    round_computes,
    step_source,
)
from cadence.sim.bench_twins import twin_fields
from cadence.sim.command import (
    Setup,
    run_strategy,
    step_cost,
    zoo_arrival_order,
    zoo_buffer_broadcasts,
    zoo_layout,
)
from cadence.sim.compute import cap_link, emulated_options, rate_while_computing
from cadence.sim.options import SimOptions
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION, chosen_step_s


def scaled_profile(
    profile: Profile, factor: float, backward_factor: float | None = None
) -> Profile:
    """`profile` with every time multiplied by `factor` (sizes unchanged); with
    `backward_factor`, the gradient times by that instead, and the whole iteration becomes
    the sum of the scaled parts."""
    g = factor if backward_factor is None else backward_factor
    blocks = tuple(
        dataclasses.replace(
            b,
            forward_s=b.forward_s * factor,
            input_grad_s=b.input_grad_s * g,
            weight_grad_s=b.weight_grad_s * g,
        )
        for b in profile.blocks
    )
    loss_s = profile.loss_s * factor
    iteration_s = profile.iteration_s * factor
    forward_pass_s = None if profile.forward_pass_s is None else profile.forward_pass_s * factor
    if backward_factor is not None:  # the parts are the measured ones: nothing to calibrate
        iteration_s = loss_s + sum(b.forward_s + b.input_grad_s + b.weight_grad_s for b in blocks)
        forward_pass_s = sum(b.forward_s for b in blocks)
    return dataclasses.replace(
        profile,
        blocks=blocks,
        iteration_s=iteration_s,
        loss_s=loss_s,
        forward_pass_s=forward_pass_s,
    )


def compute_scale(profile: Profile, compute_s: float, step_s: float) -> float:
    """The factor on `profile`'s times that makes its iteration plus an optimizer step of
    `step_s` take `compute_s` (a step measured without communication)."""
    return max(compute_s - step_s, 1e-6) / profile.iteration_s


@dataclasses.dataclass(frozen=True)
class _Case:
    """One (model, cap) of a benchmark file, as the simulator runs it."""

    profile: Profile
    params: Any
    buffer_bytes: int
    buffer_broadcasts: int
    workers: int
    link: AlphaBeta
    description: str
    update_s_per_byte: float
    step_s: float
    threshold: int | None
    credit: int
    reorder_k: int | None
    options: SimOptions
    default_plan: str
    """cadence-dp's default plan as the run chose it (`recorded_default_plan`)."""

    slowdown: dict[str, float] = dataclasses.field(default_factory=dict)
    """Per simulated strategy, how much its runtime slows compute on a host whose cores all
    compute (`cadence bench runtime-cost`); absent: 1."""
    own_steps: bool = False
    """Price each round or run at the optimizer step its own compute timed (`own_step_samples`)
    rather than at `step_s`."""
    arrival_order: tuple[int, ...] | None = None
    """The order the model's gradients arrive in (`Setup.arrival_order`)."""
    step_share: float | None = None
    """Price the optimizer step as this share of each compute sample (`--step-shares`)
    rather than at `step_s`; None: at `step_s`."""
    heap_factor: float = 1.0
    """How much slower DDP computes in processes that leave glibc's heap thresholds dynamic
    (`cadence bench heap-cost`); charged to the variants in `dynamic_heap` only."""
    dynamic_heap: frozenset[str] = frozenset()
    """The variants whose processes left the heap thresholds dynamic (`heap_kept`)."""

    def with_step(self, step_s: float) -> _Case:
        """The same case with a whole-model optimizer step of `step_s`."""
        per_byte = step_s / max(1, sum(p.nbytes for p in self.params))
        return dataclasses.replace(self, step_s=step_s, update_s_per_byte=per_byte, step_share=None)

    def per_sample(self, steps: Sequence[float], count: int) -> list[_Case]:
        """One case for each of `count` samples (rounds or runs): each at its own optimizer
        step where the row timed one per sample and they are to be priced, else this one."""
        if self.own_steps and len(steps) == count:
            return [self.with_step(step) for step in steps]
        return [self] * count

    def predict(
        self, compute_s: float, co_run: float, variants: Sequence[str] = tuple(VARIANTS)
    ) -> dict[str, Any]:
        """Each of `variants`' simulated result with the compute scaled so that profile
        iteration + optimizer step equals `compute_s` (times `co_run`, times the strategy's
        slowdown)."""
        out = {}
        for variant in variants:
            strategy = IN_RUN_VARIANTS[variant]
            strategy_compute_s = compute_s * self.slowdown.get(strategy, 1.0)
            if variant in self.dynamic_heap:
                strategy_compute_s *= self.heap_factor
            case = self
            if self.step_share is not None:  # the step at the speed of this compute
                case = self.with_step(strategy_compute_s * self.step_share)
            factor = co_run * compute_scale(self.profile, strategy_compute_s, case.step_s)
            setup = Setup(
                profile=scaled_profile(self.profile, factor),
                params=self.params,
                buffer_bytes=self.buffer_bytes,
                buffer_broadcasts=self.buffer_broadcasts,
                world_size=self.workers,
                link=self.link,
                description=self.description,
                update_s_per_byte=case.update_s_per_byte,
                arrival_order=self.arrival_order,
            )
            out[variant], _ = run_strategy(
                setup,
                strategy,
                self.threshold,
                self.credit,
                DDP_BUCKET_BYTES,
                self.options,
                reorder_k=self.reorder_k,
                default_plan=self.default_plan,
            )
        return out


def predict_bench_dp(
    paths: Sequence[str],
    profiles: dict[str, Profile],
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    optimizer_step_s: float | None = None,
    options: SimOptions | None = None,
    co_run_slowdown: float = 1.0,
    runtime_slowdowns: dict[str, dict[str, float]] | None = None,
    in_run_compute: bool | None = False,
    calibrated: AlphaBeta | None = None,
    link_bucket: bool = False,
    probe: str = "after",
    step_shares: dict[str, float] | None = None,
    heap_factors: dict[str, dict[float, float]] | None = None,
    measured_rates: bool = True,
    paired_compute: str = "lockstep",
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows of measured vs predicted, skipped rows as text). The measured compute-only
    iteration of `cadence bench dp` ran one worker alone; `co_run_slowdown` scales it for
    workers sharing a host. Rows of `cadence bench dp-paired` are predicted round by round.
    `runtime_slowdowns` (model -> strategy -> factor, from `cadence bench runtime-cost`)
    charges each strategy's runtime on the compute; a model missing from it is an error.
    `in_run_compute`: predict each run of each variant from the compute its own processes
    timed after its steps (`variant_compute_runs_s`; see `_in_run_rows`); a file without it
    is an error. None: in-run for the files that have it, the compute-only runs for others.
    `calibrated` gives the links their alphas (`cap_link`); `link_bucket` their emulated
    token bucket (`emulated_options`). `probe`: which of a run's probes is its in-run compute,
    the one "after" its steps, the "interleaved" blocks between them (`PROBE_KEYS`,
    `probe_samples`), or "auto": the blocks where a file has them (`file_probe`).
    `step_shares` (model -> share, `cadence.sim.step_share`): rows that timed no optimizer
    step of their own price it as that share of their compute, not at the profile's or one
    timed now. `heap_factors` (model -> cap in bit/s -> factor, `cadence bench heap-cost`;
    the nearest cap's) slows the compute of DDP's separate runs whose processes left glibc's
    heap thresholds dynamic (`heap_kept`; not dp-paired's, whose DDP shares cadence-dp's
    processes). `measured_rates`: where a row measured the share of the link's rate its
    transfers keep while the compute runs (`rate_while_computing`), price it so rather than
    at `options.comm_rate_while_computing`. `paired_compute` (`PAIRED_COMPUTES`): what
    `dp-paired` rows are priced from; "aligned" needs rows that timed aligned compute turns,
    "auto" takes them where a row has them."""
    from cadence.bench.heap_cost import factor_at
    from cadence.netem import parse_bandwidth

    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for path in paths:
        data = read_bench_dp(path)
        cfg = data.get("config", {})
        workers = int(cfg.get("workers", 2))
        probe_here = file_probe(data, probe)
        in_run = has_in_run_compute(data, probe_here) if in_run_compute is None else in_run_compute
        for row in data["rows"]:
            model, cap = row["model"], row["cap"]
            if "rounds_s" in row:
                row = paired_view(row, paired_compute, f"{path}: {model} at {cap}")
            try:
                bps = parse_bandwidth(str(row.get("cap_bandwidth", cap)))
            except UserError:
                bps = None
            if bps is None or cap == "none" or bps == float("inf"):
                skipped.append(f"{Path(path).name}: {model} at cap {cap} (link unknown)")
                continue
            if model not in profiles:
                raise UserError(f"{path}: no profile of {model!r} given")
            slowdown: dict[str, float] = {}
            if runtime_slowdowns is not None:
                if model not in runtime_slowdowns:
                    raise UserError(f"{path}: no runtime cost of {model!r} given")
                slowdown = runtime_slowdowns[model]
            dynamic_heap = dynamic_heap_variants(row)
            heap_factor = 1.0
            if heap_factors is not None and dynamic_heap:
                if model not in heap_factors:
                    raise UserError(f"{path}: no heap cost of {model!r} given")
                heap_factor = factor_at(heap_factors[model], bps)
            params, buffer_bytes = zoo_layout(model)
            gradient_bytes = sum(p.nbytes for p in params)
            # `--optimizer-step` first, then the steps the row's own compute timed.
            own = [] if optimizer_step_s is not None else own_step_samples(row, probe_here)
            step_s: float | None
            share = None
            if own:
                step_s, step_basis = statistics.median(own), "timed with the compute"
            elif optimizer_step_s is None and step_shares and model in step_shares:
                share = step_shares[model]
                step_s, step_basis = share * float(row["compute_s"]), "share of the compute"
            else:
                recorded = profiles[model].optimizer_step_s
                step_s = chosen_step_s("adam", optimizer_step_s, recorded)
                step_basis = step_source(optimizer_step_s, step_s)
            update = step_cost(model, "adam", step_s, params)
            threshold = recorded_threshold(cfg)
            row_options = emulated_options(
                options or SimOptions(), bps, payload_fraction, link_bucket
            )
            rate = rate_while_computing(row) if measured_rates else None
            if rate is not None:
                row_options = dataclasses.replace(row_options, comm_rate_while_computing=rate)
            case = _Case(
                profile=profiles[model],
                params=params,
                buffer_bytes=buffer_bytes,
                buffer_broadcasts=zoo_buffer_broadcasts(model),
                workers=workers,
                link=cap_link(bps, payload_fraction, calibrated),
                description=f"{model} {cap}",
                update_s_per_byte=update,
                step_s=update * gradient_bytes,
                threshold=threshold,
                credit=recorded_credit(row, threshold, gradient_bytes),
                reorder_k=cfg.get("reorder_k"),
                options=row_options,
                default_plan=recorded_default_plan(row),
                slowdown=slowdown,
                own_steps=bool(own),
                arrival_order=zoo_arrival_order(model),
                step_share=share,
                heap_factor=heap_factor,
                dynamic_heap=dynamic_heap,
            )
            common = {
                "run": f"{Path(path).name}:{model}",
                "model": model,
                "bandwidth": cap,
                "workers": workers,
                "optimizer_step_s": case.step_s,
                "optimizer_step_basis": step_basis,
                "compute_s": row["compute_s"],
                "comm_rate_while_computing": row_options.comm_rate_while_computing,
            }
            if "rounds_s" in row:  # `cadence bench dp-paired`
                rows += _paired_rows(row, case, common)
                continue
            if in_run:
                rows += _in_run_rows(row, case, common, f"{path}: {model} at {cap}", probe_here)
                continue
            predicted = case.predict(row["compute_s"], co_run_slowdown)
            for variant, strategy in VARIANTS.items():
                measured = row["iteration_s"].get(variant)
                if measured is None:
                    continue
                result = predicted[variant]
                rows.append(
                    {
                        **common,
                        "compute_basis": "compute-only runs",
                        "strategy": strategy,
                        "measured_s": float(measured),
                        "predicted_s": result.iteration_s,
                        "error": (result.iteration_s - measured) / measured,
                        "wire_s": result.wire_s,
                    }
                )
    return rows, skipped


def _in_run_rows(
    row: dict[str, Any], case: _Case, common: dict[str, Any], where: str, probe: str = "after"
) -> list[dict[str, Any]]:
    """A `cadence bench dp` row with in-run compute: each run predicted from the compute its
    own processes timed (`probe`: right after its steps, or interleaved with them where the
    run did that; both workers computing at once, so no co-run factor) and compared with that
    run's iteration; the error is the median over runs."""
    compute_key = PROBE_KEYS[probe][0]
    if not row.get(compute_key):
        since = "2026-11-26" if probe == "after" else "2026-11-27, --interleaved-probe-every"
        raise UserError(
            f"{where} has no in-run compute (`{compute_key}`, files since {since}): use "
            "--compute-basis beside"
        )
    computes, own_steps, basis = probe_samples(row, probe)
    out = []
    for variant, strategy in IN_RUN_VARIANTS.items():
        if variant not in computes:
            continue
        cases = case.per_sample(own_steps.get(variant, []), len(computes[variant]))
        results = [
            c.predict(compute, 1.0, [variant])[variant]
            for c, compute in zip(cases, computes[variant], strict=True)
        ]
        run_common = {
            **common,
            "compute_s": statistics.median(computes[variant]),
            "compute_basis": basis[variant],
        }
        median_row = _median_row(
            run_common, strategy, row["runs_s"][variant], results, "run_errors"
        )
        if variant == DDP_FIXED_HEAP:
            median_row["variant"] = variant  # shown for the strategy: DDP has two rows here
        out.append(median_row)
    return out


def _median_row(
    common: dict[str, Any],
    strategy: str,
    measured: list[float],
    results: list[Any],
    errors_key: str,
) -> dict[str, Any]:
    """One strategy's row from paired samples (rounds or runs), each sample's simulated
    result against its own measurement: the medians of both, and as the error the median of
    the samples' errors (kept under `errors_key`)."""
    predicted = [r.iteration_s for r in results]
    errors = [(p - m) / m for p, m in zip(predicted, measured, strict=True)]
    return {
        **common,
        "strategy": strategy,
        "measured_s": statistics.median(measured),
        "predicted_s": statistics.median(predicted),
        "error": statistics.median(errors),
        errors_key: errors,
        "wire_s": results[0].wire_s,
    }


def _paired_rows(row: dict[str, Any], case: _Case, common: dict[str, Any]) -> list[dict[str, Any]]:
    """A `cadence bench dp-paired` row: each round predicted from that round's compute (both
    workers computing at once, so no co-run factor on top) and compared with the same round's
    measurement; the error reported is the median over rounds, as the benchmark's ratios.

    The compute is the lockstep figure where the file has it: each step's slowest rank, what
    a step that ends in a collective waits for (jitter between the ranks costs a synchronous
    step the larger of their times, not their mean); older files have only each rank's mean."""
    rounds: dict[str, list[float]] = row["rounds_s"]
    computes = round_computes(row)
    cases = case.per_sample(row.get("compute_step_rounds_s") or [], len(computes))
    per_round = [c.predict(compute, 1.0) for c, compute in zip(cases, computes, strict=True)]
    lockstep = bool(row.get("lockstep_compute_rounds_s"))
    basis = row.get("compute_basis") or ("lockstep" if lockstep else "per-rank")
    common = {**common, "compute_basis": basis}
    out = []
    for variant, strategy in VARIANTS.items():
        results = [p[variant] for p in per_round]
        median_row = _median_row(common, strategy, rounds[variant], results, "round_errors")
        twin = rounds.get(TWINS[variant])
        if twin:  # `dp-paired --twins`: the same predictions against the identical copy
            median_row.update(twin_fields([r.iteration_s for r in results], rounds[variant], twin))
        out.append(median_row)
    return out
