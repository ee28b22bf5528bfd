"""cadence-dp's gradient codecs without processes: encode/decode round trips, error feedback
that loses nothing between steps, PowerSGD exact at full rank and warm-started, wire sizes.

The codecs' collectives are replaced by a world of one (a reduction returns its input), so
what one rank sends, keeps and applies can be checked exactly."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from cadence.dp import compress
from cadence.dp.compress import (
    PowerSGDCodec,
    SignCodec,
    low_rank,
    pack_signs,
    sign_decode,
    sign_encode,
    unpack_signs,
)
from cadence.dp.plan import Chunk, Segment
from cadence.dp.wire import matrix_shape, wire_bytes


class _Done:
    def wait(self) -> None:
        pass


@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def gather(out: torch.Tensor, tensor: torch.Tensor, group: Any = None) -> _Done:
        out.copy_(tensor)
        return _Done()

    monkeypatch.setattr(compress.comm, "all_reduce_async", lambda t, group=None: _Done())
    monkeypatch.setattr(compress.comm, "all_reduce", lambda t, group=None: None)
    monkeypatch.setattr(compress.comm, "all_gather_into_tensor_async", gather)


def _chunk(params: list[torch.Tensor]) -> Chunk:
    segs = tuple(Segment(i, 0, p.numel()) for i, p in enumerate(params))
    return Chunk(0, 0, segs, sum(p.numel() * 4 for p in params))


def test_sign_bits_round_trip() -> None:
    x = torch.randn(1001)
    packed = pack_signs(x)
    assert packed.dtype == torch.uint8 and packed.numel() == 126
    signs = unpack_signs(packed, x.numel(), torch.float32)
    assert torch.equal(signs, torch.where(x >= 0, 1.0, -1.0))


def test_sign_decode_is_scale_times_sign() -> None:
    c = torch.tensor([0.5, -2.0, 1.5, -0.0])
    packed, scale = sign_encode(c)
    assert scale.item() == pytest.approx(1.0)
    assert torch.equal(sign_decode(packed, scale, 4, torch.float32), torch.tensor([1.0, -1, 1, 1]))


def test_sign_error_feedback_loses_nothing(world_of_one: None) -> None:
    params = [torch.zeros(5, 7), torch.zeros(3)]
    chunk = _chunk(params)
    codec = SignCodec(params, world_size=1)
    gen = torch.Generator().manual_seed(0)
    applied = torch.zeros(38)
    grads = torch.zeros(38)
    for step in range(6):
        g = torch.randn(38, generator=gen)
        grads += g
        before = torch.cat([codec._error(0), codec._error(1)])
        buffer = g.clone()
        codec.start(chunk, buffer, None, step + 1).wait()
        codec.settle([])
        applied += buffer
        error = torch.cat([codec._error(0), codec._error(1)])
        # The error carried is c - decoded, with c = g + the error before.
        torch.testing.assert_close(error, g + before - buffer)
        assert error.abs().sum() > 0
    torch.testing.assert_close(applied + error, grads)


def test_sign_unapplied_parameter_keeps_what_was_sent(world_of_one: None) -> None:
    params = [torch.zeros(4, 4)]
    codec = SignCodec(params, world_size=1)
    chunk = _chunk(params)
    g = torch.randn(16)
    codec.local_unused = {0}  # this rank had no gradient for it either
    codec.start(chunk, g.clone(), None, 1).wait()
    codec.settle([0])  # no rank had a gradient: nothing applied, so nothing is lost
    torch.testing.assert_close(codec._error(0), g)


def test_low_rank_exact_at_full_rank() -> None:
    gen = torch.Generator().manual_seed(1)
    for n, m in ((6, 4), (4, 6), (5, 5)):
        mat = torch.randn(n, m, generator=gen, dtype=torch.float64)
        q = torch.randn(m, min(n, m), generator=gen, dtype=torch.float64)
        p, q_new = low_rank(mat, q)
        torch.testing.assert_close(p @ q_new.t(), mat)


def test_low_rank_is_rank_limited() -> None:
    mat = torch.randn(8, 6, dtype=torch.float64)
    p, q = low_rank(mat, torch.randn(6, 2, dtype=torch.float64))
    assert torch.linalg.matrix_rank(p @ q.t()) == 2


def test_matrix_shape_whole_rows_only() -> None:
    assert matrix_shape((4, 3, 2), Segment(0, 0, 24)) == (4, 6)
    assert matrix_shape((4, 6), Segment(0, 12, 12)) == (2, 6)
    assert matrix_shape((4, 6), Segment(0, 5, 12)) is None  # not whole rows
    assert matrix_shape((4, 6), Segment(0, 0, 6)) is None  # one row
    assert matrix_shape((10,), Segment(0, 0, 10)) is None


def test_powersgd_error_feedback_and_warm_start(world_of_one: None) -> None:
    params = [torch.zeros(8, 6), torch.zeros(6)]
    chunk = _chunk(params)
    codec = PowerSGDCodec(params, world_size=1, rank=2, start_step=1)
    gen = torch.Generator().manual_seed(2)
    applied, grads = torch.zeros(54), torch.zeros(54)
    qs = []
    for step in range(1, 6):
        g = torch.randn(54, generator=gen)
        grads += g
        before = torch.cat([codec._error(0), codec._error(1)])
        buffer = g.clone()
        codec.start(chunk, buffer, None, step).wait()
        codec.settle([])
        applied += buffer
        error = torch.cat([codec._error(0), codec._error(1)])
        torch.testing.assert_close(error, g + before - buffer)
        assert torch.equal(error[48:], torch.zeros(6))  # the bias goes as it is
        if step == 1:  # uncompressed start: exact, no error
            torch.testing.assert_close(buffer, g)
        else:
            assert error[:48].abs().sum() > 0
            qs.append(codec.qs[(0, 0, 48)].clone())
    torch.testing.assert_close(applied + error, grads)
    # Warm start: each step's Q is the last step's reduced Q, not a fresh draw.
    assert not torch.equal(qs[0], qs[1])


def test_powersgd_exact_at_full_rank(world_of_one: None) -> None:
    params = [torch.zeros(5, 3)]
    codec = PowerSGDCodec(params, world_size=1, rank=8, start_step=0)
    g = torch.randn(15, dtype=torch.float32)
    buffer = g.clone()
    codec.start(_chunk(params), buffer, None, 1).wait()
    torch.testing.assert_close(buffer, g)
    assert codec._error(0).abs().max() < 1e-5


def test_wire_bytes_by_method() -> None:
    assert wire_bytes("none", 1000, 4) == 4000
    assert wire_bytes("bf16", 1000, 4) == 2000
    assert wire_bytes("sign", 1000, 4) == 125 + 4
    lengths = [64 * 32, 32]
    assert wire_bytes("powersgd", 2080, 4, [(64, 32), None], lengths, rank=2) == 4 * (2 * 96 + 32)


def test_compression_with_autotune_is_refused_in_one_line() -> None:
    import cadence
    from cadence.dp import DPConfig
    from cadence.errors import UserError

    model = torch.nn.Linear(4, 4)
    config = DPConfig(compression="sign", autotune="exhaustive")
    with pytest.raises(UserError) as caught:
        cadence.data_parallel(model, torch.optim.SGD(model.parameters(), lr=0.1), config)
    assert "autotune" in str(caught.value) and "\n" not in str(caught.value)


def test_unknown_compression_is_refused() -> None:
    from cadence.dp import DPConfig

    with pytest.raises(ValueError, match="compression"):
        DPConfig(compression="topk")


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        ({"dp_compression": "sign", "autotune": "exhaustive"}, "--autotune"),
        ({"dp_compression": "sign", "strategy": "ddp"}, "--strategy cadence-dp"),
        ({"dp_compression": "topk"}, "unknown --dp-compression"),
        ({"dp_compression": "powersgd", "powersgd_rank": 0}, "--powersgd-rank"),
    ],
)
def test_flags_refused_in_one_line(keys: dict[str, Any], needle: str) -> None:
    from cadence.config import TrainConfig
    from cadence.config_checks import check_train_config
    from cadence.errors import UserError

    with pytest.raises(UserError) as caught:
        check_train_config(TrainConfig.from_flat(**keys))
    assert needle in str(caught.value) and "\n" not in str(caught.value)
