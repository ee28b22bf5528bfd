"""Only `cadence.comm` calls torch.distributed's collectives and makes process groups: every
other module goes through `cadence.comm.ops` / `cadence.comm.process_group`."""

from __future__ import annotations

import ast
from pathlib import Path

import cadence

COLLECTIVES = {
    "all_gather", "all_gather_into_tensor", "all_gather_object", "all_gather_single",
    "all_reduce", "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv",
    "broadcast", "broadcast_object_list", "gather", "gather_object", "init_process_group",
    "irecv", "isend", "monitored_barrier", "new_group", "new_subgroups", "recv",
    "recv_object_list", "reduce", "reduce_scatter", "reduce_scatter_single",
    "reduce_scatter_tensor", "scatter", "scatter_object_list", "send", "send_object_list",
}  # fmt: skip
PACKAGE = Path(cadence.__file__).parent


def _distributed_aliases(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Names bound to torch.distributed, and collectives imported from it by name."""
    modules: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch.distributed" and alias.asname:
                    modules.add(alias.asname)
        elif isinstance(node, ast.ImportFrom):
            if node.module == "torch" and any(a.name == "distributed" for a in node.names):
                modules.update(a.asname or a.name for a in node.names if a.name == "distributed")
            if node.module == "torch.distributed":
                names.update(a.asname or a.name for a in node.names if a.name in COLLECTIVES)
    return modules, names


def _chain(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def offenders(source: str, where: str) -> list[str]:
    """`where:line call` for every torch.distributed collective `source` calls."""
    tree = ast.parse(source)
    modules, names = _distributed_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in COLLECTIVES:
            owner = _chain(node.value)
            if owner in modules or owner == "torch.distributed":
                found.append(f"{where}:{node.lineno} {owner}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in names:
            found.append(f"{where}:{node.lineno} {node.id}")
    return found


def test_the_check_sees_every_spelling() -> None:
    source = (
        "import torch\nimport torch.distributed as dist\nfrom torch import distributed as d2\n"
        "from torch.distributed import all_reduce as ar\n"
        "dist.all_reduce(x)\nd2.broadcast(x, 0)\ntorch.distributed.barrier()\nar(x)\n"
        "dist.get_rank()\nf = getattr(dist, 'x', dist.reduce_scatter_tensor)\n"
    )
    assert len(offenders(source, "m")) == 5
    assert offenders("import torch.distributed as dist\ndist.get_world_size()\n", "m") == []


def test_no_module_outside_comm_calls_a_collective() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "comm":
            continue
        found += offenders(path.read_text(), str(relative))
    assert found == [], "use cadence.comm.ops / cadence.comm.process_group:\n" + "\n".join(found)
