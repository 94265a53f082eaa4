"""What the conformance tests share: opening a small store, snapshots for "nothing changed" (CON-4),
calls that capture their error, and result and store comparison."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from mxrec_ref import MxrecError, TableConfig, open_store


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


def call_capturing(store, method, *args, **kwargs):
    """(result, None), or (None, (exception type, message)) for an mxrec-ref error:
    for comparing what two stores do with the same call."""
    try:
        return getattr(store, method)(*args, **kwargs), None
    except MxrecError as exc:
        return None, (type(exc), str(exc))


def assert_same_result(a, b):
    """Two lookup results agree bit for bit."""
    assert a.unique_keys.tolist() == b.unique_keys.tolist()
    assert a.inverse.tolist() == b.inverse.tolist()
    assert a.admitted.tolist() == b.admitted.tolist()
    assert a.n_unique == b.n_unique
    assert a.rows.dtype == b.rows.dtype == np.float32
    assert np.array_equal(a.rows.view(np.uint32), b.rows.view(np.uint32))


def folder_bytes(folder) -> dict[str, bytes]:
    """Every file under ``folder``, by relative path: two checkpoints compared byte for byte."""
    root = Path(folder)
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def assert_same_stores(a, b) -> None:
    """Two stores hold the same table: export (rows, slots, counts, last-seen, history, clock), statistics,
    capacity and clock."""
    assert a.export().differences(b.export()) == []
    assert a.stats() == b.stats()
    assert a.capacity() == b.capacity()
    assert a.table_clock() == b.table_clock()


def save_and_reload(a, b, folders, *, warm: bool, now: int) -> None:
    """Save both stores (``folders``: one each): the same files; then load each back, or merge it by a warm
    start (either may refuse: both the same way, compared afterwards)."""
    a.save(folders[0])
    b.save(folders[1])
    assert folder_bytes(folders[0]) == folder_bytes(folders[1])
    for store, folder in zip((a, b), folders):
        if warm:
            call_capturing(store, "warm_start", folder, now=now)
        else:
            store.load(folder)
