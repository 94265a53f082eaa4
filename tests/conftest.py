"""The repository's tests use the conformance plugin's fixtures (backend,
fast_backend) and hypothesis profiles; see mxrec_ref/conformance/plugin.py."""
import pytest

import forked_cli


@pytest.fixture(scope="session")
def _forked_server():
    server = forked_cli.ForkedCli()
    yield server
    server.close()


@pytest.fixture(scope="session")
def mxrec_ref_command(_forked_server):
    """``mxrec_ref_command(args, cwd=, env=, timeout=)``: ``python -m mxrec_ref ARGS`` as a
    CompletedProcess, run in a process forked from one that imported TensorFlow once
    (tests/forked_cli.py says what differs from a fresh process)."""
    return _forked_server.run


@pytest.fixture(scope="session")
def forked_python(_forked_server):
    """``forked_python([script, *args], cwd=, env=, timeout=)``: ``python SCRIPT ARGS`` the same way."""
    return _forked_server.python
