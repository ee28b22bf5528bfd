"""The training methods `cadence plan tta` and `cadence bench tta` compare, by one name each,
and the simulator's seconds per optimizer step of each (`method_step_s`).

A method name is `STRATEGY[+COMPRESSION][:H<sync_every>[:K<fragments>]]`:
ddp, ddp+fp16 and ddp+powersgd (torch's comm hooks), cadence-dp[+bf16|fp16|sign|powersgd],
local-sgd:H16, diloco:H16, diloco:H16:K4 (streaming: 4 fragments, each overlapped with one
inner step), local-sgd+bf16:H16 and diloco+int8:H16 (the outer sync's wire dtype), zero+onebit
(ZeRO-2 with 1-bit Adam), torchft-diloco:H16 (torchft's DiLoCo, a public implementation to
compare with: `pip install torchft` to train it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cadence.dp.wire import powersgd_wire_elements
from cadence.errors import UserError
from cadence.localsgd.config import sync_wire_bytes

DEFAULT_METHODS = (
    "ddp", "ddp+fp16", "ddp+powersgd",
    "cadence-dp", "cadence-dp+bf16", "cadence-dp+sign", "cadence-dp+powersgd",
    "local-sgd:H4", "local-sgd:H16", "local-sgd:H32", "local-sgd+bf16:H16:K4",
    "diloco:H16", "diloco:H64", "diloco:H16:K4",
    "zero+onebit",
)  # fmt: skip
"""What `cadence plan tta` ranks unless told otherwise."""

_COMPRESSIONS = {
    "ddp": ("none", "fp16", "powersgd"),
    "cadence-dp": ("none", "bf16", "fp16", "sign", "powersgd"),
    "zero": ("none", "onebit"),
    "local-sgd": ("none", "bf16", "int8"),
    "diloco": ("none", "bf16", "int8"),
    "torchft-diloco": ("none",),
}
_SEMI_SYNCHRONOUS = ("local-sgd", "diloco", "torchft-diloco")
_FORMAT = (
    "a method is STRATEGY[+COMPRESSION][:H<steps>[:K<fragments>]], e.g. ddp+fp16, "
    "cadence-dp+sign, diloco:H16:K4, local-sgd+bf16:H16, zero+onebit, torchft-diloco:H16"
)


@dataclass(frozen=True)
class Method:
    """One way to train, as `cadence train` flags."""

    strategy: str
    """`--strategy`: ddp, cadence-dp, zero, local-sgd, diloco or torchft-diloco."""
    compression: str = "none"
    """ddp: `--ddp-comm-hook`; cadence-dp: `--dp-compression`; zero: `--compression`;
    local-sgd / diloco: `--outer-dtype` (none: fp32)."""
    sync_every: int | None = None
    """local-sgd / diloco: `--sync-every` H."""
    fragments: int = 1
    """diloco / local-sgd: `--fragments` K (K > 1 streams the sync, one inner step overlap)."""

    @property
    def name(self) -> str:
        text = self.strategy + (f"+{self.compression}" if self.compression != "none" else "")
        if self.sync_every is not None:
            text += f":H{self.sync_every}"
        if self.fragments > 1:
            text += f":K{self.fragments}"
        return text

    @property
    def semi_synchronous(self) -> bool:
        return self.strategy in _SEMI_SYNCHRONOUS

    def train_flags(self) -> dict[str, Any]:
        """`TrainConfig.from_flat` keys that select this method."""
        flags: dict[str, Any] = {"strategy": self.strategy}
        if self.strategy == "ddp":
            flags["ddp_comm_hook"] = self.compression
        elif self.strategy == "cadence-dp":
            flags["dp_compression"] = self.compression
        elif self.strategy == "zero":
            flags["compression"] = self.compression
        else:
            flags["sync_every"] = self.sync_every
            flags["fragments"] = self.fragments
            if self.compression != "none":
                flags["outer_dtype"] = self.compression
        return flags


def parse_method(text: str) -> Method:
    """`text` as a `Method`; anything else is a one-line UserError."""
    parts = text.strip().split(":")
    head, _, compression = parts[0].partition("+")
    compression = compression or "none"
    if head not in _COMPRESSIONS or compression not in _COMPRESSIONS[head]:
        raise UserError(f"unknown method {text!r}: {_FORMAT}")
    numbers: dict[str, int] = {}
    for part in parts[1:]:
        if part[:1] not in ("H", "K") or not part[1:].isdigit() or int(part[1:]) < 1:
            raise UserError(f"unknown method {text!r}: {_FORMAT}")
        numbers[part[0]] = int(part[1:])
    semi = head in _SEMI_SYNCHRONOUS
    if semi != ("H" in numbers) or (not semi and "K" in numbers):
        raise UserError(
            f"method {text!r}: local-sgd, diloco and torchft-diloco take :H<steps> (and "
            ":K<fragments>), the others neither"
        )
    return Method(head, compression, numbers.get("H"), numbers.get("K", 1))


def parse_methods(text: str) -> tuple[Method, ...]:
    """Comma-separated method names; duplicates and an empty list are refused."""
    methods = tuple(parse_method(t) for t in text.split(",") if t.strip())
    if not methods:
        raise UserError(f"no method given: {_FORMAT}")
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise UserError(f"a method is named twice in {text!r}")
    return methods


# --- bytes -------------------------------------------------------------------------------
def outer_sync_bytes(numel: int, outer_dtype: str = "fp32") -> float:
    """Bytes one rank hands to the collectives for one sync of `numel` parameters (as the
    local-SGD runtime counts them)."""
    return float(sync_wire_bytes(numel, outer_dtype))


def ddp_powersgd_elements(shape: Sequence[int], rank: int, min_rate: float = 2.0) -> int:
    """Elements torch's `powerSGD_hook` all-reduces for one parameter's gradient: the factors
    r (n + m) of its (shape[0], rest) matrix where they are `min_rate` times smaller, else
    every element."""
    numel = math.prod(shape)
    n = shape[0] if shape else 1
    m = numel // n if n else 0
    r = min(n, m, rank)
    factors = r * (n + m)
    return factors if factors * min_rate < numel else numel


def cadence_powersgd_elements(shape: Sequence[int], rank: int) -> int:
    """Elements cadence-dp's powersgd sends for a whole parameter (`dp.wire`)."""
    numel = math.prod(shape)
    cols = numel // shape[0] if len(shape) >= 2 and shape[0] else 0
    matrix = (shape[0], cols) if len(shape) >= 2 and cols >= 2 and shape[0] >= 2 else None
    return powersgd_wire_elements([matrix], [numel], rank)


@functools.cache
def zoo_param_shapes(model: str) -> tuple[tuple[int, ...], ...]:
    """Zoo `model`'s parameter shapes in `model_layout` order (builds the model: torch)."""
    import torch

    from cadence.dp.layers import model_layout
    from cadence.models import get_model_spec

    torch.manual_seed(0)
    module = get_model_spec(model).build()
    return tuple(tuple(p.shape) for p in model_layout(module).params)


def _shrunk(setup: Any, elements: Sequence[int], element_size: int | None = None) -> Any:
    """`setup` with each parameter's gradient as large as what goes on the wire (`elements`
    of `element_size` bytes, None: its own), the profile's blocks holding the same, and the
    optimizer step's seconds per byte scaled to keep the step's time."""
    from cadence.sim.compute import block_costs, param_blocks

    params = tuple(
        dataclasses.replace(p, numel=max(1, e), element_size=element_size or p.element_size)
        for p, e in zip(setup.params, elements, strict=True)
    )
    owner = param_blocks(block_costs(setup.profile), setup.params)
    held = [0] * len(setup.profile.blocks)
    for p in params:
        held[owner[p.index]] += p.nbytes
    profile_blocks = setup.profile.blocks
    blocks = tuple(
        dataclasses.replace(b, param_bytes=n) for b, n in zip(profile_blocks, held, strict=True)
    )
    before, after = sum(p.nbytes for p in setup.params), sum(p.nbytes for p in params)
    return dataclasses.replace(
        setup,
        params=params,
        profile=dataclasses.replace(setup.profile, blocks=blocks),
        update_s_per_byte=setup.update_s_per_byte * before / max(1, after),
    )


# --- seconds per step --------------------------------------------------------------------
@dataclass(frozen=True)
class StepEstimate:
    """What the simulator predicts for one optimizer step of a method."""

    method: str
    """Its name."""
    step_s: float
    """Seconds per step once the method runs as configured (steady state)."""
    wire_bytes: float
    """Bytes one worker hands to its link per step (averaged over a sync period)."""
    assumed: str
    """How it was priced and what was left out, for the user."""
    warmup_steps: int = 0
    """Steps run another way first (PowerSGD's uncompressed start, 1-bit Adam's freeze)."""
    warmup_step_s: float = 0.0
    """Seconds per step of those."""

    def seconds_for(self, steps: float) -> float:
        """Wall-clock seconds of `steps` steps, the warm-up ones at their own price."""
        first = min(steps, self.warmup_steps)
        return first * self.warmup_step_s + (steps - first) * self.step_s


def method_step_s(
    setup: Any,
    method: Method,
    options: Any = None,
    *,
    shapes: Sequence[Sequence[int]] | None = None,
    powersgd_rank: int = 2,
    powersgd_start: int = 10,
    freeze_steps: int = 100,
    outer_dtype: str = "fp32",
    overlap_steps: int = 1,
    loop_overhead_s: float | None = None,
) -> StepEstimate:
    """Seconds per step of `method` on `setup`'s cluster (`cadence.sim.command.Setup`).

    ddp, cadence-dp (none, bf16, fp16, sign) and zero (none, onebit) are event-simulated as
    `cadence simulate` does. Both powersgd variants need the parameters' `shapes` (None: a
    one-line UserError): they are simulated as their strategy with each parameter's gradient
    shrunk to the low-rank factors' elements (torch's hook in one bucket, as it runs on
    gloo), plus the factors' arithmetic timed on those shapes and the latency of the extra
    all-reduce rounds (`cadence.sim.powersgd_cost`). ddp+fp16
    is DDP with 2-byte gradients. `loop_overhead_s`: what PowerSGD was measured to add to a
    step in the loop on this machine (`cadence.sim.loop_costs`); given, it replaces the timed
    products (its rounds' latency on the link is still added). local-sgd / diloco: one
    worker's compute and optimizer step, plus one all-reduce of the model every H steps
    spread over them; streamed (K fragments), each fragment's sync hides behind
    `overlap_steps` steps.
    """
    from cadence.sim.command import run_strategy
    from cadence.sim.options import SimOptions
    from cadence.sim.powersgd_cost import (
        CADENCE_ROUNDS,
        TORCH_HOOK_ROUNDS,
        compressed_matrices,
        extra_round_seconds,
        factor_seconds,
    )
    from cadence.sim.zero_graph import ZeroSimPlan

    options = options or SimOptions()
    bucket = 25 << 20  # DDP's default bucket

    def run_with_plan(strategy: str, shrunk: Any = None, **kw: Any) -> Any:
        s = setup if shrunk is None else shrunk
        opts = dataclasses.replace(options, dp_compression=kw.pop("dp_compression", "none"))
        return run_strategy(s, strategy, None, None, kw.pop("bucket", bucket), opts, **kw)

    def run(strategy: str, shrunk: Any = None, **kw: Any) -> Any:
        return run_with_plan(strategy, shrunk, **kw)[0]

    def powersgd_overhead(
        rounds: int, collectives: int, min_rate: float, elements: Sequence[int]
    ) -> float:
        """The factors' arithmetic, timed on the model's shapes, or the compression's cost
        measured in the loop (`loop_overhead_s`), and the latency of the collectives' extra
        rounds (`cadence.sim.powersgd_cost`)."""
        assert shapes is not None
        if loop_overhead_s is None:
            matrices = compressed_matrices(shapes, powersgd_rank, min_rate)
            threads = getattr(setup.profile, "threads", None)  # the workers' intra-op threads
            codec = factor_seconds(matrices, powersgd_rank, threads)
        else:
            codec = loop_overhead_s
        sent = 4.0 * sum(elements)  # fp32 factors and uncompressed tensors
        return codec + extra_round_seconds(
            setup.link, setup.world_size, sent, rounds, collectives
        )

    codec_note = (
        "the factors' arithmetic timed here"
        if loop_overhead_s is None
        else f"{loop_overhead_s * 1e3:.2f} ms measured in the loop"
    )

    s, c = method.strategy, method.compression
    if c == "powersgd" and shapes is None:
        raise UserError(
            f"{method.name} needs the model's parameter shapes (a zoo model) to price the "
            "low-rank factors"
        )
    if s == "ddp":
        plain = run("ddp")
        if c == "none":
            return StepEstimate(method.name, plain.iteration_s, plain.wire_bytes,
                                "event-simulated DDP, 25 MiB buckets")  # fmt: skip
        if c == "fp16":
            half = _shrunk(setup, [p.numel for p in setup.params], 2)
            r = run("ddp", half, bucket=bucket // 2)  # the same parameters per bucket
            cast = "DDP with 2-byte gradients; the hook's casts priced only by --loop-costs"
            return StepEstimate(method.name, r.iteration_s, r.wire_bytes, cast)
        assert shapes is not None
        elements = [ddp_powersgd_elements(tuple(sh), powersgd_rank) for sh in shapes]
        # One bucket: torch's hook on gloo runs with one (`train.strategies._ddp_bucket_mb`).
        whole = sum(p.nbytes for p in setup.params) + 1
        r = run("ddp", _shrunk(setup, elements), bucket=whole)
        extra = powersgd_overhead(TORCH_HOOK_ROUNDS, 1, 2.0, elements)
        return StepEstimate(
            method.name, r.iteration_s + extra, r.wire_bytes,
            f"DDP in one bucket over rank-{powersgd_rank} factors' bytes, plus {codec_note} "
            f"and {TORCH_HOOK_ROUNDS} rounds of all-reduce; the first {powersgd_start} steps "
            "uncompressed",
            powersgd_start, plain.iteration_s,
        )  # fmt: skip
    if s == "cadence-dp":
        if c != "powersgd":
            r = run("cadence-dp", dp_compression=c)
            return StepEstimate(method.name, r.iteration_s, r.wire_bytes,
                                f"event-simulated cadence-dp, compression {c}")  # fmt: skip
        assert shapes is not None
        plain = run("cadence-dp")
        elements = [cadence_powersgd_elements(tuple(sh), powersgd_rank) for sh in shapes]
        r, plan = run_with_plan("cadence-dp", _shrunk(setup, elements))
        chunks = len(plan.chunks) if plan is not None else 1
        extra = powersgd_overhead(CADENCE_ROUNDS, chunks, 0.0, elements)
        return StepEstimate(
            method.name, r.iteration_s + extra, r.wire_bytes,
            f"cadence-dp over rank-{powersgd_rank} factors' bytes, plus {codec_note} and "
            f"{CADENCE_ROUNDS} rounds of all-reduce per chunk; the first {powersgd_start} "
            "steps uncompressed",
            powersgd_start, plain.iteration_s,
        )  # fmt: skip
    if s == "zero":
        full = run("zero", zero=ZeroSimPlan(stage=2))
        if c == "none":
            return StepEstimate(method.name, full.iteration_s, full.wire_bytes,
                                "event-simulated ZeRO-2")  # fmt: skip
        r = run("zero", zero=ZeroSimPlan(stage=2, compression="onebit"))
        return StepEstimate(
            method.name, r.iteration_s, r.wire_bytes,
            f"event-simulated ZeRO-2 with 1-bit Adam after {freeze_steps} uncompressed steps",
            freeze_steps, full.iteration_s,
        )  # fmt: skip
    dtype = outer_dtype if c == "none" else c  # a method's own dtype wins over the default
    return _semi_synchronous(setup, method, options, dtype, overlap_steps)


def _semi_synchronous(
    setup: Any, method: Method, options: Any, outer_dtype: str, overlap_steps: int
) -> StepEstimate:
    from cadence.sim.compute import block_costs

    assert method.sync_every is not None
    costs = block_costs(setup.profile, options.calibrate_compute)
    numel = sum(p.numel for p in setup.params)
    param_bytes = sum(p.nbytes for p in setup.params)
    compute = costs.compute_s * options.grad_accum + setup.update_s_per_byte * param_bytes
    h, k, n = method.sync_every, method.fragments, setup.world_size
    sync_bytes = outer_sync_bytes(numel, outer_dtype)
    if outer_dtype == "int8":  # all-gathered: every rank's share arrives at every rank
        sync_s = setup.link.time("allgather", "ring", int(sync_bytes * n), n)
    else:
        sync_s = setup.link.time("allreduce", "ring", int(sync_bytes), n)
    outer = setup.update_s_per_byte * param_bytes if method.strategy != "local-sgd" else 0.0
    if k > 1:  # each fragment's sync travels behind `overlap_steps` inner steps
        exposed = k * max(0.0, sync_s / k - overlap_steps * compute)
        how = f"{k} fragments, each sync overlapped with {overlap_steps} step(s)"
    else:
        exposed = sync_s
        how = "the sync blocking"
    step = compute + (exposed + outer) / h
    # What each NIC moves per sync: a ring all-reduce sends 2 (n-1)/n of the payload, the
    # int8 all-gather every other rank's share.
    share = (n - 1) if outer_dtype == "int8" else 2 * (n - 1) / n
    wire = share * sync_bytes / h
    assumed = (
        f"one worker's compute and step + a {outer_dtype} all-reduce of the model every {h} "
        f"steps ({how}), alpha-beta"
    )
    return StepEstimate(method.name, step, wire, assumed)
