"""A user's own model, dataset and loss for `cadence train`, named `pkg.module:name`.

Contracts (docs/your-model.md):

- model: `factory()` returns an `nn.Module` mapping a batch of inputs to outputs. Every rank
  calls it after seeding torch with `--seed`, so every rank starts from the same weights.
- dataset: `factory()` returns `(train, test)`, each either a map-style dataset whose items
  are `(input, target)` pairs (e.g. `torch.utils.data.TensorDataset`) or an
  `(inputs, targets)` pair of tensors with the samples along dimension 0. It is called with
  torch seeded by `--seed` and must give the same samples on every rank; cadence holds both
  splits in memory and shards them itself.
- loss: `fn(output, target)` returns the batch's mean loss as a scalar tensor (default: cross
  entropy over the last dimension, as the zoo's `loss_fn`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from cadence.errors import UserError
from cadence.models.blocks import BlockModel
from cadence.models.datasets import Dataset, load_dataset
from cadence.models.loss import loss_fn as cross_entropy
from cadence.models.refs import USER_ZOO_DATASETS, first_line, import_ref, is_ref
from cadence.models.registry import get_model_spec
from cadence.models.spec import ModelSpec

LossFn = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class UserModelSpec(ModelSpec):
    """A `ModelSpec` for a user's model; its example batches are the dataset's own samples."""

    examples: tuple[Tensor, Tensor] | None = None
    """(inputs, targets) of the training split."""

    def synthetic_batch(self, batch_size: int, seed: int = 0) -> tuple[Tensor, Tensor]:
        """The first `batch_size` training samples (repeated when there are fewer)."""
        if self.examples is None:
            raise UserError(f"model '{self.name}' has no dataset to draw example batches from")
        x, y = self.examples
        index = torch.arange(batch_size) % len(x)
        return x[index], y[index]


def build_user_model(ref: str) -> nn.Module:
    """Call the factory `ref` names; `UserError` unless it returns an `nn.Module`."""
    model = import_ref(ref, "--model")()
    if not isinstance(model, nn.Module):
        raise UserError(
            f"--model '{ref}' returned an object of type {type(model).__name__}, not a "
            "torch.nn.Module"
        )
    return model


def load_loss(ref: str | None) -> LossFn:
    """The loss `ref` names, or the zoo's cross entropy for None."""
    if ref is None:
        return cross_entropy
    loss: LossFn = import_ref(ref, "--loss")
    return loss


@functools.cache  # the loop and a strategy may both ask in one process
def load_user_dataset(ref: str, seed: int = 0) -> Dataset:
    """The dataset the factory `ref` names, as in-memory tensors."""
    factory = import_ref(ref, "--dataset")
    with torch.random.fork_rng(devices=[]):  # the user's sampling must not move the model's
        torch.manual_seed(seed)
        made = factory()
    if not (isinstance(made, tuple | list) and len(made) == 2):
        raise UserError(
            f"--dataset '{ref}' returned an object of type {type(made).__name__}: it must "
            "return a pair (train, test)"
        )
    train_x, train_y = _tensors(made[0], ref, "train")
    test_x, test_y = _tensors(made[1], ref, "test")
    if train_x.shape[1:] != test_x.shape[1:] or train_y.shape[1:] != test_y.shape[1:]:
        raise UserError(
            f"--dataset '{ref}': train samples are {_shapes(train_x, train_y)} but test "
            f"samples {_shapes(test_x, test_y)}"
        )
    integer = not (train_y.is_floating_point() or train_y.is_complex())
    classes = int(torch.cat([train_y.flatten(), test_y.flatten()]).max()) + 1 if integer else 0
    return Dataset(ref, train_x, train_y, test_x, test_y, num_classes=classes)


def _tensors(split: Any, ref: str, which: str) -> tuple[Tensor, Tensor]:
    """(inputs, targets) of one split: a pair of tensors, or a dataset of (input, target)."""
    if isinstance(split, tuple | list) and len(split) == 2 and all(map(_is_array, split)):
        x, y = (torch.as_tensor(t) for t in split)  # tensors, or numpy arrays
    elif isinstance(getattr(split, "tensors", None), tuple) and len(split.tensors) == 2:
        x, y = split.tensors  # TensorDataset: no need to stack its items one by one
    elif hasattr(split, "__len__") and hasattr(split, "__getitem__"):
        try:
            items = [split[i] for i in range(len(split))]
            x = torch.stack([torch.as_tensor(item[0]) for item in items])
            y = torch.stack([torch.as_tensor(item[1]) for item in items])
        except (TypeError, IndexError, RuntimeError, ValueError) as exc:
            raise UserError(
                f"--dataset '{ref}': the {which} split's items must be (input, target) pairs "
                f"of equally shaped tensors ({type(exc).__name__}: {first_line(exc)})"
            ) from None
    else:
        raise UserError(
            f"--dataset '{ref}': the {which} split is of type {type(split).__name__}: give a "
            "dataset of (input, target) pairs or an (inputs, targets) pair of tensors"
        )
    if len(x) == 0 or len(x) != len(y):
        raise UserError(
            f"--dataset '{ref}': the {which} split has {len(x)} inputs and {len(y)} targets"
        )
    return x, y


def _is_array(value: Any) -> bool:
    """A tensor or an array (numpy's): many samples, unlike one (input, target) item."""
    return isinstance(value, Tensor) or hasattr(value, "__array__")


def _shapes(x: Tensor, y: Tensor) -> str:
    return f"inputs {tuple(x.shape[1:])} / targets {tuple(y.shape[1:])}"


def model_and_data(model: str, dataset: str | None, seed: int = 0) -> tuple[ModelSpec, Dataset]:
    """The spec and data of a training job: zoo names, `pkg.module:name` references, or a mix
    (a zoo model on the user's data, a user's model on digits)."""
    if not is_ref(model):
        spec = get_model_spec(model)
        if is_ref(dataset):
            assert dataset is not None
            return spec, load_user_dataset(dataset, seed)
        return spec, load_dataset(dataset or spec.default_dataset, spec, seed=seed)
    if dataset is None:
        raise UserError(f"--model '{model}' needs --dataset: digits or pkg.module:factory")
    if is_ref(dataset):
        data = load_user_dataset(dataset, seed)
        input_shape = tuple(data.train_x.shape[1:])
    elif dataset in USER_ZOO_DATASETS:
        input_shape = (1, 8, 8)
        probe = ModelSpec(model, _unused_build, input_shape, (dataset,), "classify", "")
        data = load_dataset(dataset, probe, seed=seed)
    else:
        raise UserError(
            f"--model '{model}' takes --dataset {', '.join(USER_ZOO_DATASETS)} or "
            f"pkg.module:factory, not '{dataset}'"
        )
    spec = UserModelSpec(
        name=model,
        build=cast("Callable[..., BlockModel]", functools.partial(build_user_model, model)),
        input_shape=input_shape,
        datasets=(dataset,),
        task="classify",  # shapes only the zoo's synthetic batches, which `examples` replace
        description=f"your model from {model}",
        num_classes=data.num_classes,
        examples=(data.train_x, data.train_y),
    )
    return spec, data


def _unused_build() -> BlockModel:
    raise AssertionError("a spec made only to shape a zoo dataset")


def check_fits(
    model: nn.Module, data: Dataset, loss: LossFn, model_name: str, device: torch.device
) -> None:
    """One forward of two training samples and the loss on it, without gradients, in eval
    mode (no BatchNorm statistics move): a one-line `UserError` if the model cannot take the
    data or the loss does not give one number."""
    x, y = data.train_x[:2].to(device), data.train_y[:2].to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = model(x)
            value = loss(out, y)
    except Exception as exc:  # noqa: BLE001 - the user's model or loss: one line naming both
        raise UserError(
            f"model '{model_name}' cannot train on dataset '{data.name}' ({_shapes(x, y)}): "
            f"{type(exc).__name__}: {first_line(exc)}"
        ) from None
    finally:
        model.train(was_training)
    if not (isinstance(value, Tensor) and value.numel() == 1):
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise UserError(f"the loss must return one number (the batch mean), got {shape}")
