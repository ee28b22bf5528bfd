"""Environment for the worker processes a benchmark starts."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def child_environment(updates: Mapping[str, str]) -> Iterator[None]:
    """Set `updates` in this process's environment, which the workers it starts inherit
    (glibc reads its malloc settings from there at a process's start), and restore the
    previous values on the way out, failure included."""
    saved = {key: os.environ.get(key) for key in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
