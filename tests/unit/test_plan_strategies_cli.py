"""`cadence plan strategies` and `cadence plan map` on saved profiles; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadence.cli import main
from tests.cli_helpers import run_cadence
from tests.unit.test_sim_cli import zoo_profile


@pytest.fixture(scope="module")
def gpt_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prof") / "gpt.json"
    zoo_profile("gpt_mini").save(path)
    return path


def _common(profile: Path) -> list[str]:
    return ["--model", "gpt_mini", "--profile", str(profile), "--optimizer-step", "0.01"]


def test_strategies_ranks_every_family_and_honours_the_memory_limit(
    gpt_profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.json"
    args = ["plan", "strategies", *_common(gpt_profile), "--workers", "4", "--bandwidth", "1gbit"]
    assert main([*args, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    names = {r["strategy"] for r in data["rows"]}
    assert {"ddp", "cadence-dp", "zero", "ps", "tp", "tp x dp", "pipeline"} <= names
    times = [r["iteration_s"] for r in data["rows"]]
    assert times == sorted(times)
    assert data["why"].startswith("pick ") and "pick" in capsys.readouterr().out
    ddp_memory = next(r for r in data["rows"] if r["strategy"] == "ddp")["memory_bytes"]
    limit = str(ddp_memory - 1)
    assert main([*args, "--memory-limit", limit, "--json", str(out)]) == 0
    limited = json.loads(out.read_text())
    first_fitting = next(r for r in limited["rows"] if r["fits"])
    assert first_fitting["memory_bytes"] < ddp_memory
    assert limited["why"].startswith(f"pick {first_fitting['strategy']}")


def test_map_writes_a_cell_per_pair_and_a_picture(gpt_profile: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "m.json", tmp_path / "m.png"
    args = [
        "plan",
        "map",
        *_common(gpt_profile),
        "--workers",
        "2,4",
        "--bandwidths",
        "10mbit,10gbit",
    ]
    assert main([*args, "--json", str(out), "--png", str(png)]) == 0
    cells = json.loads(out.read_text())["cells"]
    assert [(c["workers"], c["bandwidth"]) for c in cells] == [
        (2, "10mbit"),
        (2, "10gbit"),
        (4, "10mbit"),
        (4, "10gbit"),
    ]
    for c in cells:
        assert c["best"]["iteration_s"] == min(r["iteration_s"] for r in c["rows"])
    slow, fast = cells[0], cells[1]
    assert slow["best"]["iteration_s"] > fast["best"]["iteration_s"]
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["map", "--bandwidths", "fast"], "fast"),
        (["map", "--workers", "1,x"], "--workers"),
        (["strategies", "--memory-limit", "lots"], "--memory-limit"),
    ],
)
def test_bad_input_is_one_line(
    gpt_profile: Path, flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *flags, *_common(gpt_profile)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cadence: error:") and needle in lines[0]


def test_plan_without_a_subcommand_ranks_strategies(gpt_profile: Path, tmp_path: Path) -> None:
    proc = run_cadence("plan", *_common(gpt_profile), "--workers", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pick " in proc.stdout and "zero" in proc.stdout
