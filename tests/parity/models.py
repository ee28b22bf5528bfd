"""Models the parity matrix trains: public-library models (transformers, random init, nothing
downloaded), torch's own `nn.TransformerEncoder` and zoo models, each tiny so that a few steps of
every cell fit in CI.

Every case builds a model, cuts a seeded global batch, and computes a scalar loss; the data is
the same on every rank and for every strategy, so any difference comes from the strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

VOCAB = 64
CONTEXT = 8


@dataclass(frozen=True)
class ModelCase:
    name: str
    build: Callable[[], nn.Module]
    """A fresh model; the caller seeds torch first."""
    batch: Callable[[torch.Generator, int], tuple[Tensor, Tensor]]
    """(inputs, targets) of a global batch, first dimension the batch."""
    loss: Callable[[nn.Module, Tensor, Tensor], Tensor]
    """Scalar training loss of `model` on a batch."""
    output: Callable[[nn.Module, Tensor], Tensor]
    """What evaluation reads (logits), for the habit that evaluates between steps."""
    has_buffers: bool = False
    criterion: Callable[[Tensor, Tensor], Tensor] | None = None
    """The loss on the model's output and the targets, for strategies that run forward and
    backward themselves (`Wrapped.train_step`); None: the loss needs the model itself."""
    with_unused: Callable[[nn.Module], nn.Module] | None = None
    """How the "adamw_groups" habit adds a layer that gets no gradient; None: `WithUnused`."""


def _tokens(gen: torch.Generator, n: int) -> tuple[Tensor, Tensor]:
    ids = torch.randint(0, VOCAB, (n, CONTEXT + 1), generator=gen)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def _labelled_tokens(gen: torch.Generator, n: int) -> tuple[Tensor, Tensor]:
    ids = torch.randint(0, VOCAB, (n, CONTEXT), generator=gen)
    return ids, torch.randint(0, 3, (n,), generator=gen)


def _images(side: int) -> Callable[[torch.Generator, int], tuple[Tensor, Tensor]]:
    def batch(gen: torch.Generator, n: int) -> tuple[Tensor, Tensor]:
        images = torch.randn(n, 3, side, side, generator=gen)
        return images, torch.randint(0, 5, (n,), generator=gen)

    return batch


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=CONTEXT,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied, as GPT-2 ships
    return model


def _gpt2_logits(model: nn.Module, x: Tensor) -> Tensor:
    return model(input_ids=x).logits


def _lm_loss(logits: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))


def _bert() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    # num_labels reaches PretrainedConfig through kwargs.
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=CONTEXT, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, num_labels=3,
    )  # fmt: skip
    return BertForSequenceClassification(config)


def _resnet() -> nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(  # num_labels, as above
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
        layer_type="basic", num_labels=5,
    )  # fmt: skip
    return ResNetForImageClassification(config)


class EncoderClassifier(nn.Module):
    """torch's own encoder: `MultiheadAttention` reads `out_proj.weight` without calling
    `out_proj`, so a module-level gate on `out_proj` protects nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        layer = nn.TransformerEncoderLayer(32, 2, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


class SmallNet(nn.Module):
    """BatchNorm buffers, a weight shared by two layers and a parameter that never gets a
    gradient: the awkward parts of real models in a net small enough to hand-check."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 16)
        self.mix = nn.Linear(16, 16)
        self.mix2 = nn.Linear(16, 16, bias=False)
        self.mix2.weight = self.mix.weight
        self.unused = nn.Linear(3, 3)
        self.head = nn.Linear(16, 5)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2).flatten(1)
        x = torch.tanh(self.mix(F.relu(self.fc(x))))
        return self.head(torch.tanh(self.mix2(x)))


def _gpt_mini_tied() -> nn.Module:
    from cadence.models.gpt import build_gpt_mini

    return build_gpt_mini(vocab=VOCAB, context=CONTEXT, n_layers=2, d_model=32, n_heads=2,
                          tie_weights=True)  # fmt: skip


def _plain_logits(model: nn.Module, x: Tensor) -> Tensor:
    return model(x)


CASES: dict[str, ModelCase] = {
    case.name: case
    for case in [
        ModelCase(
            "gpt2",
            _gpt2,
            _tokens,
            lambda m, x, y: _lm_loss(_gpt2_logits(m, x), y),
            _gpt2_logits,
        ),
        ModelCase(
            "bert",
            _bert,
            _labelled_tokens,
            lambda m, x, y: F.cross_entropy(m(input_ids=x).logits.float(), y),
            lambda m, x: m(input_ids=x).logits,
        ),
        ModelCase(
            "resnet",
            _resnet,
            _images(16),  # BatchNorm needs more than one value per channel at the last stage
            lambda m, x, y: F.cross_entropy(m(pixel_values=x).logits.float(), y),
            lambda m, x: m(pixel_values=x).logits,
            has_buffers=True,
        ),
        ModelCase(
            "encoder",
            EncoderClassifier,
            _labelled_tokens,
            lambda m, x, y: F.cross_entropy(m(x).float(), y),
            _plain_logits,
        ),
        ModelCase(
            "gpt_mini_tied",
            _gpt_mini_tied,
            _tokens,
            lambda m, x, y: _lm_loss(m(x), y),
            _plain_logits,
            criterion=_lm_loss,
        ),
        ModelCase(
            "smallnet",
            SmallNet,
            _images(8),
            lambda m, x, y: F.cross_entropy(m(x).float(), y),
            _plain_logits,
            has_buffers=True,
        ),
    ]
}
