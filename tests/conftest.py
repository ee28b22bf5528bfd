import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import cadence.testing


def _netem_missing_reason() -> str | None:
    if os.geteuid() != 0:
        return "emulated cluster needs root"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "emulated cluster needs iproute2 (ip, tc)"
    return None


NETEM_SKIP_REASON = _netem_missing_reason()
_netem_skip = pytest.mark.skipif(NETEM_SKIP_REASON is not None, reason=NETEM_SKIP_REASON or "")


def needs_netem(test: Callable[..., Any]) -> Callable[..., Any]:
    """Skip `test` where no emulated cluster can be built, and mark it `netem`."""
    return pytest.mark.netem(_netem_skip(test))


def _builds_clusters(item: pytest.Item) -> bool:
    return item.get_closest_marker("netem") is not None or item.nodeid.startswith("tests/netem/")


@pytest.fixture(autouse=True)
def _one_emulated_cluster_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests that build emulated clusters compare the host's namespaces before and after and
    time capped links: under pytest-xdist they take turns (a lock file), whichever worker
    runs them."""
    if not _builds_clusters(request.node):
        yield
        return
    with open(os.path.join(tempfile.gettempdir(), "cadence-tests-netem.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _start_order(item: pytest.Item) -> tuple[int, str]:
    path = item.nodeid.split("::")[0]
    tier = 0 if path.startswith("tests/parity/") else 2 if path.startswith("tests/unit/") else 1
    return tier, path.rsplit("/", 1)[-1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Under pytest-xdist the longest files (the parity matrices) start first and the many
    # short unit tests fill the end, so no worker runs a long file alone at the end; the
    # multi-process files of tests/dist and tests/netem interleave by name, which spreads
    # the netem files (they take turns) among the others. Within a file the order is kept.
    items.sort(key=_start_order)


# Ranks of the parity matrices build transformers' models: their modules (~3.5 s of imports a
# rank) are imported once by the fork server every rank is forked from.
cadence.testing.preload_in_ranks(
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.bert.modeling_bert",
    "transformers.models.resnet.modeling_resnet",
)
