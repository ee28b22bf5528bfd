"""`cadence.train.resources`: the figures a soak benchmark compares, read from /proc of this
test's own process, and a plot that leaves nothing for the cyclic collector."""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cadence.train.resources import (
    SAMPLES_ENV,
    children,
    encode,
    probe_from_env,
    snapshot,
    usage,
)


def test_usage_counts_threads_descriptors_and_sockets() -> None:
    before = usage()
    assert before.rss_bytes > 0 and before.threads >= 1 and before.fds >= 3
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    with socket.socket() as a, socket.socket(), open(__file__) as _f:
        during = usage()
        tasks = os.listdir("/proc/self/task")
        assert a.fileno() >= 0
    stop.set()
    thread.join()
    # Other threads of the test process (pytest-xdist's) may start or end between two samples:
    # the count is the kernel's at that moment, and it includes the thread started here.
    assert during.threads == len(tasks) and str(thread.native_id) in tasks
    assert during.fds == before.fds + 3
    assert during.sockets == before.sockets + 2
    assert usage().fds == before.fds


def test_children_and_their_commands() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in children()
        sample = snapshot(7)
        assert sample["step"] == 7
        assert sample["children"][str(child.pid)]["command"].startswith("-c import time")
        assert sample["children"][str(child.pid)]["threads"] == 1
    finally:
        child.kill()
        child.wait()
    assert child.pid not in children()


def test_probe_samples_start_every_and_last_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SAMPLES_ENV, raising=False)
    assert probe_from_env(0, 10) is None  # the ordinary run samples nothing
    monkeypatch.setenv(SAMPLES_ENV, encode(tmp_path, 4, 3))
    probe = probe_from_env(1, 10)
    assert probe is not None
    for step in range(1, 11):
        probe.after_step(step)
    record = json.loads((tmp_path / "rank1.json").read_text())
    assert [s["step"] for s in record["series"]] == [3, 4, 8, 10]
    assert record["start"]["step"] == 3 and record["end"]["step"] == 10
    assert record["rank"] == 1


def test_plot_training_leaves_no_figure_for_the_cyclic_collector(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from cadence.train.outputs import plot_training

    metrics = {
        "step_loss": [1.0, 0.5, 0.25],
        "epochs": [{"epoch": 1, "step": 3, "test_loss": 0.3, "test_accuracy": 0.9}],
        "config": {"model": "cnn", "strategy": "ddp"},
        "dataset": "digits",
        "world_size": 2,
    }
    gc.collect()
    gc.disable()  # only plot_training's own collection may free the figure
    try:
        plot_training(tmp_path / "t.png", metrics)
        alive = [o for o in gc.get_objects() if isinstance(o, Figure)]
    finally:
        gc.enable()
    assert alive == []
    assert (tmp_path / "t.png").exists()
