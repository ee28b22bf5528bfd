"""Bandwidth parsing and formatting (pure; no root needed)."""

import math

import pytest

from cadence.errors import UserError
from cadence.netem import format_bandwidth, parse_bandwidth
from cadence.netem._bandwidth import tbf_burst_bytes


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("400mbit", 400e6),
        ("1gbit", 1e9),
        ("10gbit", 10e9),
        ("200kbit", 200e3),
        ("2.5gbit", 2.5e9),
        ("0.5mbit", 0.5e6),
        ("400MBIT", 400e6),
        (" 100 mbit ", 100e6),
    ],
)
def test_parse_good(text: str, bps: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(bps)


def test_parse_none_is_uncapped() -> None:
    assert math.isinf(parse_bandwidth("none"))
    assert math.isinf(parse_bandwidth("NONE"))


@pytest.mark.parametrize(
    "text", ["10gbps", "100mbps", "fast", "-1mbit", "0mbit", "mbit", "400", "", "1e3mbit", "inf"]
)
def test_parse_bad(text: str) -> None:
    with pytest.raises(UserError) as info:
        parse_bandwidth(text)
    message = str(info.value)
    assert "\n" not in message
    assert repr(text) in message
    assert "mbit" in message


@pytest.mark.parametrize(
    ("bps", "text"),
    [
        (400e6, "400mbit"),
        (1e9, "1gbit"),
        (2.5e9, "2.5gbit"),
        (200e3, "200kbit"),
        (math.inf, "none"),
    ],
)
def test_format(bps: float, text: str) -> None:
    assert format_bandwidth(bps) == text


@pytest.mark.parametrize("bps", [123e3, 1.5e6, 999e6, 40e9, math.inf])
def test_round_trip(bps: float) -> None:
    assert parse_bandwidth(format_bandwidth(bps)) == pytest.approx(bps)


def test_burst_holds_a_gso_packet_and_grows_with_rate() -> None:
    assert tbf_burst_bytes(1e6) >= 64 * 1024 + 1514
    assert tbf_burst_bytes(10e9) >= 10e9 / 8 * 0.004
