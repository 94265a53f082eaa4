"""Concurrent calls on one store (CON-8, BE-2)."""
import threading

import numpy as np

from mxrec_ref import SGD, Initializer

from .checks import make_store

N_THREADS = 4
ROUNDS = 60


def _work(store, thread: int, errors: list):
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
            if step % 7 == 0:
                store.evict()
    except Exception as exc:  # reported by the main thread
        errors.append(exc)


def _store(backend):
    return make_store(backend, SGD(learning_rate=1.0), dim=8, device_vocabulary_size=16, dynamic_expansion=True,
                      access_threshold=1, eviction_threshold=10**6,
                      initializer=Initializer(kind="constant", value=0.0))


def test_con_8_threads_lose_no_update(backend):
    threaded, serial = _store(backend), _store(backend)
    errors = []
    threads = [threading.Thread(target=_work, args=(threaded, t, errors)) for t in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for t in range(N_THREADS):
        _work(serial, t, errors)
    a, b = threaded.export(), serial.export()
    assert np.array_equal(a.keys, b.keys)
    assert np.array_equal(a.counts, b.counts)           # every access counted once
    assert np.array_equal(a.values, b.values)           # every gradient applied once
    assert a.counts.sum() == N_THREADS * ROUNDS * 256
    assert -a.values[:, 0].sum() == N_THREADS * ROUNDS * 256
    assert threaded.stats()["grad_rows_applied"] == serial.stats()["grad_rows_applied"]
