"""The simulator prices cadence-dp's compressed chunks with the bytes the engine counts
(`cadence.dp.wire`): the two-layer case of test_sim_dp, 80 B/s, 2 workers, 100 floats a chunk."""

from __future__ import annotations

import pytest

from cadence.dp.plan import build_plan
from cadence.errors import UserError
from cadence.sim import SimOptions, simulate_dp
from tests.unit.test_sim_dp import LINK, TWO, params_of


def _wire_s(method: str) -> float:
    plan = build_plan(params_of(TWO), threshold_bytes=400, credit_bytes=800)
    return simulate_dp(TWO, plan, 2, LINK, options=SimOptions(dp_compression=method)).wire_s


def test_chunks_cost_the_codec_bytes() -> None:
    assert _wire_s("none") == pytest.approx(10.0)  # 2 chunks of 400 B
    assert _wire_s("bf16") == pytest.approx(5.0)
    assert _wire_s("fp16") == pytest.approx(5.0)
    # sign: each rank's 13 bytes of bits and a 4-byte scale reach the other rank.
    assert _wire_s("sign") == pytest.approx(2 * 17 / LINK)


def test_powersgd_is_refused_without_shapes() -> None:
    with pytest.raises(UserError, match="powersgd"):
        _wire_s("powersgd")
    with pytest.raises(ValueError, match="dp_compression"):
        SimOptions(dp_compression="topk")
