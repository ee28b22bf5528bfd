"""The fit behind `cadence bench contention` and reading its file back."""

from __future__ import annotations

import json

import pytest

from cadence.bench.contention import ContentionConfig, ContentionFit, fit_costs, summarise
from cadence.errors import UserError


def rows(a: float, b: float, sizes: tuple[int, ...] = (65536, 1 << 20, 4 << 20)) -> list[dict]:
    """Rows whose extra time is exactly a per message + b per byte."""
    out = []
    for i, size in enumerate(sizes):
        messages = 40.0 / (i + 1)
        out.append({"messages": messages, "bytes": messages * size,
                    "extra_s": a * messages + b * messages * size})  # fmt: skip
    return out


def test_fit_recovers_both_constants() -> None:
    fit = fit_costs(rows(2e-3, 5e-9))
    assert fit.cpu_s_per_message == pytest.approx(2e-3, rel=1e-6)
    assert fit.cpu_s_per_byte == pytest.approx(5e-9, rel=1e-6)


def test_fit_never_returns_a_negative_constant() -> None:
    # Extra time falling with bytes would need b < 0: the fit puts it on the boundary.
    data = rows(1e-3, 0.0)
    data[-1]["extra_s"] = 0.0
    fit = fit_costs(data)
    assert fit.cpu_s_per_message >= 0 and fit.cpu_s_per_byte >= 0
    assert fit.cpu_s_per_message > 0 or fit.cpu_s_per_byte > 0


def test_summarise_takes_medians_over_ranks_and_rounds() -> None:
    raw = [
        {
            "rank": r,
            "size": 1024,
            "round": k,
            "alone_s": 1.0 + k,
            "with_traffic_s": 2.0 + k,
            "messages": 10 * (k + 1),
        }  # fmt: skip
        for r in range(2)
        for k in range(3)
    ]
    (row,) = summarise(raw)
    assert row == {"size": 1024, "alone_s": 2.0, "with_traffic_s": 3.0, "extra_s": 1.0,
                   "messages": 20.0, "bytes": 20480.0}  # fmt: skip


def test_fit_file_round_trip_and_bad_file(tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"fit": {"cpu_s_per_message": 1e-3, "cpu_s_per_byte": 2e-9}}))
    assert ContentionFit.load(path) == ContentionFit(1e-3, 2e-9)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="not a `cadence bench contention` file"):
        ContentionFit.load(tmp_path / "bad.json")


def test_config_rejects_what_cannot_be_fitted() -> None:
    with pytest.raises(UserError, match="two sizes"):
        ContentionConfig(sizes=(1 << 20,))
    with pytest.raises(UserError, match="--hosts"):
        ContentionConfig(hosts=1)
