"""Server checkpoints: one `.npz` file per server with every slice's value, version, clocks
and optimizer state (numpy only, like the server).

Slices reach a version at different moments, so a periodic checkpoint is assembled from
per-slice snapshots taken when each slice reaches the same version, and written once the last
slice of the server has one: the file always holds one consistent version. Files are written
to a temporary name and renamed, so a crash mid-write leaves the previous checkpoint intact.
Files are read without unpickling (`allow_pickle=False`): one holding pickled objects is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

_OPT_FIELDS = ("buf", "m", "v")


def checkpoint_path(directory: str | os.PathLike[str], server: int) -> Path:
    """The file of server `server` in `directory`."""
    return Path(directory) / f"server{server}.npz"


def snapshot(state: Any) -> dict[str, Any]:
    """Copies of what a `SliceState` needs to resume (value, version, clocks, optimizer)."""
    opt = state.optimizer
    snap: dict[str, Any] = {
        "value": state.value.copy(),
        "version": state.version,
        "clocks": list(state.clocks),
        "opt_steps": opt.steps,
    }
    for name in _OPT_FIELDS:
        array = getattr(opt, name)
        snap[name] = None if array is None else array.copy()
    return snap


def save(path: Path, snapshots: dict[int, dict[str, Any]]) -> None:
    """Write the snapshots of all slices (by key) atomically."""
    arrays: dict[str, Any] = {"keys": np.array(sorted(snapshots), np.int64)}
    for key, snap in snapshots.items():
        arrays[f"{key}.value"] = snap["value"]
        meta = [snap["version"], snap["opt_steps"], *snap["clocks"]]
        arrays[f"{key}.meta"] = np.array(meta, np.int64)
        for name in _OPT_FIELDS:
            if snap[name] is not None:
                arrays[f"{key}.{name}"] = snap[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as stream:
        np.savez(stream, **arrays)
    os.replace(tmp, path)


def restore(path: Path, slices: dict[int, Any]) -> int:
    """Load `path` into the `SliceState`s `slices`; returns the version restored.

    Raises ValueError if the file does not describe exactly these slices (another model,
    server count or slice size) or holds pickled objects instead of plain arrays.
    """
    try:
        return _restore(path, slices)
    except ValueError as exc:
        if "allow_pickle" in str(exc):  # numpy's refusal to unpickle an object array
            raise ValueError(
                f"checkpoint {path} holds pickled objects, not plain arrays: refusing to load it"
            ) from None
        raise


def _restore(path: Path, slices: dict[int, Any]) -> int:
    with np.load(path, allow_pickle=False) as data:
        keys = sorted(int(k) for k in data["keys"])
        if keys != sorted(slices):
            raise ValueError(f"checkpoint {path} holds slices {keys}, this server {sorted(slices)}")
        versions = set()
        for key in keys:
            state = slices[key]
            value = data[f"{key}.value"]
            if value.shape != state.value.shape:
                raise ValueError(
                    f"checkpoint {path}: slice {key} has {value.size} elements, "
                    f"expected {state.value.size}"
                )
            meta = [int(x) for x in data[f"{key}.meta"]]
            state.value[:] = value
            state.version, state.optimizer.steps = meta[0], meta[1]
            if len(meta) - 2 == len(state.clocks):
                state.clocks[:] = meta[2:]
            for name in _OPT_FIELDS:
                if f"{key}.{name}" in data:
                    setattr(state.optimizer, name, data[f"{key}.{name}"].copy())
            state.initialized = True
            versions.add(state.version)
    return min(versions, default=0)
