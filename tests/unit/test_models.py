"""Tests for cadence.models: the block-structured model zoo and its datasets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cadence.errors import UserError
from cadence.models import (
    BlockModel,
    dataset_names,
    get_model_spec,
    load_dataset,
    loss_fn,
    model_names,
)
from cadence.models.text import PLACEHOLDER_ID, VOCAB_SIZE, encode, stdlib_corpus

ALL_MODELS = ["cnn", "mlp", "vgg16", "resnet32", "cnn_lstm", "gpt_mini"]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_registry_lists_all_models_and_datasets() -> None:
    assert model_names() == ALL_MODELS
    assert dataset_names() == ["digits", "stdlib-text", "synthetic"]
    for name in ALL_MODELS:
        spec = get_model_spec(name)
        assert spec.name == name
        assert "synthetic" in spec.datasets
        assert spec.default_dataset == spec.datasets[0]


@pytest.mark.parametrize("name", ALL_MODELS)
def test_forward_shape_and_blocks_chain(name: str) -> None:
    spec = get_model_spec(name)
    torch.manual_seed(0)
    model = spec.build()
    assert isinstance(model, BlockModel)
    blocks = model.blocks()
    assert len(blocks) > 1
    assert len(model.block_names()) == len(blocks)
    x, y = spec.synthetic_batch(3, seed=1)
    assert x.shape == (3, *spec.input_shape)
    model.eval()  # BatchNorm must use running stats so the two passes agree exactly
    with torch.no_grad():
        out = model(x)
        chained = x
        for block in blocks:
            chained = block(chained)
    expected = (3, spec.num_classes) if spec.task == "classify" else (3, 64, spec.num_classes)
    assert out.shape == expected
    assert y.shape == out.shape[:-1]
    assert torch.equal(out, chained)
    # Slicing keeps the block structure, so pipeline stages are BlockModels too.
    head, tail = model[:2], model[2:]
    assert isinstance(head, BlockModel) and isinstance(tail, BlockModel)
    with torch.no_grad():
        assert torch.equal(tail(head(x)), out)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_loss_backward_reaches_every_parameter(name: str) -> None:
    spec = get_model_spec(name)
    torch.manual_seed(0)
    model = spec.build()
    x, y = spec.synthetic_batch(2)
    loss = loss_fn(model(x), y)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize(
    ("name", "expected", "tol"), [("vgg16", 15.2e6, 0.02), ("resnet32", 0.46e6, 0.05)]
)
def test_parameter_counts(name: str, expected: float, tol: float) -> None:
    model = get_model_spec(name).build()
    count = sum(p.numel() for p in model.parameters())
    assert model.num_parameters() == count
    assert abs(count - expected) / expected < tol, count


def test_block_counts_follow_architecture() -> None:
    assert len(get_model_spec("vgg16").build().blocks()) == 13 + 3
    assert len(get_model_spec("resnet32").build().blocks()) == 1 + 15 + 1
    assert len(get_model_spec("gpt_mini").build().blocks()) == 1 + 4 + 1


def test_builders_accept_overrides() -> None:
    x, _ = get_model_spec("cnn").synthetic_batch(2)
    assert get_model_spec("cnn").build(num_classes=5)(x).shape == (2, 5)
    assert get_model_spec("mlp").build(hidden=(32,), num_classes=3)(x).shape == (2, 3)
    small = get_model_spec("vgg16").build(width=64)
    assert small.num_parameters() < get_model_spec("vgg16").build().num_parameters()
    gpt = get_model_spec("gpt_mini").build(n_layers=2, context=16)
    assert len(gpt.blocks()) == 4
    assert gpt(torch.zeros(2, 16, dtype=torch.long)).shape == (2, 16, VOCAB_SIZE)
    with pytest.raises(ValueError, match="context"):
        gpt(torch.zeros(1, 17, dtype=torch.long))


def test_loss_fn_flattens_sequence_outputs() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=gen)
    target = torch.randint(0, 7, (2, 5), generator=gen)
    manual = F.cross_entropy(logits.reshape(10, 7), target.reshape(10))
    assert torch.allclose(loss_fn(logits, target), manual)
    assert torch.allclose(
        loss_fn(logits[:, 0], target[:, 0]), F.cross_entropy(logits[:, 0], target[:, 0])
    )


def test_gpt_tie_weights_shares_the_parameter() -> None:
    untied = get_model_spec("gpt_mini").build()
    tied = get_model_spec("gpt_mini").build(tie_weights=True)
    # Block 0 is the embedding (token table "tok"); the last block is LayerNorm + head ("1").
    tok_weight = tied.get_submodule("embed.tok").weight
    assert isinstance(tok_weight, nn.Parameter)
    assert tied.get_submodule("final.1").weight is tok_weight
    assert tied.block_names()[0] == "embed" and tied.block_names()[-1] == "final"
    untied_tok = untied.get_submodule("embed.tok").weight
    assert untied.get_submodule("final.1").weight is not untied_tok
    assert untied.num_parameters() - tied.num_parameters() == VOCAB_SIZE * 128


def test_gpt_is_causal() -> None:
    torch.manual_seed(0)
    model = get_model_spec("gpt_mini").build().eval()
    x, _ = get_model_spec("gpt_mini").synthetic_batch(2, seed=3)
    changed = x.clone()
    changed[:, 40] = (changed[:, 40] + 1) % VOCAB_SIZE
    with torch.no_grad():
        a, b = model(x), model(changed)
    assert torch.allclose(a[:, :40], b[:, :40], atol=1e-5)
    assert not torch.allclose(a[:, 40:], b[:, 40:])


@pytest.mark.parametrize("name", ["cnn", "resnet32"])
def test_digits_variants(name: str) -> None:
    spec = get_model_spec(name)
    ds = load_dataset("digits", spec, seed=0)
    assert ds.name == "digits" and ds.num_classes == 10
    assert len(ds.train_x) + len(ds.test_x) == 1797
    assert (len(ds.train_x), len(ds.test_x)) == (1437, 360)
    assert ds.train_x.shape[1:] == spec.input_shape == ds.test_x.shape[1:]
    assert ds.train_x.dtype == torch.float32 and ds.train_y.dtype == torch.int64
    # Stratified: every class holds ~20% of its samples out (each has 174..183).
    counts = torch.bincount(ds.test_y, minlength=10)
    assert counts.min() >= 34 and counts.max() <= 38
    if spec.input_shape == (1, 8, 8):
        assert abs(ds.train_x.mean().item()) < 1e-4
        assert abs(ds.train_x.std().item() - 1) < 1e-3
    else:
        assert torch.equal(ds.train_x[:, 0], ds.train_x[:, 2])


def test_digits_split_is_deterministic_per_seed() -> None:
    spec = get_model_spec("mlp")
    a, b = load_dataset("digits", spec, seed=3), load_dataset("digits", spec, seed=3)
    c = load_dataset("digits", spec, seed=4)
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_y, b.test_y)
    assert not torch.equal(a.train_x, c.train_x)


def test_stdlib_text_windows() -> None:
    spec = get_model_spec("gpt_mini")
    ds = load_dataset("stdlib-text", spec)
    assert ds.num_classes == VOCAB_SIZE
    assert ds.train_x.shape[1] == 64 and ds.test_y.shape[1] == 64
    assert 8.5 * len(ds.test_x) < len(ds.train_x) < 9.5 * len(ds.test_x)  # 90/10 split
    for x, y in ((ds.train_x, ds.train_y), (ds.test_x, ds.test_y)):
        assert x.dtype == torch.int64
        assert int(x.min()) >= 0 and int(x.max()) < VOCAB_SIZE
        assert torch.equal(x[:, 1:], y[:, :-1])
    ids = encode(stdlib_corpus())
    assert torch.equal(ds.train_x[0], ids[:64]) and torch.equal(ds.train_y[0], ids[1:65])
    assert torch.equal(ds.train_x[1], ids[65:129])  # windows do not overlap
    assert torch.equal(load_dataset("stdlib-text", spec).test_x, ds.test_x)


def test_encode_maps_non_ascii_to_placeholder() -> None:
    assert encode("aZ\n").tolist() == [97, 90, 10]
    assert encode("é€😀").tolist() == [PLACEHOLDER_ID] * 3


@pytest.mark.parametrize("name", ALL_MODELS)
def test_synthetic_batches_and_dataset(name: str) -> None:
    spec = get_model_spec(name)
    x1, y1 = spec.synthetic_batch(4, seed=7)
    x2, y2 = spec.synthetic_batch(4, seed=7)
    x3, _ = spec.synthetic_batch(4, seed=8)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, x3)
    assert y1.dtype == torch.int64 and int(y1.max()) < spec.num_classes
    if spec.task == "next_token":
        assert x1.dtype == torch.int64 and y1.shape == x1.shape
    else:
        assert x1.dtype == torch.float32 and y1.shape == (4,)
    ds = load_dataset("synthetic", spec, seed=1)
    assert (len(ds.train_x), len(ds.test_x)) == (2048, 512)
    assert ds.train_x.shape[1:] == spec.input_shape
    assert not torch.equal(ds.train_x[:512], ds.test_x)


def test_user_errors_list_what_is_accepted() -> None:
    with pytest.raises(UserError, match="unknown model 'nope'.*cnn, mlp, vgg16"):
        get_model_spec("nope")
    with pytest.raises(UserError, match="unknown dataset 'cifar'.*digits, stdlib-text, synthetic"):
        load_dataset("cifar", get_model_spec("cnn"))
    msg = "model 'gpt_mini' cannot use dataset 'digits'; it accepts: stdlib-text, synthetic"
    with pytest.raises(UserError) as info:
        load_dataset("digits", get_model_spec("gpt_mini"))
    assert str(info.value) == msg
    with pytest.raises(UserError, match="cannot use dataset 'stdlib-text'"):
        load_dataset("stdlib-text", get_model_spec("resnet32"))


def test_cnn_reaches_95_percent_on_digits() -> None:
    torch.manual_seed(0)
    spec = get_model_spec("cnn")
    ds = load_dataset("digits", spec, seed=0)
    model = spec.build()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        perm = torch.randperm(len(ds.train_x), generator=gen)
        for i in range(0, len(perm), 32):
            idx = perm[i : i + 32]
            opt.zero_grad()
            loss_fn(model(ds.train_x[idx]), ds.train_y[idx]).backward()
            opt.step()
    with torch.no_grad():
        acc = (model.eval()(ds.test_x).argmax(1) == ds.test_y).float().mean().item()
    assert acc >= 0.95, acc
