"""Pipeline parity: `cadence.pipeline_parallel` under every habit of the ordinary loop equals one
process training the whole model on the whole global batch.

The reference is single-process training, not DDP: a pipeline computes every sample of the
global batch through the same model, as one process does, so that is what it must equal (for
models without BatchNorm DDP computes the same, within rounding). Every rank trains the
reference itself and compares the entries its stage holds (`PARTIAL`).

Cells: sequential cases (torch's encoder as an `nn.Sequential`, the zoo's `gpt_mini` with its
embedding tied to the head across the first and last stages, a BatchNorm convnet) x habits x
the torch runtime (1F1B), ours (kFkB), model parallel (one micro-batch) and, at 4 ranks, 2
replicas x 2 stages; 2 ranks make 2 stages, 4 ranks 4. Refusals: models that are not sequential
(transformers' GPT-2, BERT, ResNet; the "adamw_groups" habit's wrapper around gpt_mini), a
torch clip on one stage's gradients, BatchNorm with more than one micro-batch.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cadence.errors import UserError
from cadence.pipeline.wrap import pipeline_parallel
from cadence.testing import run_ranks
from tests.parity.loop import HABITS, MakeOptimizer, Wrapped
from tests.parity.matrix import Cell, cell_id, check_cells, matrix_results
from tests.parity.models import VOCAB, ModelCase, _images, _labelled_tokens


class MeanHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x.mean(dim=1))


class PassThroughWithUnused(nn.Module):
    """A block that returns its input and owns a layer never called: no gradient reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.never_called = nn.Linear(3, 3)

    def forward(self, x: Tensor) -> Tensor:
        return x


class Pair(nn.Module):
    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x, x


class Sum(nn.Module):
    def forward(self, pair: tuple[Tensor, Tensor]) -> Tensor:
        return pair[0] + pair[1]


def _encoder_seq() -> nn.Module:
    def layer() -> nn.Module:
        return nn.TransformerEncoderLayer(32, 2, dim_feedforward=64, dropout=0.0, batch_first=True)

    return nn.Sequential(OrderedDict(
        embed=nn.Embedding(VOCAB, 32), layer0=layer(), layer1=layer(), head=MeanHead()
    ))  # fmt: skip


def _convnet_bn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
        nn.Sequential(nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 16)),
        nn.Linear(16, 5),
    )  # fmt: skip


def _with_unused(model: nn.Module) -> nn.Module:
    return nn.Sequential(*cast(nn.Sequential, model), PassThroughWithUnused())


def _classify(out: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(out.float(), y)


EXTRA_CASES = {
    case.name: case
    for case in [
        ModelCase("encoder_seq", _encoder_seq, _labelled_tokens,
                  lambda m, x, y: _classify(m(x), y), lambda m, x: m(x),
                  criterion=_classify, with_unused=_with_unused),
        ModelCase("convnet_bn", _convnet_bn, _images(8),
                  lambda m, x, y: _classify(m(x), y), lambda m, x: m(x),
                  has_buffers=True, criterion=_classify, with_unused=_with_unused),
    ]  # fmt: skip
}


def single(model: nn.Module, make_optimizer: MakeOptimizer) -> Wrapped:
    """The reference: this process trains the whole model on the whole global batch."""

    def step(x: Tensor, y: Tensor, criterion: Any) -> None:
        criterion(model(x), y).backward()

    return Wrapped(
        model=model, optimizer=make_optimizer(model.parameters()), module=model,
        clip=lambda norm: torch.nn.utils.clip_grad_norm_(model.parameters(), norm),
        train_step=step,
    )  # fmt: skip


def _pipeline(**options: Any) -> Any:
    def wrap(model: nn.Module, make_optimizer: MakeOptimizer) -> Wrapped:
        pipe = pipeline_parallel(model, **options)
        return Wrapped(
            model=pipe, optimizer=make_optimizer(pipe.parameters()), module=pipe,
            clip=pipe.clip_grad_norm_, train_step=pipe.train_step, partial=True,
        )  # fmt: skip

    return wrap


STRATEGIES = {
    "single": single,
    "pipe_1f1b": _pipeline(schedule="1f1b", microbatches=2),
    "pipe_kfkb": _pipeline(schedule="kfkb:2", microbatches=4, backend="cadence"),
    "model_parallel": _pipeline(schedule="gpipe", microbatches=1),
    "pipe_2x2": _pipeline(schedule="1f1b", microbatches=2, data_parallel=2),
}
PIPES = ("pipe_1f1b", "pipe_kfkb", "model_parallel", "pipe_2x2")
REFERENCE = dict.fromkeys(PIPES, "single")
PARTIAL = set(PIPES)
NOT_SEQUENTIAL = "is not sequential"
TORCH_CLIP = "call pipe.clip_grad_norm_"
BATCHNORM = "BatchNorm in a pipeline"


def _cells(world_size: int) -> tuple[list[Cell], dict[str, str]]:
    pipes = [p for p in PIPES if world_size == 4 or p != "pipe_2x2"]
    cells: list[Cell] = []
    refusals: dict[str, str] = {}
    for model in ("encoder_seq", "gpt_mini_tied"):
        for habit in HABITS:
            for pipe in pipes if model == "encoder_seq" else ("pipe_1f1b",):
                cells.append((model, habit, pipe))
    for habit in ("plain", "eval", "state_dict", "adamw_groups"):
        cells.append(("convnet_bn", habit, "model_parallel"))
    cells.append(("convnet_bn", "plain", "pipe_1f1b"))
    refusals[cell_id(("convnet_bn", "plain", "pipe_1f1b"))] = BATCHNORM
    for model in ("gpt2", "bert", "resnet"):
        cells.append((model, "plain", "pipe_1f1b"))
        refusals[cell_id((model, "plain", "pipe_1f1b"))] = NOT_SEQUENTIAL
    refusals[cell_id(("gpt_mini_tied", "adamw_groups", "pipe_1f1b"))] = NOT_SEQUENTIAL
    for cell in cells:
        if cell[1] == "torch_clip" and cell_id(cell) not in refusals:
            refusals[cell_id(cell)] = TORCH_CLIP
    return cells, refusals




@pytest.mark.parametrize("world_size", [2, 4])
def test_pipeline_matrix(world_size: int) -> None:
    cells, refusals = _cells(world_size)
    check_cells(matrix_results(__name__, cells, world_size), cells, refusals)


def _api_checks(rank: int, world_size: int) -> dict[str, Any]:
    """What the matrix does not reach: the loss every rank gets, a whole model's state loaded
    into a stage, parameter names, and the refusals that need processes."""
    case = EXTRA_CASES["encoder_seq"]
    torch.manual_seed(0)
    whole = case.build()
    x, y = case.batch(torch.Generator().manual_seed(5), 8)
    torch.manual_seed(3)  # other initial values: the loaded state must replace them
    pipe = pipeline_parallel(case.build(), microbatches=2)
    pipe.load_state_dict(whole.state_dict())
    out: dict[str, Any] = {"loss": pipe.train_step(x, y, _classify).item()}
    names = {name for name, _ in pipe.named_parameters()}
    out["names"] = bool(names) and names <= set(whole.state_dict())
    try:
        pipe(x)
    except UserError as exc:
        out["forward_with_grad"] = str(exc)
    chain = nn.Sequential(nn.Linear(4, 4), Pair(), Sum(), nn.Linear(4, 2))
    try:  # cut between a block returning a pair and the block taking it
        pipeline_parallel(chain, split_points=[2]).train_step(
            torch.randn(4, 4), torch.randint(0, 2, (4,)), _classify
        )
    except UserError as exc:
        out["pair"] = str(exc)
    try:
        pipeline_parallel(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU()),
                          split_points=[2])  # fmt: skip
    except UserError as exc:
        out["no_parameters"] = str(exc)
    return out


def test_loss_on_every_rank_loaded_state_and_refusals() -> None:
    torch.manual_seed(0)
    case = EXTRA_CASES["encoder_seq"]
    whole = case.build()
    x, y = case.batch(torch.Generator().manual_seed(5), 8)
    expected = _classify(whole(x), y).item()
    for out in run_ranks(_api_checks, 2, timeout=120):
        assert out["loss"] == pytest.approx(expected, rel=1e-5)
        assert out["names"]  # the plain model's parameter names
        assert "under torch.no_grad()" in out["forward_with_grad"]
        assert "stage 1 (blocks 2..2) has no parameters" in out["no_parameters"]
        assert "pipeline stage 0 failed on a one-sample forward" in out["pair"]
