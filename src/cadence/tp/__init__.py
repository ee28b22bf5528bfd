"""Intra-operator (tensor) parallelism: weights of one layer split over the ranks of a group.

Column-parallel and row-parallel Linear, a vocabulary-sharded embedding, a transformer MLP and
attention block with one all-reduce per forward each, and `parallelize_gpt`, which turns the
zoo's gpt_mini into a tensor-parallel model whose shards are copied from the full model;
`gpt_tp_plan` lists the collectives one step issues and `predict_comm_s` prices them.
"""

from cadence.tp.functions import (
    copy_to_tp,
    count_collectives,
    gather_from_tp,
    hybrid_groups,
    reduce_from_tp,
)
from cadence.tp.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    local_slice,
)
from cadence.tp.plan import TPCollective, gpt_tp_plan, predict_comm_s
from cadence.tp.transformer import TPAttention, parallelize_gpt, shard_dims, tp_mlp

__all__ = [
    "ColumnParallelLinear",
    "RowParallelLinear",
    "TPAttention",
    "TPCollective",
    "VocabParallelEmbedding",
    "copy_to_tp",
    "count_collectives",
    "gather_from_tp",
    "hybrid_groups",
    "gpt_tp_plan",
    "local_slice",
    "parallelize_gpt",
    "predict_comm_s",
    "reduce_from_tp",
    "shard_dims",
    "tp_mlp",
]
