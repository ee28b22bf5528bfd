"""What tensor parallelism communicates in one training step, as data, and what it costs.

`gpt_tp_plan` lists every collective a `parallelize_gpt` model issues for one batch, in issue
order; the executor's `count_collectives()` log must equal it (tested), and `predict_comm_s` prices
it with the alpha-beta model. TP collectives block the layer that issued them, so the step's
communication time is their sum (no overlap with computation).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from cadence.comm.cost import AlphaBeta
from cadence.tp.transformer import gpt_parts

# TP collective -> cost-model collective; gloo runs both as rings on CPU.
_COST_NAME = {"all_reduce": "allreduce", "all_gather": "allgather"}


@dataclass(frozen=True)
class TPCollective:
    """One collective of a tensor-parallel training step."""

    block: str
    """Block that issues it, e.g. "layer1" (its attention or MLP) or "final" (the head)."""
    phase: str
    """"forward" or "backward"."""
    collective: str
    """"all_reduce" or "all_gather"."""
    nbytes: int
    """Bytes of the whole vector (all-gather: the gathered output)."""


def gpt_tp_plan(
    model: nn.Module, batch: int, seq: int, tp_size: int, itemsize: int = 4
) -> list[TPCollective]:
    """Collectives of one forward + backward of `parallelize_gpt(model)` on a (batch, seq)
    input of token ids, in issue order; empty for `tp_size` 1.

    Forward: the embedding's all-reduce, one per attention and per MLP, the head's all-gather
    of logits. Backward: one all-reduce of the input gradient of the head, of each MLP and of
    each attention (the embedding needs none).
    """
    if tp_size == 1:
        return []
    embed, layers, final = gpt_parts(model)
    head = final[1]
    assert isinstance(head, nn.Linear)  # checked by gpt_parts; narrows the type
    names = {id(m): n for n, m in model.named_children()}
    hidden = batch * seq * embed.tok.embedding_dim * itemsize
    logits = batch * seq * head.out_features * itemsize
    first, last = names[id(embed)], names[id(final)]
    plan = [TPCollective(first, "forward", "all_reduce", hidden)]
    for layer in layers:
        plan += [TPCollective(names[id(layer)], "forward", "all_reduce", hidden)] * 2
    plan.append(TPCollective(last, "forward", "all_gather", logits))
    plan.append(TPCollective(last, "backward", "all_reduce", hidden))
    for layer in reversed(layers):
        plan += [TPCollective(names[id(layer)], "backward", "all_reduce", hidden)] * 2
    return plan


def predict_comm_s(plan: list[TPCollective], model: AlphaBeta, tp_size: int) -> float:
    """Seconds the plan's collectives take back to back on `tp_size` ranks (ring algorithms)."""
    return sum(model.time(_COST_NAME[c.collective], "ring", c.nbytes, tp_size) for c in plan)
