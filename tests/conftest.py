"""The repository's tests use the conformance plugin's fixtures (backend,
fast_backend) and hypothesis profiles; see mxrec_ref/conformance/plugin.py."""
import pytest

import forked_cli


@pytest.fixture(scope="session")
def mxrec_ref_command():
    """``mxrec_ref_command(args, cwd=, env=, timeout=)``: ``python -m mxrec_ref ARGS`` as a
    CompletedProcess, run in a process forked from one that imported TensorFlow once
    (tests/forked_cli.py says what differs from a fresh process)."""
    server = forked_cli.ForkedCli()
    yield server.run
    server.close()
