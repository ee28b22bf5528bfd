"""Package names that load their modules on first use (PEP 562), so plain-data modules (plans,
configs, cost models, profiles) can be imported without paying for torch: the command line
parses and checks its arguments, and answers bad input, before any torch import."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `homes[name]` when `name` is read."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(homes[name])
        except ModuleNotFoundError as exc:  # an optional package (pyzmq, ...): one line
            from cadence.extras import user_error_for

            error = user_error_for(exc)
            if error is None:
                raise
            raise error from None
        return getattr(module, name)

    return __getattr__
