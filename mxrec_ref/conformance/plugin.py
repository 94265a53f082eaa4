"""pytest plugin of the conformance suite: hypothesis profiles, the backend
under test, and the rule-by-rule report.

Options: ``--mxrec-backend`` (comma-separated: ``ref``, ``fast`` or
``module:factory``; default ``ref,fast``), ``--mxrec-report`` (print the
table of rules) and ``--mxrec-report-file`` (write it to a file too).  A test
whose store raises ``NotSupported`` is skipped and its rules reported n/a
(CON-11); a ``BackendFailure`` fails its test and makes the exit status 3 (BE-3).
Hypothesis profiles: "ci" (bounded, derandomized; default), "quick" ("ci"
without shrinking, ``HYPOTHESIS_PROFILE=quick``) and "deep"
(``HYPOTHESIS_PROFILE=deep``).
"""
from __future__ import annotations

import importlib
import os
import re
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, Phase, settings

from ..backends import available_backends, register_backend
from ..errors import BackendFailure, NotSupported

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
    group.addoption("--mxrec-report-file", default="", help="also write the table of rules to this file")
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


NOT_EXPRESSIBLE_PREFIX = "not expressible: "
BACKEND_FAILURE_EXIT = 3        # BE-3: the backend's process died; distinct from a rule failing (1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """CON-11: a test whose store raised NotSupported is skipped, its reason kept for the report.  Read
    before the other hooks run: pytest's unittest support turns the SkipTest into a plain skip."""
    raised = call.excinfo
    outcome = yield
    report = outcome.get_result()
    if raised is not None and raised.errisinstance(NotSupported):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, NOT_EXPRESSIBLE_PREFIX + str(raised.value))


def not_expressible_reason(report) -> str | None:
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and str(longrepr[2]).startswith(NOT_EXPRESSIBLE_PREFIX):
        return str(longrepr[2])[len(NOT_EXPRESSIBLE_PREFIX):]
    return None


class RuleReport:
    """The table of rules: pass (every test of the rule that ran passed), FAIL (one failed) or n/a (none
    ran: each raised NotSupported, CON-11), then ``N passed, M failed, K n/a`` and the backends' known
    differences (a factory's ``known_differences``: rule -> what differs)."""

    def __init__(self, config):
        self.config = config
        self.outcomes = defaultdict(list)     # rule -> [(test id, "pass" | "fail" | "n/a", message)]
        self.backend_failed = False

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if call.excinfo is not None and call.excinfo.errisinstance(BackendFailure):
                self.backend_failed = True
            reason = not_expressible_reason(report)
            if report.skipped and reason is None:
                return
            result = "n/a" if reason is not None else "pass" if report.passed else "fail"
            message = reason or ("" if report.passed else _failure_line(report))
            for rule in sorted(rules_of(item)) or ["(no rule)"]:
                self.outcomes[rule].append((item.nodeid, result, message))

    def lines(self) -> list[str]:
        lines = [f"{'rule':10} {'result':7} tests"]
        totals = {"pass": 0, "FAIL": 0, "n/a": 0}
        for rule in sorted(self.outcomes, key=_rule_order):
            results = self.outcomes[rule]
            ran = [r for r in results if r[1] != "n/a"]
            verdict = "FAIL" if any(r[1] == "fail" for r in ran) else "pass" if ran else "n/a"
            totals[verdict] += 1
            passed = sum(r[1] == "pass" for r in ran)
            skipped = len(results) - len(ran)
            lines.append(f"{rule:10} {verdict:7} {passed}/{len(ran)}" + (f" ({skipped} n/a)" if skipped else ""))
            for nodeid, result, message in results:
                if result == "fail" or (verdict == "n/a" and message):
                    lines.append(f"{'':18} {nodeid.split('::')[-1]}: {message}")
                    if verdict == "n/a":
                        break           # one reason is enough: every test of the rule gave one
        differences = self.known_differences()
        if differences:
            lines.append("known differences (what the backend's adapter bridges):")
            lines += [f"  {rule}: {text}" for rule, text in differences]
        lines.append(f"{totals['pass']} passed, {totals['FAIL']} failed, {totals['n/a']} n/a")
        return lines

    def known_differences(self) -> list[tuple[str, str]]:
        found = []
        for spec in backends_under_test(self.config):
            if ":" in spec:
                module, _, attribute = spec.partition(":")
                factory = getattr(importlib.import_module(module), attribute, None)
                found += sorted(getattr(factory, "known_differences", {}).items())
        return found

    def pytest_terminal_summary(self, terminalreporter):
        lines = self.lines()
        terminalreporter.write_line("")
        for line in lines:
            terminalreporter.write_line(line)
        path = self.config.getoption("--mxrec-report-file")
        if path:
            with open(path, "w", encoding="utf-8") as out:
                out.write(f"mxrec-ref conformance, backend {','.join(backends_under_test(self.config))}\n")
                out.write("\n".join(lines) + "\n")
            terminalreporter.write_line(f"report written to {path}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self.backend_failed:
            session.exitstatus = BACKEND_FAILURE_EXIT


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
    if config.getoption("--mxrec-report", default=False) or config.getoption("--mxrec-report-file", default=""):
        config.pluginmanager.register(RuleReport(config), "mxrec-rule-report")
