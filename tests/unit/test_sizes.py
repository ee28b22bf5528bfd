"""Byte sizes on the command line: one parser for every command's sizes and memory limits."""

import pytest

from cadence.errors import UserError
from cadence.sizes import parse_memory_limit, parse_size


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [("4mib", 4 << 20), ("2GiB", 2 << 30), ("500kb", 500_000), ("1.5 MB", 1_500_000), ("64", 64)],
)
def test_sizes_parse_with_decimal_and_binary_units(text, nbytes):
    assert parse_size(text) == nbytes
    assert parse_memory_limit(text) == nbytes


@pytest.mark.parametrize("text", [None, "", "none", " NONE "])
def test_no_memory_limit(text):
    assert parse_memory_limit(text) is None


@pytest.mark.parametrize("text", ["fast", "-1mb", "0", "4 tb", "nan"])
def test_bad_sizes_name_the_flag(text):
    with pytest.raises(UserError, match=r"bad --memory-limit .*e\.g\. 4mib"):
        parse_memory_limit(text)
