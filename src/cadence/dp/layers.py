"""Finding a model's layers and parameters, in forward order, for any nn.Module.

A layer is a module that owns parameters directly (Linear, Conv, BatchNorm, Embedding, LSTM,
...). Registration order stands in for forward order, which holds for sequential models and
most others; a parameter shared by several layers belongs to the front-most one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from cadence.dp.plan import ParamInfo


@dataclass(frozen=True)
class ModelLayout:
    """Layers and parameters of a model, with the indices the plan uses."""

    layers: tuple[nn.Module, ...]
    """Modules owning parameters directly, front to back."""
    params: tuple[nn.Parameter, ...]
    """Trainable parameters, each once, indexed like `infos`."""
    infos: tuple[ParamInfo, ...]
    """Plan-side description of each parameter."""
    layer_params: tuple[tuple[int, ...], ...]
    """For each layer, the indices of the parameters its forward reads."""


def model_layout(model: nn.Module) -> ModelLayout:
    layers: list[nn.Module] = []
    index_of: dict[int, int] = {}
    params: list[nn.Parameter] = []
    names: list[str] = []
    front_layer: list[int] = []
    layer_params: list[tuple[int, ...]] = []
    for name, module in model.named_modules():
        own = [(n, p) for n, p in module.named_parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        layer = len(layers)
        layers.append(module)
        indices = []
        for pname, param in own:
            if id(param) not in index_of:
                index_of[id(param)] = len(params)
                params.append(param)
                names.append(f"{name}.{pname}" if name else pname)
                front_layer.append(layer)
            indices.append(index_of[id(param)])
        layer_params.append(tuple(indices))
    infos = tuple(
        ParamInfo(i, names[i], p.numel(), p.element_size(), front_layer[i])
        for i, p in enumerate(params)
    )
    return ModelLayout(tuple(layers), tuple(params), infos, tuple(layer_params))


def gradient_arrival_order(
    model: nn.Module, loss: Callable[[nn.Module], Tensor]
) -> tuple[int, ...]:
    """Indices (as `model_layout` numbers them) of `model`'s parameters in the order one
    backward pass of `loss(model)` accumulates their gradients: the order cadence-dp's gradient
    hooks see, and DDP's buckets follow once rebuilt. Within a layer it need not be the reverse
    of registration (an LSTM's input weights come before its hidden weights). The gradients
    are cleared afterwards."""
    params = model_layout(model).params
    order: list[int] = []
    hooks = [
        p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i))
        for i, p in enumerate(params)
    ]
    try:
        loss(model).backward()
    finally:
        for hook in hooks:
            hook.remove()
        for p in params:
            p.grad = None
    seen = set(order)
    # A parameter the loss does not reach gets no gradient: last, in reverse registration order.
    return tuple(order) + tuple(i for i in reversed(range(len(params))) if i not in seen)
