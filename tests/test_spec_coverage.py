"""Every spec rule is named by at least one test (spec/README.md)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULE = re.compile(r"\*\*([A-Z]+-\d+)\*\*")


def _rules():
    rules = []
    for path in sorted((ROOT / "spec").glob("*.md")):
        rules += RULE.findall(path.read_text())
    return rules


def _mentions():
    files = [*(ROOT / "tests").glob("test_*.py"), *(ROOT / "mxrec_ref" / "conformance").glob("test_*.py")]
    text = "\n".join(p.read_text() for p in files)
    ids = set(re.findall(r"\b([A-Z]+-\d+)\b", text))
    # test names spell rules as test_adm_8_...: ADM-8
    ids |= {f"{m.group(1).upper()}-{m.group(2)}" for m in re.finditer(r"def test_([a-z]+)_(\d+)_", text)}
    return ids


def test_rules_are_unique_and_numbered():
    rules = _rules()
    assert len(rules) > 40
    assert len(rules) == len(set(rules)), "a rule id is defined twice"


def test_every_rule_has_a_test():
    missing = sorted(set(_rules()) - _mentions())
    assert missing == [], f"rules without a test: {missing}"
