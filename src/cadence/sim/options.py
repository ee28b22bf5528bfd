"""Knobs shared by every simulator adapter."""

from __future__ import annotations

import math
from dataclasses import dataclass

CLIP_SHARE_OF_STEP = 3 / 7
"""Time of a global-norm clip relative to an optimizer step over the same bytes: both are
memory-bound passes; the clip reads every gradient for the norm and reads and writes it to
scale it (3 tensor passes), Adam reads parameter, gradient and two moments and writes three
(7 passes)."""


DDP_BUCKET_BYTES = 25 * 2**20
"""torch DDP's default bucket cap (`bucket_cap_mb` 25)."""
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""torch DDP's first-bucket cap when built without `bucket_cap_mb`."""


@dataclass(frozen=True, kw_only=True)
class SimOptions:
    """How a simulation is set up beyond the plan, the profile and the link."""

    grad_accum: int = 1
    """Gradient accumulation: micro-batches (forward + backward of the profile's batch each)
    per iteration and optimizer step; the gradients are synchronised once, starting in the
    last micro-batch's backward, so only that one overlaps the communication."""
    replicas: int = 1
    """Workers simulated explicitly (each with its own compute, communication thread and NIC;
    collectives span all of them). Data-parallel workers run the same program on the same
    profile, so one stands for all and the result does not change; more give per-worker rows."""
    update_s_per_byte: float = 0.0
    """Optimizer-step seconds per parameter byte (the profile does not time the step):
    charged per layer on the communication thread for cadence-dp, after backward for DDP."""
    updates_share_compute: bool = True
    """cadence-dp's per-layer optimizer updates (issued by the communication thread) run on the
    worker's compute (its one CPU thread, or its GPU), taking turns with forward and backward
    at task boundaries; False gives them a processor of their own."""
    calibrate_compute: bool = True
    """Scale block times so that blocks + loss equal the profile's measured iteration."""
    comm_cpu_s_per_message: float = 0.0
    """Processor seconds each all-reduce call takes from its worker's compute (gloo's send,
    receive and reduce, the kernel's TCP work, the issuing thread), whatever its size; charged
    on the compute beside the transfer, so compute slows while messages are in flight. 0: the
    worker has spare cores for communication."""
    comm_cpu_s_per_byte: float = 0.0
    """Processor seconds per all-reduced byte taken from the worker's compute (as above)."""
    host_cpu_share: float = 0.0
    """Share of each collective call's measured processor time (`AlphaBeta.host_s`, from a
    calibration) charged to its worker's compute, time-sliced with it: the host's busy threads
    over its cores when they fill them (`cadence.sim.host_cpu.compute_share`, which the
    simulator commands take from the profile); 0: a spare core runs it."""
    comm_rate_while_computing: float = 1.0
    """Share of its link's rate a worker's transfers keep while its compute runs: where the
    transfers' processor work (the kernel's TCP and shaping, gloo's copies) shares the cores
    the compute keeps busy, they slow while it computes. 1: they do not."""
    ddp_first_bucket_bytes: int | None = DDP_FIRST_BUCKET_BYTES
    """Cap of DDP's first bucket (its last layers' gradients). torch uses 1 MiB when DDP is
    built without `bucket_cap_mb` (as `cadence train` does without `--bucket-mb`); given one,
    the first bucket has that cap too: None (`ddp_bucket_caps`)."""
    link_bucket_bytes: float = 0.0
    """Token bucket of each worker's link (`Resource.bucket_bytes`): an emulated link's tbf
    passes this many bytes at once after an idle spell. 0: a real link."""
    clip: bool = False
    """The loop clips gradients by their global norm between backward and step
    (`clip_grad_norm_`): the step waits for every reduction, then a norm pass over the
    gradients (`CLIP_SHARE_OF_STEP` of the optimizer step's time) runs on the compute; ZeRO
    adds a scalar all-reduce of the shards' norms."""
    warmup_iterations: int = 1
    """Iterations simulated before the measured ones (the first has no communication to wait
    for, so it is not steady state)."""
    dp_compression: str = "none"
    """cadence-dp: how each chunk travels (`cadence.dp.compress`): none, bf16, fp16 (an
    all-reduce of the cast bytes) or sign (an all-gather of bits and a scale per rank).
    powersgd needs parameter shapes, which the simulator does not have: refused."""

    def __post_init__(self) -> None:
        from cadence.dp.config import COMPRESSIONS

        if self.dp_compression not in COMPRESSIONS:
            raise ValueError(
                f"dp_compression must be one of {', '.join(COMPRESSIONS)}, got "
                f"{self.dp_compression!r}"
            )
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum must be >= 1, got {self.grad_accum}")
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if not (math.isfinite(self.update_s_per_byte) and self.update_s_per_byte >= 0):
            raise ValueError(f"update_s_per_byte must be >= 0, got {self.update_s_per_byte}")
        for name in ("comm_cpu_s_per_message", "comm_cpu_s_per_byte"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be >= 0, got {value}")
        if not (math.isfinite(self.host_cpu_share) and self.host_cpu_share >= 0):
            raise ValueError(f"host_cpu_share must be >= 0, got {self.host_cpu_share}")
        rate = self.comm_rate_while_computing
        if not (math.isfinite(rate) and 0 < rate <= 1):
            raise ValueError(f"comm_rate_while_computing must be in (0, 1], got {rate}")
        if self.ddp_first_bucket_bytes is not None and self.ddp_first_bucket_bytes < 1:
            raise ValueError(
                f"ddp_first_bucket_bytes must be >= 1, got {self.ddp_first_bucket_bytes}"
            )
        if not (math.isfinite(self.link_bucket_bytes) and self.link_bucket_bytes >= 0):
            raise ValueError(f"link_bucket_bytes must be >= 0, got {self.link_bucket_bytes}")
        if self.warmup_iterations < 0:
            raise ValueError(f"warmup_iterations must be >= 0, got {self.warmup_iterations}")

    @property
    def charges_comm_cpu(self) -> bool:
        """Whether communication takes processor time from compute."""
        return self.comm_cpu_s_per_message > 0 or self.comm_cpu_s_per_byte > 0

    def clip_s(self, nbytes: float) -> float:
        """Compute seconds of the clip over `nbytes` of gradients (0 without `clip`)."""
        return CLIP_SHARE_OF_STEP * self.update_s_per_byte * nbytes if self.clip else 0.0

    def comm_cpu_s(self, nbytes: float) -> float:
        """Processor seconds one all-reduce of `nbytes` takes from its worker's compute."""
        return self.comm_cpu_s_per_message + self.comm_cpu_s_per_byte * nbytes


def ddp_bucket_caps(bucket_mb: float | None) -> tuple[int, int | None]:
    """(bucket bytes, `SimOptions.ddp_first_bucket_bytes`) of DDP built with
    `bucket_cap_mb=bucket_mb`, as `cadence train --bucket-mb` builds it: None is torch's
    default (25 MiB buckets after a first one of 1 MiB); a given cap holds for the first
    bucket too."""
    from cadence.dp.config import mb_to_bytes

    bucket = mb_to_bytes(bucket_mb)
    return (DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES) if bucket is None else (bucket, None)
