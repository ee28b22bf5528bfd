"""The tensor-parallel communication plan of gpt_mini, checked by hand (the distributed test
checks it against what the layers really issue)."""

from __future__ import annotations

import pytest

from cadence.comm.cost import AlphaBeta
from cadence.errors import UserError
from cadence.models.gpt import build_gpt_mini
from cadence.models.vision import build_mlp
from cadence.tp import gpt_tp_plan, predict_comm_s


def test_plan_by_hand() -> None:
    model = build_gpt_mini(vocab=32, context=8, n_layers=1, d_model=16, n_heads=2)
    plan = gpt_tp_plan(model, batch=2, seq=8, tp_size=2)
    hidden, logits = 2 * 8 * 16 * 4, 2 * 8 * 32 * 4
    assert [(c.block, c.phase, c.collective, c.nbytes) for c in plan] == [
        ("embed", "forward", "all_reduce", hidden),
        ("layer1", "forward", "all_reduce", hidden),
        ("layer1", "forward", "all_reduce", hidden),
        ("final", "forward", "all_gather", logits),
        ("final", "backward", "all_reduce", hidden),
        ("layer1", "backward", "all_reduce", hidden),
        ("layer1", "backward", "all_reduce", hidden),
    ]
    # Latency only: a 2-rank ring all-reduce is 2 messages, an all-gather 1: 6 x 2 + 1.
    assert predict_comm_s(plan, AlphaBeta(1e-3, 0.0), 2) == pytest.approx(13e-3)
    # Bandwidth only at 1 byte/s: all-reduce sends 2 (p-1)/p n, all-gather (p-1)/p n.
    assert predict_comm_s(plan, AlphaBeta(0.0, 1.0), 2) == pytest.approx(6 * hidden + logits / 2)


def test_group_of_one_communicates_nothing() -> None:
    assert gpt_tp_plan(build_gpt_mini(), batch=2, seq=8, tp_size=1) == []


def test_plan_of_an_unsupported_model_is_a_user_error() -> None:
    with pytest.raises(UserError, match="gpt_mini-style"):
        gpt_tp_plan(build_mlp(), batch=2, seq=8, tp_size=2)
