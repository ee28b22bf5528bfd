"""`cadence train`'s flags and TOML file, derived from `cadence.config`'s sections: each field
is one flag in its section's help group, its docstring the help text, a `Literal` type the
flag's choices. Values come from the defaults, then `--config FILE`, then the flags given."""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import sys
import types
import typing
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any

from cadence.config import SECTIONS, TrainConfig, flag_of
from cadence.errors import UserError


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass `cls`, whitespace collapsed (read from its
    source: Python keeps no attribute docstrings at run time); {} where there is no source."""
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and is_doc:
            docs[node.target.id] = " ".join(str(after.value.value).split())  # type: ignore[attr-defined]
    return docs


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def _unwrap(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """(the value type, the Literal's choices or ()) of a field's type, Optional removed."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        return type(choices[0]), choices
    return hint, ()


def _default(f: Field[Any]) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[operator]


def _help(doc: str, default: Any) -> str:
    shown = (
        "none"
        if default is None
        else str(default).lower()
        if isinstance(default, bool)
        else default
    )
    return f"{doc} (default: {shown})".replace("%", "%%")


_METAVARS = {int: "N", float: "X"}


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One help group per section and one flag per field. The flags default to nothing set
    (argparse.SUPPRESS), so `config_from_args` can tell a flag given from a default."""
    for section, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{section}", (cls.__doc__ or "").strip())
        docs, hints = field_docs(cls), _hints(cls)
        for f in fields(cls):
            kind, choices = _unwrap(hints[f.name])
            kwargs: dict[str, Any] = {
                "dest": f"{section}.{f.name}",
                "default": argparse.SUPPRESS,
                "help": _help(docs.get(f.name, ""), _default(f)),
            }
            if kind is bool:
                kwargs["action"] = argparse.BooleanOptionalAction
            else:
                kwargs["type"] = f.metadata.get("parse") or kind
                if choices:
                    kwargs["choices"] = choices
                else:
                    kwargs["metavar"] = f.metadata.get("metavar") or _METAVARS.get(kind, "TEXT")
            group.add_argument(flag_of(f), **kwargs)


def load_toml(path: str) -> dict[str, dict[str, Any]]:
    """`[section]` tables of `key = value` from a TOML file, each key checked against its
    section's fields and each value's type against the field's; one line for the first wrong."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise UserError(
                f"--config {path}: reading TOML needs Python 3.11 or `pip install tomli`"
            ) from None
    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise UserError(f"cannot read --config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"--config {path} is not valid TOML: {exc}") from None
    out: dict[str, dict[str, Any]] = {}
    for section, table in raw.items():
        if section not in SECTIONS or not isinstance(table, dict):
            raise UserError(
                f"--config {path}: unknown section [{section}]: use tables "
                f"{', '.join(f'[{s}]' for s in SECTIONS)}"
            )
        cls = SECTIONS[section]
        known = {f.name: f for f in fields(cls)}
        hints = _hints(cls)
        for key, value in table.items():
            if key not in known:
                raise UserError(
                    f"--config {path}: unknown key '{key}' in [{section}]: choose from "
                    f"{', '.join(known)}"
                )
            out.setdefault(section, {})[key] = _toml_value(
                path, section, key, value, known[key], hints[key]
            )
    return out


def _toml_value(path: str, section: str, key: str, value: Any, f: Field[Any], hint: Any) -> Any:
    kind, _ = _unwrap(hint)
    parse = f.metadata.get("parse")
    if parse is not None and isinstance(value, str):
        return parse(value)
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise UserError(
            f"--config {path}: [{section}] {key} = {value!r} should be a {kind.__name__}"
        )
    return value


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Defaults, overridden by `--config FILE`'s values, overridden by the flags given."""
    values = load_toml(args.config) if getattr(args, "config", None) else {}
    for dest, value in vars(args).items():
        section, _, name = dest.partition(".")
        if name and section in SECTIONS:
            values.setdefault(section, {})[name] = value
    return TrainConfig(**{s: cls(**values.get(s, {})) for s, cls in SECTIONS.items()})
