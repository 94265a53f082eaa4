"""OPT-10 on several ranks: a learning rate given to one apply of a sharded table (with and
without hot replicas, SHARD-20) or a data-parallel one (SHARD-16) is the owners' and replicas'
update, on virtual ranks, both backends."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mxrec_ref.config import TableConfig
from mxrec_ref.distributed import ShardedStore, VirtualWorld
from mxrec_ref.distributed.replicated import ReplicatedStore
from mxrec_ref.optimizers import Adagrad, LazyAdam
from mxrec_ref.store import open_store

DIM = 4


def _steps(ranks: int, n: int):
    rng = np.random.default_rng(5)
    return [np.array_split(rng.integers(0, 12, size=6 * ranks).astype(np.int64), ranks) for _ in range(n)]


def _run(backend, kind, optimizer, rates):
    """Train on 2 virtual ranks; ``rates[step]`` is given to the step's apply (None: the store's)."""
    steps = _steps(2, len(rates))

    def body(rank, comm):
        local = open_store(TableConfig(name="t", dim=DIM, device_vocabulary_size=32, dynamic_expansion=True),
                           optimizer, backend=backend)
        store = (ReplicatedStore(local, comm) if kind == "dp" else
                 ShardedStore(local, comm, hot_rows=4 if kind == "hot" else 0,
                              hot_update_step=2 if kind == "hot" else None))
        forward = []
        for step, (slices, rate) in enumerate(zip(steps, rates)):
            result = store.lookup(slices[rank], step=step)
            forward.append(result.embeddings())
            grads = np.sin(result.unique_keys[:, None] * 0.3 + np.arange(DIM) + rank).astype(np.float32)
            store.apply_gradients(result, grads, step=step, **({} if rate is None else {"learning_rate": rate}))
        state = store.export()
        return forward, state.keys, state.values
    return VirtualWorld(2).run(body)


@pytest.mark.parametrize("kind", ["sharded", "hot", "dp"])
@pytest.mark.parametrize("optimizer", [Adagrad(learning_rate=0.05), LazyAdam(learning_rate=0.05)],
                         ids=["adagrad", "lazy_adam"])
def test_opt_10_every_owner_and_replica_applies_the_calls_learning_rate(backend, kind, optimizer):
    given = _run(backend, kind, optimizer, [0.37] * 5)
    configured = _run(backend, kind, dataclasses.replace(optimizer, learning_rate=0.37), [None] * 5)
    for (forward_a, keys_a, values_a), (forward_b, keys_b, values_b) in zip(given, configured):
        assert all(np.array_equal(a, b) for a, b in zip(forward_a, forward_b))     # hot rows read alike
        assert np.array_equal(keys_a, keys_b) and np.array_equal(values_a, values_b)
    unchanged = _run(backend, kind, optimizer, [None] * 5)
    assert not np.array_equal(unchanged[0][2], given[0][2])                        # the rate mattered
