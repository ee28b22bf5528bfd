"""Predict one `cadence train` job of the held-out set (`cadence.sim.held_out`) with the
simulator, from a profile taken now in the conditions the job's workers train in.

Conditions: the profile runs at the job's per-worker batch (a pipeline's: its micro-batch) with
the intra-op threads each training worker gets (`cadence.launch.local.worker_threads`). The
emulated cluster's workers all share this machine, so the profile is timed with one process
per other worker training the same model beside it (`cadence.profile.neighbours`): where
workers x threads exceed the cores, each worker computes slower than alone, and the profile
sees it.

Which simulator predicts what: ddp, cadence-dp and zero as `cadence simulate` does
(`cadence.sim.command.run_strategy`); pipeline with `simulate_pipeline` (one replica: workers =
stages, a named schedule); ps with `simulate_ps` (bsp, the plan the runtime makes for the
model's parameters, pushed in their gradients' arrival order, servers on the first worker's
host). Anything else is "not predicted", with the reason. Links are the emulated cap, its
payload share carrying data, no per-message latency unless a calibration gives the alphas
(`cap_link`). A pipeline's messages are priced with the token bucket the emulated cluster
gives every link (`cadence.netem.link_bucket_bytes`): a message that starts on a
link idle long enough passes that many bytes at once (traced: gpt_mini's 262 KB messages of
1F1B at 50 mbit each cross in 33 ms, 44 ms at the cap less the 69 KB bucket). The data-parallel
strategies' collectives are priced without it: megabytes a step, where it is a few ms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from cadence.comm.cost import AlphaBeta
from cadence.config import TrainConfig
from cadence.dp.config import mb_to_bytes
from cadence.models.refs import is_ref
from cadence.profile import Profile
from cadence.profile.facts import ModelFacts, zoo_facts
from cadence.sim.compute import cap_link
from cadence.sim.host_cpu import compute_share
from cadence.sim.options import SimOptions, ddp_bucket_caps
from cadence.sim.stepcost import TCP_PAYLOAD_FRACTION, chosen_step_s

ProfileKey = tuple[str, str | None, int, int, int]
"""(model, dataset, samples per forward/backward, threads, neighbours) of a profile."""


@dataclass(frozen=True)
class Prediction:
    """The simulator's figure for one job, or why there is none."""

    iteration_s: float | None
    """Predicted median iteration (None: not predicted)."""
    note: str
    """What was predicted (strategy and settings), or why nothing was."""
    conditions: str
    """The profile's conditions against the run's: "as trained", or what differs."""


class NotPredicted(Exception):
    """The simulator has no model of this job (the message says why)."""


def profile_key(config: TrainConfig) -> ProfileKey:
    """The profile a job's prediction reads: its samples per forward/backward on one worker,
    at the threads its workers train with."""
    from cadence.launch.local import worker_threads

    c = config
    if c.job.strategy == "pipeline":
        samples = c.data.batch_size // max(1, c.cluster.workers // c.pipeline.stages)
        samples //= c.pipeline.microbatches * c.data.grad_accum
    else:
        samples = c.data.batch_size // (c.cluster.workers * c.data.grad_accum)
    # Every worker of the emulated cluster computes on this machine.
    neighbours = c.cluster.workers - 1
    return (c.model.name, c.data.dataset, max(1, samples), worker_threads(c), neighbours)


def conditions(config: TrainConfig, profile: Profile) -> str:
    """ "as trained" when the profile ran as each worker runs, else what differs."""
    threads, neighbours = profile_key(config)[3:]
    notes = []
    if profile.threads != threads:
        notes.append(f"profiled at {profile.threads} threads, workers train at {threads}")
    if profile.neighbours != neighbours:
        notes.append(
            f"profiled beside {profile.neighbours} training process(es), each worker computes "
            f"beside {neighbours}"
        )
    return "; ".join(notes) or "as trained"


def take_profile(key: ProfileKey, iterations: int = 5) -> Profile:
    """A profile of `key`'s model (a zoo name, or `pkg.module:factory` on its dataset) at its
    batch and threads, beside its neighbours."""
    model, dataset, batch, threads, neighbours = key
    if not is_ref(model):
        from cadence.profile import profile_command

        return profile_command(
            model, batch_size=batch, iterations=iterations, threads=threads,
            echo=lambda _: None, neighbours=neighbours,
        )  # fmt: skip
    from cadence.sim.held_out_profile import profile_user_model

    return profile_user_model(model, dataset, batch, iterations, threads, neighbours=neighbours)


def predict(
    config: TrainConfig,
    profile: Profile,
    payload_fraction: float = TCP_PAYLOAD_FRACTION,
    calibrated: AlphaBeta | None = None,
) -> Prediction:
    """The simulator's median iteration of `config`'s job from `profile` (`profile_key`)."""
    from cadence.netem import parse_bandwidth

    cap = config.cluster.emulate_bandwidth
    if cap is None:
        return Prediction(None, "not predicted: no --emulate-bandwidth, the link is unknown", "")
    bps = parse_bandwidth(cap)
    link = cap_link(bps, payload_fraction, calibrated)
    try:
        if config.model.loss is not None:
            raise NotPredicted(f"the profile times cross entropy, not --loss {config.model.loss}")
        predictor = _PREDICTORS.get(config.job.strategy, _unknown)
        seconds, note = predictor(config, profile, link)
    except NotPredicted as exc:
        return Prediction(None, f"not predicted: {exc}", conditions(config, profile))
    return Prediction(seconds, note, conditions(config, profile))


def _facts(config: TrainConfig, profile: Profile) -> ModelFacts:
    """The model's layout as the profile recorded it, else the zoo model's."""
    return profile.model_facts or zoo_facts(config.model.name)


def _update_s_per_byte(config: TrainConfig, profile: Profile) -> float:
    from cadence.sim.command import step_cost

    optimizer = config.optim.name
    step_s = chosen_step_s(optimizer, None, profile.optimizer_step_s)
    return step_cost(config.model.name, optimizer, step_s, _facts(config, profile).params)


def _data_parallel(config: TrainConfig, profile: Profile, link: AlphaBeta) -> tuple[float, str]:
    from cadence.sim.command import Setup, run_strategy
    from cadence.sim.zero_graph import ZeroSimPlan
    from cadence.zero.config import ZeroConfig

    facts = _facts(config, profile)
    c = config
    setup = Setup(
        profile=profile, params=facts.params, world_size=c.cluster.workers, link=link,
        description=c.model.name, update_s_per_byte=_update_s_per_byte(c, profile),
        buffer_bytes=facts.buffer_bytes, buffer_broadcasts=facts.buffer_broadcasts,
        arrival_order=facts.arrival_order,
    )  # fmt: skip
    # DDP's buckets as cadence train builds them (a --bucket-mb caps the first bucket too).
    bucket, first_bucket = ddp_bucket_caps(c.dp.bucket_mb)
    options = SimOptions(ddp_first_bucket_bytes=first_bucket, grad_accum=c.data.grad_accum)
    zero = None
    note: str = c.job.strategy
    if c.job.strategy == "zero":
        zero = ZeroSimPlan.from_config(ZeroConfig.from_train_settings(c.to_flat()))
        note += f" stage {zero.stage}, {zero.compression}"
    result, _ = run_strategy(
        setup, c.job.strategy, mb_to_bytes(c.dp.threshold_mb), None, bucket, options,
        reorder_k=c.dp.reorder_k, zero=zero,
    )  # fmt: skip
    if c.job.strategy == "ddp":
        note += f", bucket {c.dp.bucket_mb:g} MB" if c.dp.bucket_mb else ", torch's buckets"
    share = compute_share(profile) if link.measures_host else 0.0
    if share:
        note += f", calls' processor time on compute x{share:g}"
    return result.iteration_s, note


def _pipeline(config: TrainConfig, profile: Profile, link: AlphaBeta) -> tuple[float, str]:
    from cadence.sim.pipeline_adapter import simulate_pipeline

    c, p = config, config.pipeline
    if c.cluster.workers != p.stages:
        raise NotPredicted(f"{c.cluster.workers // p.stages} pipeline replicas (x data parallel)")
    if ":" not in p.schedule and p.schedule not in ("gpipe", "1f1b"):
        raise NotPredicted(f"schedule {p.schedule!r} is chosen at run time")
    if p.recompute:
        raise NotPredicted("recomputation is not in the held-out predictor")
    from cadence.netem import link_bucket_bytes, parse_bandwidth

    microbatches = p.microbatches * c.data.grad_accum
    runtime = _pipeline_runtime(config, microbatches)
    cap = c.cluster.emulate_bandwidth
    result = simulate_pipeline(
        profile, stages=p.stages, microbatches=microbatches, schedule=p.schedule, link=link,
        batch_size=c.data.batch_size, optimizer=c.optim.name,
        update_s_per_byte=_update_s_per_byte(c, profile),
        runtime=runtime,
        link_bucket_bytes=link_bucket_bytes(parse_bandwidth(cap)) if cap else 0.0,
    )  # fmt: skip
    return (
        result.iteration_s,
        f"pipeline {p.stages} stages, {p.schedule} x {microbatches}, {runtime}'s runtime",
    )


def _pipeline_runtime(config: TrainConfig, microbatches: int) -> str:
    """The executor backend `cadence train` runs the job's pipeline on: the one asked for, or
    for `auto` torch's runtime where it can run the schedule and the model has no BatchNorm
    (`cadence.pipeline.executor`, `wrap`)."""
    from cadence.pipeline.receives import torch_runtime_supports
    from cadence.pipeline.schedule import build_schedule

    p = config.pipeline
    if p.backend == "torch-builtin":
        raise NotPredicted("torch's own schedule classes (--pipeline-backend torch-builtin)")
    if p.backend != "auto":
        return p.backend
    schedule = build_schedule(p.schedule, p.stages, microbatches, p.recompute)
    if not torch_runtime_supports(schedule) or _has_batchnorm(config):
        return "cadence"
    return "torch"


def _has_batchnorm(config: TrainConfig) -> bool:
    from torch.nn.modules.batchnorm import _BatchNorm

    from cadence.models.user import model_and_data

    spec, _ = model_and_data(config.model.name, config.data.dataset, config.job.seed)
    return any(isinstance(m, _BatchNorm) for m in spec.build().modules())


def _ps(config: TrainConfig, profile: Profile, link: AlphaBeta) -> tuple[float, str]:
    from cadence.ps.config import parse_consistency
    from cadence.ps.serving_cost import profile_serving
    from cadence.sim.ps_adapter import simulate_ps

    c = config
    if parse_consistency(c.ps.consistency)[0] != "bsp":
        raise NotPredicted(f"the simulator models bsp only, not {c.ps.consistency}")
    if c.data.grad_accum > 1:
        raise NotPredicted("the parameter-server model has no gradient accumulation")
    options = dataclasses.replace(SimOptions(), update_s_per_byte=_update_s_per_byte(c, profile))
    facts = _facts(config, profile)
    # Each slice's serving as the runtime costs it on this machine, on the server's processor.
    result = simulate_ps(
        profile, workers=c.cluster.workers, servers=c.ps.servers, link=link,
        priority=c.ps.priority, options=options,
        params=facts.params, arrival_order=facts.arrival_order,
        serving=profile_serving(profile),
    )  # fmt: skip
    return result.iteration_s, f"ps bsp, {c.ps.servers} server(s), {c.ps.priority} order"


def _unknown(config: TrainConfig, profile: Profile, link: AlphaBeta) -> tuple[float, str]:
    raise NotPredicted(f"no simulator for strategy {config.job.strategy!r}")


_PREDICTORS: dict[str, Callable[[TrainConfig, Profile, AlphaBeta], tuple[float, str]]] = {
    "ddp": _data_parallel,
    "cadence-dp": _data_parallel,
    "zero": _data_parallel,
    "pipeline": _pipeline,
    "ps": _ps,
}
