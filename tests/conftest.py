import compileall
import fcntl
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
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


TESTS = Path(__file__).resolve().parent
NETEM_SCOPE = "emulated clusters"


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package and the tests to bytecode once, before any worker starts: the
    suite starts hundreds of processes that import them, and where PYTHONDONTWRITEBYTECODE is
    set (as on CI's machines) none of them would keep what it compiled."""
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        for tree in (TESTS.parent / "src", TESTS):
            compileall.compile_dir(tree, quiet=1)


@functools.cache
def _netem_file(path: str) -> bool:
    """Whether test file `path` (relative to the root, as in a node id) builds emulated
    clusters: everything under tests/netem/, and files with `needs_netem` tests."""
    if path.startswith("tests/netem/"):
        return True
    try:
        return "@needs_netem" in (TESTS.parent / path).read_text()
    except OSError:
        return False


def _start_order(item: pytest.Item) -> tuple[int, str]:
    path = item.nodeid.split("::")[0]
    if _netem_file(path):
        tier = -1
    else:
        tier = 0 if path.startswith("tests/parity/") else 2 if path.startswith("tests/unit/") else 1
    return tier, path.rsplit("/", 1)[-1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Under pytest-xdist (`pytest_xdist_make_scheduler`) the files that build emulated
    # clusters go first, as one unit; then the longest files (the parity matrices), and the
    # many short unit tests fill the end, so no worker runs a long file alone at the end.
    # Within a file the order is kept.
    items.sort(key=_start_order)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, but every file that builds emulated clusters in one unit, and the
    units in the collection's order (not by size). Those tests take turns (a lock file): as
    files of their own, a worker given one while the other ran another waited idle."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class NetemTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return NETEM_SCOPE if _netem_file(path) else path

    config.option.loadscopereorder = False
    return NetemTogether(config, log)


# Ranks of the parity matrices build transformers' models: their modules (~3.5 s of imports a
# rank) are imported once by the fork server every rank is forked from.
cadence.testing.preload_in_ranks(
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.bert.modeling_bert",
    "transformers.models.resnet.modeling_resnet",
)
