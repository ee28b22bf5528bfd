"""The digits train/test split, cached on disk so a worker need not import scikit-learn.

Importing scikit-learn (for `load_digits` and its stratified `train_test_split`) takes 2-3.5 s
of one core, in every worker of every run: with two workers on 2 cores, a quarter of a short
training run's wall time. The split is computed once per seed and scikit-learn version and
kept as a `.npz` file; later runs read the same arrays back (bit for bit the same split).
A cache that cannot be read or written is rebuilt or skipped, never an error.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

CACHE_DIR_ENV = "CADENCE_CACHE_DIR"
"""Environment variable naming the cache folder (default `$XDG_CACHE_HOME/cadence`, or
`~/.cache/cadence`)."""
TEST_FRACTION = 0.2
"""Share of the digits held out for testing (stratified by label)."""
_ARRAYS = ("x_train", "x_test", "y_train", "y_test")

DigitsSplit = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Pixels scaled to [0, 1] (float32, N x 64) and labels (int64): train x, test x, train y,
test y."""


def cache_dir() -> Path:
    """Where cached splits live."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cadence"


def cache_path(seed: int) -> Path:
    """The file holding `seed`'s split; named by scikit-learn's version, whose splitter made it."""
    try:
        sklearn_version = version("scikit-learn")
    except PackageNotFoundError:
        sklearn_version = "none"
    return cache_dir() / f"digits-split-seed{seed}-sklearn{sklearn_version}.npz"


def compute_split(seed: int) -> DigitsSplit:
    """The split made from scratch with scikit-learn (seconds: it imports scikit-learn)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    raw = load_digits()
    pixels = np.asarray(raw.data, dtype=np.float32) / 16.0  # digits pixels are 0..16
    labels = np.asarray(raw.target, dtype=np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        pixels, labels, test_size=TEST_FRACTION, stratify=labels, random_state=seed
    )
    return x_tr, x_te, y_tr, y_te


def _read(path: Path) -> DigitsSplit | None:
    try:
        with np.load(path) as data:
            arrays = tuple(data[name] for name in _ARRAYS)  # each read whole, once
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # absent, truncated or from something else: rebuild it
    return arrays


def _write(path: Path, split: DigitsSplit) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside then renamed: ranks starting together never read a half-written file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                x_train, x_test, y_train, y_test = split
                np.savez(out, x_train=x_train, x_test=x_test, y_train=y_train, y_test=y_test)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError:
        pass  # a read-only or full disk only costs the next run the import again


def digits_split(seed: int) -> DigitsSplit:
    """`seed`'s stratified digits split, from the cache when it is there."""
    path = cache_path(seed)
    cached = _read(path)
    if cached is not None:
        return cached
    split = compute_split(seed)
    _write(path, split)
    return split
