"""`mxrec-ref conformance`: run the spec's rules against a store."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def main(args) -> int:
    import pytest

    if args.deep:
        os.environ["HYPOTHESIS_PROFILE"] = "deep"
    with tempfile.TemporaryDirectory() as scratch:
        ini = Path(scratch) / "pytest.ini"
        ini.write_text("[pytest]\n")          # keep the repository's own pytest settings out of this run
        argv = ["-c", str(ini), "--rootdir", scratch, "-p", "mxrec_ref.conformance.plugin", "-p", "no:cacheprovider",
                "--pyargs", "mxrec_ref.conformance", "--mxrec-backend", args.backend, "--mxrec-report",
                "-q", "--no-header", "-rN"]
        if args.rules:
            argv += ["--mxrec-rules", args.rules]
        return int(pytest.main(argv))
