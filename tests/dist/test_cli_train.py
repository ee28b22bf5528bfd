"""`cadence train` end to end: outputs, bad input, a crashing worker, and torchrun."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

from tests.cli_helpers import SRC, WORKER_COMMAND, assert_one_line_error, run_cadence


def test_train_writes_metrics_plot_checkpoint_and_json(tmp_path):
    proc = run_cadence(
        "train", "--model", "mlp", "--steps", "30", "--out", "out", "--name", "r1",
        "--json", "summary.json", cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "out" / "r1"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 30
    assert metrics["world_size"] == 2
    assert len(metrics["step_loss"]) == 30
    assert metrics["step_loss"][-1] < metrics["step_loss"][0]
    assert 0.5 < metrics["final_test_accuracy"] <= 1.0
    assert json.loads((tmp_path / "summary.json").read_text()) == metrics
    assert (run_dir / "training.png").stat().st_size > 10_000
    checkpoint = torch.load(run_dir / "checkpoint.pt")
    assert checkpoint["step"] == 30 and "model" in checkpoint and "optimizer" in checkpoint
    assert "test accuracy" in proc.stdout


def test_flags_override_the_config_file(tmp_path):
    (tmp_path / "job.toml").write_text(
        '[job]\nsteps = 50\nname = "fromfile"\nout = "out"\n[model]\nname = "mlp"\n'
        "[data]\nbatch_size = 32\n[optim]\nname = \"sgd\"\nlr = 0.05\n"
    )
    proc = run_cadence("train", "--config", "job.toml", "--steps", "4", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "out" / "fromfile" / "metrics.json").read_text())
    assert metrics["steps"] == 4  # the flag
    config = metrics["config"]  # the file's, and a default
    assert (config["model"], config["batch_size"], config["optimizer"]) == ("mlp", 32, "sgd")
    assert (config["lr"], config["workers"]) == (0.05, 2)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "alexnet"], "unknown model 'alexnet'"),
        (["--dataset", "imagenet"], "unknown dataset 'imagenet'"),
        (["--model", "gpt_mini", "--dataset", "digits"], "cannot use dataset 'digits'"),
        (["--workers", "0"], "--workers must be at least 1"),
        (["--workers", "3"], "not divisible by --workers 3"),
        (["--out", "afile/sub"], "cannot write to --out"),
        (["--emulate-bandwidth", "10gbps"], "bad bandwidth '10gbps'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    (tmp_path / "afile").write_text("not a directory")
    assert_one_line_error(run_cadence("train", *args, cwd=tmp_path, timeout=60), needle)


def test_busy_port_is_one_line(tmp_path):
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = run_cadence("train", "--master-port", str(port), cwd=tmp_path, timeout=60)
    assert_one_line_error(proc, f"port {port} is busy")


def test_crashing_worker_stops_everyone_and_names_the_rank(tmp_path):
    start = time.monotonic()
    proc = run_cadence(
        "train", "--model", "mlp", "--steps", "500", "--out", str(tmp_path), cwd=tmp_path,
        env={"CADENCE_INJECT_FAILURE": "1:5"}, timeout=120,
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 1
    assert "rank 1 failed: RuntimeError: injected failure at step 5" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert elapsed < 60, f"took {elapsed:.0f} s to stop"
    leftover = subprocess.run(
        ["pgrep", "-f", f"{WORKER_COMMAND} .*{tmp_path}"], capture_output=True, text=True
    )
    assert leftover.stdout.strip() == ""


def test_joins_a_torchrun_launch(tmp_path):
    env = dict(os.environ, PYTHONPATH=SRC, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "cadence", "train", "--model", "mlp", "--steps", "10", "--out", "out",
         "--name", "tr"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "out" / "tr" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 10


def test_help_lists_commands(tmp_path):
    proc = run_cadence("--help", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0
    for command in ("train", "netem", "models"):
        assert command in proc.stdout


_USER_MODULE = '''
import torch
from torch import nn


def build():
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))


def data():
    y = torch.randint(0, 3, (384,))
    x = torch.eye(3, 8)[y] * 3 + torch.randn(384, 8)
    return (x[:256], y[:256]), (x[256:], y[256:])


def smooth(output, target):
    return nn.functional.cross_entropy(output, target, label_smoothing=0.1)


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.left, self.right = nn.Linear(8, 3), nn.Linear(8, 3)

    def forward(self, x):
        return self.left(x) + self.right(x)


def tower():
    return Tower()
'''


@pytest.mark.parametrize(("strategy", "grad_accum"), [("ddp", 2), ("ps", 2), ("pipeline", 2)])
def test_trains_a_users_own_model_from_the_current_directory(tmp_path, strategy, grad_accum):
    (tmp_path / "mynet.py").write_text(_USER_MODULE)
    proc = run_cadence(
        "train", "--model", "mynet:build", "--dataset", "mynet:data", "--steps", "24",
        "--batch-size", "32", "--grad-accum", str(grad_accum), "--lr", "0.01",
        "--loss", "mynet:smooth", "--strategy", strategy, "--out", "out", "--name", "mine",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "out" / "mine" / "metrics.json").read_text())
    assert metrics["config"]["grad_accum"] == grad_accum and metrics["dataset"] == "mynet:data"
    assert metrics["num_parameters"] == 8 * 16 + 16 + 16 * 3 + 3
    assert metrics["step_loss"][-1] < metrics["step_loss"][0]
    assert metrics["final_test_accuracy"] > 0.5


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "nomodule:build", "--dataset", "digits"], "no module named 'nomodule'"),
        (["--model", "mynet:missing", "--dataset", "digits"], "has no attribute 'missing'"),
        (["--model", "mynet:build", "--dataset", "digits"], "cannot train on dataset 'digits'"),
        (["--model", "mynet:tower", "--dataset", "mynet:data", "--strategy", "pipeline"],
         "make --model mynet:tower return an nn.Sequential"),
        (["--grad-accum", "2", "--strategy", "pipeline", "--schedule", "auto"],
         "--schedule auto picks the number of micro-batches itself"),
    ],
)  # fmt: skip
def test_a_users_model_that_cannot_train_is_one_line(tmp_path, args, needle):
    (tmp_path / "mynet.py").write_text(_USER_MODULE)
    assert_one_line_error(run_cadence("train", *args, cwd=tmp_path, timeout=60), needle)
