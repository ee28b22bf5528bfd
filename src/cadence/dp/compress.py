"""Gradient compression for cadence-dp, one chunk at a time.

The engine packs a chunk's gradients into one flat buffer; a codec starts that buffer's
reduction and, when waited on, leaves the average over ranks in it. Every codec issues its
collectives through `cadence.comm.ops`, from the plan's chunk order, so all ranks agree.

- `bf16` / `fp16`: the buffer travels cast to the low dtype (fp16 divided by the world size
  first, so the sum cannot overflow where the average does not), then is cast back.
- `sign`: 1-bit with error feedback (EF-SignSGD): c = g + e; each rank sends sign(c) packed
  eight to a byte and one scale, mean |c|; every rank decodes and averages them all; e = c -
  its own decoded contribution.
- `powersgd`: low rank with error feedback and warm start (Vogels et al., 2019): per matrix
  segment M = g + e; P = M Q, all-reduced and orthonormalised; Q = Mᵀ P, all-reduced; the
  average becomes P Qᵀ and e = M - P Qᵀ. Other elements (vectors, segments that are not whole
  rows) go in fp32 with the P's. The first `start_step` iterations go uncompressed.

Errors live per parameter, not per chunk, so they survive a change of plan (warm-up, tuning).
The pure functions below need no processes; the codecs add the collectives and the state.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from cadence.comm import ops as comm
from cadence.dp.config import COMPRESSIONS
from cadence.dp.plan import Chunk, Segment
from cadence.dp.wire import matrix_shape, wire_bytes

METHODS = COMPRESSIONS


# ----- pure functions --------------------------------------------------------------------------
def pack_signs(x: torch.Tensor) -> torch.Tensor:
    """One bit per element of `x` (1 where x >= 0), eight to a uint8, zero-padded at the end."""
    bits = (x.reshape(-1) >= 0).to(torch.uint8)
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    bits = bits.view(-1, 8)
    # Shift-and-or column by column: half the time of a weighted sum over the rows.
    packed = bits[:, 0] << 7
    for i in range(1, 8):
        packed |= bits[:, i] << (7 - i)
    return packed


def unpack_signs(packed: torch.Tensor, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """+1/-1 for each of the first `numel` bits `pack_signs` packed."""
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=packed.device)
    bits = (packed.unsqueeze(1) >> shifts) & 1
    return bits.reshape(-1)[:numel].to(dtype).mul_(2).sub_(1)


def sign_encode(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`c` as packed signs and one float32 scale, the mean |c| (its l1 norm over its size)."""
    return pack_signs(c), c.abs().mean(dtype=torch.float32).reshape(1)


def sign_decode(
    packed: torch.Tensor, scale: torch.Tensor, numel: int, dtype: torch.dtype
) -> torch.Tensor:
    """What `sign_encode` stands for: scale x sign."""
    return unpack_signs(packed, numel, dtype) * scale.to(dtype)


def orthonormalise(p: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis of `p`'s columns (n x r, r <= n), as a new n x r matrix."""
    wide = p.float() if p.element_size() < 4 else p  # QR has no half-precision kernels
    q, _ = torch.linalg.qr(wide, mode="reduced")
    return q.to(p.dtype)


def low_rank(m: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One rank's PowerSGD step without communication: (P orthonormalised, new Q); the
    approximation of `m` is P @ Q.T. Exact when Q (m x r) has rank min(n, m)."""
    p = orthonormalise(m @ q)
    return p, m.t() @ p


# ----- codecs ------------------------------------------------------------------------------------
class Pending(Protocol):
    def wait(self) -> None: ...


@dataclass
class _Done:
    finish: Callable[[], None]

    def wait(self) -> None:
        self.finish()


class Codec:
    """Reduces a chunk's packed buffer to the average over ranks, compressed on the wire."""

    name = "none"

    def __init__(self, params: Sequence[torch.Tensor], world_size: int):
        self.params = params
        self.world_size = world_size
        self.last_bytes = 0  # bytes the last `start` handed to collectives
        # Parameters this rank got no gradient for in the backward pass being reduced (the
        # engine's zeros): the only ones whose update may be withheld (`settle`).
        self.local_unused: Container[int] = ()
        # Iterations reduced before this engine's first (a resumed run's engine counts from 1
        # again): the codec's schedule (PowerSGD's uncompressed start) goes on where it was.
        self.iterations_before = 0
        self.last_iteration = 0

    def step_of(self, iteration: int) -> int:
        """The run's iteration number of the engine's `iteration`."""
        self.last_iteration = iteration
        return self.iterations_before + iteration

    def start(self, chunk: Chunk, buffer: torch.Tensor, group: Any, iteration: int) -> Pending:
        raise NotImplementedError

    def settle(self, unapplied: Sequence[int]) -> None:
        """After an iteration's reductions: `unapplied` parameters got a gradient on no rank,
        so nothing of theirs is applied and their error keeps what was sent."""

    def state_dict(self) -> dict[str, Any]:
        return {"iterations": self.iterations_before + self.last_iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iterations_before = int(state.get("iterations", 0)) - self.last_iteration


class CastCodec(Codec):
    """bf16 or fp16 on the wire."""

    def __init__(self, params: Sequence[torch.Tensor], world_size: int, dtype: torch.dtype):
        super().__init__(params, world_size)
        self.dtype = dtype
        self.name = "bf16" if dtype == torch.bfloat16 else "fp16"

    def start(self, chunk: Chunk, buffer: torch.Tensor, group: Any, iteration: int) -> Pending:
        low = buffer.to(self.dtype)
        if self.dtype == torch.float16:
            low.div_(self.world_size)  # the sum of averages cannot overflow where they do not
        work = comm.all_reduce_async(low, group=group)
        self.last_bytes = wire_bytes(self.name, low.numel(), buffer.element_size())

        def finish() -> None:
            work.wait()
            if self.dtype != torch.float16:
                low.div_(self.world_size)
            buffer.copy_(low)

        return _Done(finish)


class _FeedbackCodec(Codec):
    """Keeps an error per parameter (flat, lazily allocated) and what was sent last."""

    def __init__(self, params: Sequence[torch.Tensor], world_size: int):
        super().__init__(params, world_size)
        self.errors: dict[int, torch.Tensor] = {}
        self._sent: list[tuple[Segment, torch.Tensor]] = []  # c of the locally unused

    def _error(self, index: int) -> torch.Tensor:
        error = self.errors.get(index)
        if error is None:
            param = self.params[index]
            error = torch.zeros(param.numel(), dtype=param.dtype, device=param.device)
            self.errors[index] = error
        return error

    def _with_error(self, chunk: Chunk, buffer: torch.Tensor) -> torch.Tensor:
        errors = [self._error(s.param)[s.start : s.start + s.length] for s in chunk.segments]
        return buffer + (errors[0] if len(errors) == 1 else torch.cat(errors))

    def _store_error(self, chunk: Chunk, error: torch.Tensor) -> None:
        offset = 0
        for s in chunk.segments:
            self._error(s.param)[s.start : s.start + s.length].copy_(
                error[offset : offset + s.length]
            )
            offset += s.length

    def _keep_sent(self, chunk: Chunk, c: torch.Tensor) -> None:
        """Keep what was sent for parameters whose update no rank may apply (`settle`)."""
        offset = 0
        for s in chunk.segments:
            if s.param in self.local_unused:
                self._sent.append((s, c[offset : offset + s.length].clone()))
            offset += s.length

    def settle(self, unapplied: Sequence[int]) -> None:
        wanted = set(unapplied)
        for s, sent in self._sent:
            if s.param in wanted:
                self._error(s.param)[s.start : s.start + s.length].copy_(sent)
        self._sent = []

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["errors"] = {i: e.clone() for i, e in self.errors.items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.errors = {int(i): e.clone() for i, e in state["errors"].items()}


class SignCodec(_FeedbackCodec):
    """1-bit (sign and scale) with error feedback, all-gathered."""

    name = "sign"

    def start(self, chunk: Chunk, buffer: torch.Tensor, group: Any, iteration: int) -> Pending:
        c = self._with_error(chunk, buffer)
        packed, scale = sign_encode(c)
        payload = torch.cat([packed, scale.view(torch.uint8)])
        gathered = payload.new_empty(self.world_size * payload.numel())
        work = comm.all_gather_into_tensor_async(gathered, payload, group=group)
        self.last_bytes = wire_bytes("sign", c.numel(), c.element_size())
        numel = c.numel()

        def finish() -> None:
            work.wait()
            rows = gathered.view(self.world_size, -1)
            scales = rows[:, -4:].reshape(-1).clone().view(torch.float32)
            total = torch.zeros_like(c)
            for row, s in zip(rows, scales, strict=True):
                total += sign_decode(row[:-4], s, numel, c.dtype)
            # Every rank sees the same scales: all skip the error update on an inf or NaN (a
            # GradScaler overflow), so the error never holds one.
            if bool(torch.isfinite(scales).all()):
                self._store_error(chunk, c - sign_decode(packed, scale, numel, c.dtype))
                self._keep_sent(chunk, c)
            buffer.copy_(total.div_(self.world_size))

        return _Done(finish)


class PowerSGDCodec(_FeedbackCodec):
    """Low rank with error feedback and warm-started Q, two all-reduces per chunk."""

    name = "powersgd"

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        world_size: int,
        rank: int,
        start_step: int,
        seed: int = 0,
    ):
        super().__init__(params, world_size)
        self.rank = rank
        self.start_step = start_step
        self.seed = seed
        self.qs: dict[tuple[int, int, int], torch.Tensor] = {}  # per (param, start, length)

    def shapes(self, chunk: Chunk) -> list[tuple[int, int] | None]:
        return [matrix_shape(self.params[s.param].shape, s) for s in chunk.segments]

    def _q(self, seg: Segment, m: int, r: int, like: torch.Tensor) -> torch.Tensor:
        key = (seg.param, seg.start, seg.length)
        q = self.qs.get(key)
        if q is None:  # the same on every rank: seeded from the key alone
            gen = torch.Generator().manual_seed(
                self.seed * 1_000_003 + seg.param * 7919 + seg.start
            )
            q = torch.randn(m, r, generator=gen, dtype=torch.float32).to(like)
            self.qs[key] = q
        return q

    def start(self, chunk: Chunk, buffer: torch.Tensor, group: Any, iteration: int) -> Pending:
        if self.step_of(iteration) <= self.start_step:
            work = comm.all_reduce_async(buffer, group=group)
            self.last_bytes = wire_bytes("none", buffer.numel(), buffer.element_size())

            def plain() -> None:
                work.wait()
                buffer.div_(self.world_size)

            return _Done(plain)
        c = self._with_error(chunk, buffer)
        shapes = self.shapes(chunk)
        plain_parts: list[tuple[int, int]] = []  # (offset, length) sent as they are
        mats: list[tuple[int, torch.Tensor, torch.Tensor, tuple[int, int, int]]] = []
        pieces: list[torch.Tensor] = []
        offset = 0
        for seg, shape in zip(chunk.segments, shapes, strict=True):
            if shape is None:
                plain_parts.append((offset, seg.length))
                pieces.append(c[offset : offset + seg.length])
            else:
                n, m = shape
                r = min(self.rank, n, m)
                mat = c[offset : offset + seg.length].view(n, m)
                q = self._q(seg, m, r, mat)
                mats.append((offset, mat, q, (seg.param, seg.start, seg.length)))
            offset += seg.length
        ps = [mat @ q for _, mat, q, _ in mats]
        phase1 = torch.cat([*pieces, *(p.reshape(-1) for p in ps)]) if pieces or ps else c[:0]
        work = comm.all_reduce_async(phase1, group=group)
        lengths = [seg.length for seg in chunk.segments]
        self.last_bytes = wire_bytes(
            "powersgd", c.numel(), c.element_size(), shapes, lengths, self.rank
        )

        def finish() -> None:
            work.wait()
            phase1.div_(self.world_size)
            at = 0
            for off, length in plain_parts:
                buffer[off : off + length].copy_(phase1[at : at + length])
                at += length
            ps_reduced = []
            for p in ps:
                ps_reduced.append(orthonormalise(phase1[at : at + p.numel()].view_as(p)))
                at += p.numel()
            new_qs = [mat.t() @ p for (_, mat, _, _), p in zip(mats, ps_reduced, strict=True)]
            if new_qs:
                phase2 = torch.cat([q.reshape(-1) for q in new_qs])
                comm.all_reduce(phase2, group=group)
                phase2.div_(self.world_size)
            else:
                phase2 = c[:0]
            # The reduced P and Q are the same on every rank: all keep or all skip the update
            # of errors and Q on an inf or NaN (a GradScaler overflow).
            finite = bool(torch.isfinite(phase1).all()) and bool(torch.isfinite(phase2).all())
            error = torch.zeros_like(c)
            at = 0
            for (off, mat, _, key), p, q in zip(mats, ps_reduced, new_qs, strict=True):
                q_avg = phase2[at : at + q.numel()].view_as(q)
                at += q.numel()
                approx = p @ q_avg.t()
                buffer[off : off + mat.numel()].copy_(approx.reshape(-1))
                if finite:
                    error[off : off + mat.numel()].copy_((mat - approx).reshape(-1))
                    self.qs[key] = q_avg.clone()  # warm start for the next iteration
            if finite:
                self._store_error(chunk, error)
                self._keep_sent(chunk, c)

        return _Done(finish)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["qs"] = {k: q.clone() for k, q in self.qs.items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.qs = {tuple(k): q.clone() for k, q in state.get("qs", {}).items()}


def make_codec(
    method: str,
    params: Sequence[torch.Tensor],
    world_size: int,
    *,
    rank: int = 2,
    start_step: int = 10,
) -> Codec | None:
    """The codec for `method`, or None for `none` (the engine's own fp32 all-reduce)."""
    if method == "none":
        return None
    if method == "bf16":
        return CastCodec(params, world_size, torch.bfloat16)
    if method == "fp16":
        return CastCodec(params, world_size, torch.float16)
    if method == "sign":
        return SignCodec(params, world_size)
    if method == "powersgd":
        return PowerSGDCodec(params, world_size, rank, start_step)
    raise ValueError(f"unknown compression {method!r}: choose one of {', '.join(METHODS)}")
