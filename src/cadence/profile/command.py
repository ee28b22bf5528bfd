"""The `cadence profile` entry point: profile a zoo model, print a table, save JSON."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from cadence.errors import UserError
from cadence.heap import keep_heap
from cadence.models import get_model_spec
from cadence.placement import place_worker, visible_gpus
from cadence.profile.facts import zoo_facts
from cadence.profile.measure import profile_zoo_model
from cadence.profile.neighbours import iteration_of, paced
from cadence.profile.neighbours import neighbours as beside
from cadence.profile.record import DEFAULT_BLOCK_TIMING, Profile
from cadence.ps.serving_cost import time_serving

SETTLED_WITHIN = 0.01
"""`profile_command` times iterations until the medians are known to within 1% of themselves
(`cadence.profile.measure.median_settled`), `iterations` at most: a quiet machine needs a few,
a busy one all of them."""

_MB = 1e6
_TIMING_NOTE = {"separate": "", "in-iteration": ", blocks timed inside whole iterations"}


def format_table(profile: Profile) -> str:
    """A compact per-block table plus the sum-vs-measured line."""
    head = (
        f"{'block':<12}{'fwd ms':>9}{'in-grad ms':>12}{'w-grad ms':>11}"
        f"{'param MB':>10}{'act MB':>9}"
    )
    lines = [
        f"{profile.model}, batch {profile.batch_size}, {profile.device}, {profile.threads} "
        f"thread(s), median of {profile.iterations}{_TIMING_NOTE[profile.block_timing]}",
        head,
    ]
    for b in profile.blocks:
        lines.append(
            f"{b.name[:12]:<12}{b.forward_s * 1e3:>9.3f}{b.input_grad_s * 1e3:>12.3f}"
            f"{b.weight_grad_s * 1e3:>11.3f}{b.param_bytes / _MB:>10.3f}"
            f"{b.activation_bytes / _MB:>9.3f}"
        )
    kind = "accounted" if profile.peak_memory_kind == "cpu_accounted" else "CUDA max allocated"
    lines.append(
        f"blocks {profile.block_sum_s * 1e3:.2f} ms + loss {profile.loss_s * 1e3:.2f} ms vs "
        f"measured iteration {profile.iteration_s * 1e3:.2f} ms (ratio "
        f"{profile.block_sum_ratio:.2f}); params {profile.param_bytes / _MB:.2f} MB; "
        f"peak {profile.peak_memory_bytes / _MB:.2f} MB ({kind})"
    )
    if profile.forward_pass_s is not None:
        forward = sum(b.forward_s for b in profile.blocks)
        lines.append(
            f"forward blocks {forward * 1e3:.2f} ms vs measured forward pass "
            f"{profile.forward_pass_s * 1e3:.2f} ms; gradients "
            f"{(profile.block_sum_s - forward) * 1e3:.2f} ms vs measured rest "
            f"{(profile.iteration_s - profile.forward_pass_s - profile.loss_s) * 1e3:.2f} ms"
        )
    if profile.optimizer_step_s:
        steps = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in profile.optimizer_step_s.items())
        how = " (what it adds to a training step)" * (profile.optimizer_step_timing == "in-loop")
        lines.append(f"optimizer step over the whole model{how}: {steps}")
    if profile.input_s is not None:
        lines.append(f"batch from host memory to {profile.device}: {profile.input_s * 1e3:.3f} ms")
    if profile.codec_s_per_element:
        codec = profile.codec_s_per_element
        lines.append(
            f"1-bit Adam's codec per million elements: encode {codec['encode'] * 1e9:.2f} ms, "
            f"decode {codec['decode'] * 1e9:.2f} ms"
        )
    if profile.ps_serving_s:
        serving = profile.ps_serving_s
        lines.append(
            f"parameter server's processor per message {serving['message'] * 1e6:.0f} us, "
            f"per MB of slices per worker {serving['byte'] * 1e9:.2f} ms"
        )
    return "\n".join(lines)


def profile_command(
    model: str,
    *,
    batch_size: int,
    iterations: int = 10,
    out: str | Path | None = None,
    warmup: int = 2,
    threads: int | None = 1,
    echo: Callable[[str], None] = print,
    device: str = "cpu",
    block_timing: str = DEFAULT_BLOCK_TIMING,
    tolerance: float | None = SETTLED_WITHIN,
    neighbours: int = 0,
) -> Profile:
    """Profile zoo `model` on a synthetic batch, print the per-block table, save JSON to `out`.

    Runs with `threads` intra-op CPU threads, 1 by default: each rank of a CPU training run
    uses one thread, so per-block times then match what a rank sees (and they are steadier).
    `None` keeps torch's current setting. The previous setting is restored afterwards.
    `device` is cpu, cuda (the current GPU) or auto (cuda where there is one); `block_timing`
    is in-iteration, separate or auto (in-iteration on CUDA; see `profile_model`).
    `iterations` is the most it times: it stops once the medians are known to within
    `tolerance` (None: all of them). A progress bar shows on stderr where that is a terminal.
    The process's glibc heap thresholds are fixed first (`cadence.heap.keep_heap`, as in
    cadence-dp's training processes), so that the blocks and the optimizer step are timed in
    the steady state of a training process, not in a fresh process's faulting heap.
    The profile carries the model's layout, buffers and gradient arrival order
    (`Profile.model_facts`), so a prediction from it need not build the model. `neighbours`
    processes train the same model beside it while it is timed (`cadence.profile.neighbours`:
    a run's workers per host minus one), and its times are put at the pace of iterations
    that all of them start together.
    Bad arguments or an unknown model raise a one-line UserError.
    """
    where = place_worker(device, 0, 1, visible_gpus()).device
    if threads is not None and threads < 1:
        raise UserError(f"threads must be >= 1 (or unset for torch's default), got {threads}")
    if neighbours and where != "cpu":
        raise UserError(
            f"--workers-per-host runs CPU neighbours beside a CPU profile; this one runs on {where}"
        )
    # A training process's heap settles: its steps stop faulting memory in. A fresh process
    # with glibc's dynamic thresholds faults Adam's temporaries in on every step (vgg16's step
    # about 2x), so time as cadence-dp's processes run, with the thresholds fixed.
    keep_heap()
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with beside(model, None, batch_size, torch.get_num_threads(), neighbours) as group:
            profile = profile_zoo_model(
                model, batch_size, iterations, warmup, device=where, block_timing=block_timing,
                tolerance=tolerance, progress=sys.stderr.isatty(),
            )  # fmt: skip
            pace = None
            if neighbours:
                spec = get_model_spec(model)
                torch.manual_seed(0)
                pace = group.lockstep(iteration_of(spec.build(), *spec.synthetic_batch(batch_size)))
        # What the simulator would otherwise build the model for, saved with the timings.
        profile = dataclasses.replace(profile, model_facts=zoo_facts(model), neighbours=neighbours)
        profile = paced(profile, pace)
    finally:
        torch.set_num_threads(previous)
    # Parameter servers run on the workers' hosts' processors: what serving costs here.
    profile = dataclasses.replace(profile, ps_serving_s=time_serving().as_dict())
    echo(format_table(profile))
    if out is not None:
        try:
            profile.save(out)
        except OSError as exc:
            raise UserError(f"cannot write profile to {out}: {exc.strerror or exc}") from None
        echo(f"saved {out}")
    return profile
