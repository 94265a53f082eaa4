"""The TF layer and the mx_rec alias import without cycles (issue 15, item 5).

Every module under ``mxrec_ref/tf`` and ``mxrec_ref/compat`` is parsed (not
imported); each import of one of those modules -- absolute or relative, at
module level or inside a function -- is an edge.  A cycle, even one dodged
by a function-local import, fails with the modules on it.  Packages a
submodule import passes through are not edges (Python runs them first, they
are not a dependency of the importer)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mxrec_ref

ROOT = Path(mxrec_ref.__file__).parent
SCOPES = ("tf", "compat")


def _modules() -> dict[str, Path]:
    found = {}
    for scope in SCOPES:
        for path in sorted((ROOT / scope).rglob("*.py")):
            parts = ["mxrec_ref", *path.relative_to(ROOT).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``name`` imports, anywhere in its body."""
    package = name if _is_package(path) else name.rpartition(".")[0]
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in modules]
            targets = submodules
            if len(submodules) < len(node.names):     # some names are attributes of the module itself
                targets = targets + [source]
        else:
            continue
        edges |= {t for t in targets if t in modules and t != name}
    return edges


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_tf_layer():
    graph = import_graph()
    assert "mxrec_ref.tf.config_initializer" in graph and "mxrec_ref.compat.mx_rec.util.initialize" in graph
    assert "mxrec_ref.tf.config_initializer" in graph["mxrec_ref.tf.table"]
    assert "mxrec_ref.tf.config_initializer" in graph["mxrec_ref.compat.mx_rec.util.initialize"]


def test_cycles_are_found_in_a_made_up_graph():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_tf_layer_and_the_alias_have_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (one line each): " + "; ".join(" <-> ".join(c) for c in found)


def test_config_initializer_is_a_leaf_of_the_tf_layer():
    assert import_graph()["mxrec_ref.tf.config_initializer"] <= {"mxrec_ref.tf.constants"}


def test_only_checkpoint_py_reads_the_table_format():
    """The TF layer goes through mxrec_ref.checkpoint for anything inside a table
    folder (tf/saver.py parsed meta.json itself to follow delta chains)."""
    readers = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "tf").rglob("*.py"))
               if "meta.json" in path.read_text()]
    assert readers == []


if __name__ == "__main__":     # print the graph, e.g. for a review
    for module, targets in sorted(import_graph().items()):
        print(module, "->", ", ".join(sorted(targets)) or "-")
    pytest.main([__file__])
