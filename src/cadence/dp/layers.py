"""Finding a model's layers and parameters, in forward order, for any nn.Module.

A layer is a module that owns parameters directly (Linear, Conv, BatchNorm, Embedding, LSTM,
...). Registration order stands in for forward order, which holds for sequential models and
most others; a parameter shared by several layers belongs to the front-most one.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

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
