"""Concurrent calls on one store (CON-8, BE-2)."""
import threading

import numpy as np
import pytest

from mxrec_ref import SGD, Initializer

from .checks import make_store

N_THREADS = 4
ROUNDS = 60


def _work(store, thread: int, errors: list, evict: bool):
    """Lookups, raw-key gradient applies and evictions.  Gradients are exact
    small integers and nothing is old enough to be evicted, so the final state
    does not depend on the interleaving: any lost or torn update shows."""
    rng = np.random.default_rng(thread)
    try:
        for step in range(ROUNDS):
            batch = rng.integers(0, 300, size=256)
            result = store.lookup(batch, step=step)
            assert np.array_equal(result.unique_keys[result.inverse], batch)
            store.apply_gradients(batch, np.ones((batch.size, store.config.dim), np.float32), step=step)
            if evict and step % 7 == 0:
                store.evict()
    except Exception as exc:  # reported by the main thread
        errors.append(exc)


def _store(backend, evict: bool):
    # the evictions (of nothing) interleave a third kind of call; without them the run needs no threshold,
    # so a backend without eviction (CON-11) is still checked for lost updates
    thresholds = dict(access_threshold=1, eviction_threshold=10**6) if evict else {}
    return make_store(backend, SGD(learning_rate=1.0), dim=8, device_vocabulary_size=16, dynamic_expansion=True,
                      initializer=Initializer(kind="constant", value=0.0), **thresholds)


@pytest.mark.parametrize("evict", [True, False], ids=["with-evictions", "lookups-and-applies"])
def test_con_8_threads_lose_no_update(backend, evict):
    threaded, serial = _store(backend, evict), _store(backend, evict)
    errors = []
    threads = [threading.Thread(target=_work, args=(threaded, t, errors, evict)) for t in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for t in range(N_THREADS):
        _work(serial, t, errors, evict)
    a, b = threaded.export(), serial.export()
    assert np.array_equal(a.keys, b.keys)
    assert np.array_equal(a.counts, b.counts)           # every access counted once
    assert np.array_equal(a.values, b.values)           # every gradient applied once
    assert a.counts.sum() == N_THREADS * ROUNDS * 256
    assert -a.values[:, 0].sum() == N_THREADS * ROUNDS * 256
    assert threaded.stats()["grad_rows_applied"] == serial.stats()["grad_rows_applied"]
