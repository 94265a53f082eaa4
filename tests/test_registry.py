"""The registry reads the environment once per store and passes it down (issue 15 item 1, HOT-1)."""
from __future__ import annotations

import pytest

from mxrec_ref import ConfigError, TableConfig, backends, hot, open_store


def test_hot_1_open_store_reads_the_update_step_once_and_passes_it_down(backend, monkeypatch):
    reads = []
    real = hot.update_step
    monkeypatch.setattr(hot, "update_step", lambda table: reads.append(table) or real(table))
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "7")
    flat = open_store(TableConfig("t", dim=2, device_vocabulary_size=4), backend=backend)
    tiered = open_store(TableConfig("d", dim=2, device_vocabulary_size=2, host_vocabulary_size=4), backend=backend)
    assert reads == ["t", "d"]                      # once per store, by the registry, tiers or not
    assert flat.engine.hot_update_step == tiered.engine.inner.hot_update_step == 7


def test_hot_1_a_store_given_the_update_step_does_not_read_the_environment(backend, monkeypatch):
    monkeypatch.setenv("HOT_EMB_UPDATE_STEP", "not a number")
    config = TableConfig("t", dim=2, device_vocabulary_size=4)
    with pytest.raises(ConfigError, match="'t': HOT_EMB_UPDATE_STEP"):
        open_store(config, backend=backend)
    factory = backends._BACKENDS[backend]
    assert factory(config, hot_update_step=3).engine.hot_update_step == 3
