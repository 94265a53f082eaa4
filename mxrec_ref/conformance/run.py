"""`mxrec-ref conformance`: run the spec's rules against a store.

Exit status: 0 when every rule that ran passed (rules the backend cannot express are n/a, CON-11), 1 when
one failed (0 with ``--failures-ok`` once the ``--report`` file is written), 2 for a bad command line, 3
when the backend's process died (``BackendFailure``, BE-3)."""
from __future__ import annotations

import importlib
import os
import sys
import tempfile
from pathlib import Path

from ..backends import available_backends, unknown_backend_reason
from . import plugin


def main(args) -> int:
    import pytest
    from hypothesis import settings
    from hypothesis.configuration import set_hypothesis_home_dir

    specs = [s.strip() for s in args.backend.split(",") if s.strip()]
    if not specs:
        return _usage("--backend: no backend given")
    for spec in specs:
        problem = backend_problem(spec)
        if problem:
            return _usage(f"--backend {spec}: {problem}")
    # --deep is explicit and beats HYPOTHESIS_PROFILE; the plugin loaded the environment's choice
    settings.load_profile("deep" if args.deep else os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    with tempfile.TemporaryDirectory() as scratch:
        ini = Path(scratch) / "pytest.ini"
        ini.write_text("[pytest]\n")          # keep the repository's own pytest settings out of this run
        # Nothing goes into the user's current folder: no pytest cache, no pytest-benchmark
        # storage (.benchmarks), and hypothesis's example database and constants cache
        # (.hypothesis) live in the scratch folder.
        argv = ["-c", str(ini), "--rootdir", scratch, "-p", plugin.__name__, "-p", "no:cacheprovider",
                "-p", "no:benchmark", "--pyargs", "mxrec_ref.conformance", "--mxrec-backend", ",".join(specs),
                "--mxrec-report", "-q", "--no-header", "-rN"]
        if args.rules:
            argv += ["--mxrec-rules", args.rules]
        if args.report:
            argv += ["--mxrec-report-file", os.path.abspath(args.report)]
        set_hypothesis_home_dir(Path(scratch) / ".hypothesis")
        try:
            status = int(pytest.main(argv))
        finally:
            set_hypothesis_home_dir(None)
    return exit_status(status, failures_ok=args.failures_ok, report=args.report)


def exit_status(pytest_status: int, *, failures_ok: bool, report: str) -> int:
    """CON-11: failed rules exit 1, or 0 with --failures-ok once the report file exists; every other
    status (2 usage, 3 a dead backend process, BE-3) passes through."""
    if pytest_status == 1 and failures_ok and report and os.path.exists(report):
        return 0
    return pytest_status


def backend_problem(spec: str) -> str | None:
    """Why ``spec`` cannot be tested, in one line, or None: a built-in name that is not
    available, or a ``module:factory`` whose module does not import or lacks the factory."""
    if ":" not in spec:
        return None if spec in available_backends() else unknown_backend_reason(spec)
    module, _, attribute = spec.partition(":")
    if not module or not attribute:
        return "expected module:factory, e.g. mypkg.store:open_my_store"
    try:
        loaded = importlib.import_module(module)
    except Exception as error:   # any failure to import is the user's module's, reported in one line
        return f"cannot import {module!r}: {type(error).__name__}: {error}"
    factory = getattr(loaded, attribute, None)
    if not callable(factory):
        return f"{module!r} has no callable {attribute!r}"
    return None


def _usage(message: str) -> int:
    print(f"mxrec-ref conformance: {message}", file=sys.stderr)
    return 2
