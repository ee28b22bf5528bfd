"""Byte sizes on the command line: `4mib`, `2GiB`, `500kb`, `none`. Torch-free, so every command
can parse its flags before importing anything heavy."""

from __future__ import annotations

import math
import re

from cadence.errors import UserError

_SIZE = re.compile(r"^(\d+(?:\.\d*)?)\s*(b|kb|mb|gb|kib|mib|gib)?$", re.IGNORECASE)
_SCALE = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(text: str, what: str = "size") -> int:
    """Bytes in `text`: a number with an optional unit (b, kb, mb, gb, kib, mib, gib)."""
    match = _SIZE.match(text.strip()) if isinstance(text, str) else None
    if match is not None:
        value = float(match.group(1)) * _SCALE[(match.group(2) or "b").lower()]
        if value >= 1 and math.isfinite(value):
            return int(value)
    raise UserError(
        f"bad {what} {text!r}: use a positive number of bytes, optionally with kb, mb, gb, "
        "kib, mib or gib (e.g. 4mib)"
    )


def parse_memory_limit(text: str | None) -> int | None:
    """`--memory-limit` of every command: bytes as `parse_size`, or None when absent/"none"."""
    if text is None or text.strip().lower() in ("", "none"):
        return None
    return parse_size(text, "--memory-limit")
