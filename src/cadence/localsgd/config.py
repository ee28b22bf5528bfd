"""Settings of local SGD and DiLoCo: plain data, importable without torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from cadence.errors import UserError

OuterDtype = Literal["fp32", "bf16", "int8"]
OUTER_DTYPES: tuple[str, ...] = get_args(OuterDtype)

INT8_CHUNK = 256
"""Elements per int8 scale: each chunk of a fragment's pseudo-gradient is scaled by its own
absolute maximum, so one outlier coarsens 256 values, not a whole tensor (the scales add
1.6% to the int8 bytes)."""


@dataclass(frozen=True, kw_only=True)
class LocalSGDConfig:
    """How often the replicas meet and what the meeting does. Local SGD is the case
    outer_lr=1, outer_momentum=0 (the sync replaces every replica by the replicas' mean)."""

    sync_every: int = 500
    """H: inner steps (the user's optimizer, on each rank's own gradients) between two syncs
    of a fragment; DiLoCo's language-model default."""
    outer_lr: float = 0.7
    """Outer SGD learning rate on the averaged pseudo-gradient (DiLoCo's 0.7; 1 with no
    momentum is plain model averaging)."""
    outer_momentum: float = 0.9
    """Outer SGD momentum (DiLoCo's 0.9); 0 for none."""
    nesterov: bool = True
    """Nesterov momentum for the outer step (ignored when outer_momentum is 0)."""
    fragments: int = 1
    """K > 1 (streaming): the parameters are cut into K groups by module order and group i
    syncs when step % H == i*H//K, so syncs are spread over the H steps."""
    overlap_steps: int | None = None
    """Inner steps that run while a fragment's outer all-reduce travels before its result is
    applied (each rank keeps the local progress made meanwhile); none: 1 when streaming
    (fragments > 1), else 0 (a blocking sync)."""
    outer_dtype: OuterDtype = "fp32"
    """Pseudo-gradients on the wire: fp32; bf16 (summed in bf16); int8 (absmax-scaled per
    chunk of 256 values, all-gathered and summed in fp32 on each rank)."""

    def __post_init__(self) -> None:
        if self.sync_every < 1:
            raise UserError(f"--sync-every must be at least 1 (got {self.sync_every})")
        if not self.outer_lr > 0:
            raise UserError(f"--outer-lr must be positive (got {self.outer_lr})")
        if not 0 <= self.outer_momentum < 1:
            raise UserError(f"--outer-momentum must be within [0, 1) (got {self.outer_momentum})")
        if self.fragments < 1:
            raise UserError(f"--fragments must be at least 1 (got {self.fragments})")
        if self.fragments > self.sync_every:
            raise UserError(
                f"--fragments {self.fragments} exceeds --sync-every {self.sync_every}: each "
                "fragment needs its own step within the H steps; use fewer fragments"
            )
        if self.overlap_steps is not None and not 0 <= self.overlap_steps < self.sync_every:
            raise UserError(
                f"--overlap-steps must be within 0..{self.sync_every - 1} (below --sync-every; "
                f"got {self.overlap_steps})"
            )
        if self.outer_dtype not in OUTER_DTYPES:
            raise UserError(
                f"unknown outer dtype '{self.outer_dtype}': choose one of {', '.join(OUTER_DTYPES)}"
            )

    @property
    def delay(self) -> int:
        """Inner steps between issuing a fragment's all-reduce and applying it."""
        if self.overlap_steps is not None:
            return self.overlap_steps
        return 1 if self.fragments > 1 else 0

    def offset(self, fragment: int) -> int:
        """Fragment `fragment` syncs after the inner steps t with t % H == this offset."""
        return fragment * self.sync_every // self.fragments

    def due(self, step: int) -> list[int]:
        """The fragments whose sync starts after inner step `step` (1-based, since the last
        full sync)."""
        phase = step % self.sync_every
        return [i for i in range(self.fragments) if self.offset(i) == phase]


def sync_wire_bytes(numel: int, outer_dtype: str) -> int:
    """Bytes one rank hands to the collectives to sync `numel` values as `outer_dtype`: 4 or
    2 per value (fp32, bf16), int8's values padded to whole chunks plus an fp32 scale each."""
    if outer_dtype == "int8":
        chunks = -(-numel // INT8_CHUNK)
        return chunks * (INT8_CHUNK + 4)
    return numel * (2 if outer_dtype == "bf16" else 4)

