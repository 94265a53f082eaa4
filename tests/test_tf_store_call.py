"""The TF layer's one store call (issue 31): every lookup -- FeatureSpec (alone or fused, TF-20), graph
modification (GRAPH-1), eager and the Keras ``Embedding`` (KERAS-12) -- gets its outputs from
``mxrec_ref/tf/store_call.py``, which calls its owner's ``lookup_batch``; only the owners' ``lookup_batch``
call ``store.lookup``, and only ``store_call.apply_gradient`` the store's apply (TF-18, KERAS-12).  Read from
the source, so a fifth copy of the call cannot come back unnoticed."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "mxrec_ref"
LAYERS = sorted((ROOT / "tf").rglob("*.py")) + sorted((ROOT / "keras").rglob("*.py"))


def _calls(path: Path):
    """(attribute called, receiver source, enclosing function name) of each ``x.attr(...)`` call in ``path``."""
    tree = ast.parse(path.read_text())
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                found.append((child.func.attr, ast.unparse(child.func.value), inner))
            visit(child, inner)

    visit(tree, None)
    return found


def test_only_store_call_calls_lookup_batch():
    callers = sorted(str(p.relative_to(ROOT)) for p in LAYERS
                     if any(attr == "lookup_batch" for attr, _, _ in _calls(p)))
    assert callers == ["tf/store_call.py"]


def test_only_the_owners_lookup_batch_calls_the_store_lookup():
    sites = sorted((str(p.relative_to(ROOT)), function) for p in LAYERS for attr, receiver, function in _calls(p)
                   if attr == "lookup" and receiver.endswith("store"))
    assert sorted(set(sites)) == [("keras/layer.py", "lookup_batch"), ("tf/table.py", "lookup_batch")]


def test_only_store_call_calls_the_store_apply():
    """The apply's store call, reusing the lookup's kept result (TF-18, KERAS-12), is written once too."""
    callers = sorted({str(p.relative_to(ROOT)) for p in LAYERS for attr, receiver, _ in _calls(p)
                      if attr == "apply_gradients" and receiver.endswith("store")})
    assert callers == ["tf/store_call.py"]
