"""The conformance suite against a third-party store in another process (issue 20, item 3): TFRA's
dynamic_embedding behind mxrec_ref.peers (BE-3), rules it cannot express reported n/a (CON-11).

The CI tests use a stand-in server in this environment (tests/peers_fake_server.py); the live test runs
TFRA itself and is skipped unless its environment exists (MXREC_TFRA_PYTHON or .venv-peers)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from mxrec_ref import SGD, Adagrad, Initializer, MxrecError, TableConfig, open_store
from mxrec_ref.backends import register_backend
from mxrec_ref.conformance import plugin
from mxrec_ref.conformance.run import exit_status
from mxrec_ref.errors import BackendFailure, NotSupported
from mxrec_ref.peers import protocol, tfra

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_fake_backend import open_dying_store, open_fake_store  # noqa: E402


def _config(**extra):
    extra.setdefault("device_vocabulary_size", 4)
    return TableConfig("t", dim=2, initializer=Initializer(kind="constant", value=0.5), **extra)


def test_be_3_the_protocol_carries_fields_and_arrays_of_any_dtype_and_shape():
    read_fd, write_fd = os.pipe()
    arrays = {"keys": np.array([1, -1, 2**63 - 1], np.int64), "rows": np.arange(6, dtype=np.float32).reshape(3, 2),
              "exists": np.array([True, False, True]), "empty": np.zeros((0, 4), np.float32)}
    with os.fdopen(write_fd, "wb") as writer, os.fdopen(read_fd, "rb") as reader:
        protocol.write_message(writer, {"op": "lookup", "fields": {"table": 3, "clock": None}}, arrays)
        header, received = protocol.read_message(reader)
        assert header == {"op": "lookup", "fields": {"table": 3, "clock": None}}
        assert list(received) == list(arrays)
        for name, array in arrays.items():
            assert received[name].dtype == array.dtype and np.array_equal(received[name], array)
            assert received[name].flags.writeable                   # a copy, not a view of the pipe's bytes
        writer.close()
        with pytest.raises(protocol.ConnectionClosed):
            protocol.read_message(reader)


def test_be_3_a_store_over_a_server_process_answers_as_the_reference():
    """The client validates, dedups and keeps the contract's bookkeeping; the server holds the rows."""
    peer, ref = open_fake_store(_config(), SGD(1.0)), open_store(_config(), SGD(1.0), backend="ref")
    for store in (peer, ref):
        result = store.lookup([[1, 2], [2, -1]], step=3, pad_to=4)
        store.apply_gradients(result, np.ones((4, 2)), step=3)
        store.apply_gradients(np.array([2, 2, 9]), np.ones((3, 2)), step=4)     # OPT-1 sum, OPT-2 drop
        store.lookup([5], train=False)
    assert peer.export().differences(ref.export()) == []
    assert peer.stats() == ref.stats() and peer.capacity() == ref.capacity() == 4
    with pytest.raises(MxrecError, match="table 't': device_vocabulary_size") as error:
        peer.lookup(np.arange(10, 15), step=5)                               # EXP-2, before the server is asked
    assert type(error.value).__name__ == "CapacityError"
    assert peer.export().differences(ref.export()) == []


def test_con_11_what_tfra_cannot_express_raises_not_supported_before_anything():
    register_backend("fake-tfra", open_fake_store)
    for extra, reason in ((dict(access_threshold=2), "ADM"), (dict(eviction_threshold=3, access_threshold=1), "EVI"),
                          (dict(host_vocabulary_size=8), "TIER")):
        with pytest.raises(NotSupported, match=f"^{reason}") as error:
            open_store(_config(**extra), SGD(1.0), backend="fake-tfra")
        assert not isinstance(error.value, MxrecError)
    store = open_fake_store(_config())
    store.lookup([1], step=0)
    with pytest.raises(NotSupported, match="row indices"):
        store.row_handles([1])
    with pytest.raises(NotSupported, match="weight decay"):
        open_fake_store(_config(), SGD(0.1, weight_decay=1e-3))
    with pytest.raises(NotSupported, match="^ADM"):
        store.set_threshold(2)                         # ADM-9 above 1 needs admission
    assert not store.config.admission_enabled
    store.set_threshold(0)                             # stop counting: the contract's bookkeeping
    assert not store.counting


def test_be_3_a_collected_store_closes_its_table_with_the_next_call():
    """A finalizer only queues the table (it may run inside a call holding the pipe); the next call sends it."""
    import gc

    kept, dropped = open_fake_store(_config()), open_fake_store(_config())
    server, table = dropped._server, dropped._id
    del dropped
    gc.collect()
    assert table in server.closed_tables
    kept.size()
    assert server.closed_tables == []


def _report(outcomes, backends=("ref",)):
    class Config:
        def getoption(self, name):
            return ",".join(backends)

    report = plugin.RuleReport(Config())
    for rule, results in outcomes.items():
        report.outcomes[rule] = results
    return report.lines()


def test_con_11_the_report_gives_pass_fail_or_n_a_per_rule_with_reasons():
    lines = _report({"ADM-1": [("x.py::test_adm_1_a", "n/a", "ADM: no admission")],
                     "LKP-2": [("x.py::test_lkp_2_a", "pass", ""), ("x.py::test_lkp_2_b", "n/a", "EXP-4: no rows")],
                     "OPT-3": [("x.py::test_opt_3_a", "fail", "DID NOT RAISE"), ("x.py::test_opt_3_b", "pass", "")]},
                    backends=("peers_fake_backend:open_fake_store",))
    assert lines[0].split() == ["rule", "result", "tests"]
    assert lines[1].split() == ["ADM-1", "n/a", "0/0", "(1", "n/a)"]
    assert lines[2].split(":", 1) == ["                   test_adm_1_a", " ADM: no admission"]
    assert lines[3].split() == ["LKP-2", "pass", "1/1", "(1", "n/a)"]
    assert lines[4].split() == ["OPT-3", "FAIL", "1/2"]
    assert lines[5].strip() == "test_opt_3_a: DID NOT RAISE"
    assert lines[-3:] == ["known differences (what the backend's adapter bridges):",
                          "  LKP-1: the fake server is a dictionary", "1 passed, 1 failed, 1 n/a"]


def test_con_11_failures_ok_exits_0_only_once_the_report_exists(tmp_path):
    report = tmp_path / "report.txt"
    assert exit_status(1, failures_ok=True, report=str(report)) == 1          # not written: still a failure
    report.write_text("...")
    assert exit_status(1, failures_ok=True, report=str(report)) == 0
    assert exit_status(1, failures_ok=False, report=str(report)) == 1
    assert exit_status(3, failures_ok=True, report=str(report)) == 3          # a dead backend is never ok


RUN_AGAINST_A_DYING_SERVER = """
from mxrec_ref.conformance.checks import make_store

def test_exp_2_a_lookup_whose_server_dies(backend):
    make_store(backend).lookup([1], step=0)

def test_adm_1_a_threshold_the_backend_cannot_express(backend):
    make_store(backend, access_threshold=3)
"""


def test_be_3_a_dead_server_is_a_backend_failure_and_conformance_exits_3(tmp_path):
    """The suite's plugin on two tests (not the whole suite, for time): one meets a dead server, one a
    NotSupported; the report says FAIL and n/a, and the run's status is 3 (CON-11)."""
    store = open_dying_store(_config())
    for _ in range(2):                                 # the call that found it dead, and every later one
        with pytest.raises(BackendFailure, match=r"failed during 'lookup'.*exit code 7.*dying on lookup"):
            store.lookup([1], step=0)
    assert not isinstance(BackendFailure("x"), MxrecError)
    (tmp_path / "test_dying.py").write_text(RUN_AGAINST_A_DYING_SERVER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.txt"
    status = pytest.main([str(tmp_path / "test_dying.py"), "-c", str(tmp_path / "pytest.ini"), "--rootdir",
                          str(tmp_path), "-p", "mxrec_ref.conformance.plugin", "-p", "no:cacheprovider", "-q",
                          "--mxrec-backend", "peers_fake_backend:open_dying_store", "--mxrec-report-file", str(report)])
    assert status == 3
    text = report.read_text()
    assert "EXP-2      FAIL" in text and "BackendFailure" in text
    assert "ADM-1      n/a" in text and "no count-based admission" in text
    assert text.rstrip().endswith("0 passed, 1 failed, 1 n/a")


def _peers_python() -> str | None:
    python = tfra.peers_python()
    return python if os.path.exists(python) else None


@pytest.mark.skipif(_peers_python() is None, reason="TFRA's environment (.venv-peers, MXREC_TFRA_PYTHON) is absent")
def test_be_3_tfra_itself_agrees_with_the_reference_on_what_it_expresses(tmp_path):
    """Live: TFRA 0.8.1 in its own process; SGD and Adagrad through its DynamicEmbeddingOptimizer give the
    reference's rows bit for bit, and a save/load round trip keeps every row and slot."""
    for optimizer in (SGD(0.5), Adagrad(0.1, initial_accumulator_value=0.2)):
        config = _config(dynamic_expansion=True, device_vocabulary_size=2)
        peer, ref = tfra.open_tfra_store(config, optimizer), open_store(config, optimizer, backend="ref")
        rng = np.random.default_rng(0)
        for step in range(3):
            batch = rng.integers(0, 9, size=12)
            for store in (peer, ref):
                result = store.lookup(batch, step=step)
                store.apply_gradients(result, np.linspace(-1, 1, 2 * len(result.unique_keys)).reshape(-1, 2),
                                      step=step)
        assert peer.export().differences(ref.export()) == []
        assert peer.stats() == ref.stats()
        fresh = tfra.open_tfra_store(config, optimizer)
        peer.save(tmp_path / optimizer.kind)
        fresh.load(tmp_path / optimizer.kind)
        assert fresh.export().differences(ref.export()) == []
