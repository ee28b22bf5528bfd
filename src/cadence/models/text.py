"""Character-level corpus from the Python standard library's own source files."""

from __future__ import annotations

import os
import sysconfig
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from cadence.errors import UserError
from cadence.models.vocab import PLACEHOLDER_ID, VOCAB_SIZE

MAX_CORPUS_CHARS = 1_500_000
"""Enough text for a small model while keeping loading well under two seconds."""
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def encode(text: str) -> Tensor:
    """Map characters to int64 ids in [0, VOCAB_SIZE)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    codes[codes >= VOCAB_SIZE] = PLACEHOLDER_ID
    return torch.from_numpy(codes)


def decode(ids: Tensor) -> str:
    """Inverse of `encode` for ASCII; placeholders come back as U+FFFD."""
    return "".join("\ufffd" if i == PLACEHOLDER_ID else chr(i) for i in ids.tolist())


@lru_cache(maxsize=2)
def stdlib_corpus(max_chars: int = MAX_CORPUS_CHARS) -> str:
    """Concatenated stdlib .py sources in sorted path order, truncated to `max_chars`."""
    root = sysconfig.get_paths()["stdlib"]
    parts: list[str] = []
    total = 0
    # Sorted top-down walk, so the corpus is the same on every call with this interpreter.
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for fname in sorted(f for f in filenames if f.endswith(".py")):
            try:
                with open(os.path.join(dirpath, fname), encoding="utf-8") as fh:
                    src = fh.read()
            except (OSError, UnicodeDecodeError):
                continue
            parts.append(src)
            total += len(src)
            if total >= max_chars:
                return "".join(parts)[:max_chars]
    if not parts:
        raise UserError(f"no readable .py files under the stdlib path {root}")
    return "".join(parts)


def windows(ids: Tensor, context: int) -> tuple[Tensor, Tensor]:
    """Non-overlapping windows of context+1 ids -> (x, y) with y = x shifted left by one."""
    n = ids.numel() // (context + 1)
    w = ids[: n * (context + 1)].view(n, context + 1)
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()
