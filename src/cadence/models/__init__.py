"""The model zoo and the datasets it trains on.

Every model is a `BlockModel`: an `nn.Sequential` of blocks, so pipelines can cut between
blocks and hooks can attach per block.
"""

from cadence.models.blocks import BlockModel
from cadence.models.datasets import Dataset, dataset_names, load_dataset
from cadence.models.loss import loss_fn
from cadence.models.registry import get_model_spec, model_names
from cadence.models.spec import ModelSpec

__all__ = [
    "BlockModel",
    "Dataset",
    "ModelSpec",
    "dataset_names",
    "get_model_spec",
    "load_dataset",
    "loss_fn",
    "model_names",
]
