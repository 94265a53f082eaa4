"""The rule index (issue 15, item 6): where each numbered rule of ``spec/*.md`` is written,
tested and built.  One reader of the spec and its citations, used by ``mxrec-ref rules``
and by tests/test_rule_index.py, which enforces that every rule is defined once, named by a
test, and that nothing cites an undefined rule.

A rule is defined as ``- **P-n** text`` in ``spec/F.md``; it is *cited* wherever ``P-n``
appears as a word, and a test *names* it by citing it (docstring, comment) or by its name
(``test_adm_2_...`` names ADM-2).  The index reads a source checkout: the spec, the tests and
``cext/`` are not installed with the package.  Only the standard library is used.
"""
from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

DEFINITION = re.compile(r"\*\*([A-Z]+-\d+)\*\*")
CITATION = re.compile(r"\b([A-Z]+)-(\d+)\b")
TEST_NAME = re.compile(r"def test_([a-z]+)_(\d+)_")
RULE_ID = re.compile(r"^([A-Za-z]+)-(\d+)$")
# Where tests live, and the code whose citations are the rule's sites (tests are listed apart).
TEST_FILES = ("tests/test_*.py", "mxrec_ref/conformance/test_*.py")
CODE_FILES = ("mxrec_ref/**/*.py", "cext/*.pyx", "cext/*.pxd", "cext/*.pxi", "cext/*.h")
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class SpecNotFound(LookupError):
    """No ``spec/`` folder where the index looked (an installed package ships none)."""


# ------------------------------------------------------------ the spec and its citations
def find_root(root: str | Path | None = None) -> Path:
    """The source checkout to read: ``root`` if given, else the folder above this package (a
    checkout or an editable install), else the current folder; SpecNotFound if none holds spec/."""
    candidates = [Path(root)] if root is not None else [PACKAGE_ROOT, Path.cwd()]
    for candidate in candidates:
        if (candidate / "spec").is_dir():
            return candidate.resolve()
    looked = " or ".join(str(c / "spec") for c in candidates)
    raise SpecNotFound(f"spec not found: no folder {looked}; the rule index reads a source checkout of mxrec-ref "
                       f"(an installed package has no spec/): run it there or pass --root")


def spec_files(root: Path) -> list[Path]:
    return sorted(path for path in (root / "spec").glob("*.md") if path.stem != "README")


def defined_rules(root: Path) -> list[str]:
    """Every rule id defined in spec/, in file order (a duplicate appears twice)."""
    return [rule for path in spec_files(root) for rule in DEFINITION.findall(path.read_text())]


def prefixes(root: Path) -> set[str]:
    return {rule.split("-")[0] for rule in defined_rules(root)}


def files(root: Path, *patterns: str) -> list[Path]:
    return sorted({path for pattern in patterns for path in root.glob(pattern)})


def rule_ids_in(text: str, known_prefixes) -> set[str]:
    """The rule ids ``text`` cites or names by a test's name (``UTF-8``, ``CRC-32``: not rules)."""
    ids = {f"{p}-{n}" for p, n in CITATION.findall(text) if p in known_prefixes}
    ids |= {f"{p.upper()}-{n}" for p, n in TEST_NAME.findall(text) if p.upper() in known_prefixes}
    return ids


def cited(paths, known_prefixes, root: Path) -> dict[str, set[str]]:
    """Rule id -> the files citing it (relative to ``root``), by id or (in tests) by test name."""
    sites: dict[str, set[str]] = {}
    for path in paths:
        for rule in rule_ids_in(path.read_text(), known_prefixes):
            sites.setdefault(rule, set()).add(_relative(path, root))
    return sites


def rule_order(rule: str):
    prefix, number = rule.split("-")
    return prefix, int(number)


# ------------------------------------------------------------ one rule: text, tests, code
@dataclass(frozen=True)
class Site:
    path: str        # relative to the checkout
    line: int
    what: str        # the test's name, or the citing line

    def __str__(self) -> str:
        return f"{self.path}:{self.line}  {self.what}"


@dataclass(frozen=True)
class RuleEntry:
    rule: str
    spec: Site                   # where it is defined; ``what`` is its text, one paragraph
    tests: list[Site]
    code: list[Site]


def normalise(rule: str) -> str | None:
    """``adm-2`` -> ``ADM-2``; None for text that is not shaped like a rule id."""
    match = RULE_ID.match(rule.strip())
    return f"{match.group(1).upper()}-{int(match.group(2))}" if match else None


def rule_text(root: Path, rule: str) -> Site | None:
    """Where ``rule`` is defined and its text (the bullet and its indented continuation lines)."""
    for path in spec_files(root):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if f"**{rule}**" not in line or not DEFINITION.search(line):
                continue
            text = [line.split(f"**{rule}**", 1)[1].strip()]
            for more in lines[number:]:
                if not more.startswith("  ") or not more.strip():
                    break
                text.append(more.strip())
            return Site(_relative(path, root), number, " ".join(text))
    return None


def tests_naming(root: Path, rule: str) -> list[Site]:
    """The tests that name ``rule``: a test function (or class) whose name or source cites it;
    a citation outside any test (a module docstring) is listed by its line."""
    found = []
    known = {rule.split("-")[0]}
    for path in files(root, *TEST_FILES):
        text = path.read_text()
        if rule not in rule_ids_in(text, known):
            continue
        lines = text.splitlines()
        covered = set()
        for node in ast.walk(ast.parse(text, str(path))):
            if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and node.name.lower().startswith("test")):
                continue
            span = range(node.lineno, node.end_lineno + 1)
            source = "\n".join(lines[node.lineno - 1:node.end_lineno])
            if rule in rule_ids_in(source, known) or _names(node.name, rule):
                found.append(Site(_relative(path, root), node.lineno, node.name))
                covered.update(span)
        for number, line in enumerate(lines, 1):
            if number not in covered and rule in rule_ids_in(line, known):
                found.append(Site(_relative(path, root), number, line.strip()[:100]))
    return sorted(set(found), key=lambda site: (site.path, site.line))


def code_sites(root: Path, rule: str) -> list[Site]:
    """Every line of the package and cext/ (tests aside) that cites ``rule``."""
    known = {rule.split("-")[0]}
    tests = set(files(root, *TEST_FILES))
    found = []
    for path in files(root, *CODE_FILES):
        if path in tests or path == Path(__file__).resolve():     # this module cites ids as examples only
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if rule in rule_ids_in(line, known):
                found.append(Site(_relative(path, root), number, line.strip()[:100]))
    return found


def lookup(root: Path, rule: str) -> RuleEntry | None:
    """Everything the index knows of ``rule``; None when spec/ does not define it."""
    spec = rule_text(root, rule)
    if spec is None:
        return None
    return RuleEntry(rule, spec, tests_naming(root, rule), code_sites(root, rule))


def families(root: Path) -> list[tuple[str, list[str]]]:
    """(spec stem, its rule ids in order) for every spec file."""
    return [(path.stem, DEFINITION.findall(path.read_text())) for path in spec_files(root)]


# ------------------------------------------------------------ `mxrec-ref rules`
def add_arguments(parser) -> None:
    parser.add_argument("rule", nargs="?", help="a rule id such as ADM-2, or a family (ADM, admission); "
                                                "without one, every family and its rule ids")
    parser.add_argument("--root", help="the source checkout to read (default: the one this package was "
                                       "imported from, else the current folder)")


def main(args, out, err) -> int:
    """``mxrec-ref rules [RULE] [--root DIR]``: prints to ``out``; a problem is one line on ``err``, status 2."""
    try:
        root = find_root(args.root)
    except SpecNotFound as error:
        print(f"mxrec-ref rules: {error}", file=err)
        return 2
    if args.rule is None:
        for stem, rules in families(root):
            print(f"{stem} ({len(rules)}): {' '.join(rules)}", file=out)
        return 0
    family = _family(root, args.rule)
    if family is not None:
        stem, rules = family
        print(f"spec/{stem}.md", file=out)
        for rule in rules:
            print(f"  {rule}  {_shorten(rule_text(root, rule).what, 96)}", file=out)
        return 0
    rule = normalise(args.rule)
    entry = lookup(root, rule) if rule is not None else None
    if entry is None:
        print(f"mxrec-ref rules: unknown rule {args.rule!r}: no spec file under {root / 'spec'} defines it "
              f"(`mxrec-ref rules` lists every rule id)", file=err)
        return 2
    print(f"{entry.rule}  ({entry.spec.path}:{entry.spec.line})", file=out)
    for line in _wrap(entry.spec.what, 96):
        print(f"  {line}", file=out)
    for title, sites in (("tests", entry.tests), ("code", entry.code)):
        print(f"\n{title} ({len(sites)}):", file=out)
        for site in sites:
            print(f"  {site}", file=out)
    return 0


def _family(root: Path, name: str):
    for stem, rules in families(root):
        if name.lower() == stem or (rules and name.upper() in {rule.split("-")[0] for rule in rules}):
            return stem, rules
    return None


def _names(test_name: str, rule: str) -> bool:
    prefix, number = rule.split("-")
    return bool(re.match(rf"test_{prefix.lower()}_{number}(_|$)", test_name))


def _relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width) or [""]
