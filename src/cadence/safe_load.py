"""Loading checkpoints without running code they carry.

A checkpoint is a pickle; unpickling an arbitrary one runs whatever callable it names. Every
checkpoint cadence writes is plain data (dicts, lists and tuples of tensors, numbers, strings
and None), so every one it reads goes through `torch.load(weights_only=True)`, whose unpickler
builds only those; a file naming anything else (a class, a function) is refused with one line.
"""

from __future__ import annotations

import os
import pickle
import re
from typing import Any

import torch

from cadence.errors import UserError

_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = None) -> Any:
    """The data in the checkpoint `path`; `UserError` if it holds anything but plain data."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = _GLOBAL.search(str(exc))
        what = found.group(1) if found else "an object that is not plain data"
        raise UserError(
            f"checkpoint '{path}' holds {what}, not only tensors and plain values: refusing to "
            "unpickle it (it could run code); load only checkpoints cadence wrote"
        ) from None
