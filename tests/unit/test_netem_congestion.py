"""Naming the emulated hosts' TCP congestion control: checks that need no root."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.netem import EmulatedCluster
from cadence.netem._congestion import (
    IDLE_ENV_VAR,
    check_congestion_control,
    default_slow_start_after_idle,
    with_allowed,
)

AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def test_with_allowed_appends_only_what_is_missing() -> None:
    assert with_allowed(("reno", "bbr"), "cubic") == ("reno", "bbr", "cubic")
    assert with_allowed(("reno", "cubic"), "cubic") == ("reno", "cubic")


@pytest.mark.parametrize("name", ["cubic; reboot", "BBR", "x" * 17])
def test_a_name_no_congestion_control_has_is_one_line_naming_what_the_machine_offers(
    name: str,
) -> None:
    offers = r"bad TCP congestion control .*: this machine offers .*reno"
    if not AVAILABLE.exists():
        offers = r"bad TCP congestion control"
    with pytest.raises(UserError, match=offers):
        EmulatedCluster(2, 400e6, congestion_control=name)


def test_the_names_the_kernel_offers_pass() -> None:
    if not AVAILABLE.exists():
        pytest.skip("no /proc/sys/net/ipv4 on this machine")
    for name in AVAILABLE.read_text().split():
        check_congestion_control(name)


def test_cubic_unless_named_or_set_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CADENCE_NETEM_CONGESTION_CONTROL", raising=False)
    assert EmulatedCluster(2, 400e6).congestion_control == "cubic"
    assert EmulatedCluster(2, 400e6, congestion_control="reno").congestion_control == "reno"
    monkeypatch.setenv("CADENCE_NETEM_CONGESTION_CONTROL", "bbr")
    assert EmulatedCluster(2, 400e6).congestion_control == "bbr"
    monkeypatch.setenv("CADENCE_NETEM_CONGESTION_CONTROL", "no such")
    with pytest.raises(UserError, match="bad TCP congestion control 'no such'"):
        EmulatedCluster(2, 400e6)


def test_slow_start_after_idle_is_off_unless_turned_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IDLE_ENV_VAR, raising=False)
    assert EmulatedCluster(2, 400e6).slow_start_after_idle is False
    assert EmulatedCluster(2, 400e6, slow_start_after_idle=True).slow_start_after_idle is True
    monkeypatch.setenv(IDLE_ENV_VAR, "1")
    assert default_slow_start_after_idle() is True
    monkeypatch.setenv(IDLE_ENV_VAR, "off")
    with pytest.raises(UserError, match="bad \\$CADENCE_NETEM_SLOW_START_AFTER_IDLE 'off'"):
        EmulatedCluster(2, 400e6)


@pytest.mark.parametrize(
    ("flag", "expected"),
    [([], None), (["--slow-start-after-idle"], True), (["--no-slow-start-after-idle"], False)],
)
def test_netem_up_takes_idle_restart_either_way(flag: list[str], expected: bool | None) -> None:
    from cadence.cli import build_parser
    from cadence.config_flags import resolve_flags

    args = build_parser().parse_args(["netem", "up", "--emulate-bandwidth", "400mbit", *flag])
    resolve_flags(args)
    assert args.slow_start_after_idle is expected
    assert args.emulate_bandwidth == "400mbit"
