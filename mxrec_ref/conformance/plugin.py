"""pytest plugin of the conformance suite: hypothesis profiles, the backend
under test, and the rule-by-rule report.

Options: ``--mxrec-backend`` (comma-separated: ``ref``, ``fast`` or
``module:factory``; default ``ref,fast``) and ``--mxrec-report`` (print the
table of rules).  Hypothesis profiles: "ci" (bounded, derandomized; default),
"quick" ("ci" without shrinking, ``HYPOTHESIS_PROFILE=quick``) and "deep" (``HYPOTHESIS_PROFILE=deep``).
"""
from __future__ import annotations

import importlib
import os
import re
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, Phase, settings

from ..backends import available_backends, register_backend

# "ci" reports the first failure only: shrinking a second one of a stateful machine costs a minute
# and names no rule the first does not.
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True, report_multiple_bugs=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("deep", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
# "quick" is "ci" without shrinking: the same examples, a failure reported as first found (less minimal,
# but without the shrink's minutes): for a fast local loop, not for CI, whose report names the smallest case.
settings.register_profile("quick", settings.get_profile("ci"), phases=[p for p in Phase if p != Phase.shrink])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

RULE_IN_NAME = re.compile(r"test_([a-z]+)_(\d+)_")
RULE_IN_TEXT = re.compile(r"\b([A-Z]{2,5}-\d+)\b")


def resolve_backend(spec: str) -> str:
    """A backend name for ``open_store``: built-in names pass through,
    ``module:factory`` is imported and registered under that spec."""
    if ":" not in spec:
        return spec
    module, _, attribute = spec.partition(":")
    factory = getattr(importlib.import_module(module), attribute)
    register_backend(spec, factory)
    return spec


def fast_available() -> bool:
    return "fast" in available_backends()


def require_fast() -> None:
    """A missing fast path is an error, not a skip, unless
    MXREC_ALLOW_MISSING_FAST=1: a broken build must not pass as green."""
    if not fast_available():
        if os.environ.get("MXREC_ALLOW_MISSING_FAST") == "1":
            pytest.skip("fast backend not built")
        pytest.fail("the fast backend (mxrec_ref._fast) is not built; run `make test`, which builds it")


def pytest_addoption(parser):
    group = parser.getgroup("mxrec-ref conformance")
    group.addoption("--mxrec-backend", default="ref,fast",
                    help="backends under test: ref, fast or module:factory, comma-separated")
    group.addoption("--mxrec-report", action="store_true", help="print the table of spec rules")
    group.addoption("--mxrec-rules", default="",
                    help="only tests of these rules or rule prefixes, comma-separated (e.g. ADM,EVI-3)")


def backends_under_test(config) -> list[str]:
    return [s.strip() for s in config.getoption("--mxrec-backend").split(",") if s.strip()]


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", backends_under_test(metafunc.config), indirect=True)


@pytest.fixture
def backend(request):
    """The backend under test (every store test runs once per backend)."""
    if request.param == "fast":
        require_fast()
    return resolve_backend(request.param)


@pytest.fixture
def fast_backend():
    require_fast()
    return "fast"


@pytest.fixture
def other_backend(request):
    """The store compared with the reference in the differential run."""
    candidates = [b for b in backends_under_test(request.config) if b != "ref"]
    if not candidates:
        pytest.skip("only the reference is under test: nothing to compare it with")
    if candidates[0] == "fast":
        require_fast()
    return resolve_backend(candidates[0])


# ------------------------------------------------------------------ report
def rules_of(item) -> set[str]:
    rules = {f"{m.group(1).upper()}-{m.group(2)}" for m in RULE_IN_NAME.finditer(item.name)}
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    return rules | set(RULE_IN_TEXT.findall(doc))


class RuleReport:
    def __init__(self):
        self.outcomes = defaultdict(list)     # rule -> [(test id, passed, message)]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if report.skipped:
                return
            message = "" if report.passed else _failure_line(report)
            for rule in sorted(rules_of(item)) or ["(no rule)"]:
                self.outcomes[rule].append((item.nodeid, report.passed, message))

    def pytest_terminal_summary(self, terminalreporter):
        write = terminalreporter.write_line
        write("")
        write(f"{'rule':10} {'result':7} tests")
        passed = failed = 0
        for rule in sorted(self.outcomes, key=_rule_order):
            results = self.outcomes[rule]
            ok = all(p for _, p, _ in results)
            passed, failed = passed + ok, failed + (not ok)
            write(f"{rule:10} {'pass' if ok else 'FAIL':7} {sum(p for _, p, _ in results)}/{len(results)}")
            for nodeid, p, message in results:
                if not p:
                    write(f"{'':18} {nodeid.split('::')[-1]}: {message}")
        write(f"{passed} passed, {failed} failed")


def _failure_line(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return " ".join(text.split())[:160]


def _rule_order(rule: str):
    prefix, _, number = rule.partition("-")
    return (prefix, int(number) if number.isdigit() else 0)


def pytest_collection_modifyitems(config, items):
    wanted = [w.strip().upper() for w in config.getoption("--mxrec-rules", default="").split(",") if w.strip()]
    if not wanted:
        return
    keep, drop = [], []
    for item in items:
        matches = any(rule == w or rule.startswith(w + "-") for rule in rules_of(item) for w in wanted)
        (keep if matches else drop).append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_configure(config):
    if config.getoption("--mxrec-report", default=False):
        config.pluginmanager.register(RuleReport(), "mxrec-rule-report")
