"""A profile of a user's model (`pkg.module:factory` on its `--dataset`) for the held-out
predictor: what `cadence profile` records for a zoo model, taken on the dataset's first samples.

An `nn.Sequential` is profiled block by block (its modules, as the pipeline cuts it); any other
module as one block, so its gradients are all ready at the end of backward as far as the
simulator knows. The model facts (parameter layout, buffers, gradient arrival order) come from
the same build, as `cadence.profile.facts.zoo_facts` finds them for the zoo.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from cadence.profile import Profile
from cadence.profile.facts import ModelFacts, module_facts


def user_facts(module: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> ModelFacts:
    """`module`'s layout, buffers and the order one backward of a batch produces gradients."""
    return module_facts(module, inputs, targets)


def profile_user_model(
    ref: str,
    dataset: str | None,
    batch_size: int,
    iterations: int,
    threads: int,
    seed: int = 0,
    neighbours: int = 0,
) -> Profile:
    """Profile `ref`'s model on `batch_size` of `dataset`'s training samples at `threads`
    intra-op threads (restored afterwards), heap thresholds fixed as in training processes,
    with `neighbours` processes training it beside (`cadence.profile.neighbours`), at the
    pace of iterations they all start together."""
    from cadence.heap import keep_heap
    from cadence.models.blocks import BlockModel
    from cadence.models.user import build_user_model, model_and_data
    from cadence.pipeline.sequential import as_blocks
    from cadence.profile.command import SETTLED_WITHIN
    from cadence.profile.measure import profile_model
    from cadence.profile.neighbours import iteration_of, paced
    from cadence.profile.neighbours import neighbours as beside

    spec, _ = model_and_data(ref, dataset, seed)
    torch.manual_seed(seed)
    module = build_user_model(ref)
    plain_sequential = type(module).forward is nn.Sequential.forward
    blocks = as_blocks(module) if plain_sequential else BlockModel(module)
    inputs, targets = spec.synthetic_batch(batch_size, seed)
    keep_heap()
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with beside(ref, dataset, batch_size, threads, neighbours) as group:
            profile = profile_model(
                blocks, (inputs, targets), iterations, 2, ref, tolerance=SETTLED_WITHIN
            )
            pace = group.lockstep(iteration_of(module, inputs, targets))
        facts = user_facts(module, inputs[:2], targets[:2])
    finally:
        torch.set_num_threads(previous)
    return paced(dataclasses.replace(profile, model_facts=facts, neighbours=neighbours), pace)
