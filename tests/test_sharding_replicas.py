"""Replicas on several ranks (spec/sharding.md, SHARD-16..): data-parallel tables (``is_dp=True``), eviction
decided on rank 0, and hot rows replicated on every rank -- on virtual ranks (VirtualWorld), both backends.
The real-mpirun scenarios are in tests/sharding_child.py (run by tests/test_sharding_mpi.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxrec_ref.config import TableConfig
from mxrec_ref.distributed import ShardedStore, SingleProcess, VirtualWorld
from mxrec_ref.distributed.replicated import ReplicatedStore, gather_rows
from mxrec_ref.distributed.schedule import EvictionSchedule
from mxrec_ref.errors import CapacityError, KeyInputError, UsageError
from mxrec_ref.optimizers import SGD, Adagrad, LazyAdam
from mxrec_ref.store import open_store

DIM = 4
OPTIMIZERS = {"sgd": SGD(learning_rate=0.1), "adagrad": Adagrad(learning_rate=0.1),
              "lazy_adam": LazyAdam(learning_rate=0.01)}


def config(**overrides) -> TableConfig:
    fields = dict(name="t", dim=DIM, device_vocabulary_size=8, dynamic_expansion=True, access_threshold=2,
                  eviction_threshold=3, faae_coefficient=1)
    fields.update(overrides)
    return TableConfig(**fields)


def local_unique(keys) -> np.ndarray:
    return np.array(list(dict.fromkeys(np.asarray(keys).reshape(-1).tolist())), dtype=np.int64)


def gradient_for(step: int, rank: int, keys: np.ndarray) -> np.ndarray:
    base = (keys.astype(np.float64)[:, None] * 0.37 + np.arange(DIM) * 0.11 + step * 0.05 + rank * 0.013)
    return np.sin(base).astype(np.float32)


def timestamp_of(step: int, rank: int, stamped: bool):
    return 100 * step + (7 * rank) % 5 if stamped else None


def run_one_process(backend, cfg, optimizer, steps, stamped=False, divide=1):
    """One process on the ranks' slices concatenated in rank order; its gradients are the ranks'
    per-key rows concatenated in rank order (SHARD-9)."""
    store = open_store(cfg, optimizer, backend=backend)
    forward, evicted = [], []
    for step, (slices, train, evict) in enumerate(steps):
        stamp = max(timestamp_of(step, r, True) for r in range(len(slices))) if stamped and train else None
        result = store.lookup(np.concatenate(slices), train=train, step=step if train else None, timestamp=stamp)
        forward.append(result.embeddings())
        if train:
            admitted = set(result.unique_keys[result.admitted].tolist())
            keys, grads = [], []
            for rank, part in enumerate(slices):
                unique = local_unique(part)
                unique = unique[np.isin(unique, list(admitted))]
                keys.append(unique)
                grads.append(gradient_for(step, rank, unique) * np.float32(1.0 / divide) if divide > 1
                             else gradient_for(step, rank, unique))
            store.apply_gradients(np.concatenate(keys), np.concatenate(grads).reshape(-1, DIM), step=step)
        if evict:
            evicted.append(store.evict().tolist())
    return store, forward, evicted


def run_ranks(n, make_store, steps, stamped=False):
    """The same call sequence on ``n`` virtual ranks, each on its slice; ``make_store(rank, comm)``."""
    def body(rank, comm):
        store = make_store(rank, comm)
        forward, evicted = [], []
        for step, (slices, train, evict) in enumerate(steps):
            result = store.lookup(slices[rank], train=train, step=step if train else None,
                                  timestamp=timestamp_of(step, rank, stamped) if train else None)
            forward.append(result.embeddings())
            if train:
                store.apply_gradients(result, gradient_for(step, rank, result.unique_keys), step=step)
            if evict:
                evicted.append(store.evict().tolist())
        return store, store.export(), forward, evicted, store.size(), store.capacity(), store.stats()
    return VirtualWorld(n).run(body)


@st.composite
def scenarios(draw, max_ranks=4):
    n = draw(st.integers(1, max_ranks))
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        slices = [np.array(draw(st.lists(st.integers(-6, 20), max_size=7)), dtype=np.int64) for _ in range(n)]
        steps.append((slices, draw(st.booleans()) or not steps, draw(st.integers(0, 3)) == 0))
    return n, steps, draw(st.sampled_from(sorted(OPTIMIZERS))), draw(st.integers(1, 3)), draw(st.booleans())


def assert_same_rows(mine, whole, slices, rank):
    start = sum(len(s) for s in slices[:rank])
    want = whole[start:start + len(slices[rank])]
    assert mine.view(np.uint32).tolist() == want.view(np.uint32).tolist()


STATS_COMPARED = ("size", "capacity", "pending", "admitted", "evicted", "evicted_pending", "train_lookups",
                  "eval_lookups", "key_positions", "padding_positions", "default_positions", "grad_rows_applied",
                  "grad_applies", "growths")


# ----------------------------------------------------------------------------- SHARD-16
def test_shard_16_gather_rows_concatenates_every_ranks_rows_in_rank_order():
    def body(rank, comm):
        return gather_rows(comm, np.arange(rank, dtype=np.int64) + 10 * rank, np.arange(3))
    for out in VirtualWorld(3).run(body):
        assert out.tolist() == [10, 20, 21]


@settings(max_examples=20)
@given(scenario=scenarios())
def test_shard_16_replicas_are_bitwise_equal_and_equal_one_process_on_the_concatenated_batch(backend, scenario):
    n, steps, optimizer, threshold, stamped = scenario
    cfg = config(access_threshold=threshold, eviction_threshold=2 if not stamped else 150)
    one, forward, evicted = run_one_process(backend, cfg, OPTIMIZERS[optimizer], steps, stamped)
    results = run_ranks(n, lambda rank, comm: ReplicatedStore(open_store(cfg, OPTIMIZERS[optimizer],
                                                                         backend=backend), comm), steps, stamped)
    expected, expected_stats = one.export(), one.stats()
    for rank, (store, state, rank_forward, rank_evicted, size, capacity, stats) in enumerate(results):
        assert state.differences(expected) == []                        # bitwise, row placement too
        assert store.local.export().equals(results[0][0].local.export())
        assert np.array_equal(store.local.row_handles(expected.keys), one.row_handles(expected.keys))
        assert rank_evicted == evicted and (size, capacity) == (one.size(), one.capacity())
        for name in STATS_COMPARED:
            assert stats[name] == expected_stats[name], name
        for (slices, _, _), mine, whole in zip(steps, rank_forward, forward):
            assert_same_rows(mine, whole, slices, rank)


def test_shard_16_divide_gradients_and_tiered_replicas(backend, tmp_path):
    """A DDR replica (tiers per rank) with all2all_gradients_op="sum_gradients_and_div_by_ranksize"."""
    cfg = config(access_threshold=1, dynamic_expansion=False, device_vocabulary_size=20, host_vocabulary_size=40)
    flat = config(access_threshold=1, device_vocabulary_size=20)
    rng = np.random.default_rng(5)
    steps = [([rng.integers(-1, 30, 6) for _ in range(3)], True, step % 3 == 2) for step in range(6)]
    one, _, evicted = run_one_process(backend, flat, OPTIMIZERS["adagrad"], steps, divide=3)
    results = run_ranks(3, lambda rank, comm: ReplicatedStore(open_store(cfg, OPTIMIZERS["adagrad"], backend=backend),
                                                              comm, divide_gradients=True), steps)
    for store, state, _, rank_evicted, *_ in results:
        assert store.tiered and state.differences(one.export()) == [] and rank_evicted == evicted


def test_shard_16_a_full_replica_fails_every_rank_and_the_group_goes_on(backend):
    cfg = config(access_threshold=1, dynamic_expansion=False, device_vocabulary_size=3)

    def body(rank, comm):
        store = ReplicatedStore(open_store(cfg, backend=backend), comm)
        with pytest.raises(CapacityError):
            store.lookup([rank, rank + 2], step=0)           # 4 distinct keys over 3 rows: every replica is full
        with pytest.raises(KeyInputError if rank == 0 else UsageError, match="keys" if rank == 0 else "rank 0 of 2"):
            store.lookup([1.5] if rank == 0 else [1], step=1)
        store.lookup([7], step=2)
        return store.export()

    for state in VirtualWorld(2).run(body):
        assert state.keys.tolist() == [7]


# ----------------------------------------------------------------------------- SHARD-17
def test_shard_17_size_and_capacity_are_one_replicas(backend):
    cfg = config(access_threshold=1, dynamic_expansion=False, device_vocabulary_size=10)

    def body(rank, comm):
        store = ReplicatedStore(open_store(cfg, backend=backend), comm)
        store.lookup([1, 2, -1] if rank == 0 else [2, 3], step=0)
        return store.size(), store.capacity(), store.stats()

    for size, capacity, stats in VirtualWorld(2).run(body):
        assert (size, capacity) == (3, 10)               # the table's keys, device_vocabulary_size (not x ranks)
        assert (stats["key_positions"], stats["padding_positions"], stats["default_positions"]) == (4, 1, 0)


# ----------------------------------------------------------------------------- SHARD-18
def test_shard_18_saved_once_by_rank_0_and_loaded_whole_on_any_rank_count(backend, tmp_path):
    cfg = config(access_threshold=1)
    rng = np.random.default_rng(2)
    steps = [([rng.integers(-1, 40, 8) for _ in range(3)], True, False) for _ in range(4)]
    writes = []

    def train(rank, comm):
        store = ReplicatedStore(open_store(cfg, OPTIMIZERS["adagrad"], backend=backend), comm)
        if rank != 0:            # only rank 0 may write: any other rank's write fails the test
            store._write = lambda *a: writes.append(rank)
        for step, (slices, _, _) in enumerate(steps):
            result = store.lookup(slices[rank], step=step)
            store.apply_gradients(result, gradient_for(step, rank, result.unique_keys), step=step)
        return store.save(tmp_path), store.export()

    out = VirtualWorld(3).run(train)
    assert writes == [] and all(path == str(tmp_path / "t") for path, _ in out)
    saved = out[0][1]
    one = open_store(cfg, OPTIMIZERS["adagrad"], backend=backend)
    one.load(tmp_path)
    assert one.export().equals(saved) and len(saved.keys) > 0

    def reload(rank, comm):
        store = ReplicatedStore(open_store(cfg, OPTIMIZERS["adagrad"], backend=backend), comm)
        store.load(tmp_path)
        loaded = store.export()
        store.warm_start(tmp_path, now=3)
        return loaded, store.export()

    one.warm_start(tmp_path, now=3)
    for loaded, warm in VirtualWorld(2).run(reload):
        assert loaded.equals(saved) and warm.equals(one.export())


def test_shard_18_every_checkpoint_method_of_a_sharded_table_is_a_replicas_own():
    """A replica shares the sharded table's collective plumbing (TableCollective), never its checkpoint code
    (which writes and reads owners' slices): a checkpoint method of ShardedStore has a replica's own twin."""
    words = ("save", "load", "warm", "export", "import", "checkpoint", "slice", "write", "read", "merge")
    checkpointing = {name for name, value in vars(ShardedStore).items()
                     if callable(value) and any(word in name for word in words)}
    assert {"save", "load", "plan_warm_start", "apply_warm_start", "_export", "_import_state"} <= checkpointing
    assert checkpointing <= set(vars(ReplicatedStore))


# ----------------------------------------------------------------------------- SHARD-19
def clocks(readings):
    """A clock returning ``readings`` in turn (rank 0's); the other ranks' clocks must never be read."""
    values = iter(readings)
    return lambda: next(values)


def never_read():
    raise AssertionError("only rank 0 may read its clock (SHARD-19)")


def test_shard_19_rank_0s_clock_decides_time_eviction_for_every_rank():
    def body(rank, comm):
        clock = clocks([0, 5, 11, 12, 25, 26]) if rank == 0 else never_read
        schedule = EvictionSchedule(None, 10, clock, comm)
        schedule.start()
        return [schedule.due(step) for step in range(1, 6)]

    assert VirtualWorld(3).run(body) == [[False, True, False, True, False]] * 3


def test_shard_19_step_intervals_are_due_everywhere_without_a_clock():
    schedule = EvictionSchedule(3, 10**9, clocks([0] * 10), SingleProcess())
    assert [schedule.due(step) for step in range(1, 8)] == [False, False, True, False, False, True, False]


@settings(max_examples=6)
@given(n=st.integers(1, 3), gaps=st.lists(st.integers(0, 12), min_size=8, max_size=8),
       step_interval=st.sampled_from([None, 3]), data=st.data())
def test_shard_19_sharded_tables_evict_at_rank_0s_decisions_as_one_process_does(backend, n, gaps, step_interval,
                                                                                 data):
    """Training with eviction on rank 0's (injected) clock equals one process with that clock; the
    other ranks' clocks are never read, so no wall clock reaches a result."""
    readings = np.cumsum([0] + gaps).tolist()
    cfg = config(access_threshold=1, eviction_threshold=2, device_vocabulary_size=16)
    steps = [[np.array(data.draw(st.lists(st.integers(-1, 15), max_size=5)), np.int64) for _ in range(n)]
             for _ in range(len(gaps))]

    one = open_store(cfg, OPTIMIZERS["sgd"], backend=backend)
    schedule, expected = EvictionSchedule(step_interval, 10, clocks(readings), SingleProcess()), []
    schedule.start()
    for step, slices in enumerate(steps):
        result = one.lookup(np.concatenate(slices), step=step)
        admitted = set(result.unique_keys[result.admitted].tolist())
        keys = [u[np.isin(u, list(admitted))] for u in map(local_unique, slices)]
        grads = [gradient_for(step, rank, k) for rank, k in enumerate(keys)]
        one.apply_gradients(np.concatenate(keys), np.concatenate(grads).reshape(-1, DIM), step=step)
        if schedule.due(step + 1):
            expected.append((step, one.evict().tolist()))

    def body(rank, comm):
        store = ShardedStore(open_store(cfg, OPTIMIZERS["sgd"], backend=backend), comm)
        schedule, evicted = EvictionSchedule(step_interval, 10, clocks(readings) if rank == 0 else never_read, comm), []
        schedule.start()
        for step, slices in enumerate(steps):
            result = store.lookup(slices[rank], step=step)
            store.apply_gradients(result, gradient_for(step, rank, result.unique_keys), step=step)
            if schedule.due(step + 1):
                evicted.append((step, store.evict().tolist()))
        return evicted, store.export()

    for evicted, state in VirtualWorld(n).run(body):
        assert evicted == expected and state.differences(one.export()) == []


# ----------------------------------------------------------------------------- SHARD-20
HOT_STATS = ("hot_rows", "hot_refreshes", "hot_hit_positions")


@settings(max_examples=15)
@given(scenario=scenarios(), hot_rows=st.integers(1, 5), update_step=st.integers(1, 3))
def test_shard_20_hot_replicas_change_nothing_at_any_rank_count(backend, scenario, hot_rows, update_step):
    """HOT-3 across rank counts: with the hottest rows replicated on every rank, every rank's results,
    export, evictions and statistics (but hot_*) equal the same ranks without replicas and one process."""
    n, steps, optimizer, threshold, stamped = scenario
    cfg = config(access_threshold=threshold, eviction_threshold=2 if not stamped else 150)
    one, forward, evicted = run_one_process(backend, cfg, OPTIMIZERS[optimizer], steps, stamped)

    def make(hot):
        return lambda rank, comm: ShardedStore(open_store(cfg, OPTIMIZERS[optimizer], backend=backend), comm,
                                               hot_rows=hot, hot_update_step=update_step)
    with_hot = run_ranks(n, make(hot_rows), steps, stamped)
    without = run_ranks(n, make(0), steps, stamped)
    expected = one.export()
    for rank, (hot_run, plain_run) in enumerate(zip(with_hot, without)):
        store, state, rank_forward, rank_evicted, size, capacity, stats = hot_run
        assert state.differences(expected) == [] and rank_evicted == evicted and size == one.size()
        assert (size, capacity) == plain_run[4:6]
        assert {k: v for k, v in stats.items() if k not in HOT_STATS} == \
            {k: v for k, v in plain_run[6].items() if k not in HOT_STATS}
        assert stats["hot_refreshes"] == sum(1 for s in steps if s[1]) // update_step
        for (slices, _, _), mine, whole in zip(steps, rank_forward, forward):
            assert_same_rows(mine, whole, slices, rank)
        if len(store._hot.keys):           # the replica's rows are the owners' rows, bit for bit
            replica = store._hot.replica.export()
            rows = expected.values[np.searchsorted(expected.keys, replica.keys)]
            assert np.array_equal(replica.values.view(np.uint32), rows.view(np.uint32))


def test_shard_20_hot_keys_are_answered_locally_and_skip_the_row_exchange(backend):
    cfg = config(access_threshold=1)
    sent = []

    def body(rank, comm):
        original = comm._alltoallv

        def counting(send, send_counts, recv_counts):
            sent.append((rank, int(send_counts.sum()) - int(send_counts[rank]), send.dtype.itemsize * (
                send[0].size if len(send) else 0)))
            return original(send, send_counts, recv_counts)
        comm._alltoallv = counting
        store = ShardedStore(open_store(cfg, OPTIMIZERS["sgd"], backend=backend), comm, hot_rows=2,
                             hot_update_step=1)
        result = store.lookup([1, 2, 2, 3, 3, 3], step=0)     # refresh after it: the hot keys are 3 and 2
        store.apply_gradients(result, np.ones((3, DIM), np.float32), step=0)
        sent.clear() if rank == 0 else None
        comm.barrier()
        store.lookup([2, 3, 5], train=False)
        return store._hot.keys.tolist(), store.stats()

    out = VirtualWorld(2).run(body)
    assert out[0][0] == [2, 3]
    assert out[0][1]["hot_hit_positions"] == 4 and out[0][1]["hot_rows"] == 2
    # the evaluation lookup sent only rank 0's key 5 to its owner, rank 1, which sent back its row and
    # admitted flag (one exchange, alltoallv_columns): hot keys 2 and 3 never left either rank (without
    # replicas: 2 keys and 2 answers more)
    assert sorted((rank, n, size) for rank, n, size in sent if n) == [(0, 1, 16), (1, 1, 4 * DIM + 1)]   # [key, occurrences]; [row | admitted]


# ----------------------------------------------------------------------------- SHARD-11 (a fix found here)
def test_shard_11_a_fixed_size_sharded_table_loads_and_warm_starts_and_refuses_what_does_not_fit(backend, tmp_path):
    """mxRec's default tables cannot grow: each owner checks its slice against its rows (CKPT-6)."""
    cfg = config(access_threshold=1, dynamic_expansion=False, device_vocabulary_size=4)

    def body(rank, comm):
        store = ShardedStore(open_store(cfg, OPTIMIZERS["sgd"], backend=backend), comm)
        store.lookup([1, 2, 3, 4, 5, 6], step=0)             # 3 keys an owner: they fit 4 rows
        saved = store.save(tmp_path / "a")
        store.load(tmp_path / "a")
        loaded = store.export()
        store.warm_start(tmp_path / "a", now=1)
        small = ShardedStore(open_store(dataclasses.replace(cfg, device_vocabulary_size=2), backend=backend), comm)
        with pytest.raises((CapacityError, UsageError)):
            small.load(tmp_path / "a")
        return saved, loaded, small.export()

    for saved, loaded, small in VirtualWorld(2).run(body):
        assert loaded.keys.tolist() == [1, 2, 3, 4, 5, 6] and len(small.keys) == 0
