"""The checks of a `TrainConfig` that read more than one section (a section checks its own
fields itself): what the strategy, the batch and the workers must agree on. Each failure is
one `UserError` line naming the flags to change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cadence.config import USER_MODEL_STRATEGIES
from cadence.errors import UserError
from cadence.models.refs import USER_ZOO_DATASETS, is_ref

if TYPE_CHECKING:
    from cadence.config import TrainConfig


def check_train_config(c: TrainConfig) -> None:
    """Raise the first cross-section problem of `c`."""
    batch, workers, strategy = c.data.batch_size, c.cluster.workers, c.job.strategy
    if batch % workers and strategy != "pipeline":
        raise UserError(
            f"--batch-size {batch} is not divisible by --workers {workers}: "
            f"use a multiple of {workers}"
        )
    _check_accumulation(c)
    _check_user_parts(c)
    _check_zero(c)
    _check_dp_compression(c)
    _check_pipeline(c)
    _check_ps(c)
    _check_localsgd(c)


def _check_accumulation(c: TrainConfig) -> None:
    n = c.data.grad_accum
    if n == 1:
        return
    if c.job.strategy == "pipeline":
        if c.pipeline.auto:
            raise UserError(
                "--schedule auto picks the number of micro-batches itself: drop "
                "--grad-accum, or give --schedule and --microbatches"
            )
        return  # grad_accum x the micro-batches: _check_pipeline checks they divide
    batch, workers = c.data.batch_size, c.cluster.workers
    if batch % (workers * n):
        raise UserError(
            f"--batch-size {batch} does not split into {n} micro-batches on each "
            f"of {workers} workers: use a multiple of {workers * n}"
        )


def _check_dp_compression(c: TrainConfig) -> None:
    if c.dp.compression != "none" and c.job.strategy != "cadence-dp":
        raise UserError(
            f"--dp-compression compresses cadence-dp's gradients: use --strategy cadence-dp, or"
            f" --compression with --strategy zero (got --strategy {c.job.strategy})"
        )
    if c.dp.ddp_comm_hook != "none":
        if c.job.strategy != "ddp":
            raise UserError(
                f"--ddp-comm-hook registers torch's hook on DDP: use --strategy ddp, or "
                f"--dp-compression with cadence-dp (got --strategy {c.job.strategy})"
            )
        if c.dp.ddp_comm_hook == "powersgd" and c.dp.powersgd_start_step < 2:
            raise UserError(
                "--ddp-comm-hook powersgd needs --powersgd-start-step of at least 2 (torch's "
                f"PowerSGD with error feedback starts after step 1; got {c.dp.powersgd_start_step})"
            )


def _check_user_parts(c: TrainConfig) -> None:
    """What a user's own model, dataset or loss (`pkg.module:name`) cannot be used with."""
    model, dataset = c.model.name, c.data.dataset
    if is_ref(model) and not (is_ref(dataset) or dataset in USER_ZOO_DATASETS):
        raise UserError(
            f"--model {model} needs --dataset {' or '.join(USER_ZOO_DATASETS)} or "
            f"pkg.module:factory (your data), not {dataset or 'none'}"
        )
    if is_ref(model) and c.job.strategy not in USER_MODEL_STRATEGIES:
        raise UserError(
            f"--strategy {c.job.strategy} trains zoo models only: train --model "
            f"{model} with --strategy {', '.join(USER_MODEL_STRATEGIES)}"
        )
    if is_ref(model) and c.dp.autotune == "guided":
        raise UserError(
            "--autotune guided profiles a zoo model: use --autotune exhaustive with "
            f"--model {model}"
        )


def _check_localsgd(c: TrainConfig) -> None:
    """Settings that would be ignored: local SGD / DiLoCo flags with another strategy, and
    DiLoCo's outer step with local SGD (which averages: outer lr 1, no momentum)."""
    from dataclasses import fields

    from cadence.config import LocalSGDSection, flag_of

    changed = [
        flag_of(f)
        for f in fields(LocalSGDSection)
        if getattr(c.localsgd, f.name) != f.default
    ]
    if c.job.strategy not in ("local-sgd", "diloco", "torchft-diloco") and changed:
        raise UserError(f"{changed[0]} is for --strategy local-sgd or diloco")
    if c.job.strategy == "torchft-diloco":
        if "--outer-dtype" in changed:
            raise UserError("--outer-dtype is cadence's own: torchft-diloco syncs in fp32")
        if c.job.resume:
            raise UserError(
                "--resume is not supported with torchft-diloco (a peer to compare with: its "
                "checkpoints hold the inner optimizer only); use --strategy diloco"
            )
    outer = [flag for flag in changed if flag in ("--outer-lr", "--outer-momentum")]
    if c.job.strategy == "local-sgd" and outer:
        raise UserError(
            f"{outer[0]} sets DiLoCo's outer step; local-sgd averages the models: use "
            "--strategy diloco"
        )


def _check_ps(c: TrainConfig) -> None:
    from cadence.ps.config import ps_config  # torch-free

    if c.job.strategy != "ps":
        if c.ps.straggler is not None:
            raise UserError("--straggler is for --strategy ps")
        return
    ps_config(c, c.cluster.workers)  # validates; the workers build theirs the same way
    from cadence.extras import require

    require("zmq")  # before any worker starts: one line, not each worker's traceback
    if c.ps.priority.endswith("+net") and c.cluster.emulate_bandwidth in (None, "none"):
        raise UserError(
            f"--ps-priority {c.ps.priority} sets priority classes on the emulated "
            "switch: it needs --emulate-bandwidth RATE"
        )


def _check_pipeline(c: TrainConfig) -> None:
    from cadence.pipeline.schedule import build_schedule  # torch-free

    p, strategy = c.pipeline, c.job.strategy
    if (p.replan_every or p.replan_file) and (strategy != "pipeline" or not p.auto):
        flag = "--replan-every" if p.replan_every else "--replan-file"
        raise UserError(
            f"{flag} re-runs the pipeline planner: use it with --strategy pipeline "
            f"--schedule auto (got --strategy {strategy} --schedule {p.schedule})"
        )
    if strategy != "pipeline":
        return
    workers, batch, accum = c.cluster.workers, c.data.batch_size, c.data.grad_accum
    if p.stages < 1 or workers % p.stages:
        raise UserError(
            f"--strategy pipeline needs --workers a multiple of --stages (replicas x "
            f"stages): --stages {p.stages} does not divide --workers {workers}"
        )
    replicas = workers // p.stages
    per_replica = batch // replicas
    if batch % replicas:
        raise UserError(
            f"--batch-size {batch} does not split over {replicas} pipeline "
            f"replicas: use a multiple of {replicas}"
        )
    if p.auto:  # the planner picks M and the schedule; it checks the rest
        if p.backend != "auto":
            raise UserError("--schedule auto picks its runtime: leave --pipeline-backend auto")
        return
    # --grad-accum N runs N x the micro-batches in a step (cadence.pipeline.train).
    count = p.microbatches * accum
    if p.microbatches < 1 or per_replica % count:
        fits = [m for m in range(1, per_replica + 1) if per_replica % (m * accum) == 0]
        if not fits:
            raise UserError(
                f"--grad-accum {accum} does not divide the {per_replica} samples "
                "per replica: use a smaller --grad-accum or a larger --batch-size"
            )
        times = f" x --grad-accum {accum}" if accum > 1 else ""
        raise UserError(
            f"--microbatches {p.microbatches}{times} does not divide the {per_replica} "
            f"samples per replica: use one of {', '.join(map(str, fits))}"
        )
    schedule = build_schedule(p.schedule, p.stages, count, p.recompute)
    torch_ok = schedule.group_size == 1 and not p.recompute
    if p.backend == "torch-builtin":
        torch_ok = torch_ok and schedule.name in ("gpipe", "1f1b")
    if p.backend.startswith("torch") and not torch_ok:
        raise UserError(
            f"--pipeline-backend {p.backend} cannot run --schedule "
            f"{p.schedule}{' with --recompute' if p.recompute else ''}: use cadence"
        )


def _check_zero(c: TrainConfig) -> None:
    z = c.zero
    if c.job.strategy != "zero":
        return
    if z.compression == "onebit":
        if c.optim.name != "adam":
            raise UserError(
                f"--compression onebit is 1-bit Adam: use --optimizer adam, not {c.optim.name}"
            )
        if z.freeze_steps < 1:
            raise UserError("--compression onebit needs --freeze-steps of at least 1")
    if z.replicated_update and z.gather_dtype != "fp32":
        raise UserError("--replicated-update gathers no parameters: drop --gather-dtype")
    if z.replicated_update and not (z.compression == "onebit" and z.stage < 3):
        raise UserError("--replicated-update needs --compression onebit and --zero-stage 1 or 2")
    if z.stage == 3 and not c.job.eval_every_epoch:
        # Stage 3 gathers full parameters for checkpoints during each epoch's evaluation.
        raise UserError("--zero-stage 3 needs evaluation after every epoch")
