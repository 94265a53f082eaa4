"""Shared fixtures: every store test runs on both backends (BE-1).

Hypothesis profiles: "ci" (default, bounded and derandomized so CI is
reproducible and fits the time budget) and "deep" (HYPOTHESIS_PROFILE=deep,
for local soak runs).
"""
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("deep", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

BACKENDS = ("ref", "fast")


def _fast_available() -> bool:
    try:
        import mxrec_ref.fast  # noqa: F401
    except ImportError:
        return False
    return True


def _require_fast() -> None:
    """A missing fast path is an error, not a skip, unless
    MXREC_ALLOW_MISSING_FAST=1: a broken build must not pass as green."""
    if not _fast_available():
        if os.environ.get("MXREC_ALLOW_MISSING_FAST") == "1":
            pytest.skip("fast backend not built")
        pytest.fail("the fast backend (mxrec_ref._fast) is not built; run `make test`, which builds it")


@pytest.fixture(params=BACKENDS)
def backend(request):
    """The backend name: every store test runs once per backend."""
    if request.param == "fast":
        _require_fast()
    return request.param


@pytest.fixture
def fast_backend():
    _require_fast()
    return "fast"
