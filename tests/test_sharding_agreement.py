"""Ranks agree or fail clearly (spec/sharding.md, SHARD-22), on virtual ranks: every ordered pair of different
collective calls is the same UsageError on both ranks, listing each rank's call, with each rank's shard unchanged;
tables configured differently on the ranks are refused at their first call, naming the field and each value."""
from __future__ import annotations

import itertools
import os
import threading

import numpy as np
import pytest

from mxrec_ref.config import TableConfig
from mxrec_ref.distributed import ReplicatedStore, ShardedStore, VirtualWorld
from mxrec_ref.errors import UsageError
from mxrec_ref.optimizers import SGD, Adagrad
from mxrec_ref.store import open_store

CALLS = {
    "lookup": ("training lookup", lambda s, ctx: s.lookup(np.arange(-3, 20), step=50)),
    "eval lookup": ("evaluation lookup", lambda s, ctx: s.lookup(np.arange(-3, 20), train=False)),
    "apply": ("apply_gradients", lambda s, ctx: s.apply_gradients(
        ctx["result"], np.ones((len(ctx["result"].unique_keys), 4), np.float32), step=ctx["step"])),
    "evict": ("evict", lambda s, ctx: s.evict(now=10_000)),
    "export": ("export", lambda s, ctx: s.export()),
    "save": ("save", lambda s, ctx: s.save(ctx["other"])),
    "load": ("load", lambda s, ctx: s.load(ctx["saved"])),
    "table_clock": ("table_clock", lambda s, ctx: s.table_clock()),
}


def config(**changes) -> TableConfig:
    fields = dict(name="clicks", dim=4, device_vocabulary_size=64, dynamic_expansion=True, access_threshold=2,
                  eviction_threshold=3)
    fields.update(changes)
    return TableConfig(**fields)


def on_both(world, calls) -> list:
    """``calls[r]()`` on virtual rank r, side by side; each rank's result or exception, in rank order.  The
    world stays usable when every rank gets through the exchange (no rank aborts it)."""
    outcomes = [None] * world.size

    def body(rank):
        try:
            outcomes[rank] = calls[rank]()
        except Exception as error:      # noqa: BLE001 -- the outcome under test
            outcomes[rank] = error

    threads = [threading.Thread(target=body, args=(rank,)) for rank in range(world.size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a rank is still waiting: the call hung"
    return outcomes


def snapshot(store) -> tuple:
    """What a rank holds: its shard's full state and statistics, and the wrapper's counters."""
    return store.local.export(), dict(store.local.stats()), dict(store._positions), store.stats()


@pytest.fixture(params=["sharded", "replicated"])
def trained(request, tmp_path):
    """Two ranks of a table after 3 training steps, saved to ``saved``; ``result`` is the last step's lookup."""
    kind = ShardedStore if request.param == "sharded" else ReplicatedStore
    world = VirtualWorld(2, timeout=60)
    stores = [kind(open_store(config(), Adagrad(learning_rate=0.1), backend="ref"), comm)
              for comm in world.communicators()]
    contexts = [{"saved": str(tmp_path / "saved"), "other": str(tmp_path / f"other{rank}")} for rank in range(2)]

    def train(rank):
        def steps():
            for step in range(3):
                result = stores[rank].lookup((np.arange(12) * (step + 1) + rank) % 17, step=step)
                stores[rank].apply_gradients(result, np.full((len(result.unique_keys), 4), 0.5, np.float32),
                                             step=step)
            contexts[rank].update(result=stores[rank].lookup(np.arange(8) + rank, step=3), step=3)
            return stores[rank].save(contexts[rank]["saved"])
        return steps

    outcomes = on_both(world, [train(0), train(1)])
    assert all(isinstance(path, str) for path in outcomes), outcomes
    return world, stores, contexts


def test_shard_22_every_pair_of_different_collective_calls_is_a_clear_error_that_changes_nothing(trained):
    """All 56 ordered pairs of {lookup, eval lookup, apply, evict, export, save, load, table_clock}: both ranks
    raise the same UsageError naming each rank's call, before anything changes -- each rank's shard (state and
    statistics) is bit-identical afterwards, nothing was saved; the table then still works on both ranks."""
    world, stores, contexts = trained
    for first, second in itertools.permutations(CALLS, 2):
        before = [snapshot(store) for store in stores]
        outcomes = on_both(world, [lambda: CALLS[first][1](stores[0], contexts[0]),
                                   lambda: CALLS[second][1](stores[1], contexts[1])])
        for rank, outcome in enumerate(outcomes):
            assert isinstance(outcome, UsageError), (first, second, rank, outcome)
            message = str(outcome)
            assert f"rank 0: {CALLS[first][0]} of table 'clicks'" in message, message
            assert f"rank 1: {CALLS[second][0]} of table 'clicks'" in message, message
            assert "the ranks make different collective calls" in message
        assert str(outcomes[0]) == str(outcomes[1])
        for rank, store in enumerate(stores):
            state, local_stats, positions, stats = snapshot(store)
            assert state.equals(before[rank][0]), (first, second, rank, state.differences(before[rank][0]))
            assert (local_stats, positions, stats) == before[rank][1:], (first, second, rank)
        assert not any(os.path.exists(contexts[rank]["other"]) for rank in (0, 1))      # nothing was saved
    # the ranks still make their calls in step: a matched call works
    clocks = on_both(world, [stores[0].table_clock, stores[1].table_clock])
    assert clocks[0] == clocks[1] == (3, "step")
    states = on_both(world, [stores[0].export, stores[1].export])
    assert states[0].equals(states[1]) and len(states[0].keys) > 0


def test_shard_22_a_rank_that_skipped_a_call_is_named_by_its_counter(trained):
    """Rank 1 skips one lookup: at the next call both ranks raise, each rank's call counted."""
    world, stores, contexts = trained
    on_both(world, [lambda: None, lambda: None])
    store_0, store_1 = stores
    calls_0 = store_0.collective.calls

    def rank_0():
        store_0.collective.calls += 1   # as if rank 0 had made one call that rank 1 skipped
        return store_0.table_clock()

    outcomes = on_both(world, [rank_0, store_1.table_clock])
    assert all(isinstance(o, UsageError) for o in outcomes), outcomes
    assert f"rank 0: table_clock of table 'clicks' (its call {calls_0 + 2})" in str(outcomes[0])
    assert f"rank 1: table_clock of table 'clicks' (its call {calls_0 + 1})" in str(outcomes[0])


@pytest.mark.parametrize("field,values,optimizers", [
    ("optimizer", None, (Adagrad(learning_rate=0.1), SGD(learning_rate=0.1))),
    ("name", ("t0", "t1"), None),
    ("dim", (4, 8), None),
    ("eviction_threshold", (3, 5), None),
    ("device_vocabulary_size", (64, 128), None),
])
def test_shard_22_ranks_with_different_table_configs_are_refused_at_the_first_call(field, values, optimizers):
    """Adagrad on rank 0 and SGD on rank 1 trained silently; tables t0 and t1 merged into one checkpoint; dims 4
    and 8 gave a bare numpy error.  Now the first collective call raises the same UsageError on both ranks,
    naming the field and each rank's value, and changes nothing."""
    world = VirtualWorld(2, timeout=60)
    stores = []
    for rank, comm in enumerate(world.communicators()):
        changes = {field: values[rank]} if values is not None else {}
        optimizer = optimizers[rank] if optimizers is not None else Adagrad(learning_rate=0.1)
        stores.append(ShardedStore(open_store(config(**changes), optimizer, backend="ref"), comm))
    outcomes = on_both(world, [lambda: stores[0].lookup([1, 2, 3], step=0),
                               lambda: stores[1].lookup([4, 5], step=0)])
    for outcome in outcomes:
        assert isinstance(outcome, UsageError), outcome
        assert f": {field}: the ranks configure this table differently (rank 0: " in str(outcome)
    assert str(outcomes[0]) == str(outcomes[1])
    if values is not None:
        assert f"rank 0: {values[0]!r}, rank 1: {values[1]!r}" in str(outcomes[0])
    else:
        assert "'kind': 'Adagrad'" in str(outcomes[0]) and "'kind': 'gradient_descent'" in str(outcomes[0])
    assert all(store.local.size() == 0 and store.local.stats()["train_lookups"] == 0 for store in stores)
