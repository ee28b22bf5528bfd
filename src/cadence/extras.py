"""Optional dependencies: what each is for, and the one line a user sees when it is missing.

cadence's core (training with ddp, cadence-dp, zero and pipeline, the simulator, the emulated
cluster) needs only the packages `pyproject.toml` lists as dependencies. The parameter server
needs pyzmq (extra `ps`); `cadence bench zero`'s DeepSpeed peer needs deepspeed (extra
`peers`).
"""

from __future__ import annotations

import importlib.util

from cadence.errors import UserError

OPTIONAL: dict[str, tuple[str, str, str]] = {
    "zmq": ("pyzmq", "ps", "the parameter server (--strategy ps)"),
    "deepspeed": ("deepspeed", "peers", "the DeepSpeed peer of `cadence bench zero`"),
}
"""Import name -> (distribution, extra that installs it, what needs it)."""


def missing_line(module: str) -> str:
    """The one line that says how to install optional `module`."""
    distribution, extra, what = OPTIONAL[module]
    return (
        f"{what} needs {distribution}, which is not installed: "
        f"pip install 'cadence[{extra}]' (or pip install {distribution})"
    )


def require(module: str) -> None:
    """Raise a one-line UserError unless optional `module` can be imported."""
    if importlib.util.find_spec(module) is None:
        raise UserError(missing_line(module))


def user_error_for(exc: ModuleNotFoundError) -> UserError | None:
    """The UserError for an import that failed on a missing optional package, else None."""
    top = (exc.name or "").split(".")[0]
    return UserError(missing_line(top)) if top in OPTIONAL else None
