"""The model zoo and the datasets it trains on.

Every model is a `BlockModel`: an `nn.Sequential` of blocks, so pipelines can cut between
blocks and hooks can attach per block. The registry (names, datasets, shapes) loads without
torch; models, datasets and the loss load it when first read.
"""

from typing import TYPE_CHECKING

from cadence._lazy import lazy_names
from cadence.models.registry import dataset_names, get_model_spec, model_names
from cadence.models.spec import ModelSpec

if TYPE_CHECKING:
    from cadence.models.blocks import BlockModel
    from cadence.models.datasets import Dataset, load_dataset
    from cadence.models.loss import loss_fn

__getattr__ = lazy_names(
    __name__,
    {
        "BlockModel": "cadence.models.blocks",
        "Dataset": "cadence.models.datasets",
        "load_dataset": "cadence.models.datasets",
        "loss_fn": "cadence.models.loss",
    },
)

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
