"""The model registry: name -> `ModelSpec`.

Reading it does not import torch: each builder's module loads when the model is first built,
so the command line can check a model name (and answer a bad one) in a fraction of a second.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from cadence.errors import UserError
from cadence.models.spec import ModelSpec
from cadence.models.vocab import VOCAB_SIZE

DATASET_NAMES = ("digits", "stdlib-text", "synthetic")
"""Every dataset `cadence.models.load_dataset` knows."""


def _builder(module: str, name: str) -> Callable[..., Any]:
    """`module.name`, imported on the first call (later calls find it in `sys.modules`)."""

    def build(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"`{module}.{name}`, imported when first called."
    return build


build_cnn = _builder("cadence.models.vision", "build_cnn")
build_mlp = _builder("cadence.models.vision", "build_mlp")
build_vgg16 = _builder("cadence.models.vision", "build_vgg16")
build_cnn_lstm = _builder("cadence.models.vision", "build_cnn_lstm")
build_resnet32 = _builder("cadence.models.resnet", "build_resnet32")
build_gpt_mini = _builder("cadence.models.gpt", "build_gpt_mini")

_IMAGE_DATA = ("digits", "synthetic")
_SPECS = (
    ModelSpec(
        name="cnn",
        build=build_cnn,
        input_shape=(1, 8, 8),
        datasets=_IMAGE_DATA,
        task="classify",
        description="small 2-conv CNN for 8x8 digits (~29k params)",
    ),
    ModelSpec(
        name="mlp",
        build=build_mlp,
        input_shape=(1, 8, 8),
        datasets=_IMAGE_DATA,
        task="classify",
        description="MLP over flattened 8x8 digits, hidden (256, 256)",
    ),
    ModelSpec(
        name="vgg16",
        build=build_vgg16,
        input_shape=(3, 32, 32),
        datasets=_IMAGE_DATA,
        task="classify",
        description="CIFAR VGG16 with BatchNorm, 13 conv + 3 linear (~15.2M params)",
    ),
    ModelSpec(
        name="resnet32",
        build=build_resnet32,
        input_shape=(3, 32, 32),
        datasets=_IMAGE_DATA,
        task="classify",
        description="CIFAR ResNet-32, option-A shortcuts (~0.46M params)",
    ),
    ModelSpec(
        name="cnn_lstm",
        build=build_cnn_lstm,
        input_shape=(3, 32, 32),
        datasets=_IMAGE_DATA,
        task="classify",
        description="2-conv CNN whose feature-map columns feed an LSTM (hidden 128)",
    ),
    ModelSpec(
        name="gpt_mini",
        build=build_gpt_mini,
        input_shape=(64,),
        datasets=("stdlib-text", "synthetic"),
        task="next_token",
        description="4-layer pre-LN character transformer, d_model 128, context 64",
        num_classes=VOCAB_SIZE,
    ),
)
REGISTRY: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}


def dataset_names() -> list[str]:
    """All dataset names `load_dataset` knows."""
    return list(DATASET_NAMES)


def model_names() -> list[str]:
    """Registered model names, in registry order."""
    return list(REGISTRY)


def get_model_spec(name: str) -> ModelSpec:
    """The spec registered as `name`; `UserError` listing known names if there is none."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown model '{name}'; known models: {', '.join(REGISTRY)}") from None
