"""Measure per-block forward, input-gradient and weight-gradient times and memory.

The model runs block by block on detached inputs, so each block's backward can be timed on its
own: `autograd.grad(out, [inp], g)` for the input gradient and `autograd.grad(out, params, g)`
for the weight gradients, each with `retain_graph=True`. The gradient w.r.t. a block's input is
the upstream gradient of the block before it, exactly as in a real backward pass.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from tqdm import tqdm

from cadence.errors import UserError
from cadence.models import BlockModel, get_model_spec, loss_fn
from cadence.profile.clock import Stopwatch, sync
from cadence.profile.in_iteration import block_times_in_iteration
from cadence.profile.in_loop import LOOP_STEPS_CUDA, batch_input_s, steps_in_loop, warm_up
from cadence.profile.optimizer_step import STEPPED_OPTIMIZERS, optimizer_step_s
from cadence.profile.record import BLOCK_TIMINGS, DEFAULT_BLOCK_TIMING, BlockProfile, Profile
from cadence.zero.codec_cost import time_codec

MIN_SETTLED_ITERATIONS = 3
"""Timed iterations `profile_model` runs at least before a `tolerance` may stop it."""


def host_cores() -> int:
    """Cores this process may run on (its affinity; all of the machine's where that is
    unknown)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def median_settled(samples: Sequence[float], tolerance: float) -> bool:
    """Whether the median of `samples` is known to within `tolerance` of itself: its standard
    error, estimated robustly as 1.2533 x 1.4826 x the median absolute deviation / sqrt(n)
    (exact for normal noise, and one outlier moves it little), is at most `tolerance` times
    the median. Fewer than `MIN_SETTLED_ITERATIONS` samples never settle."""
    n = len(samples)
    if n < MIN_SETTLED_ITERATIONS:
        return False
    middle = statistics.median(samples)
    spread = statistics.median(abs(v - middle) for v in samples)
    return 1.2533 * 1.4826 * spread / math.sqrt(n) <= tolerance * abs(middle)


class _SavedBytes:
    """Pack hook counting bytes autograd saves, once per storage, parameters excluded."""

    def __init__(self, param_storages: set[int], seen: dict[int, int]) -> None:
        self.param_storages = param_storages
        self.seen = seen  # storages counted in any block so far (shared across blocks)
        self.mine: dict[int, int] = {}

    def pack(self, tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.param_storages and key not in self.mine:
            self.mine[key] = storage.nbytes()
            self.seen.setdefault(key, storage.nbytes())
        return tensor


def _owned_params(blocks: list[nn.Module]) -> list[list[nn.Parameter]]:
    seen: set[int] = set()
    owned = []
    for block in blocks:
        mine = [p for p in block.parameters() if id(p) not in seen]
        seen.update(id(p) for p in mine)
        owned.append(mine)
    return owned


def _as_tensor(out: object, name: str) -> Tensor:
    if not isinstance(out, Tensor):
        raise TypeError(f"block {name!r} returned {type(out).__name__}; profiling needs a Tensor")
    return out


def _memory_pass(model: BlockModel, x: Tensor, device: torch.device) -> tuple[list[int], ...]:
    """(activation, output, peak) bytes per block, from one untimed forward with pack hooks."""
    params = list(model.parameters())
    param_storages = {p.untyped_storage().data_ptr() for p in params}
    fixed = sum(p.nbytes for p in params) + sum(p.nbytes for p in params if p.requires_grad)
    seen: dict[int, int] = {}
    acts, outs, peaks = [], [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    h = x
    for name, block in zip(model.block_names(), model.blocks(), strict=True):
        counter = _SavedBytes(param_storages, seen)
        with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
            h = _as_tensor(block(h), name)
        acts.append(sum(counter.mine.values()))
        outs.append(h.nbytes)
        out_key = h.untyped_storage().data_ptr()
        if device.type == "cuda":
            peaks.append(int(torch.cuda.max_memory_allocated(device)))
        else:
            peaks.append(fixed + sum(seen.values()) + (0 if out_key in seen else h.nbytes))
    return acts, outs, peaks


def _timed_pass(
    model: BlockModel, x: Tensor, y: Tensor, device: torch.device
) -> tuple[list[float], list[float], list[float], float]:
    """One block-by-block iteration: (forward, input-grad, weight-grad) seconds per block, loss."""
    blocks, names = model.blocks(), model.block_names()
    clock = Stopwatch(device)
    # (start, end) marks per block; -1 where the block had nothing to time.
    fwd, igrad, wgrad = ([(-1, -1)] * len(blocks) for _ in range(3))
    inputs, outputs = [], []
    h = x
    for i, block in enumerate(blocks):
        inp = h.detach()
        if i > 0 and inp.is_floating_point():
            inp.requires_grad_(True)
        start = clock.mark()
        h = block(inp)
        fwd[i] = (start, clock.mark())
        h = _as_tensor(h, names[i])
        inputs.append(inp)
        outputs.append(h)
    start = clock.mark()
    last = h.detach().requires_grad_(True)
    g: Tensor | None = torch.autograd.grad(loss_fn(last, y), [last])[0]
    loss = (start, clock.mark())
    for i in reversed(range(len(blocks))):
        out, inp = outputs[i], inputs[i]
        if g is None or not out.requires_grad:
            break  # nothing upstream can be differentiated (e.g. integer activations)
        params = [p for p in blocks[i].parameters() if p.requires_grad]
        if params:
            start = clock.mark()
            torch.autograd.grad(out, params, g, retain_graph=True, allow_unused=True)
            wgrad[i] = (start, clock.mark())
        g_in = None
        if i > 0 and inp.requires_grad:
            start = clock.mark()
            (g_in,) = torch.autograd.grad(out, [inp], g, retain_graph=True, allow_unused=True)
            igrad[i] = (start, clock.mark())
        g = g_in

    def seconds(marks: list[tuple[int, int]]) -> list[float]:
        return [clock.seconds(a, b) if a >= 0 else 0.0 for a, b in marks]

    return seconds(fwd), seconds(igrad), seconds(wgrad), clock.seconds(*loss)


def _iteration_s(
    model: BlockModel, x: Tensor, y: Tensor, device: torch.device
) -> tuple[float, float]:
    """One whole-model iteration: (forward + loss + backward seconds, forward seconds)."""
    model.zero_grad(set_to_none=True)
    sync(device)
    clock = Stopwatch(device)
    start = clock.mark()
    out = model(x)
    forward = clock.mark()
    loss_fn(out, y).backward()
    end = clock.mark()
    return clock.seconds(start, end), clock.seconds(start, forward)


def profile_model(
    model: BlockModel,
    batch: tuple[Tensor, Tensor],
    iterations: int = 10,
    warmup: int = 2,
    name: str = "custom",
    block_timing: str = DEFAULT_BLOCK_TIMING,
    optimizer_steps: bool = True,
    tolerance: float | None = None,
    progress: bool = False,
) -> Profile:
    """Profile `model` (in training mode, on its parameters' device) on `batch`.

    Medians over `iterations` timed iterations after `warmup` untimed ones; with a
    `tolerance`, `iterations` is the most it times: it stops once the medians of the whole
    iteration and of the blocks' sum are each known to within that share of themselves
    (`median_settled`), after at least `MIN_SETTLED_ITERATIONS`, and `Profile.iterations`
    says how many it timed. `progress` draws a progress bar on stderr. Each block's
    forward and two gradients are timed in calls of their own. With `block_timing`
    "in-iteration" (the default) the times recorded are the block's share of whole iterations,
    each block's backward split between its two gradients as its own calls split it; with
    "separate", the own calls' times; "auto" is in-iteration on CUDA and separate on the CPU
    (`Profile.block_timing`). With
    `optimizer_steps`, each optimizer's step is timed too, on copies of the parameters: alone,
    or on CUDA inside whole training steps (`cadence.profile.in_loop`), and so is 1-bit Adam's
    codec per element (`cadence.zero.codec_cost`). The batch's way from
    host memory to the device is timed as the training loop takes it. Running statistics
    (BatchNorm) update as in training; parameters do not change. Gradients are left cleared.
    """
    if iterations < 1 or warmup < 0:
        raise ValueError(f"need iterations >= 1 and warmup >= 0, got {iterations}, {warmup}")
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"tolerance must be > 0, got {tolerance}")
    if block_timing not in ("auto", *BLOCK_TIMINGS):
        raise UserError(
            f"unknown block timing {block_timing!r}: use {', '.join(BLOCK_TIMINGS)} or auto"
        )
    first = next(model.parameters(), None)
    device = first.device if first is not None else torch.device("cpu")
    x, y = (t.to(device) for t in batch)
    model.train()
    acts, outs, peaks = _memory_pass(model, x, device)
    # "in-iteration" is the default: such profiles predict the data-parallel benchmarks better
    # than blocks timed in calls of their own. "auto" is the device-dependent choice the
    # pipeline planners were validated with.
    in_iteration = block_timing == "in-iteration" or (
        block_timing == "auto" and device.type == "cuda"
    )
    # fwd, igrad, wgrad in calls of their own; fwd and backward inside whole iterations
    samples: list[list[list[float]]] = [[], [], [], [], []]
    loss_samples, iteration_samples, forward_samples, block_sums = [], [], [], []
    bar = tqdm(
        total=warmup + iterations, desc=f"profiling {name}", unit="iteration",
        disable=not progress, leave=False, dynamic_ncols=True,
    )  # fmt: skip
    with bar:
        for it in range(warmup + iterations):
            fwd, igrad, wgrad, loss_s = _timed_pass(model, x, y, device)
            whole, forward = _iteration_s(model, x, y, device)
            inside = block_times_in_iteration(model, x, y, device) if in_iteration else ([], [])
            bar.update()
            if it < warmup:
                continue
            for store, values in zip(samples, (fwd, igrad, wgrad, *inside), strict=True):
                store.append(values)
            loss_samples.append(loss_s)
            iteration_samples.append(whole)
            forward_samples.append(forward)
            own = sum(fwd) + sum(igrad) + sum(wgrad)
            block_sums.append(sum(inside[0]) + sum(inside[1]) if in_iteration else own)
            if tolerance is not None and all(
                median_settled(v, tolerance) for v in (iteration_samples, block_sums)
            ):
                break
    timed = len(iteration_samples)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        _iteration_s(model, x, y, device)
        peak, peak_kind = int(torch.cuda.max_memory_allocated(device)), "cuda_max_allocated"
    else:
        peak, peak_kind = peaks[-1], "cpu_accounted"
    model.zero_grad(set_to_none=True)
    input_s = batch_input_s(x, y, device, iterations, warmup)
    iteration_s = statistics.median(iteration_samples)
    in_loop = device.type == "cuda"
    steps: dict[str, float] | None = None
    if in_loop:
        # On a GPU the loop's steps are timed as training times them, once warm: the
        # iteration from them too, and each optimizer's step as what it adds.
        warm_up(model, x, y)
        stepped = STEPPED_OPTIMIZERS if optimizer_steps else ()
        loop = steps_in_loop(model, x, y, stepped, max(iterations, LOOP_STEPS_CUDA), warmup)
        iteration_s = loop.iteration_s
        steps = loop.optimizer_step_s if optimizer_steps else None
    elif optimizer_steps:
        steps = {name: optimizer_step_s(model, name) for name in STEPPED_OPTIMIZERS}
    # 1-bit Adam's codec on this device, for the simulator's ZeRO adapter (tens of ms).
    codec = time_codec(str(device)).as_dict() if optimizer_steps else None

    def median(kind: int, i: int) -> float:
        return statistics.median(sample[i] for sample in samples[kind])

    def times(i: int) -> tuple[float, float, float]:
        """(forward, input-grad, weight-grad) of block i."""
        fwd, igrad, wgrad = median(0, i), median(1, i), median(2, i)
        if not in_iteration:
            return fwd, igrad, wgrad
        # The block's backward as the iteration ran it, split between its two gradients in
        # the proportion their own calls took.
        backward = median(4, i)
        share = igrad / (igrad + wgrad) if igrad + wgrad > 0 else float(i > 0)
        return median(3, i), backward * share, backward * (1 - share)

    owned = _owned_params(model.blocks())
    blocks = []
    for i, block_name in enumerate(model.block_names()):
        forward_s, input_grad_s, weight_grad_s = times(i)
        blocks.append(
            BlockProfile(
                name=block_name,
                forward_s=forward_s,
                input_grad_s=input_grad_s,
                weight_grad_s=weight_grad_s,
                param_bytes=sum(p.nbytes for p in owned[i]),
                activation_bytes=acts[i],
                output_bytes=outs[i],
                peak_bytes=peaks[i],
            )
        )
    return Profile(
        model=name,
        batch_size=int(x.shape[0]),
        input_shape=tuple(int(d) for d in x.shape[1:]),
        blocks=tuple(blocks),
        iteration_s=iteration_s,
        loss_s=statistics.median(loss_samples),
        iterations=timed,
        warmup=warmup,
        device=str(device),
        threads=torch.get_num_threads(),
        host_cores=host_cores(),
        torch_version=torch.__version__,
        peak_memory_bytes=peak,
        peak_memory_kind=peak_kind,
        forward_pass_s=statistics.median(forward_samples),
        optimizer_step_s=steps,
        optimizer_step_timing="in-loop" if in_loop else "alone",
        block_timing="in-iteration" if in_iteration else "separate",
        input_s=input_s,
        codec_s_per_element=codec,
    )


def profile_zoo_model(
    name: str,
    batch_size: int,
    iterations: int = 10,
    warmup: int = 2,
    seed: int = 0,
    device: str | torch.device = "cpu",
    block_timing: str = DEFAULT_BLOCK_TIMING,
    optimizer_steps: bool = True,
    tolerance: float | None = None,
    progress: bool = False,
) -> Profile:
    """Profile zoo model `name` (default build, seeded) on a synthetic batch, on `device`
    (`profile_model` says what the other arguments do)."""
    if batch_size < 1 or iterations < 1:
        raise UserError(
            f"batch size and iterations must be >= 1, got {batch_size} and {iterations}"
        )
    spec = get_model_spec(name)
    torch.manual_seed(seed)
    model = spec.build().to(device)
    batch = spec.synthetic_batch(batch_size, seed)
    return profile_model(
        model, batch, iterations, warmup, name, block_timing, optimizer_steps, tolerance, progress
    )
