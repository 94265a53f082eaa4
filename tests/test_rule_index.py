"""The rule index (issue 15, item 6): every spec rule is found by its id wherever it is checked or built.

* every rule ``P-n`` of ``spec/*.md`` is defined once and named by a test (its docstring, a comment,
  or its name: ``test_adm_8_...`` names ADM-8);
* no code, test or spec file cites a rule id the spec does not define;
* every spec file ``spec/F.md`` has its tests in ``test_F.py`` (``tests/`` or ``mxrec_ref/conformance/``);
* every store rule the reference cites (``mxrec_ref/ref/``) is cited by the fast path too, in its glue
  or kernels, or in the shared module both backends call;
* for each twin family F (``TWIN_FAMILIES``), the reference's ``ref/F.py`` and the fast path's
  ``fast/F.py`` + ``cext/_F.pxi`` cite the same rules of the twin families, every function of
  ``ref/F.py`` has its namesake in the fast path's F files, and the namesakes take the same parameters
  in the same order (issue 31, item 6), but for the differences ``SIGNATURES_DIFFER`` lists with
  their reasons.

Successor of tests/test_spec_coverage.py.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mxrec_ref import rule_index    # the one reader of the spec and its citations (also `mxrec-ref rules`)

ROOT = Path(__file__).resolve().parent.parent

# Spec families whose tests live under another file name (none since issue 15, item 7 renamed them);
# an entry must go once test_<stem>.py exists.
TESTS_UNDER_ANOTHER_NAME: dict[str, str] = {}
# Where each backend writes its rules: the reference in ref/, the fast path's glue and its
# kernels, and the modules written once that both call.
REFERENCE_SITES = ("mxrec_ref/ref/*.py",)
FAST_SITES = ("mxrec_ref/fast/*.py", "cext/*.pyx", "cext/*.pxi", "cext/*.pxd")
# The families both backends implement, each under one name F in four places: spec/F.md, ref/F.py
# (for initializers the shared mxrec_ref/initializers.py: the reference has no code of its own),
# fast/F.py and cext/_F.pxi (either may be missing where the other holds all of F).
TWIN_FAMILIES = ("lookup", "expansion", "admission", "eviction", "optimizers", "hot", "tiers", "initializers",
                 "checkpoint")
SHARED_SITES = ("mxrec_ref/contract.py", "mxrec_ref/state.py", "mxrec_ref/hot.py", "mxrec_ref/initializers.py",
                "mxrec_ref/optimizers.py")


def spec_files() -> list[Path]:
    return rule_index.spec_files(ROOT)


def defined_rules() -> list[str]:
    return rule_index.defined_rules(ROOT)


def prefixes() -> set[str]:
    return rule_index.prefixes(ROOT)


def files(*patterns: str) -> list[Path]:
    return rule_index.files(ROOT, *patterns)


def rule_test_files() -> list[Path]:
    return files(*rule_index.TEST_FILES)


def cited(paths, known_prefixes) -> dict[str, set[str]]:
    """Rule id -> the files citing it, by id or (in tests) by test name."""
    return rule_index.cited(paths, known_prefixes, ROOT)


def test_rules_are_unique_and_numbered():
    rules = defined_rules()
    assert len(rules) > 40
    duplicates = sorted({rule for rule in rules if rules.count(rule) > 1})
    assert duplicates == [], f"rule ids defined twice: {duplicates}"


def test_every_rule_is_named_by_a_test():
    named = cited(rule_test_files(), prefixes())
    missing = sorted(set(defined_rules()) - set(named), key=_rule_order)
    assert missing == [], f"rules without a test: {missing}"


def test_no_code_or_test_cites_an_undefined_rule():
    everything = files("mxrec_ref/**/*.py", "cext/*.pyx", "cext/*.pxd", "cext/*.pxi", "cext/*.h", "tests/*.py",
                       "spec/*.md", "bench/*.py", "examples/*.py")
    unknown = {rule: sorted(paths) for rule, paths in cited(everything, prefixes()).items()
               if rule not in set(defined_rules())}
    assert unknown == {}, f"cited but not defined in spec/: {unknown}"


def test_every_spec_file_has_its_test_file():
    have = {path.stem.removeprefix("test_") for path in rule_test_files()}
    stems = [path.stem for path in spec_files() if path.stem != "README"]
    missing = [stem for stem in stems if stem not in have and stem not in TESTS_UNDER_ANOTHER_NAME]
    assert missing == [], f"spec files without tests/test_F.py or conformance/test_F.py: {missing}"
    renamed = sorted(stem for stem in TESTS_UNDER_ANOTHER_NAME if stem in have)
    assert renamed == [], f"test_F.py exists now: drop these from TESTS_UNDER_ANOTHER_NAME: {renamed}"
    for stem, path in TESTS_UNDER_ANOTHER_NAME.items():
        assert stem in stems and (ROOT / path).is_file(), (stem, path)


def test_every_rule_the_reference_cites_the_fast_path_cites():
    known = prefixes()
    reference = set(cited(files(*REFERENCE_SITES), known))
    fast = set(cited(files(*FAST_SITES, *SHARED_SITES), known))
    assert len(reference) > 10
    missing = sorted(reference - fast, key=_rule_order)
    assert missing == [], f"rules the reference cites that neither the fast path nor a shared module cites: {missing}"


def reference_file(family: str) -> Path:
    own = ROOT / "mxrec_ref" / "ref" / f"{family}.py"
    return own if own.is_file() else ROOT / "mxrec_ref" / f"{family}.py"


def fast_files(family: str) -> list[Path]:
    return [path for path in (ROOT / "mxrec_ref" / "fast" / f"{family}.py", ROOT / "cext" / f"_{family}.pxi")
            if path.is_file()]


def twin_prefixes() -> set[str]:
    """The rule prefixes of the twin families (LKP, EXP, ...): read from their spec files."""
    return {rule.split("-")[0] for family in TWIN_FAMILIES
            for rule in rule_index.DEFINITION.findall((ROOT / "spec" / f"{family}.md").read_text())}


def defined_functions(path: Path) -> set[str]:
    """Public functions and classes defined at the top of a Python or Cython file, or re-exported by
    name from the extension (``from .._fast import dedup``)."""
    text = path.read_text()
    names = set(re.findall(r"^(?:def|cdef class|class|cp?def [\w\s\*\[\]:,]*?)\s*(\w+)\s*[(:]", text, re.M))
    for block in re.findall(r"^from \.\._fast import (\([^)]*\)|.*)$", text, re.M):
        names |= {name.split(" as ")[-1].strip() for name in block.strip("()").split(",") if name.strip()}
    return {name for name in names if not name.startswith("_")}


def test_every_twin_family_has_both_sides_and_cites_the_same_rules():
    known, twins = prefixes(), twin_prefixes()
    differences = {}
    for family in TWIN_FAMILIES:
        reference, fast = reference_file(family), fast_files(family)
        assert (ROOT / "spec" / f"{family}.md").is_file() and reference.is_file() and fast, family
        ref_rules = {rule for rule in cited([reference], known) if rule.split("-")[0] in twins}
        fast_rules = {rule for rule in cited(fast, known) if rule.split("-")[0] in twins}
        if ref_rules != fast_rules:
            differences[family] = {"reference only": sorted(ref_rules - fast_rules, key=_rule_order),
                                   "fast only": sorted(fast_rules - ref_rules, key=_rule_order)}
    assert differences == {}, f"twin families whose two sides cite different rules: {differences}"


def test_every_reference_function_of_a_twin_family_has_its_fast_namesake():
    missing = {}
    for family in TWIN_FAMILIES:
        fast = set().union(*(defined_functions(path) for path in fast_files(family)))
        absent = sorted(defined_functions(reference_file(family)) - fast)
        if absent and reference_file(family).parent.name == "ref":
            missing[family] = absent
    assert missing == {}, f"reference functions without a fast namesake in fast/F.py or cext/_F.pxi: {missing}"


# The twins' own state, their first parameter: the reference's Table, the fast path's FastCore.
STATE_PARAMETERS = ("table", "core")
# (family, function) -> why its two twins take different parameters.  An entry whose twins agree
# now must go (the test says so), so the list only shrinks.
SIGNATURES_DIFFER: dict[tuple[str, str], str] = {
    ("optimizers", "resolve_rows"):
        "OPT-9: the fast path may reuse the row handles its commit_train returned; the reference resolves "
        "every key by key and has no handles",
    **{("optimizers", name): "the reference updates gathered copies of the rows (weights, slots) and writes "
                             "them back; the fast kernels update the core's rows in place by row and position"
       for name in ("first_nonfinite", "apply_update", "sgd", "adagrad", "lazy_adam", "ftrl")},
    ("hot", "write_through"):
        "the fast write-through is a C step inside each optimizer kernel, by row; the reference's runs after "
        "the update, by key",
    **{("tiers", name): "the fast core keeps slots by index (slot_index) and takes the rows it already "
                        "found (rows); the reference's Table keeps slots by name and finds rows by key"
       for name in ("rows_of", "entries_of", "put_rows")},
    **{("checkpoint", name): "the fast core keeps slots by index (slot_index, slot_arrays); the reference's "
                             "Table keeps them by name"
       for name in ("export_state", "import_state")},
}


def parameters(path: Path) -> dict[str, tuple[str, ...]]:
    """Public function -> its parameter names in order: from ``ast`` for a Python file, from the
    ``def`` / ``cpdef`` / ``cdef`` lines for a Cython file (its types, ``not None`` and defaults
    dropped)."""
    text = path.read_text()
    if path.suffix == ".py":
        found = {}
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                args = node.args
                found[node.name] = tuple(arg.arg for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs))
        return found
    found = {}
    for match in re.finditer(r"^(?:def|cp?def [\w\s\*\[\]:,]*?)\s*(\w+)\s*\(", text, re.M):
        if not match.group(1).startswith("_"):
            found[match.group(1)] = tuple(_cython_name(parameter)
                                          for parameter in _top_level_split(_inside_parentheses(text, match.end())))
    return found


def _inside_parentheses(text: str, start: int) -> str:
    """The text from ``start`` (just after an opening parenthesis) to its closing one."""
    depth = 1
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            return text[start:end]
    raise ValueError(f"unclosed parenthesis at {start}")


def _top_level_split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [part for part in (*parts, current) if part.strip()]


def _cython_name(parameter: str) -> str:
    """``const int64_t[::1] keys``, ``FastCore core not None``, ``handles=None`` -> the name."""
    return re.findall(r"\w+", re.sub(r"\bnot None\b", "", parameter.split("=")[0]))[-1]


def _same_parameters(reference: tuple[str, ...], fast: tuple[str, ...]) -> bool:
    """The same names in the same order, the state parameter (Table or FastCore) counting as one name."""
    def state_as_one(names):
        return ("state", *names[1:]) if names and names[0] in STATE_PARAMETERS else names
    return state_as_one(reference) == state_as_one(fast)


def twin_signatures() -> dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]]:
    """(family, function) -> (the reference's parameters, the fast namesake's) for the families
    with a reference of their own in ref/ (the fast path's Python wrapper before its kernel)."""
    pairs = {}
    for family in TWIN_FAMILIES:
        if reference_file(family).parent.name != "ref":
            continue
        fast: dict[str, tuple[str, ...]] = {}
        for path in fast_files(family):
            for name, names in parameters(path).items():
                fast.setdefault(name, names)
        for name, names in parameters(reference_file(family)).items():
            if name in fast:
                pairs[(family, name)] = (names, fast[name])
    return pairs


def test_twin_functions_take_the_same_parameters():
    """KernelTwins (conformance/test_backends.py) binds one test to either twin: that holds only
    while both take the same arguments."""
    pairs = twin_signatures()
    assert {("lookup", "gather"), ("admission", "plan_train"), ("admission", "commit_train")} <= set(pairs)
    differ = {key: pair for key, pair in pairs.items() if not _same_parameters(*pair)}
    unexplained = {f"{family}.{name}": {"reference": list(pair[0]), "fast": list(pair[1])}
                   for (family, name), pair in sorted(differ.items()) if (family, name) not in SIGNATURES_DIFFER}
    assert unexplained == {}, f"twin functions whose parameters differ: {unexplained}"
    agree_now = sorted(set(SIGNATURES_DIFFER) - set(differ))
    assert agree_now == [], f"twins that take the same parameters now: remove them from SIGNATURES_DIFFER: {agree_now}"


def test_the_cython_parameters_are_the_compiled_functions():
    """The ``def`` line reader agrees with the built extension (where it is built) on every Python-visible
    kernel of the twin families."""
    import inspect
    fast = pytest.importorskip("mxrec_ref._fast")
    checked = 0
    for family in TWIN_FAMILIES:
        pxi = ROOT / "cext" / f"_{family}.pxi"
        if not pxi.is_file():
            continue
        for name, names in parameters(pxi).items():
            function = getattr(fast, name, None)
            if callable(function) and type(function).__name__ == "cython_function_or_method":
                assert tuple(inspect.signature(function).parameters) == names, (family, name)
                checked += 1
    assert checked > 10


def test_the_checks_can_fail(tmp_path):
    """The citation reader finds ids, test names and ignores other prefixes (UTF-8, CRC-32)."""
    sample = tmp_path / "test_sample.py"
    sample.write_text('"""ADM-2 and UTF-8 and CRC-32."""\ndef test_evi_1_expires():\n    pass\n')
    found = cited([sample], {"ADM", "EVI"})
    assert sorted(found) == ["ADM-2", "EVI-1"]
    kernels = tmp_path / "_sample.pxi"
    kernels.write_text("def dedup(FastCore core not None, keys):\n    pass\n"
                       "cdef inline int32_t take_row(FastCore core) noexcept nogil:\n    pass\n"
                       "cdef void _private(FastCore core):\n    pass\ncdef class TrainPlan:\n    pass\n"
                       "from .._fast import (gather,\n                     put_rows as _put_rows, sgd)\n"
                       "from .._fast import expired_keys\n")
    assert defined_functions(kernels) == {"dedup", "take_row", "TrainPlan", "gather", "sgd", "expired_keys"}
    assert parameters(kernels) == {"dedup": ("core", "keys"), "take_row": ("core",)}
    reference = tmp_path / "sample.py"
    reference.write_text("def dedup(table, keys):\n    pass\ndef take_row(table, row):\n    pass\n"
                         "def _helper(x):\n    pass\n")
    assert parameters(reference) == {"dedup": ("table", "keys"), "take_row": ("table", "row")}
    assert _same_parameters(parameters(reference)["dedup"], parameters(kernels)["dedup"])
    assert not _same_parameters(parameters(reference)["take_row"], parameters(kernels)["take_row"])
    assert not _same_parameters(("table", "keys", "weights"), ("core", "weights", "keys"))


_rule_order = rule_index.rule_order
