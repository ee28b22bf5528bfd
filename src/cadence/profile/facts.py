"""What the simulator needs to know of a zoo model besides its timings: its parameters as
cadence.dp lays them out, its buffers, and the order a backward pass produces its gradients.

They follow from the model's code alone (not from the batch, the device or the weights), so
`cadence profile` records them in the profile (`Profile.model_facts`) and a prediction from a
saved profile reads them there instead of building the model and running a backward pass,
which would import torch and take longer than the simulation. `zoo_facts` finds them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from cadence.dp.plan import ParamInfo


@dataclass(frozen=True)
class ModelFacts:
    """A zoo model's layout, buffers and gradient arrival order."""

    params: tuple[ParamInfo, ...]
    """Trainable parameters as `cadence.dp.layers.model_layout` numbers them."""
    buffer_bytes: int
    """Bytes of the model's buffers (BatchNorm's running statistics and counters), which DDP
    broadcasts from rank 0 before every forward; 0: none."""
    buffer_broadcasts: int
    """Broadcast calls DDP makes for those buffers: torch buckets them by dtype, one call each;
    1 for a model without buffers (nothing is sent then)."""
    arrival_order: tuple[int, ...]
    """Indices of `params` in the order one backward pass accumulates their gradients
    (`cadence.dp.layers.gradient_arrival_order`)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelFacts:
        """The saved form back (`dataclasses.asdict` of one); raises KeyError, TypeError or
        ValueError on anything else."""
        params = tuple(
            ParamInfo(
                int(p["index"]), str(p["name"]), int(p["numel"]), int(p["element_size"]),
                int(p["layer"]),
            )
            for p in data["params"]
        )  # fmt: skip
        facts = cls(
            params=params,
            buffer_bytes=int(data["buffer_bytes"]),
            buffer_broadcasts=int(data["buffer_broadcasts"]),
            arrival_order=tuple(int(i) for i in data["arrival_order"]),
        )
        if [p.index for p in params] != list(range(len(params))):
            raise ValueError("model_facts params must be numbered 0, 1, ... in order")
        if sorted(facts.arrival_order) != list(range(len(params))):
            raise ValueError("model_facts arrival_order must name every parameter once")
        return facts


@functools.cache  # several predictions of one model share one build and one backward
def zoo_facts(model: str) -> ModelFacts:
    """Zoo `model`'s facts, from its default build (seeded 0) and one backward pass of a
    batch of two synthetic samples (the arrival order follows the graph, not the batch).
    An unknown name is a UserError listing the zoo."""
    import torch

    from cadence.models import get_model_spec

    spec = get_model_spec(model)
    torch.manual_seed(0)
    module = spec.build()
    inputs, targets = spec.synthetic_batch(2)
    return module_facts(module, inputs, targets)


def module_facts(module: Any, inputs: Any, targets: Any) -> ModelFacts:
    """`module`'s parameter layout, buffers and the order one backward pass of (`inputs`,
    `targets`) under the zoo's loss produces its gradients."""
    from cadence.dp.layers import gradient_arrival_order, model_layout
    from cadence.models.loss import loss_fn

    buffers = list(module.buffers())
    order = gradient_arrival_order(module, lambda m: loss_fn(m(inputs), targets))
    return ModelFacts(
        params=model_layout(module).infos,
        buffer_bytes=sum(b.numel() * b.element_size() for b in buffers),
        buffer_broadcasts=max(len({b.dtype for b in buffers}), 1),
        arrival_order=order,
    )
