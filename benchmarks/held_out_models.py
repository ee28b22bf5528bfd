"""Public-library models of the held-out set (`held_out.toml`), for `cadence train --model
held_out_models:<factory>` (`cadence bench sim --held-out` puts this folder on the import path).

`gpt2_blocks` is GPT-2 from Hugging Face transformers, built from a config with random weights
(nothing downloaded): its own embedding, `GPT2Block` and final LayerNorm modules, laid out as an
`nn.Sequential` of blocks so the simulator profiles each block (and a pipeline could cut it). The
head is its own Linear (GPT-2 ties it to the token embedding; untied, every block owns its
parameters). `tokens` is its data: random token ids, each target the next token.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

VOCAB = 256
CONTEXT = 64


class _Embed(nn.Module):
    """Token plus position embeddings, as GPT2Model sums them."""

    def __init__(self, wte: nn.Embedding, wpe: nn.Embedding) -> None:
        super().__init__()
        self.wte, self.wpe = wte, wpe

    def forward(self, ids: Tensor) -> Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.wte(ids) + self.wpe(positions)


class _Block(nn.Module):
    """One `GPT2Block`, its hidden states out (the block returns a tuple in some versions)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, hidden: Tensor) -> Tensor:
        out = self.block(hidden)
        return out[0] if isinstance(out, tuple) else out


def gpt2_blocks() -> nn.Sequential:
    """A 2-layer GPT-2 (d 128, 4 heads, vocabulary 256, context 64) from transformers."""
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=VOCAB, n_positions=CONTEXT,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    body = GPT2Model(config)
    return nn.Sequential(
        _Embed(body.wte, body.wpe),
        *(_Block(block) for block in body.h),
        nn.Sequential(body.ln_f, nn.Linear(config.n_embd, VOCAB)),
    )


def tokens() -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """(train, test) of random token sequences, each target the next token."""
    ids = torch.randint(0, VOCAB, (640, CONTEXT + 1))
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    return (x[:512], y[:512]), (x[512:], y[512:])
