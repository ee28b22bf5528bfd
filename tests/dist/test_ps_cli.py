"""`cadence train --strategy ps` as a user runs it: real worker and server processes."""

import json

import pytest

from cadence.inject import INJECT_ENV
from tests.cli_helpers import assert_one_line_error, run_cadence


def test_train_ps_backup_workers_with_a_straggler(tmp_path):
    # 3 workers, steps made by the first 2 gradients, worker 2 slowed: the fast workers reach
    # each epoch end first and wait there, so the straggler must finish its steps without them
    # (it hung before workers said they pause).
    proc = run_cadence(
        "train", "--model", "mlp", "--strategy", "ps", "--servers", "2", "--workers", "3",
        "--consistency", "backup:2", "--straggler", "2:0.02", "--ps-priority", "graph",
        "--optimizer", "sgd", "--lr", "0.05", "--batch-size", "48", "--steps", "40",
        "--out", "out", "--name", "ps", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "out" / "ps" / "metrics.json").read_text())
    assert metrics["steps"] == 40 and metrics["world_size"] == 3
    assert len(metrics["epochs"]) == 2  # crosses an epoch end
    assert metrics["config"]["consistency"] == "backup:2"
    assert metrics["step_loss"][-1] < metrics["step_loss"][0]
    assert metrics["final_test_accuracy"] > 0.5
    # The run's counters: the servers' and every worker's, summed.
    ps = metrics["ps"]
    assert ps["servers"]["rejected"] == 0 and ps["servers"]["dropped"] > 0  # worker 2 is late
    assert [w["rank"] for w in ps["workers"]] == [0, 1, 2]
    assert ps["bytes_pushed"] == sum(w["bytes_pushed"] for w in ps["workers"])
    assert sum(ps["bytes_per_class"]) == ps["bytes_pushed"] + ps["bytes_pulled"]
    # mlp (85k float32 parameters): each worker pushes every gradient of its 40 steps.
    params = metrics["num_parameters"]
    assert all(w["bytes_pushed"] == 40 * 4 * params for w in ps["workers"])
    assert all(w["bytes_pulled"] >= 40 * 4 * params for w in ps["workers"])
    assert ps["param_wait_s"] >= 0 and ps["max_staleness"] == 0


def test_train_ps_goes_on_when_a_worker_process_dies(tmp_path):
    # Backup K = 2 of 2: each step needs both workers until the servers declare the killed
    # one dead (no heartbeat for 2 s); then worker 0 makes every remaining step alone.
    proc = run_cadence(
        "train", "--model", "mlp", "--strategy", "ps", "--workers", "2",
        "--consistency", "backup:2", "--ps-dead-after", "2", "--optimizer", "sgd",
        "--lr", "0.05", "--batch-size", "32", "--steps", "30", "--out", "out", "--name", "ps",
        cwd=tmp_path, env={INJECT_ENV: "1:5:abort"},  # rank 1 dies natively at step 5
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "cadence: worker 1 exited with code" in proc.stderr
    assert "the others train on without it (--consistency backup:2)" in proc.stderr
    metrics = json.loads((tmp_path / "out" / "ps" / "metrics.json").read_text())
    assert metrics["steps"] == 30 and len(metrics["step_loss"]) == 30
    ps = metrics["ps"]
    assert ps["servers"]["dead_workers"] == 1
    assert [w["rank"] for w in ps["workers"]] == [0]  # no collective with a dead rank
    assert ps["workers"][0]["dead_workers"] == [1]
    assert metrics["final_test_accuracy"] > 0.5


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--consistency", "ssp:x"], "bad --consistency 'ssp:x'"),
        (["--straggler", "5:1"], "--straggler rank 5 does not exist"),
        (["--ps-dead-after", "0.5"], "--ps-dead-after (0.5 s) must exceed the heartbeat"),
    ],  # the other settings: tests/unit/test_ps_plan.py (checked where TrainConfig is made)
)
def test_bad_ps_settings_are_one_line_and_exit_2(tmp_path, args, needle):
    proc = run_cadence("train", "--strategy", "ps", *args, cwd=tmp_path, timeout=60)
    assert_one_line_error(proc, needle)
