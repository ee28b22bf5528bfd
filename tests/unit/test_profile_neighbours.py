"""`cadence.profile.neighbours`: processes that train the model beside a profile."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cadence.errors import UserError
from cadence.profile.neighbours import neighbours


def _children() -> set[int]:
    """Live child processes of this one (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(os.getpid()) and fields[0] != "Z":
            out.add(int(entry.name))
    return out


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_neighbours_train_while_the_block_runs_and_stop_after() -> None:
    before = _children()
    with neighbours("cnn", None, 4, 1, 2):
        running = _children() - before
        assert len(running) == 2
        used = {pid: _cpu_seconds(pid) for pid in running}
        time.sleep(0.5)
        for pid in running:  # each is busy computing, not waiting to start
            assert _cpu_seconds(pid) - used[pid] > 0.05
    assert not (_children() - before)
    with neighbours("cnn", None, 4, 1, 0):  # none asked: nothing started
        assert _children() == before


def test_a_neighbour_that_cannot_start_is_one_line() -> None:
    with (
        pytest.raises(UserError, match="did not start: .*no-such-model") as caught,
        neighbours("no-such-model", None, 4, 1, 1),
    ):
        pass
    assert "\n" not in str(caught.value)


def test_profile_records_the_workers_per_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cadence.cli import main

    out = tmp_path / "p.json"
    args = ["profile", "--model", "cnn", "--micro-batch-size", "4", "--profile-iterations", "1"]
    assert main([*args, "--workers-per-host", "2", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["neighbours"] == 1 and saved["pace_factor"] > 0
    capsys.readouterr()
    assert main([*args, "--workers-per-host", "0"]) != 0
    assert "--workers-per-host" in capsys.readouterr().err


def test_lockstep_times_the_slowest_of_iterations_started_together() -> None:
    import dataclasses

    from cadence.models import get_model_spec
    from cadence.profile import profile_model
    from cadence.profile.neighbours import iteration_of, paced

    spec = get_model_spec("cnn")
    model = spec.build()
    batch = spec.synthetic_batch(4)
    own = profile_model(model, batch, iterations=2, warmup=1)
    with neighbours("cnn", None, 4, 1, 2) as group:
        calls = []
        slow = iteration_of(model, *batch)

        def own_slow() -> None:  # this process is the slow one: it decides each step
            calls.append(1)
            slow()
            time.sleep(0.05)

        pace = group.lockstep(own_slow, iterations=3)
    assert len(calls) == 4  # one untimed, three timed
    assert pace is not None and 0.05 < pace < 2
    with neighbours("cnn", None, 4, 1, 0) as alone:
        assert alone.lockstep(own_slow) is None
    own = dataclasses.replace(own, optimizer_step_s={"sgd": 0.01})
    scaled = paced(own, own.iteration_s * 1.5)
    assert scaled.pace_factor == pytest.approx(1.5)
    assert scaled.iteration_s == pytest.approx(own.iteration_s * 1.5)
    assert scaled.blocks[0].forward_s == pytest.approx(own.blocks[0].forward_s * 1.5)
    assert scaled.optimizer_step_s == {"sgd": pytest.approx(0.015)}
    assert paced(own, None) == own  # taken alone: as timed
