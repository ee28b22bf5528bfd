"""The training loop every worker runs, whatever the strategy.

The loop is strategy-agnostic: the strategy wraps model and optimizer, the loop runs the ordinary
`zero_grad / forward / backward / step` sequence, evaluates the plain module and records figures.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from cadence import heap
from cadence.comm import DistContext, all_reduce_sum, broadcast_object
from cadence.comm.cost import ring_allreduce_wire_s
from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.inject import fail_in_forward, injected_fault
from cadence.models import Dataset, loss_fn
from cadence.models.refs import is_ref
from cadence.models.user import LossFn, check_fits, load_loss, model_and_data
from cadence.train import ps_resume, rank_state, resume
from cadence.train.accumulate import check_accumulation, forward_backward
from cadence.train.optim import build_optimizer
from cadence.train.outputs import plot_training, save_checkpoint, write_json
from cadence.train.resources import probe_from_env
from cadence.train.sharding import epoch_batches, rank_slice, steps_per_epoch
from cadence.train.strategies import OwnsStep, get_strategy

EVAL_BATCH = 256


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    data: Dataset,
    ctx: DistContext,
    alone: bool = False,
    loss: LossFn = loss_fn,
) -> tuple[float, float]:
    """Mean loss and accuracy on the test split; each rank scores its share, then one sum
    (`alone`: this rank scores all of it, no collective). Accuracy (argmax of the last
    dimension against integer targets) is NaN where the targets are not class labels."""
    was_training = model.training
    model.eval()
    rank, world = (0, 1) if alone else (ctx.rank, ctx.world_size)
    share = rank_slice(len(data.test_x), rank, world)
    xs, ys = data.test_x[share], data.test_y[share]
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    for start in range(0, len(xs), EVAL_BATCH):
        x = xs[start : start + EVAL_BATCH].to(ctx.device)
        y = ys[start : start + EVAL_BATCH].to(ctx.device)
        out = model(x)
        totals[0] += loss(out, y).item() * y.numel()
        labels = out.shape[:-1] == y.shape and not y.is_floating_point()
        totals[1] += (out.argmax(dim=-1) == y).sum().item() if labels else math.nan
        totals[2] += y.numel()
    if not alone:
        all_reduce_sum(totals)
    model.train(was_training)
    count = max(totals[2].item(), 1.0)
    return totals[0].item() / count, totals[1].item() / count


class _IfaceCounter:
    """The kernel's byte counts of the interface the collectives use (`GLOO_SOCKET_IFNAME`,
    which an emulated host's workers are given) over the training loop: what this rank put on
    the wire and took off it, headers and retransmissions included. Not the loopback's, which
    counts every local process's traffic."""

    def __init__(self, name: str, rx: int, tx: int) -> None:
        self.name, self.rx, self.tx = name, rx, tx

    @classmethod
    def start(cls) -> _IfaceCounter | None:
        from cadence.netem.counters import read_iface_bytes

        name = os.environ.get("GLOO_SOCKET_IFNAME")
        if not name or name == "lo":
            return None
        try:
            return cls(name, *read_iface_bytes(name))
        except (OSError, RuntimeError):  # a name gloo resolves otherwise: nothing to count
            return None

    def stop(self) -> dict[str, Any]:
        from cadence.netem.counters import read_iface_bytes

        rx, tx = read_iface_bytes(self.name)
        return {"iface": self.name, "iface_tx_bytes": tx - self.tx, "iface_rx_bytes": rx - self.rx}


def run_training(
    config: TrainConfig,
    ctx: DistContext,
    run_dir: Path | None,
    bandwidth_bps: float | None = None,
) -> dict[str, Any]:
    """Train as configured; rank 0 writes outputs into `run_dir`. Returns the metrics summary."""
    if config.cluster.keep_heap:  # before anything is allocated: every strategy, DDP too
        heap.keep_heap()
    torch.manual_seed(config.job.seed)
    spec, data = model_and_data(config.model.name, config.data.dataset, config.job.seed)
    train_loss = load_loss(config.model.loss)
    model: torch.nn.Module = spec.build().to(ctx.device)
    if any(map(is_ref, (config.model.name, config.data.dataset, config.model.loss))):
        check_fits(model, data, train_loss, config.model.name, ctx.device)
    optimizer = build_optimizer(model.parameters(), config)
    strategy = get_strategy(config.job.strategy)
    per_epoch = steps_per_epoch(len(data.train_x), config.data.batch_size)
    if per_epoch == 0:
        raise UserError(
            f"--batch-size {config.data.batch_size} exceeds the {len(data.train_x)} training "
            f"samples of {data.name}"
        )
    total_steps = (
        config.job.steps if config.job.steps is not None else per_epoch * config.job.epochs
    )
    # Resumable checkpoints need every rank's files in one run directory: every rank must
    # have been given it (a caller may hand it to rank 0 only: then none are written).
    checkpointing = resume.writes_checkpoints(config) and _all_ranks_have(run_dir, ctx)
    wrap_config = config
    if checkpointing and config.job.strategy == "ps":
        assert run_dir is not None
        restore = resume.load_manifest(run_dir)[0] if config.job.resume is not None else None
        ps_resume.prepare(run_dir, ctx.rank, restore)  # before the servers start
        wrap_config = ps_resume.server_config(config, run_dir, per_epoch, total_steps)
    pipeline_plan = None  # what --schedule auto chose, kept by the checkpoint
    if config.job.resume is not None and config.job.strategy == "pipeline":
        assert run_dir is not None
        pipeline_plan = resume.load_manifest(run_dir)[1].get("pipeline_plan")
        if pipeline_plan is not None:  # run the chosen plan, not plan again
            pipeline = replace(config.pipeline, **pipeline_plan, backend="cadence")
            wrap_config = replace(config, pipeline=pipeline)
    model, optimizer = strategy.wrap_for(wrap_config)(model, optimizer, ctx)
    plain = strategy.unwrap(model)
    owner = model if isinstance(model, OwnsStep) else None  # a strategy that runs the step
    chose = getattr(owner, "plan_record", None)
    if chose is not None:
        pipeline_plan = {k: chose["best"][k] for k in ("schedule", "microbatches")}
    if owner is None:
        check_accumulation(model, config.data.grad_accum, config.job.strategy, ctx.world_size)
    # A strategy that trains on when a worker dies (parameter server: asp, ssp, backup) must
    # not be stopped by the loop's own collectives: then each rank keeps its own figures and
    # rank 0 alone evaluates and reports.
    alone = bool(getattr(owner, "survives_dead_workers", False))
    shard_rank, shard_world = (
        (0, 1) if owner is not None and owner.full_batch else (ctx.rank, ctx.world_size)
    )
    num_params = sum(p.numel() for p in plain.parameters())
    grad_bytes = sum(p.numel() * p.element_size() for p in plain.parameters() if p.requires_grad)

    epochs_needed = math.ceil(total_steps / per_epoch) if per_epoch else 0
    # Tests: CADENCE_INJECT_FAILURE (cadence.inject), on the first attempt only.
    first_attempt = config.job.resume is None
    fail_at = injected_fault(ctx.rank, "step") if first_attempt else None
    fail_in = injected_fault(ctx.rank, "forward") if first_attempt else None
    fail_saving = injected_fault(ctx.rank, "checkpoint") if first_attempt else None
    if fail_in is not None:
        fail_in_forward(plain, fail_in)
    probe = probe_from_env(ctx.rank, total_steps)  # None unless `cadence bench soak` asked

    metrics: dict[str, Any] = {
        "config": config.to_json(),
        "dataset": data.name,
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "device": str(ctx.device),
        "num_parameters": num_params,
        "gradient_bytes": grad_bytes,
        "train_samples": len(data.train_x),
        "test_samples": len(data.test_x),
        "epochs": [],
        "step_loss": [],
        "iteration_times_s": [],
    }
    if chose is not None:  # what --schedule auto chose, and the candidates it weighed
        metrics["pipeline_plan"] = chose
    eval_every = config.job.eval_every_steps
    if eval_every is not None:
        metrics["evals"] = []
    if bandwidth_bps is not None:
        metrics["bandwidth_bps"] = bandwidth_bps
        metrics["wire_bound_s"] = ring_allreduce_wire_s(grad_bytes, ctx.world_size, bandwidth_bps)

    model.train()
    step, first_epoch, skip = 0, 1, 0
    epoch_losses: list[torch.Tensor] = []
    if config.job.resume is not None:
        resume.check_resumable(config)
        assert run_dir is not None and checkpointing, "a resumed run writes checkpoints"
        step, first_epoch, skip, epoch_losses = _resume(
            config, ctx, run_dir, metrics, plain, optimizer, owner
        )
        if ctx.is_main:
            tqdm.write(f"resumed at step {step} (epoch {first_epoch}) from {run_dir}")

    def checkpoint(epoch: int, in_epoch: int, closed: bool = False) -> None:
        assert run_dir is not None
        if owner is not None:
            owner.sync()  # the plain module is complete on every rank
        state = rank_state.capture(config.job.strategy, plain, optimizer, owner)
        state.update(
            rng=resume.rng_state(ctx.device),
            epoch_losses=[x.detach().cpu() for x in epoch_losses] if in_epoch else [],
            metrics={k: metrics[k] for k in _CONTINUED if k in metrics},
        )
        manifest = {
            "step": step,
            "epoch": epoch,
            "in_epoch": in_epoch,
            "closed": closed,  # the epoch's figures are in metrics (--steps ended it)
            "world_size": ctx.world_size,
            "config": resume.fingerprint(config),
            "dp_tuned": rank_state.dp_tuned(plain),
            "pipeline_plan": pipeline_plan,
        }
        die = (
            functools.partial(fail_saving.fire, "while the checkpoint is written")
            if fail_saving is not None and fail_saving.step == step
            else None
        )
        servers = (
            (lambda: ps_resume.server_files(run_dir, step))
            if config.job.strategy == "ps"
            else tuple
        )
        resume.save(run_dir, ctx.rank, manifest, state, die, servers)
    def evaluate_now() -> tuple[float, float]:
        # Every rank evaluates through the wrapped model, as a DDP user calling `model`
        # would: DDP and cadence's data-parallel wrappers then score with the same
        # (rank 0's) buffers. One rank alone scores the plain module: no collectives.
        scored = plain if alone or owner is not None else model
        return evaluate(scored, data, ctx, alone, train_loss)

    def record_eval(test_loss: float, test_acc: float) -> None:
        # Training seconds so far: the steps' own times and the epoch ends' syncs, not the
        # evaluations, outputs and checkpoints in between.
        seconds = sum(metrics["iteration_times_s"]) + metrics.get("sync_seconds", 0.0)
        evals = metrics["evals"]
        if evals and evals[-1]["step"] == step:
            return  # an epoch's end evaluated where the N-step one did
        evals.append(
            {"step": step, "seconds": seconds, "test_loss": test_loss, "test_accuracy": test_acc}
        )

    # A bar only where a person watches; logs get the per-epoch lines.
    show_bar = ctx.is_main and sys.stderr.isatty()
    bar = tqdm(
        total=total_steps, initial=step, disable=not show_bar, unit="step", dynamic_ncols=True
    )
    # ZeRO reports the bytes it sent in each step: their sum is the run's.
    counts_steps = hasattr(type(optimizer), "bytes_sent_last_step")
    zero_sent = 0
    iface = _IfaceCounter.start()
    t_start = time.perf_counter()
    for epoch in range(first_epoch, epochs_needed + 1):
        if epoch != first_epoch or not skip:
            epoch_losses = []
        t_epoch = time.perf_counter()
        t_prev = t_epoch
        batches = epoch_batches(
            len(data.train_x),
            config.data.batch_size,
            shard_rank,
            shard_world,
            config.job.seed,
            epoch,
        )
        done_before = skip if epoch == first_epoch else 0  # the resumed epoch's steps
        for in_epoch, idx in enumerate(itertools.islice(batches, done_before, None), done_before):
            if step == total_steps:
                break
            if fail_at is not None and step == fail_at.step:
                fail_at.fire("between steps")
            x, y = data.train_x[idx].to(ctx.device), data.train_y[idx].to(ctx.device)
            if owner is not None:
                loss = owner.train_step(x, y, optimizer)
            else:
                optimizer.zero_grad(set_to_none=True)
                loss = forward_backward(model, x, y, train_loss, config.data.grad_accum)
                optimizer.step()
                if counts_steps:
                    zero_sent += optimizer.bytes_sent_last_step["total"]  # type: ignore[attr-defined]
            epoch_losses.append(loss.detach())
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)  # the step's kernels, not their launches
            now = time.perf_counter()
            metrics["iteration_times_s"].append(now - t_prev)
            t_prev = now
            step += 1
            bar.update(1)
            if probe is not None:
                probe.after_step(step)
            if ctx.is_main and step % 5 == 0:
                bar.set_postfix(epoch=epoch, loss=f"{loss.item():.4f}")
            every = config.job.checkpoint_every
            if (
                checkpointing
                and every
                and step % every == 0
                and in_epoch + 1 < per_epoch
                and step < total_steps
            ):  # (the epoch's end, or the run's, checkpoints below)
                checkpoint(epoch, in_epoch + 1)
            if (
                eval_every is not None
                and step % eval_every == 0
                and in_epoch + 1 < per_epoch
                and step < total_steps
            ):
                # (an epoch's last step is evaluated below, after the epoch's sync). Local
                # SGD / DiLoCo replicas are scored as they are: alike right after a sync.
                if owner is not None:
                    owner.sync()
                if ctx.is_main or not alone:
                    record_eval(*evaluate_now())
                t_prev = time.perf_counter()  # the next step's time leaves the evaluation out
        train_seconds = time.perf_counter() - t_epoch
        # One collective per epoch turns every rank's step losses into the global mean.
        losses = torch.stack(epoch_losses).float().cpu()
        if not alone:
            losses = all_reduce_sum(losses) / ctx.world_size
        metrics["step_loss"].extend(losses.tolist())
        last_epoch = epoch == epochs_needed
        t_sync = time.perf_counter()
        if owner is not None:
            owner.sync()  # before evaluation and the checkpoint read `plain`
        elif callable(sync := getattr(optimizer, "sync", None)):
            sync()  # local SGD / DiLoCo: the replicas averaged, likewise
        if eval_every is not None:  # part of the training's time to a test loss
            synced = time.perf_counter() - t_sync
            metrics["sync_seconds"] = metrics.get("sync_seconds", 0.0) + synced
        at_end = config.job.eval_every_epoch or last_epoch
        at_end = at_end or (eval_every is not None and step % eval_every == 0)
        if at_end and (ctx.is_main or not alone):
            test_loss, test_acc = evaluate_now()
            if eval_every is not None:
                record_eval(test_loss, test_acc)
        else:
            test_loss, test_acc = math.nan, math.nan
        record = {
            "epoch": epoch,
            "step": step,
            "train_loss": losses.mean().item(),
            "test_loss": test_loss,
            "test_accuracy": test_acc,
            "samples_per_s": len(epoch_losses) * config.data.batch_size / train_seconds,
            "seconds": train_seconds,
        }
        metrics["epochs"].append(record)
        if ctx.is_main:
            tested = (
                ""  # not evaluated this epoch (eval_every_epoch off): say nothing, not "nan"
                if math.isnan(test_loss)
                else f"test loss {test_loss:.4f}  "
                + ("" if math.isnan(test_acc) else f"test acc {100 * test_acc:.2f}%  ")
            )  # (no accuracy where the targets are not class labels)
            tqdm.write(
                f"epoch {epoch}/{epochs_needed}  loss {record['train_loss']:.4f}  "
                f"{tested}samples/s {record['samples_per_s']:.0f}"
            )
            if run_dir is not None:
                _save_outputs(
                    run_dir, metrics, plain, optimizer, epoch, step, time.perf_counter() - t_start
                )
        if checkpointing:
            # Mid-epoch when --steps ended the run there: a longer resumed run goes on in it.
            in_epoch = step - (epoch - 1) * per_epoch
            if in_epoch == per_epoch:
                checkpoint(epoch + 1, 0)
            else:
                checkpoint(epoch, in_epoch, closed=True)
    bar.close()
    engine = getattr(plain, "_cadence_dp_engine", None)
    # Bytes this rank handed to the collectives, where the strategy counts them.
    counted = getattr(model, "cadence_wire", None)  # ddp with torch's comm hook
    if counted is not None:
        metrics["wire_bytes_total"] = counted.total
    outer_sent = getattr(getattr(optimizer, "outer", None), "wire_bytes_total", None)
    if outer_sent is not None:  # local SGD / DiLoCo's syncs
        metrics["wire_bytes_total"] = outer_sent
    if counts_steps:
        metrics["wire_bytes_total"] = zero_sent
    if engine is not None:  # the threshold cadence-dp ended with (given, default or tuned)
        metrics["wire_bytes_total"] = engine.wire_bytes_total
        metrics["dp_threshold_bytes"] = engine.threshold_bytes
        metrics["dp_chunks"] = len(engine.plan.chunks)
        if engine.one_chunk_probe is not None:  # whether the default plan stayed one chunk
            metrics["dp_one_chunk_probe"] = engine.one_chunk_probe
    tuned = getattr(engine, "tune_result", None)
    if tuned is not None:  # what cadence-dp's autotuning chose, for the record
        metrics["dp_autotune"] = tuned.to_json()
    report = getattr(owner, "run_report", None)
    if callable(report):  # counters the strategy kept (e.g. the parameter server's traffic)
        metrics.update(report())
    if iface is not None:
        metrics.update(iface.stop())
    _summarise(metrics, time.perf_counter() - t_start)
    if ctx.is_main and run_dir is not None:
        write_json(run_dir / "metrics.json", metrics)
    return metrics


_CONTINUED = (
    "epochs", "step_loss", "iteration_times_s", "resumed_at_steps", "pipeline_plan", "evals",
    "sync_seconds",
)  # fmt: skip
"""The figures a resumed run continues (rank 0's are the run's)."""


def _all_ranks_have(run_dir: Path | None, ctx: DistContext) -> bool:
    """Whether every rank was given a run directory (one small collective at start)."""
    given = torch.tensor([float(run_dir is not None)])
    return int(all_reduce_sum(given).item()) == ctx.world_size


def _resume(
    config: TrainConfig,
    ctx: DistContext,
    run_dir: Path,
    metrics: dict[str, Any],
    plain: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    owner: Any,
) -> tuple[int, int, int, list[torch.Tensor]]:
    """Restore this rank from the run's checkpoint: (step, epoch, steps done in that epoch,
    that epoch's step losses so far)."""
    directory, manifest = resume.load_manifest(run_dir)
    # Every rank must read the same checkpoint: rank 0's choice (a crash may leave two).
    directory = Path(broadcast_object(str(directory)) if ctx.world_size > 1 else directory)
    resume.check_matches(manifest, config, ctx.world_size, directory)
    state = resume.load_rank(directory, ctx.rank, ctx.device)
    rank_state.restore(
        config.job.strategy, plain, optimizer, owner, state, directory, ctx.rank, manifest
    )
    for key, value in state["metrics"].items():
        metrics[key] = value
    if manifest["closed"] and manifest["in_epoch"]:
        # The run ended inside this epoch and closed its figures: this run closes it again.
        metrics["epochs"].pop()
        del metrics["step_loss"][-manifest["in_epoch"] :]
    metrics.setdefault("resumed_at_steps", []).append(manifest["step"])
    resume.set_rng_state(state["rng"], ctx.device)
    losses = [x.to(ctx.device) for x in state["epoch_losses"]]
    return manifest["step"], manifest["epoch"], manifest["in_epoch"], losses


def _summarise(metrics: dict[str, Any], seconds: float) -> None:
    times = metrics["iteration_times_s"]
    # The first step pays one-off set-up costs; steps spent autotuning, or timing cadence-dp's
    # one-chunk plan before switching to chunks, run other settings.
    first = max(1, int(metrics.get("dp_autotune", {}).get("iterations", 0)))
    probe = metrics.get("dp_one_chunk_probe")
    if probe is not None and not probe["one_chunk"]:  # it ran one chunk before its plan
        first = max(first, int(probe["iterations"]))
    if len(times) - first < 3:  # too few left: keep every step but the first
        first = min(1, len(times) - 1)
    timed = times[first:] or times
    metrics["timed_from_step"] = first
    last = metrics["epochs"][-1] if metrics["epochs"] else {}
    metrics["total_seconds"] = seconds
    metrics["steps"] = len(times)
    metrics["median_iteration_s"] = statistics.median(timed) if timed else math.nan
    metrics["final_test_accuracy"] = last.get("test_accuracy", math.nan)
    metrics["final_test_loss"] = last.get("test_loss", math.nan)
    bound = metrics.get("wire_bound_s")
    if bound:
        metrics["iteration_over_wire_bound"] = metrics["median_iteration_s"] / bound


def _save_outputs(
    run_dir: Path,
    metrics: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    step: int,
    seconds: float,
) -> None:
    _summarise(metrics, seconds)
    write_json(run_dir / "metrics.json", metrics)
    plot_training(run_dir / "training.png", metrics)
    save_checkpoint(
        run_dir / "checkpoint.pt",
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "config": metrics["config"],
            "epoch": epoch,
            "step": step,
        },
    )
