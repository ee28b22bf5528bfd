"""`cadence bench steadiness`: window figures from real timed steps, and one-line errors."""

import json

import pytest

from cadence.bench.steadiness import SteadinessConfig, run_steadiness, summarise
from cadence.errors import UserError


def test_windows_are_timed_steps_and_the_spread_follows_them(tmp_path):
    config = SteadinessConfig(
        model="mlp", batch_size=8, windows=2, window_s=0.2, processes=2,
        out=str(tmp_path / "s.json"),
    )  # fmt: skip
    lines: list[str] = []
    report = run_steadiness(config, "test", echo=lines.append)
    saved = json.loads((tmp_path / "s.json").read_text())
    assert (tmp_path / "s.png").stat().st_size > 0
    assert saved["summary"] == report["summary"]
    assert len(saved["windows"]) == 2 and all(len(p) == 2 for p in saved["windows"])
    for window in (w for proc in saved["windows"] for w in proc):
        assert window["steps"] >= 1
        # Processor time of one thread cannot exceed its wall time (clock granularity aside).
        assert 0 < window["cpu_ms"] <= window["wall_ms"] * 1.05 + 0.1
    cpu = [w["cpu_ms"] for proc in saved["windows"] for w in proc]
    assert report["summary"]["max_over_min"] == pytest.approx(max(cpu) / min(cpu))
    assert any("slowest window / fastest" in line for line in lines)


def test_summary_of_known_windows():
    windows = [[{"cpu_ms": 100.0}, {"cpu_ms": 130.0}], [{"cpu_ms": 110.0}, {"cpu_ms": 100.0}]]
    s = summarise(windows)
    assert s["median_cpu_ms"] == 105.0
    assert s["max_over_min"] == pytest.approx(1.3)
    assert s["worst_percent"] == pytest.approx(100 * 25 / 105)


@pytest.mark.parametrize(
    "kwargs", [{"model": "nope"}, {"windows": 1}, {"window_s": 0}, {"processes": 0}]
)
def test_bad_input_is_one_line(kwargs):
    with pytest.raises(UserError) as err:
        SteadinessConfig(**kwargs)
    assert "\n" not in str(err.value)
