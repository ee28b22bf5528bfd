"""Re-planning `--schedule auto` during training, on real gloo ranks with injected links.

The link probe is replaced by a function that answers a latency-bound link (one second per
message: the fewest messages win, GPipe with one micro-batch) or a bandwidth-bound one (1 kB/s:
more micro-batches overlap compute with the wire), so the planner's pick must change when the
"network" does, while the real messages still travel over loopback. Losses and parameters must
equal single-process training step for step across every switch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from cadence.comm import DistContext
from cadence.comm.cost import AlphaBeta
from cadence.config import TrainConfig
from cadence.pipeline.train import PipelineTrainer, pipeline_wrap_for
from cadence.testing import run_ranks
from tests.cli_helpers import assert_one_line_error, run_cadence
from tests.dist.pipeline_helpers import BATCH, batches, build, reference, sgd

LATENCY_BOUND = AlphaBeta(alpha_s=1.0, beta_s_per_byte=0.0)
BANDWIDTH_BOUND = AlphaBeta(alpha_s=0.0, beta_s_per_byte=1e-3)


class _Links:
    """A probe answering the given links in turn (the last one from then on)."""

    def __init__(self, links: list[AlphaBeta]) -> None:
        self.links = links
        self.calls = 0

    def __call__(self) -> AlphaBeta:
        link = self.links[min(self.calls, len(self.links) - 1)]
        self.calls += 1
        return link


def _train(
    rank: int, world: int, config: TrainConfig, links: list[AlphaBeta], steps: int,
    touch_before: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train `steps` steps on this rank; rank 0 touches the request file before step
    `touch_before` + 1."""
    model = build("mlp")
    opt = sgd(model.parameters())
    ctx = DistContext(rank, world, rank, "gloo", torch.device("cpu"))
    trainer, _ = pipeline_wrap_for(config, probe=_Links(links))(model, opt, ctx)
    assert isinstance(trainer, PipelineTrainer)
    start = trainer.plan_record
    assert start is not None
    ran, losses = [], []
    for step, (x, y) in enumerate(batches("mlp", steps)):
        if rank == 0 and step == touch_before:
            assert config.pipeline.replan_file is not None
            Path(config.pipeline.replan_file).touch()
        loss = trainer.train_step(x, y, opt)
        sched = trainer.executor.schedule
        ran.append((sched.name, sched.num_microbatches))
        losses.append(loss.item())
    names = set(trainer.stage.state_dict())
    params = {k: v.clone() for k, v in model.state_dict().items() if k in names}
    return {
        "start": (start["best"]["schedule"], start["best"]["microbatches"]),
        "ran": ran,
        "losses": losses,
        "params": params,
        "replans": trainer.run_report()["pipeline_replans"],
    }


def _config(world: int, **replan: Any) -> TrainConfig:
    return TrainConfig.from_flat(
        model="mlp", strategy="pipeline", workers=world, stages=2, batch_size=BATCH,
        schedule="auto", optimizer="sgd", lr=0.1, **replan,
    )  # fmt: skip


def _check_parity(results: list[dict[str, Any]], steps: int, world: int) -> None:
    ref_losses, ref_params = reference("mlp", steps)
    # The loop averages the ranks' loss shares: last stages report loss x S, the others 0.
    mean = [sum(r["losses"][i] for r in results) / world for i in range(steps)]
    torch.testing.assert_close(mean, ref_losses, rtol=1e-5, atol=1e-6)
    covered = set()
    for rank, result in enumerate(results):
        for key, value in result["params"].items():
            torch.testing.assert_close(
                value, ref_params[key], rtol=1e-4, atol=1e-5, msg=f"rank {rank} {key}"
            )
        covered |= set(result["params"])
    assert covered == set(ref_params)


def test_replan_every_switches_with_the_link_and_keeps_parity() -> None:
    steps, config = 6, _config(2, replan_every=2)
    links = [LATENCY_BOUND, BANDWIDTH_BOUND, LATENCY_BOUND]  # start, step 2, step 4
    results = run_ranks(_train, 2, config, links, steps, timeout=120)
    first = results[0]
    start = first["start"]
    # One second a message: GPipe, whose messages overlap. Its 1 and 2 micro-batches wait on
    # the same two latencies and come out a fraction of a ms apart in 2 s; which is ahead
    # moves with the profile's timings (x 2 by under 0.05 ms in one CI run, x 1 by 0.3 ms in
    # the next), so either may start, and either may come back.
    assert start[0] == "gpipe" and start[1] <= 2
    replans = first["replans"]
    assert [r["step"] for r in replans] == [2, 4]
    assert all(r["reason"] == "every 2" and r["probed"] for r in replans)
    to_bandwidth, back = replans
    assert to_bandwidth["switched"] and to_bandwidth["bandwidth_bytes_per_s"] == pytest.approx(1e3)
    assert (to_bandwidth["old_schedule"], to_bandwidth["old_microbatches"]) == start
    moved = (to_bandwidth["new_schedule"], to_bandwidth["new_microbatches"])
    assert moved[1] > 1  # at 1 kB/s more micro-batches hide compute behind the wire
    assert to_bandwidth["new_predicted_s"] < to_bandwidth["old_predicted_s"]
    returned = (back["new_schedule"], back["new_microbatches"])
    assert back["switched"] and returned[0] == "gpipe" and returned[1] <= 2
    for result in results:  # every rank ran the broadcast pick from the step after
        assert result["replans"] == replans
        assert result["ran"] == [start] * 2 + [moved] * 2 + [returned] * 2
    _check_parity(results, steps, 2)


def test_replan_file_asks_once_on_every_rank_of_a_hybrid_pipeline(tmp_path: Path) -> None:
    # 2 replicas x 2 stages: the flag reaches all four ranks, the data-parallel groups survive.
    request = tmp_path / "replan"
    request.touch()  # left from before the start: removed, asks nothing
    steps, config = 4, _config(4, replan_file=str(request))
    results = run_ranks(_train, 4, config, [LATENCY_BOUND, BANDWIDTH_BOUND], steps, 2, timeout=120)
    replans = results[0]["replans"]
    assert [(r["step"], r["reason"], r["switched"]) for r in replans] == [(2, "requested", True)]
    assert not request.exists()
    moved = (replans[0]["new_schedule"], replans[0]["new_microbatches"])
    for result in results:
        assert result["replans"] == replans
        assert result["ran"] == [result["start"]] * 2 + [moved] * 2
    _check_parity(results, steps, 4)


def test_cli_replans_every_n_steps_and_records_it(tmp_path: Path) -> None:
    proc = run_cadence(
        "train", "--model", "mlp", "--strategy", "pipeline", "--workers", "2", "--stages", "2",
        "--schedule", "auto", "--batch-size", "16", "--steps", "5", "--replan-every", "2",
        "--out", "out", "--name", "r", cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "out" / "r" / "metrics.json").read_text())
    replans = metrics["pipeline_replans"]
    assert [r["step"] for r in replans] == [2, 4]
    for r in replans:  # the real probe measured the loopback link
        assert r["probed"] and r["bandwidth_bytes_per_s"] > 0 and r["latency_s"] > 0
        assert r["new_predicted_s"] <= r["old_predicted_s"] and r["error"] is None
    lines = [line for line in proc.stdout.splitlines() if "pipeline re-plan" in line]
    assert [line.split(":")[0] for line in lines] == [
        "pipeline re-plan at step 2 (every 2)", "pipeline re-plan at step 4 (every 2)",
    ]  # fmt: skip
    assert len(metrics["step_loss"]) == 5


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--schedule", "auto", "--replan-every", "-1"),
         "--replan-every must be 0 (never) or more"),
        (("--replan-every", "3"), "--replan-every re-runs the pipeline planner: use it with "
                                  "--strategy pipeline --schedule auto"),
    ],
)  # fmt: skip
def test_cli_bad_replan_input_is_one_line(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    proc = run_cadence("train", "--strategy", "pipeline", *args, cwd=tmp_path, timeout=60)
    assert_one_line_error(proc, needle)
