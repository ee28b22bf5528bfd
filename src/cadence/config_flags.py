"""Every command's flags and TOML file, derived from config fields: `cadence train`'s from
`cadence.config`'s sections, the other commands' from the fields of those sections they share
with train (`FlagSet(..., only=...)`) and from `cadence.command_options`' tables. Each field is
one flag in its table's help group, its docstring the help text, a `Literal` type the flag's
choices. Values come from the defaults, then `--config FILE`, then the flags given."""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, fields
from dataclasses import field as dc_field
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


@dataclass(frozen=True)
class FlagSet:
    """One TOML table's fields offered as flags of a command: `cls`'s fields (`only` picks
    some, in class order), `defaults` replacing the class's, `choices` replacing a `Literal`'s
    (for a command that accepts fewer, or more, values). The flag, type, help and metavar come
    from the field, so an option means the same in every command that takes it."""

    table: str
    cls: type
    only: tuple[str, ...] | None = None
    defaults: Mapping[str, Any] = dc_field(default_factory=dict)
    choices: Mapping[str, tuple[Any, ...]] = dc_field(default_factory=dict)

    def fields(self) -> list[Field[Any]]:
        every = fields(self.cls)
        if self.only is None:
            return list(every)
        unknown = set(self.only) - {f.name for f in every}
        if unknown:
            raise ValueError(f"{self.cls.__name__} has no field {sorted(unknown)}")
        return [f for f in every if f.name in self.only]

    def default(self, f: Field[Any]) -> Any:
        return self.defaults[f.name] if f.name in self.defaults else _default(f)


def flat_key(f: Field[Any]) -> str:
    """The attribute a field's value takes on the parsed arguments: its flag without dashes."""
    return flag_of(f)[2:].replace("-", "_")


def add_flags(parser: argparse.ArgumentParser, sets: Sequence[FlagSet]) -> None:
    """`--config FILE` plus one help group per table and one flag per field. The flags default
    to nothing set (argparse.SUPPRESS), so `resolve_flags` can tell a flag given from a
    default; it runs before the command (`cadence.cli.main`) and sets every field's flat key."""
    add_config_flag(parser)
    for flag_set in sets:
        _add_set(parser, flag_set)
    parser.set_defaults(_flag_sets=tuple(sets))


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """`--config FILE`: the TOML file whose tables the flags given override."""
    parser.add_argument(
        "--config", default=None, metavar="FILE", help="TOML file of settings (flags override it)"
    )


def _add_set(parser: argparse.ArgumentParser, flag_set: FlagSet) -> None:
    cls = flag_set.cls
    group = parser.add_argument_group(flag_set.table, (cls.__doc__ or "").strip())
    docs, hints = field_docs(cls), _hints(cls)
    for f in flag_set.fields():
        kind, choices = _unwrap(hints[f.name])
        choices = flag_set.choices.get(f.name, choices)
        kwargs: dict[str, Any] = {
            "dest": f"{flag_set.table}.{f.name}",
            "default": argparse.SUPPRESS,
            "help": _help(docs.get(f.name, ""), flag_set.default(f)),
        }
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            item = _item_type(hints[f.name])
            if item is not None:  # tuple[X, ...]: several values, or the flag repeated
                kind, kwargs["nargs"], kwargs["action"] = item, "+", "extend"
            # A field's own parser runs in `resolve_flags`, so a bad value is a one-line UserError
            # like any other (argparse would report an exception from `type` as a traceback).
            kwargs["type"] = str if f.metadata.get("parse") else kind
            if choices:
                kwargs["choices"] = choices
            else:
                kwargs["metavar"] = f.metadata.get("metavar") or _METAVARS.get(kind, "TEXT")
        group.add_argument(flag_of(f), **kwargs)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """`cadence train`'s flags: every field of every `TrainConfig` section (no `--config`;
    `add_flags` adds it)."""
    for section, cls in SECTIONS.items():
        _add_set(parser, FlagSet(section, cls))


def _item_type(hint: Any) -> Any:
    """X of a `tuple[X, ...]` field (Optional removed), else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0]
    return None


def _tables() -> dict[str, type]:
    """Every table a TOML file may hold: `TrainConfig`'s sections and the commands' own."""
    from cadence.command_options import COMMAND_TABLES

    return {**SECTIONS, **COMMAND_TABLES}


def load_toml(path: str, tables: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """`[table]` of `key = value` from a TOML file, each key checked against its table's
    fields and each value's type against the field's; one line for the first wrong. Tables of
    other commands are checked and left out when `tables` names the ones this command takes."""
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
    known = _tables()
    taken = list(SECTIONS) if tables is None else list(tables)
    out: dict[str, dict[str, Any]] = {}
    for section, table in raw.items():
        if section not in known or not isinstance(table, dict):
            raise UserError(
                f"--config {path}: unknown section [{section}]: use tables "
                f"{', '.join(f'[{s}]' for s in taken)}"
            )
        cls = known[section]
        names = {f.name: f for f in fields(cls)}
        hints = _hints(cls)
        for key, value in table.items():
            if key not in names:
                raise UserError(
                    f"--config {path}: unknown key '{key}' in [{section}]: choose from "
                    f"{', '.join(names)}"
                )
            checked = _toml_value(path, section, key, value, names[key], hints[key])
            if section in taken:
                out.setdefault(section, {})[key] = checked
    return out


def _toml_value(path: str, section: str, key: str, value: Any, f: Field[Any], hint: Any) -> Any:
    item = _item_type(hint)
    if item is not None:
        if not isinstance(value, list):
            raise UserError(f"--config {path}: [{section}] {key} = {value!r} should be a list")
        return tuple(_toml_value(path, section, key, v, f, item) for v in value)
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


def _given(args: argparse.Namespace, tables: Sequence[str]) -> dict[str, dict[str, Any]]:
    """`--config FILE`'s values overridden by the flags given, as {table: {field: value}}."""
    values = load_toml(args.config, tables) if getattr(args, "config", None) else {}
    known = _tables()
    for dest, value in vars(args).items():
        table, _, name = dest.partition(".")
        if name and table in tables:
            parse = next(f for f in fields(known[table]) if f.name == name).metadata.get("parse")
            values.setdefault(table, {})[name] = value if parse is None else parse(value)
    return values


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Defaults, overridden by `--config FILE`'s values, overridden by the flags given."""
    values = _given(args, list(SECTIONS))
    return TrainConfig(**{s: cls(**values.get(s, {})) for s, cls in SECTIONS.items()})


def resolve_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The tables of a command's `add_flags`, built from defaults < `--config FILE` < flags
    (each one's own checks run, one line naming the flag), and every field's value set on
    `args` under its flat key (`args.batch_size`, `args.zero_stage`). A value one of the
    command's `choices` allows beyond the field's `Literal` skips only the field's check."""
    sets: tuple[FlagSet, ...] = args._flag_sets
    values = _given(args, [s.table for s in sets])
    built: dict[str, Any] = {}
    args._given = set()  # flat keys set by --config FILE or a flag, not by a default
    for flag_set in sets:
        given = values.get(flag_set.table, {})
        args._given |= {flat_key(f) for f in flag_set.fields() if f.name in given}
        chosen = {f.name: given.get(f.name, flag_set.default(f)) for f in flag_set.fields()}
        hints = _hints(flag_set.cls)
        for f in flag_set.fields():
            if f.name in flag_set.choices and chosen[f.name] not in flag_set.choices[f.name]:
                names = ", ".join(map(str, flag_set.choices[f.name]))
                raise UserError(f"unknown {flag_of(f)} '{chosen[f.name]}': choose one of {names}")
        checked = {
            name: value
            for name, value in chosen.items()
            if name not in flag_set.choices or value in (_unwrap(hints[name])[1] or (value,))
        }
        built[flag_set.table] = flag_set.cls(**checked)
        for f in flag_set.fields():
            setattr(args, flat_key(f), chosen[f.name])
    return built
