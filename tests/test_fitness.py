"""Fitness functions of the package's shape (issue 31, item 6; DESIGN.md section 9).

No code in ``mxrec_ref/`` reads or writes another object's underscore names: an object's underscore
names are its own business, and a wrapper drives what it wraps through public methods (the engine
protocol, ``Store.import_state``, the checkpoint package's reader and writer).  What counts, read from
the source with ``ast``:

* ``X._name`` where ``X`` is not ``self``, ``cls`` or ``super()`` (dunder names such as ``__class__`` are
  Python's, not private), and the same spelled ``getattr(X, "_name")`` (or ``setattr``, ``hasattr``,
  ``delattr``) with the name written out;
* ``from m import _name``, except the package's compiled extension modules (``_fast``, ``_route``,
  one per ``cext/*.pyx``): they are modules named with an underscore by the convention CPython uses
  for ``_heapq`` behind ``heapq`` (the underscore says "use the module that wraps me"), and importing a
  module hands out nothing of another object's state.  The names they export are public.

The only exceptions are TensorFlow's, Keras' and the standard library's internals that have no public
way, listed once in ``ALLOWED`` with their reason.  An entry that matches nothing must go, so the list
never hides a stale exception.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "mxrec_ref"
# The package's compiled extension modules: one per cext/*.pyx (setup.py builds them as mxrec_ref.<stem>).
EXTENSION_MODULES = frozenset(path.stem for path in (REPO / "cext").glob("*.pyx"))

# (file under mxrec_ref/, the expression as ast.unparse writes it) -> why there is no public way.
ALLOWED: dict[tuple[str, str], str] = {
    ("keras/export.py", "model._flatten_layers"):
        "Keras has no public recursive walk of a model's tracked layers (model.layers is the top level only; "
        "an Embedding nested in a custom layer is found only this way)",
    ("peers/protocol.py", "os._exit"):
        "a peer server's 'exit' op ends its process at once, as a crash would (BE-3's tests of a server that "
        "dies); os._exit is the standard library's documented way to exit without cleanup",
    ("peers/tfra_server.py", "self.optimizer._create_all_weights"):
        "TFRA's DynamicEmbeddingOptimizer creates its slot tables lazily at the first apply; a Keras optimizer "
        "has no public call that creates them earlier (the peer server reads slots before the first apply)",
    # TensorFlow's graph edits, all in tf/graph_edit.py (issue 31's TF-layer branch moves them there)
    ("tf/graph_edit.py", "op._update_input"):
        "TensorFlow has no public way to rewire an existing op's input in a graph",
    ("tf/graph_edit.py", "op._add_control_inputs"):
        "TensorFlow has no public way to add control inputs to an op that already exists",
    ("tf/graph_edit.py", "op._remove_all_control_inputs"):
        "TensorFlow has no public way to remove an existing op's control inputs",
    ("tf/graph_modifier.py", "getattr(iterator, '_iterator_resource')"):
        "a TF1 iterator exposes its resource tensor (what graph modification keys its dataset by) only as "
        "_iterator_resource",
}


def private_accesses(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, expression) of each access to another object's underscore name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and not _is_own(node.value):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_FUNCTIONS \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) and _is_private(node.args[1].value) \
                and not _is_own(node.args[0]):
            found.append((node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, {node.args[1].value!r})"))
        elif isinstance(node, ast.ImportFrom):
            found.extend((node.lineno, f"from {'.' * node.level}{node.module or ''} import {alias.name}")
                         for alias in node.names
                         if _is_private(alias.name) and alias.name not in EXTENSION_MODULES)
    return sorted(found)


ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "hasattr", "delattr")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_own(value: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object's own names (or its class's)."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def package_accesses() -> dict[str, list[tuple[int, str]]]:
    """File under mxrec_ref/ -> its accesses, for every file of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        accesses = private_accesses(path.read_text(), str(path))
        if accesses:
            found[path.relative_to(PACKAGE).as_posix()] = accesses
    return found


def report(violations: dict[str, list[tuple[int, str]]]) -> str:
    """The violations, one file per block, most first, with a count per file and in all."""
    lines = [f"{sum(map(len, violations.values()))} cross-object underscore accesses in "
             f"{len(violations)} files of mxrec_ref/ (use a public name, or add a TensorFlow/Keras/stdlib "
             f"internal with its reason to tests/test_fitness.py's ALLOWED):"]
    for file, accesses in sorted(violations.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"  {len(accesses):3d} mxrec_ref/{file}")
        lines.extend(f"        {line:5d}: {expression}" for line, expression in accesses)
    return "\n".join(lines)


def test_no_underscore_access_across_objects():
    violations = defaultdict(list)
    for file, accesses in package_accesses().items():
        for line, expression in accesses:
            if (file, expression) not in ALLOWED:
                violations[file].append((line, expression))
    assert not violations, report(violations)


def test_every_allowed_access_is_still_there():
    """A stale exception would let a new access of the same name in through the same file."""
    present = {(file, expression) for file, accesses in package_accesses().items() for _, expression in accesses}
    stale = sorted(set(ALLOWED) - present)
    assert stale == [], f"ALLOWED entries that match nothing in mxrec_ref/ (remove them): {stale}"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_scanner_finds_a_planted_violation():
    source = ("from mxrec_ref.checkpoint import _write_file, write\n"
              "from . import _fast\n"
              "from .._route import route\n"
              "class Wrapper:\n"
              "    def __init__(self, inner):\n"
              "        self._inner = inner\n"
              "        super().__init__()\n"
              "        cls = type(self)\n"
              "        cls._count = 1\n"
              "    def size(self):\n"
              "        return self._inner._size() + len(self.__dict__) + self.inner.__class__.__name__\n"
              "    def lock(self, other):\n"
              "        with other.local._lock:\n"
              "            return other._state\n"
              "    def spelled(self, other, key):\n"
              "        setattr(self, '_own', getattr(other, '_hidden', None))\n"
              "        return hasattr(other.inner, '_x'), getattr(other, f'_{key}'), getattr(other, 'public')\n")
    assert private_accesses(source) == [(1, "from mxrec_ref.checkpoint import _write_file"),
                                        (11, "self._inner._size"),
                                        (13, "other.local._lock"),
                                        (14, "other._state"),
                                        (16, "getattr(other, '_hidden')"),
                                        (17, "hasattr(other.inner, '_x')")]
    assert EXTENSION_MODULES >= {"_fast", "_route"}
    assert "1 mxrec_ref/x.py" in report({"x.py": [(14, "other._state")]})
