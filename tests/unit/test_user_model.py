"""A user's own model, dataset and loss (`pkg.module:name`): imported, checked, and every
mistake a one-line `UserError`; gradient accumulation in one process."""

from typing import cast

import pytest
import torch
from torch import nn

from cadence.config import TrainConfig
from cadence.errors import UserError
from cadence.models.refs import import_ref, is_ref
from cadence.models.user import (
    build_user_model,
    check_fits,
    load_loss,
    load_user_dataset,
    model_and_data,
)
from cadence.train.accumulate import check_accumulation, forward_backward
from tests import user_parts

P = "tests.user_parts"


def _one_line(info: pytest.ExceptionInfo[UserError], needle: str) -> None:
    message = str(info.value)
    assert needle in message, message
    assert "\n" not in message


def test_refs_are_told_from_zoo_names() -> None:
    assert is_ref(f"{P}:small_net") and not is_ref("cnn") and not is_ref(None)
    assert import_ref(f"{P}:small_net", "--model") is user_parts.small_net


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("no_such_pkg.models:build", "no module named 'no_such_pkg'"),
        (f"{P}:nope", "module 'tests.user_parts' has no attribute 'nope'"),
        (f"{P}:NOT_CALLABLE", "'NOT_CALLABLE' is not callable"),
        (f"{P}:", "write it as pkg.module:name"),
        (":build", "write it as pkg.module:name"),
    ],
)
def test_import_errors_are_one_line(ref: str, needle: str) -> None:
    with pytest.raises(UserError) as info:
        import_ref(ref, "--model")
    _one_line(info, needle)
    assert "--model" in str(info.value)


def test_a_factory_must_return_a_module() -> None:
    with pytest.raises(UserError) as info:
        build_user_model(f"{P}:not_a_module")
    _one_line(info, "returned an object of type int, not a torch.nn.Module")


def test_datasets_load_from_tensor_datasets_items_and_tensor_pairs() -> None:
    data = load_user_dataset(f"{P}:blobs", 0)
    assert data.train_x.shape == (512, user_parts.FEATURES) and data.train_y.shape == (512,)
    assert data.num_classes == user_parts.CLASSES
    assert torch.equal(data.train_x, load_user_dataset(f"{P}:blobs", 0).train_x)
    mixed = load_user_dataset(f"{P}:blob_pairs", 0)  # a list of items, a pair of tensors
    assert mixed.train_x.shape == (64, user_parts.FEATURES) and len(mixed.test_x) == 32
    assert mixed.train_y.dtype == torch.int64
    arrays = load_user_dataset(f"{P}:numpy_blobs", 0)
    assert arrays.train_x.shape == (40, user_parts.FEATURES) and arrays.test_y.shape == (24,)


def test_a_dataset_factory_must_return_train_and_test() -> None:
    with pytest.raises(UserError) as info:
        load_user_dataset(f"{P}:not_a_pair", 0)
    _one_line(info, "must return a pair (train, test)")


def test_a_users_model_gets_a_spec_from_its_data() -> None:
    spec, data = model_and_data(f"{P}:small_net", f"{P}:blobs")
    assert spec.input_shape == (user_parts.FEATURES,)
    x, y = spec.synthetic_batch(3)  # example batches are the data's own samples
    assert torch.equal(x, data.train_x[:3]) and torch.equal(y, data.train_y[:3])
    assert isinstance(spec.build(), nn.Module)
    spec, data = model_and_data(f"{P}:digits_mlp", "digits")
    assert data.train_x.shape[1:] == (1, 8, 8)
    spec, data = model_and_data("mlp", f"{P}:blobs")  # a zoo model on the user's data
    assert spec.name == "mlp" and data.name == f"{P}:blobs"


@pytest.mark.parametrize(
    ("model", "dataset", "loss", "needle"),
    [
        (f"{P}:wrong_width", f"{P}:blobs", None, f"cannot train on dataset '{P}:blobs'"),
        (f"{P}:small_net", "digits", None, "inputs (1, 8, 8)"),
        (f"{P}:small_net", f"{P}:blobs", f"{P}:per_sample_loss", "must return one number"),
    ],
)
def test_a_mismatch_of_model_data_and_loss_is_one_line(model, dataset, loss, needle) -> None:
    spec, data = model_and_data(model, dataset)
    with pytest.raises(UserError) as info:
        check_fits(spec.build(), data, load_loss(loss), model, torch.device("cpu"))
    _one_line(info, needle)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"model": f"{P}:small_net"}, "needs --dataset digits or pkg.module:factory"),
        ({"model": f"{P}:small_net", "dataset": "synthetic"}, "not synthetic"),
        ({"model": f"{P}:small_net", "dataset": "digits", "strategy": "cadence-dp",
          "autotune": "guided"}, "--autotune guided profiles a zoo model"),
        ({"grad_accum": 0}, "--grad-accum must be at least 1"),
        ({"grad_accum": 3}, "use a multiple of 6"),
        ({"grad_accum": 3, "strategy": "ps"}, "use a multiple of 6"),
        ({"grad_accum": 2, "strategy": "pipeline", "schedule": "auto"},
         "--schedule auto picks the number of micro-batches itself: drop --grad-accum"),
        ({"grad_accum": 3, "strategy": "pipeline", "workers": 2, "stages": 2,
          "batch_size": 24, "microbatches": 3}, "--microbatches 3 x --grad-accum 3 does not "
         "divide the 24 samples per replica: use one of 1, 2, 4, 8"),
        ({"grad_accum": 5, "strategy": "pipeline", "workers": 2, "stages": 2,
          "batch_size": 24}, "--grad-accum 5 does not divide the 24 samples per replica"),
    ],
)  # fmt: skip
def test_config_refuses_what_cannot_run(kwargs, needle) -> None:
    with pytest.raises(UserError) as info:
        TrainConfig.from_flat(**kwargs)
    _one_line(info, needle)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": f"{P}:small_net", "dataset": f"{P}:blobs", "strategy": "pipeline",
         "loss": f"{P}:smooth_loss", "grad_accum": 2},
        {"model": f"{P}:small_net", "dataset": f"{P}:blobs", "strategy": "ps",
         "loss": f"{P}:smooth_loss", "grad_accum": 2},
    ],
)  # fmt: skip
def test_config_takes_a_users_model_loss_and_accumulation_in_every_strategy(kwargs) -> None:
    config = TrainConfig.from_flat(**kwargs)
    assert config.model.loss == f"{P}:smooth_loss" and config.data.grad_accum == 2


def test_the_pipeline_cuts_a_users_sequential_under_its_own_names() -> None:
    from cadence.models.blocks import BlockModel
    from cadence.pipeline.train import pipeline_blocks

    model = user_parts.small_net()
    blocks = pipeline_blocks(model, f"{P}:small_net")
    assert isinstance(blocks, BlockModel) and len(blocks) == 3
    assert blocks.state_dict().keys() == model.state_dict().keys()
    assert all(a is b for a, b in zip(blocks.parameters(), model.parameters(), strict=True))


@pytest.mark.parametrize(
    ("factory", "kind"), [("two_tower", "TwoTower"), ("own_forward", "OwnForward")]
)
def test_the_pipeline_refuses_a_model_that_is_not_a_sequential(factory: str, kind: str) -> None:
    from cadence.comm import DistContext
    from cadence.pipeline.train import pipeline_wrap_for

    ref = f"{P}:{factory}"
    config = TrainConfig.from_flat(model=ref, dataset=f"{P}:blobs", strategy="pipeline")
    model = getattr(user_parts, factory)()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    with pytest.raises(UserError) as info:
        pipeline_wrap_for(config)(model, optimizer, ctx)
    _one_line(info, f"make --model {ref} return an nn.Sequential")
    assert f"it returned a {kind}" in str(info.value)


def test_the_pipeline_refuses_batchnorm_over_micro_batches() -> None:
    from cadence.comm import DistContext
    from cadence.pipeline.train import PipelineTrainer, pipeline_wrap_for

    ref = f"{P}:batchnorm_net"
    ctx = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    for microbatches, grad_accum in ((2, 1), (1, 2)):
        config = TrainConfig.from_flat(
            model=ref, dataset=f"{P}:blobs", strategy="pipeline", workers=1, stages=1,
            microbatches=microbatches, grad_accum=grad_accum, batch_size=8,
        )  # fmt: skip
        model = user_parts.batchnorm_net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(UserError) as info:
            pipeline_wrap_for(config)(model, optimizer, ctx)
        _one_line(info, f"BatchNorm in --model {ref} would normalise each of the pipeline's")
    config = TrainConfig.from_flat(
        model=ref, dataset=f"{P}:blobs", strategy="pipeline", workers=1, stages=1,
        microbatches=1, batch_size=8,
    )  # fmt: skip
    model = user_parts.batchnorm_net()
    trainer, _ = pipeline_wrap_for(config)(model, torch.optim.SGD(model.parameters()), ctx)
    # no extra forward to move the statistics
    assert cast(PipelineTrainer, trainer).executor.backend == "cadence"


def test_accumulated_gradients_equal_the_whole_batchs() -> None:
    spec, data = model_and_data(f"{P}:small_net", f"{P}:blobs")
    x, y = data.train_x[:32], data.train_y[:32]
    grads = []
    for n in (1, 2, 4):
        torch.manual_seed(0)
        model = spec.build()
        loss = forward_backward(model, x, y, load_loss(None), n)
        grads.append((loss, [p.grad for p in model.parameters()]))
    for loss, got in grads[1:]:
        torch.testing.assert_close(loss, grads[0][0].detach())
        for g, expected in zip(got, grads[0][1], strict=True):
            torch.testing.assert_close(g, expected)
    with pytest.raises(UserError, match="do not split into --grad-accum 3"):
        forward_backward(spec.build(), x, y, load_loss(None), 3)


def test_accumulation_needs_no_sync_where_there_are_peers() -> None:
    check_accumulation(nn.Linear(2, 2), 2, "zero", world_size=1)  # alone: nothing to skip
    check_accumulation(nn.Linear(2, 2), 1, "zero", world_size=2)
    with pytest.raises(UserError) as info:
        check_accumulation(nn.Linear(2, 2), 2, "zero", world_size=2)
    _one_line(info, "--strategy zero's wrapped model does not have")


class _Recorder(nn.Module):
    """A wrapped model that records which backward passes ran under its no_sync()."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(user_parts.FEATURES, user_parts.CLASSES)
        self.quiet = False
        self.passes: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.passes.append(self.quiet)
        return self.inner(x)

    def no_sync(self):
        import contextlib

        @contextlib.contextmanager
        def quiet():
            self.quiet = True
            try:
                yield
            finally:
                self.quiet = False

        return quiet()


def test_all_micro_batches_but_the_last_run_under_no_sync() -> None:
    model = _Recorder()
    x, y = torch.randn(12, user_parts.FEATURES), torch.randint(0, user_parts.CLASSES, (12,))
    forward_backward(model, x, y, load_loss(None), 3)
    assert model.passes == [True, True, False]
    model.passes.clear()
    forward_backward(model, x, y, load_loss(None), 1)
    assert model.passes == [False]


def test_regression_is_scored_by_its_loss_alone() -> None:
    import math

    from cadence.comm import DistContext
    from cadence.train.loop import evaluate

    spec, data = model_and_data(f"{P}:regressor", f"{P}:line")
    model, loss = spec.build(), load_loss(f"{P}:mse")
    check_fits(model, data, loss, spec.name, torch.device("cpu"))
    ctx = DistContext(0, 1, 0, "gloo", torch.device("cpu"))
    test_loss, accuracy = evaluate(model, data, ctx, alone=True, loss=loss)
    expected = loss(model(data.test_x), data.test_y).item()
    assert test_loss == pytest.approx(expected, rel=1e-5) and math.isnan(accuracy)
