"""Library logging under the ``mxrec_ref`` logger (spec/observability.md, OBS-1, OBS-2).

Each test captures every record of the ``mxrec_ref`` hierarchy at DEBUG and checks
that one event gives exactly one record, from the stated logger, at the stated
level, naming the table."""
import errno
import logging
import subprocess
import sys

import numpy as np
import pytest

from mxrec_ref import Adagrad, CapacityError, DiskFullError, TableConfig, open_store
from mxrec_ref.conformance.checks import keys


@pytest.fixture
def records(caplog):
    """The records of the mxrec_ref loggers, from DEBUG up, in order."""
    caplog.set_level(logging.DEBUG, logger="mxrec_ref")
    return lambda: [r for r in caplog.records if r.name.startswith("mxrec_ref")]


def _one(records, logger: str, level: int, *words: str) -> logging.LogRecord:
    matching = [r for r in records if all(w in r.getMessage() for w in words)]
    assert len(matching) == 1, [r.getMessage() for r in records]
    record = matching[0]
    assert (record.name, record.levelno) == (logger, level)
    assert record.getMessage().startswith("table 'clicks': ")
    return record


def test_obs_2_growth_is_logged_once_with_the_table_and_sizes(backend, records):
    store = open_store(TableConfig("clicks", dim=2, device_vocabulary_size=2, dynamic_expansion=True),
                       backend=backend)
    store.lookup(keys(1, 2), step=0)
    assert records() == []                                  # fits: no event
    store.lookup(keys(3, 4, 5), step=1)                     # 5 rows needed: 2 -> 5
    record = _one(records(), "mxrec_ref.store", logging.INFO, "capacity")
    assert "2" in record.getMessage() and "5" in record.getMessage()
    assert store.stats()["growths"] == 1


def test_obs_2_a_refused_growth_logs_nothing(backend, records):
    store = open_store(TableConfig("clicks", dim=2, device_vocabulary_size=2), backend=backend)
    with pytest.raises(CapacityError):
        store.lookup(keys(1, 2, 3), step=0)
    assert records() == []


def test_obs_2_eviction_is_logged_once_with_the_count(backend, records):
    store = open_store(TableConfig("clicks", dim=2, device_vocabulary_size=8, eviction_threshold=2,
                                   access_threshold=1),
                       backend=backend)
    store.lookup(keys(1, 2), step=0)
    store.lookup(keys(3), step=1)
    store.evict(now=1)                                      # nothing old enough: a routine pass
    _one(records(), "mxrec_ref.store", logging.DEBUG, "evicted 0 keys")
    store.evict(now=2)
    _one(records(), "mxrec_ref.store", logging.INFO, "evicted 2 keys")


def test_obs_2_checkpoint_save_load_and_warm_start_are_logged(backend, records, tmp_path):
    store = open_store(TableConfig("clicks", dim=2, device_vocabulary_size=8), Adagrad(0.1), backend=backend)
    store.lookup(keys(1, 2, 3), step=0)
    store.save(tmp_path / "full")
    _one(records(), "mxrec_ref.store", logging.INFO, "saved 3 keys", "full")
    store.lookup(keys(4), step=1)
    store.save(tmp_path / "delta", incremental=True)
    _one(records(), "mxrec_ref.store", logging.INFO, "saved 4 keys", "incremental")
    other = open_store(TableConfig("clicks", dim=2, device_vocabulary_size=8), Adagrad(0.1), backend=backend)
    other.load(tmp_path / "full")
    _one(records(), "mxrec_ref.store", logging.INFO, "loaded 3 keys", str(tmp_path / "full"))
    other.warm_start(tmp_path / "delta")
    _one(records(), "mxrec_ref.store", logging.INFO, "warm start", str(tmp_path / "delta"))


def test_obs_2_a_failed_load_logs_nothing(backend, records, tmp_path):
    store = open_store(TableConfig("clicks", dim=2, device_vocabulary_size=8), backend=backend)
    with pytest.raises(Exception):
        store.load(tmp_path / "missing")
    assert records() == []


def _ssd_table(backend, folder, **options):
    config = TableConfig("clicks", dim=2, device_vocabulary_size=2, host_vocabulary_size=1,
                         ssd_vocabulary_size=100, ssd_data_path=[str(folder)], access_threshold=0)
    return open_store(config, Adagrad(0.1), backend=backend, **options)


def test_obs_2_a_full_disk_is_a_warning_once_per_failed_spill(backend, records, tmp_path):
    full = []

    def fault_hook(path, n_bytes):
        if full:
            raise OSError(errno.ENOSPC, "No space left on device", path)

    store = _ssd_table(backend, tmp_path, ssd_fault_hook=fault_hook)
    for step in range(3):
        store.lookup(keys(2 * step, 2 * step + 1), step=step)
    assert not [r for r in records() if r.levelno >= logging.WARNING]
    full.append(True)
    store.lookup(keys(6, 7), step=3)                       # the spill fails, silently to the caller (TIER-7)
    record = _one(records(), "mxrec_ref.tiers.store", logging.WARNING, "disk full")
    assert str(tmp_path) in record.getMessage()


def test_obs_2_compaction_is_logged_once_per_file(backend, records, tmp_path):
    store = _ssd_table(backend, tmp_path)
    for step in range(4):
        store.lookup(keys(2 * step, 2 * step + 1), step=step)
    assert store.stats()["compactions"] == 0
    before = len(records())
    for step in range(4):                                  # bring the rows back: their records die
        store.lookup(keys(2 * step, 2 * step + 1), step=4 + step)
    compacted = [r for r in records()[before:] if "compacted" in r.getMessage()]
    assert len(compacted) == store.stats()["compactions"] > 0
    assert {(r.name, r.levelno) for r in compacted} == {("mxrec_ref.tiers.disk", logging.INFO)}
    assert all(r.getMessage().startswith("table 'clicks': ") for r in compacted)


def test_obs_1_importing_the_package_installs_no_handler():
    """In a fresh interpreter: after importing the store and TF layers, no logger of the
    mxrec_ref hierarchy has a handler or a level, and the root logger is as Python left it."""
    probe = (
        "import logging; root = list(logging.getLogger().handlers)\n"
        "import mxrec_ref, mxrec_ref.tf, mxrec_ref.tf.callbacks, mxrec_ref.tiers.disk, mxrec_ref.fast\n"
        "names = [n for n in logging.root.manager.loggerDict if n == 'mxrec_ref' or n.startswith('mxrec_ref.')]\n"
        "assert 'mxrec_ref.store' in names, names\n"
        "bad = [(n, logging.getLogger(n).handlers, logging.getLogger(n).level) for n in names\n"
        "       if logging.getLogger(n).handlers or logging.getLogger(n).level != logging.NOTSET]\n"
        "assert bad == [], bad\n"
        "assert logging.getLogger().handlers == root, logging.getLogger().handlers\n"
        "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"

