"""The digits split cache: the same arrays as scikit-learn's split, rebuilt when damaged."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cadence.models import digits


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(digits.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _assert_same(a: digits.DigitsSplit, b: digits.DigitsSplit) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def test_cached_split_is_scikit_learns_split_bit_for_bit(cache: Path) -> None:
    fresh = digits.compute_split(5)
    first = digits.digits_split(5)  # computes and writes
    assert digits.cache_path(5).parent == cache and digits.cache_path(5).exists()
    second = digits.digits_split(5)  # reads
    _assert_same(first, fresh)
    _assert_same(second, fresh)
    assert len(fresh[0]) + len(fresh[1]) == 1797 and fresh[0].dtype == np.float32
    assert not list(cache.glob("*.tmp"))  # nothing left aside by the atomic write


def test_other_seeds_have_their_own_file(cache: Path) -> None:
    a, b = digits.digits_split(1), digits.digits_split(2)
    assert digits.cache_path(1) != digits.cache_path(2)
    assert not np.array_equal(a[2], b[2])


def test_a_damaged_cache_file_is_rebuilt(cache: Path) -> None:
    path = digits.cache_path(7)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an npz")
    _assert_same(digits.digits_split(7), digits.compute_split(7))
    _assert_same(digits.digits_split(7), digits.compute_split(7))  # now read back whole


def test_an_unwritable_cache_only_costs_the_import(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv(digits.CACHE_DIR_ENV, str(blocker / "cache"))
    _assert_same(digits.digits_split(0), digits.compute_split(0))


def test_reading_the_cache_does_not_import_scikit_learn(cache: Path) -> None:
    digits.digits_split(0)
    code = (
        "import sys; from cadence.models.digits import digits_split; digits_split(0); "
        "print('sklearn' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, digits.CACHE_DIR_ENV: str(cache)},
    )  # fmt: skip
    assert proc.stdout.strip() == "False"
