"""What 1-bit Adam's codec costs per element, and how much of it each bucket does per step.

After warm-up every rank encodes its momentum pieces with error feedback and decodes what it
holds or receives into running sums (`cadence.zero.onebit`), on the communication thread,
before and after each bucket's exchange. The simulator's ZeRO adapter prices that work from
the seconds per element a profile records for its device (`Profile.codec_s_per_element`),
or, for profiles made before it was recorded, timed on the simulating machine's CPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cadence.profile.record import Profile

TIMED_ELEMENTS = 1 << 20
"""Elements of the vector the codec is timed on: a bucket's size, past small-call overheads."""


@dataclass(frozen=True)
class CodecCost:
    """Seconds per fp32 element of the two codec passes."""

    encode_s_per_element: float
    """Encoding with error feedback (`compress.encode_feedback_`): scales, packed signs and
    what the encoding lost, in place."""
    decode_s_per_element: float
    """Decoding into a running sum (`compress.decode_add_`)."""

    def seconds(self, encoded: float, decoded: float) -> float:
        """Seconds to encode `encoded` elements and decode `decoded`."""
        return encoded * self.encode_s_per_element + decoded * self.decode_s_per_element

    def as_dict(self) -> dict[str, float]:
        """The form a profile saves (`Profile.codec_s_per_element`)."""
        return {"encode": self.encode_s_per_element, "decode": self.decode_s_per_element}


@dataclass(frozen=True)
class CodecWork:
    """Elements one rank encodes and decodes for one bucket of `n` elements per step, split
    where the executor's communication thread splits them: before the bucket's exchange,
    between stage 1's two collectives, and after the last one (a replicated update's own
    decoding of the other owners' momenta included)."""

    before: tuple[float, float]
    """(encoded, decoded) before the first collective."""
    between: tuple[float, float]
    """Stage 1 only: between the all-to-all and the all-gather of the re-encoded mean."""
    after: tuple[float, float]
    """After the last collective."""


def codec_work(stage: int, replicated: bool, n: float, p: int) -> CodecWork:
    """Per `cadence.zero.onebit`, for a bucket of `n` elements over `p` ranks.

    Stage 1 (`momentum_all_reduce`): the sender decodes the p - 1 pieces it does not own from
    the last gathered wires and encodes all p; the reducer decodes the p pieces it received
    and re-encodes their mean; a replicated update decodes the other owners' pieces again.
    Stages 2-3 (`momentum_reduce_scatter`): the sender decodes what it sent last and encodes
    p pieces; the owner decodes the p it received. A replicated stage 2
    (`momentum_all_gather_sent`) forms every owner's mean from everything sent: p pieces of
    n / p decoded for each of the p owners.
    """
    piece = n / p
    if stage == 1:
        after = (0.0, (p - 1) * piece if replicated else 0.0)
        return CodecWork((n, (p - 1) * piece), (piece, n), after)
    return CodecWork((n, n), (0.0, 0.0), (0.0, p * n if replicated else n))


@functools.cache  # `cadence plan` asks once per candidate: time once per process
def time_codec(device: str = "cpu", numel: int = TIMED_ELEMENTS, repeats: int = 5) -> CodecCost:
    """Time both passes on `device`: the least of `repeats` calls after an untimed one, since
    a busy machine only ever adds time."""
    import torch

    from cadence.profile.clock import Stopwatch, sync
    from cadence.zero.compress import decode_add_, encode_feedback_, wire_bytes

    where = torch.device(device)
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(numel, generator=generator).to(where)
    wire = torch.empty(wire_bytes(numel), dtype=torch.uint8, device=where)
    scratch = torch.empty_like(values)
    total = torch.zeros_like(values)

    def least(run: Callable[[], object]) -> float:
        samples = []
        for i in range(repeats + 1):
            sync(where)
            clock = Stopwatch(where, expected_marks=2)
            start = clock.mark()
            run()
            end = clock.mark()
            if i:
                samples.append(clock.seconds(start, end))
        return min(samples) / numel

    encode = least(lambda: encode_feedback_(values, wire, scratch))
    decode = least(lambda: decode_add_(total, wire, alpha=0.5))
    return CodecCost(encode, decode)


def profile_codec(profile: Profile) -> CodecCost:
    """The codec's cost where `profile` was made, or, for a profile without it, timed here."""
    recorded = profile.codec_s_per_element
    if recorded:
        return CodecCost(recorded["encode"], recorded["decode"])
    return time_codec()
