"""Small helpers the tests share."""
from __future__ import annotations

import numpy as np

from mxrec_ref import TableConfig, open_store


def make_store(backend: str, optimizer=None, **config):
    config.setdefault("name", "t")
    config.setdefault("dim", 4)
    return open_store(TableConfig(**config), optimizer, backend=backend)


def snapshot(store):
    """Everything observable about a store, for 'nothing changed' checks (CON-4)."""
    state = store.export()
    return state, store.stats(), store.capacity()


def assert_unchanged(store, before):
    state, stats, capacity = before
    assert store.export().differences(state) == []
    assert store.stats() == stats
    assert store.capacity() == capacity


def keys(*values):
    return np.array(values, dtype=np.int64)
