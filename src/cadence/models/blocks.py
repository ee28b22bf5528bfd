"""`BlockModel`: every model in the zoo is a flat sequence of blocks.

Pipeline stages are cut at block boundaries and per-layer hooks attach to blocks, so a model
must do nothing in `forward` beyond applying its blocks in order (which `nn.Sequential` does).
Anything else (residual adds, flattening, reshaping to sequences) lives inside a block.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn


class BlockModel(nn.Sequential):
    """A model whose children are its blocks, applied in order.

    Build it like `nn.Sequential`: from modules, or from an `OrderedDict` of named blocks
    (names show up in hooks and reports). Slicing (`model[a:b]`) yields a `BlockModel` too.
    """

    def blocks(self) -> list[nn.Module]:
        """The blocks in forward order."""
        return list(self.children())

    def block_names(self) -> list[str]:
        """The blocks' names, aligned with `blocks()`."""
        return [name for name, _ in self.named_children()]

    def num_parameters(self) -> int:
        """Number of distinct parameter elements (a tied parameter counts once)."""
        return sum(p.numel() for p in self.parameters())


def named_blocks(*pairs: tuple[str, nn.Module]) -> BlockModel:
    """Build a `BlockModel` from (name, block) pairs; names must be unique."""
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate block names in {names}")
    return BlockModel(OrderedDict(pairs))
