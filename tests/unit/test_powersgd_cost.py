"""PowerSGD's price beyond its bytes (`cadence.sim.powersgd_cost`): which parameters are
compressed, the factors' arithmetic timed on their shapes, and the extra all-reduce rounds."""

from __future__ import annotations

import dataclasses

import pytest

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.sim.methods import method_step_s, parse_method
from cadence.sim.powersgd_cost import compressed_matrices, extra_round_seconds, factor_seconds
from tests.unit.test_sim_strategies import _setup


def test_compressed_matrices_follow_each_codecs_rule() -> None:
    shapes = [(100, 50), (4, 4), (10,), (8, 3, 3, 3), (1, 40), (40, 1)]
    # cadence-dp: every matrix of at least two rows and two columns, conv weights flattened.
    assert compressed_matrices(shapes, 2) == ((100, 50), (4, 4), (8, 27))
    # torch's hook: only where the factors are at least twice smaller.
    assert compressed_matrices(shapes, 2, min_rate=2.0) == ((100, 50), (8, 27))


def test_factor_time_grows_with_the_matrices() -> None:
    # One intra-op thread, as a worker beside others times it: two threads sharing cores with
    # other test processes once waited 76 ms on each other for one matrix.
    one = factor_seconds(((256, 256),), 2, threads=1)
    many = factor_seconds(((256, 256),) * 40, 2, threads=1)
    assert 0 < one < many
    assert factor_seconds((), 2) == 0.0


def test_extra_rounds_pay_the_latency_measured_at_their_size() -> None:
    flat = AlphaBeta(alpha_s=1e-3, beta_s_per_byte=1e-8)
    # 2 ranks: 2 messages a round; 3 rounds per bucket, 2 buckets: 4 extra rounds.
    assert extra_round_seconds(flat, 2, 6000.0, 3, 2) == pytest.approx(4 * 2 * 1e-3)
    assert extra_round_seconds(flat, 4, 6000.0, 1, 2) == 0.0  # one round: nothing extra
    # Latency by size (a calibration's): each round's 1000 bytes at the alpha measured there.
    by_size = ((100.0, 5e-3), (1000.0, 2e-4), (10000.0, 1e-4))
    sized = AlphaBeta(alpha_s=1e-3, beta_s_per_byte=1e-8, allreduce_alphas=by_size)
    assert extra_round_seconds(sized, 2, 6000.0, 3, 2) == pytest.approx(4 * 2 * 2e-4)


def test_powersgd_steps_pay_for_their_arithmetic_and_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import cadence.sim.powersgd_cost as cost

    shapes = [(1000, 1000)] * 4  # 4 MB each, as the setup's blocks
    slow = _setup(2, 20e6)
    slow = dataclasses.replace(slow, link=dataclasses.replace(slow.link, alpha_s=1.0))
    for name, rounds in (("ddp+powersgd", 3), ("cadence-dp+powersgd", 2)):
        monkeypatch.setattr(cost, "factor_seconds", lambda matrices, rank, threads: 0.0)
        bare = method_step_s(slow, parse_method(name), shapes=shapes)
        monkeypatch.setattr(cost, "factor_seconds", lambda matrices, rank, threads: 0.25)
        timed = method_step_s(slow, parse_method(name), shapes=shapes)
        assert timed.step_s - bare.step_s == pytest.approx(0.25)  # the arithmetic, once
        assert "arithmetic timed here" in timed.assumed
        # A 1 s latency per all-reduce step: a ring over 2 ranks pays 2 per round.
        assert bare.step_s >= rounds * 2 * 1.0
    with pytest.raises(UserError, match="parameter shapes"):
        method_step_s(slow, parse_method("ddp+powersgd"))
