"""The package's import graph has no cycle (issue 15, item 1; DESIGN.md section 8).

Records at the bottom (``state``), the contract above them (``contract``), the
backends above it and the registry (``backends``) at the top: nothing below
the registry imports it.  The graph is read from the source with ``ast`` --
module-level *and* function-level imports, so a cycle cannot hide behind a
function-local import.  Importing ``a.b`` counts as an edge to ``a.b`` only
(Python also runs ``a/__init__``, but an edge to every parent package would
make each package's ``__init__`` importing its own modules a cycle).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "mxrec_ref"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
EXCLUDED: tuple[str, ...] = ()      # every module is checked, the TF layer and the mx_rec alias included


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of ``from <level dots><target> import ...`` written in ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``module`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = resolve(module, is_package, node.level, node.module)
            for alias in node.names:      # ``from pkg import module`` imports the module
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source)
    return {name for name in found if name in known and name != module}


def graph(excluded=EXCLUDED) -> dict[str, set[str]]:
    known = modules()
    keep = {name for name in known if not name.startswith(excluded)}
    return {name: imports_of(name, known[name], set(known)) & keep for name in sorted(keep)}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(edges[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_cycle_finder_finds_a_cycle():
    """The check itself can fail: a two-module loop and a three-module loop are found."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert cycles(edges) == [["a", "b"], ["c", "d", "e"]]


def test_resolve_relative_imports():
    assert resolve("mxrec_ref.ref.store", False, 2, "contract") == "mxrec_ref.contract"
    assert resolve("mxrec_ref.ref", True, 1, "store") == "mxrec_ref.ref.store"
    assert resolve("mxrec_ref.store", False, 1, None) == "mxrec_ref"


def test_the_graph_sees_function_level_imports():
    edges = graph()
    assert "mxrec_ref.state" in edges["mxrec_ref.checkpoint.writer"]      # the format package's writer
    assert {"mxrec_ref.ref", "mxrec_ref.tiers"} <= edges["mxrec_ref.backends"]


def test_the_import_graph_has_no_cycle():
    found = cycles(graph())
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(component) for component in found)


@pytest.mark.parametrize("low", ["mxrec_ref.state", "mxrec_ref.contract", "mxrec_ref.checkpoint",
                                 "mxrec_ref.ref.store", "mxrec_ref.fast", "mxrec_ref.tiers.store"])
def test_nothing_below_the_registry_imports_it(low):
    """DESIGN.md section 8: records, contract and backends never import the registry."""
    edges = graph()
    reachable, todo = set(), [low]
    while todo:
        for successor in edges[todo.pop()]:
            if successor not in reachable:
                reachable.add(successor)
                todo.append(successor)
    assert not reachable & {"mxrec_ref.backends", "mxrec_ref.store", PACKAGE}, sorted(reachable)


def local_imports_without_reason(module: str, path: Path, known: set[str]) -> list[int]:
    """Lines of function-level imports of project modules with no comment on the line or above it."""
    lines = path.read_text().splitlines()
    tree = ast.parse(path.read_text(), str(path))
    bare = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                targets = [resolve(module, path.name == "__init__.py", node.level, node.module)]
            if not any(name == PACKAGE or name.startswith(PACKAGE + ".") for name in targets):
                continue
            commented = "#" in lines[node.end_lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
            if not commented:
                bare.append(node.lineno)
    return sorted(set(bare))


def test_function_local_imports_of_the_project_say_why():
    known = modules()
    found = {}
    for name, path in known.items():
        if name.startswith(EXCLUDED):
            continue
        lines = local_imports_without_reason(name, path, set(known))
        if lines:
            found[name] = lines
    assert found == {}, f"function-local imports of mxrec_ref without a comment saying why: {found}"


# ------------------------------------------------------------ the TF layer (issue 15, item 5)
def test_config_initializer_is_a_leaf_of_the_tf_layer():
    tf_layer = {name for name in graph() if name.startswith((f"{PACKAGE}.tf", f"{PACKAGE}.compat"))}
    assert graph()[f"{PACKAGE}.tf.config_initializer"] & tf_layer <= {f"{PACKAGE}.tf.constants"}


def test_the_graph_sees_the_tf_layer_and_the_alias():
    edges = graph()
    assert f"{PACKAGE}.tf.config_initializer" in edges[f"{PACKAGE}.tf.table"]
    assert f"{PACKAGE}.tf.config_initializer" in edges[f"{PACKAGE}.compat.mx_rec.util.initialize"]


def test_only_checkpoint_py_reads_the_table_format():
    """The TF layer goes through mxrec_ref.checkpoint for anything inside a table
    folder (tf/saver.py parsed meta.json itself to follow delta chains)."""
    readers = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "tf").rglob("*.py"))
               if "meta.json" in path.read_text()]
    assert readers == []
