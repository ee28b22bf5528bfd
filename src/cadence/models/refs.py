"""`pkg.module:name` references to a user's own model factory, dataset factory or loss.

Torch-free, so the configuration can recognise a reference without loading torch; the object
is imported the way `python -m` would find it: from `sys.path`, which here always includes the
current directory (the console script `cadence` does not put it there by itself).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from cadence.errors import UserError

USER_ZOO_DATASETS = ("digits",)
"""Zoo datasets a user's model may train on (their samples do not depend on the model):
digits gives (N, 1, 8, 8) float images with int64 labels 0-9."""


def is_ref(name: str | None) -> bool:
    """Whether `name` is a `pkg.module:name` reference rather than a zoo name."""
    return name is not None and ":" in name


def import_ref(ref: str, flag: str) -> Any:
    """The callable `ref` names; a one-line `UserError` (naming `flag`) when its module cannot
    be imported, the attribute is missing or it is not callable."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr or ":" in attr:
        raise UserError(f"{flag} '{ref}': write it as pkg.module:name")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise UserError(
                f"{flag} '{ref}': no module named '{exc.name}' (run cadence from the directory "
                "that holds it, or add that directory to PYTHONPATH)"
            ) from None
        raise UserError(f"{flag} '{ref}': importing {module_name} failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module: say what broke, in one line
        raise UserError(
            f"{flag} '{ref}': importing {module_name} failed: {type(exc).__name__}: "
            f"{first_line(exc)}"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UserError(
                f"{flag} '{ref}': module '{module_name}' has no attribute '{attr}'"
            ) from None
    if not callable(obj):
        raise UserError(
            f"{flag} '{ref}': '{attr}' is not callable (it is of type {type(obj).__name__})"
        )
    return obj


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"
