"""Tables sharded over ranks (spec/sharding.md), run on virtual ranks in one process (VirtualWorld):
the same ShardedStore code as under mpirun, without a launcher.  The real-MPI runs are in
tests/test_sharding_mpi.py."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mxrec_ref.config import TableConfig
from mxrec_ref.distributed import (ReplicatedStore, ShardedStore, VirtualWorld, merge_states, owner_of, route,
                                   slice_state)
from mxrec_ref.distributed import sharded
from mxrec_ref.distributed.comm import SingleProcess, rank_order_sum
from mxrec_ref.errors import CapacityError, GradientError, KeyInputError, MxrecError, UsageError
from mxrec_ref.optimizers import SGD, Adagrad, LazyAdam
from mxrec_ref.state import PADDING_KEY
from mxrec_ref.store import open_store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIM = 4


def config(**overrides) -> TableConfig:
    fields = dict(name="t", dim=DIM, device_vocabulary_size=64, dynamic_expansion=True, access_threshold=2,
                  eviction_threshold=3, faae_coefficient=1)
    fields.update(overrides)
    return TableConfig(**fields)


def sharded_run(n, backend, cfg, body, optimizer=None, **options):
    """``body(rank, store)`` on ``n`` virtual ranks, each with a ShardedStore over its own store."""
    def job(rank, comm):
        return body(rank, ShardedStore(open_store(cfg, optimizer, backend=backend), comm, **options))
    return VirtualWorld(n).run(job)


def local_unique(keys) -> np.ndarray:
    return np.array(list(dict.fromkeys(np.asarray(keys).reshape(-1).tolist())), dtype=np.int64)


def gradient_for(step: int, rank: int, keys: np.ndarray) -> np.ndarray:
    """A per-key gradient row depending on step, rank and key (the test's stand-in for a model)."""
    base = (keys.astype(np.float64)[:, None] * 0.37 + np.arange(DIM) * 0.11 + step * 0.05 + rank * 0.013)
    return np.sin(base).astype(np.float32)


# ----------------------------------------------------------------------------- SHARD-1
def test_shard_1_without_a_launcher_a_process_is_rank_0_of_1_and_never_imports_mpi4py():
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS")}
    env["PYTHONPATH"] = ROOT
    code = ("import sys; from mxrec_ref.distributed import world; w = world(); "
            "print(type(w).__name__, w.rank, w.size, 'mpi4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["SingleProcess", "0", "1", "False"]


def test_shard_1_a_sharded_store_on_one_rank_is_the_store(backend):
    cfg = config()
    one, sharded = open_store(cfg, backend=backend), ShardedStore(open_store(cfg, backend=backend), SingleProcess())
    for step, keys in enumerate([[1, 2, 2, -1], [2, 3, 1], [5, 5, 5]]):
        a, b = one.lookup(keys, step=step), sharded.lookup(keys, step=step)
        assert np.array_equal(a.unique_keys, b.unique_keys) and np.array_equal(a.rows, b.rows)
        one.apply_gradients(a, gradient_for(step, 0, a.unique_keys), step=step)
        sharded.apply_gradients(b, gradient_for(step, 0, b.unique_keys), step=step)
    assert one.export().equals(sharded.export())


# ----------------------------------------------------------------------------- SHARD-2
def test_shard_2_owner_is_floor_modulo_and_routing_keeps_first_occurrence_order():
    keys = np.array([7, -3, 4, -1, 10, 3, -8], dtype=np.int64)
    assert owner_of(keys, 3).tolist() == [1, 0, 1, 2, 1, 0, 1]
    order, counts = route(keys, 3)
    assert counts.tolist() == [2, 4, 1]
    assert keys[order].tolist() == [-3, 3, 7, 4, 10, -8, -1]


def test_shard_2_padding_never_leaves_the_rank_and_each_key_lives_on_its_owner(backend):
    cfg = config(access_threshold=1)

    def body(rank, store):
        result = store.lookup([rank + 1, -1, -1, 7, 8], step=0)
        return result, store.local.export(), store.local.stats()

    out = sharded_run(3, backend, cfg, body)
    for rank, (result, local, stats) in enumerate(out):
        assert set(local.keys.tolist()) == {k for k in (1, 2, 3, 7, 8) if k % 3 == rank}
        assert stats["padding_positions"] == 0            # no owner ever saw -1
        pad = result.unique_keys.tolist().index(PADDING_KEY)
        assert not result.admitted[pad] and np.array_equal(result.rows[pad], cfg.default_row())


@given(keys=st.lists(st.integers(-2**63, 2**63 - 1) | st.integers(-5, 40), max_size=60),
       ranks=st.integers(1, 7), weighted=st.booleans())
def test_shard_2_the_routing_kernels_equal_their_numpy_versions(keys, ranks, weighted):
    """The fast twins (mxrec_ref/fast/sharding.py, cext/_route.pyx) against the reference's functions of the
    same names (distributed/sharded.py: numpy's stable sort, LKP-2's dictionary walk)."""
    fast_sharding = pytest.importorskip("mxrec_ref.fast.sharding", reason="the C extensions are not built")
    keys = np.array(keys, dtype=np.int64)
    counts = np.arange(1, keys.size + 1, dtype=np.int64) if weighted else None
    for fast, slow in zip(fast_sharding.dedup(keys, counts), sharded.dedup(keys, counts)):
        assert fast.dtype == np.int64 and slow.dtype == np.int64 and fast.tolist() == slow.tolist()
    for fast, slow in zip(fast_sharding.route(keys, ranks), sharded.route(keys, ranks)):
        assert fast.tolist() == slow.tolist()


def test_shard_2_a_table_routes_with_the_twins_of_its_shards_backend(backend):
    """The reference's routing is pure Python and numpy, whether or not the extension is built; a table whose
    shards are fast stores routes with the C kernels."""
    store = ShardedStore(open_store(config(), backend=backend), SingleProcess())
    modules = (store.routing.route.__module__, store.routing.dedup.__module__)
    if backend == "fast":
        assert modules == ("mxrec_ref.fast.sharding", "mxrec_ref.fast.sharding")
    else:
        assert modules == ("mxrec_ref.distributed.sharded", "mxrec_ref.distributed.sharded")  # over LKP-2's reference


# ----------------------------------------------------------------------------- SHARD-3
def test_shard_3_occurrence_counts_travel_with_the_keys(backend):
    """Key 6 twice on rank 0 and once on rank 1, threshold 3: admitted only if the owner adds 2 + 1."""
    cfg = config(access_threshold=3)
    out = sharded_run(2, backend, cfg, lambda rank, s: (s.lookup([6, 6] if rank == 0 else [6], step=0), s.export()))
    for result, state in out:
        assert result.admitted.tolist() == [True]
        assert state.keys.tolist() == [6] and state.counts.tolist() == [3]


def test_shard_3_counts_weights_and_the_largest_timestamp(backend):
    cfg = config(access_threshold=5)

    def body(rank, store):
        store.lookup([4, 9], step=0, timestamp=100 + 10 * rank, counts=[2, 1 + rank])
        return store.export()

    state = sharded_run(3, backend, cfg, body)[0]
    assert state.keys.tolist() == [4, 9] and state.counts.tolist() == [6, 6]
    assert state.last_seen.tolist() == [120, 120] and state.clock == 120 and state.clock_source == "timestamp"


def test_shard_3_result_is_the_local_batch_padded_to_pad_to(backend):
    cfg = config(access_threshold=1)
    out = sharded_run(2, backend, cfg, lambda rank, s: s.lookup([[3, 4], [4, -1]], step=0, pad_to=6))
    for result in out:
        assert result.unique_keys.tolist() == [3, 4, -1, -1, -1, -1] and result.n_unique == 3
        assert result.inverse.tolist() == [[0, 1], [1, 2]] and result.admitted.tolist()[:3] == [True, True, False]
        assert result.embeddings().shape == (2, 2, DIM)


# ----------------------------------------------------------------------------- SHARD-4
def test_shard_4_send_count_is_checked_for_every_rank_on_every_rank(backend):
    cfg = config(access_threshold=1)

    def body(rank, store):
        keys = [1, 2, 3, 4, 5] if rank == 1 else [1]
        with pytest.raises(UsageError) as raised:
            store.lookup(keys, step=4, pad_to=3)
        return str(raised.value), store.export()

    for message, state in sharded_run(2, backend, cfg, body):
        assert "table 't': send_count: rank 1 of 2 has 5 unique keys at step 4" in message
        assert len(state.keys) == 0 and state.clock is None          # nothing was sent or changed


# ----------------------------------------------------------------------------- SHARD-5
def test_shard_5_owner_sums_gradients_in_source_rank_order_and_applies_once(backend):
    cfg = config(access_threshold=1)
    grads = [np.float32(1.0), np.float32(1e8), np.float32(-1e8)]   # (a + b) + c = 0, a + (b + c) = 1 in float32

    def body(rank, store):
        result = store.lookup([5], step=0)
        applied = store.apply_gradients(result, np.full((1, DIM), grads[rank], np.float32), step=0)
        return applied, store.export(), store.stats()

    one = open_store(cfg, SGD(learning_rate=1.0), backend=backend)
    one.lookup([5, 5, 5], step=0)
    one.apply_gradients(np.array([5, 5, 5]), np.repeat(np.array(grads, np.float32)[:, None], DIM, axis=1), step=0)
    for applied, state, stats in sharded_run(3, backend, cfg, body, SGD(learning_rate=1.0)):
        assert applied == 1 and stats["grad_rows_applied"] == 1 and stats["grad_applies"] == 1
        assert state.equals(one.export())


def test_shard_5_divide_gradients_scales_each_rank_row_by_one_over_rank_size(backend):
    cfg = config(access_threshold=1)

    def body(rank, store):
        result = store.lookup([5, 6], step=0)
        store.apply_gradients(result, np.full((2, DIM), 3.0, np.float32), step=0)
        return store.export()

    state = sharded_run(3, backend, cfg, body, SGD(learning_rate=1.0), divide_gradients=True)[0]
    one = open_store(cfg, SGD(learning_rate=1.0), backend=backend)
    one.lookup([5, 6] * 3, step=0)
    third = np.float32(3.0) * np.float32(1.0 / 3)
    one.apply_gradients(np.array([5, 6] * 3), np.full((6, DIM), third, np.float32), step=0)
    assert state.equals(one.export())


# ----------------------------------------------------------------------------- SHARD-6
def test_shard_6_size_capacity_and_statistics_are_the_tables(backend):
    cfg = config(access_threshold=2, dynamic_expansion=False, device_vocabulary_size=10)

    def body(rank, store):
        store.lookup([1, 2, 2, 3, -1] if rank == 0 else [2, 4, 5], step=0)
        return store.size(), store.capacity(), store.stats()

    size, capacity, stats = sharded_run(2, backend, cfg, body)[1]
    assert (size, capacity) == (1, 20)            # only key 2 reached 2 accesses
    assert stats["size"] == 1 and stats["pending"] == 4 and stats["train_lookups"] == 1
    assert (stats["key_positions"], stats["padding_positions"], stats["default_positions"]) == (7, 1, 4)


# ----------------------------------------------------------------------------- SHARD-7
def test_shard_7_cross_rank_sums_are_taken_in_rank_order():
    values = [np.float32(1e8), np.float32(1.0), np.float32(-1e8), np.float32(1.0)]
    expected = ((values[0] + values[1]) + values[2]) + values[3]
    out = VirtualWorld(4).run(lambda rank, comm: rank_order_sum(comm, np.array([values[rank]], np.float32)))
    assert all(o.tobytes() == np.array([expected], np.float32).tobytes() for o in out)
    assert expected != (values[0] + values[2]) + (values[1] + values[3])   # the order matters


# ----------------------------------------------------------------------------- SHARD-8
def test_shard_8_a_bad_argument_on_one_rank_fails_every_rank_without_a_hang(backend):
    cfg = config(access_threshold=1)

    def body(rank, store):
        keys = np.array([1.5]) if rank == 1 else np.array([1, 2])
        with pytest.raises((KeyInputError, UsageError)) as raised:
            store.lookup(keys, step=0)
        store.lookup([3], step=1)                 # the group goes on with the next call
        return type(raised.value).__name__, str(raised.value), store.export()

    out = sharded_run(2, backend, cfg, body)
    assert out[1][0] == "KeyInputError"
    assert out[0][0] == "UsageError" and "lookup: rank 1 of 2 failed this call" in out[0][1]
    assert out[0][2].keys.tolist() == [3]


@pytest.mark.parametrize("layout", [ShardedStore, ReplicatedStore], ids=["sharded", "replicated"])
@pytest.mark.parametrize("call", ["lookup", "apply_gradients", "evict"])
def test_shard_8_each_checked_call_fails_every_rank_on_one_ranks_bad_argument(backend, layout, call):
    """The collective guard (distributed/collective.py) around every call the contract checks first, on both
    layouts: rank 1's argument fails the contract's check before any collective; rank 1 raises its own error,
    rank 0 a UsageError naming rank 1 and the call, nothing changes, and the next call works."""
    def job(rank, comm):
        store = layout(open_store(config(access_threshold=1), backend=backend), comm)
        result = store.lookup([1, 2, 3], step=0)
        before, bad = store.export(), rank == 1
        calls = {"lookup": lambda: store.lookup(np.array([1.5]) if bad else [4], step=1),
                 "apply_gradients": lambda: store.apply_gradients(result, np.ones((3, DIM + bad), np.float32), step=1),
                 "evict": lambda: store.evict(now="soon" if bad else 10)}
        with pytest.raises(MxrecError) as raised:
            calls[call]()
        after = store.export()
        store.lookup([5], step=2)
        return type(raised.value), str(raised.value), before, after

    (kind_0, message_0, before, after), (kind_1, _, _, _) = VirtualWorld(2).run(job)
    assert kind_1 is {"lookup": KeyInputError, "apply_gradients": GradientError, "evict": UsageError}[call]
    assert kind_0 is UsageError and f"{call}: rank 1 of 2 failed this call" in message_0, message_0
    assert after.equals(before)


def test_shard_8_ranks_that_disagree_on_the_step_raise_naming_every_rank(backend):
    def body(rank, store):
        with pytest.raises(UsageError, match="the ranks disagree on this lookup"):
            store.lookup([1], step=rank)
        return store.export()

    for state in sharded_run(2, backend, config(), body):
        assert len(state.keys) == 0 and len(state.pending_keys) == 0


def test_shard_8_a_full_owner_fails_every_rank(backend):
    cfg = config(access_threshold=1, dynamic_expansion=False, device_vocabulary_size=2)

    def body(rank, store):
        with pytest.raises((CapacityError, UsageError)) as raised:
            store.lookup([0, 2, 4] if rank == 0 else [1], step=0)   # rank 0 owns 0, 2, 4: 3 > 2 rows
        return type(raised.value).__name__, store.local.export()

    out = sharded_run(2, backend, cfg, body)
    assert out[0][0] == "CapacityError" and out[1][0] == "UsageError"
    assert len(out[0][1].keys) == 0                  # the failing owner changed nothing


# ----------------------------------------------------------------------------- SHARD-9
def timestamp_of(step: int, rank: int, stamped: bool):
    """The ranks' batch timestamps (rank order deliberately not time order), or None."""
    return 100 * step + (7 * rank) % 5 if stamped else None


def run_one_process(backend, cfg, optimizer, steps, stamped=False):
    store = open_store(cfg, optimizer, backend=backend)
    forward, evicted = [], []
    for step, (slices, train, evict) in enumerate(steps):
        stamp = max(timestamp_of(step, r, True) for r in range(len(slices))) if stamped and train else None
        result = store.lookup(np.concatenate(slices), train=train, step=step if train else None, timestamp=stamp)
        forward.append(result)
        if train:
            admitted = set(result.unique_keys[result.admitted].tolist())
            keys, grads = [], []
            for rank, part in enumerate(slices):
                unique = local_unique(part)
                unique = unique[np.isin(unique, list(admitted))]
                keys.append(unique)
                grads.append(gradient_for(step, rank, unique))
            store.apply_gradients(np.concatenate(keys), np.concatenate(grads).reshape(-1, DIM), step=step)
        if evict:
            evicted.append(store.evict().tolist())
    return store, forward, evicted


def run_sharded(n, backend, cfg, optimizer, steps, stamped=False):
    def body(rank, store):
        forward, evicted = [], []
        for step, (slices, train, evict) in enumerate(steps):
            result = store.lookup(slices[rank], train=train, step=step if train else None,
                                  timestamp=timestamp_of(step, rank, stamped) if train else None)
            forward.append(result)
            if train:
                store.apply_gradients(result, gradient_for(step, rank, result.unique_keys), step=step)
            if evict:
                evicted.append(store.evict().tolist())
        return store.export(), forward, evicted, store.size(), store.stats()
    return sharded_run(n, backend, cfg, body, optimizer)


OPTIMIZERS = {"sgd": SGD(learning_rate=0.1), "adagrad": Adagrad(learning_rate=0.1),
              "lazy_adam": LazyAdam(learning_rate=0.01)}


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 4))
    keys = st.integers(-6, 20)
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        slices = [np.array(draw(st.lists(keys, max_size=7)), dtype=np.int64) for _ in range(n)]
        steps.append((slices, draw(st.booleans()) or not steps, draw(st.integers(0, 3)) == 0))
    return n, steps, draw(st.sampled_from(sorted(OPTIMIZERS))), draw(st.integers(1, 3)), draw(st.booleans())


@given(scenario=scenarios())
def test_shard_9_n_virtual_ranks_equal_one_process_on_the_concatenated_batch(backend, scenario):
    n, steps, optimizer, threshold, stamped = scenario
    cfg = config(access_threshold=threshold, eviction_threshold=2 if not stamped else 150, device_vocabulary_size=4)
    one, forward, evicted = run_one_process(backend, cfg, OPTIMIZERS[optimizer], steps, stamped)
    results = run_sharded(n, backend, cfg, OPTIMIZERS[optimizer], steps, stamped)
    expected_stats = one.stats()
    for rank, (state, rank_forward, rank_evicted, size, stats) in enumerate(results):
        assert state.differences(one.export()) == []
        assert rank_evicted == evicted and size == one.size()
        for name in ("size", "pending", "admitted", "evicted", "evicted_pending", "train_lookups", "eval_lookups",
                     "key_positions", "padding_positions", "default_positions", "grad_rows_applied"):
            assert stats[name] == expected_stats[name], name
        for (slices, _, _), mine, whole in zip(steps, rank_forward, forward):
            start = sum(len(s) for s in slices[:rank])
            want = whole.embeddings()[start:start + len(slices[rank])]
            assert mine.embeddings().view(np.uint32).tolist() == want.view(np.uint32).tolist()


@pytest.mark.parametrize("tier", ["ddr", "ssd"])
def test_shard_9_each_owner_may_be_a_tiered_store(backend, tier, tmp_path):
    """Tiers per owner: a DDR or SSD table sharded over 3 ranks equals one HBM-equivalent process (TIER-2)."""
    ssd = dict(ssd_vocabulary_size=400, ssd_data_path=(str(tmp_path),)) if tier == "ssd" else {}
    cfg = config(access_threshold=1, dynamic_expansion=False, device_vocabulary_size=12, host_vocabulary_size=6,
                 **ssd)
    rng = np.random.default_rng(3)
    steps = [([rng.integers(-1, 60, 6) for _ in range(3)], True, step % 4 == 3) for step in range(8)]
    flat = config(access_threshold=1, device_vocabulary_size=12)
    one, forward, evicted = run_one_process(backend, flat, OPTIMIZERS["adagrad"], steps)

    def body(rank, store):
        assert store.tiered
        for step, (slices, _, evict) in enumerate(steps):
            result = store.lookup(slices[rank], step=step)
            store.apply_gradients(result, gradient_for(step, rank, result.unique_keys), step=step)
            if evict:
                store.evict()
        return store.export()

    def job(rank, comm):
        store_folder = {"ssd_data_path": (str(tmp_path / f"rank{rank}"),)} if tier == "ssd" else {}
        own = dataclasses.replace(cfg, **store_folder)
        return body(rank, ShardedStore(open_store(own, OPTIMIZERS["adagrad"], backend=backend), comm))

    for state in VirtualWorld(3).run(job):
        assert state.differences(one.export()) == []


def test_shard_9_two_runs_at_the_same_rank_count_are_bit_identical(backend):
    rng = np.random.default_rng(7)
    steps = [([rng.integers(-1, 40, 16) for _ in range(3)], True, step % 3 == 2) for step in range(6)]
    first = run_sharded(3, backend, config(), OPTIMIZERS["adagrad"], steps)
    second = run_sharded(3, backend, config(), OPTIMIZERS["adagrad"], steps)
    assert first[0][0].equals(second[0][0]) and first[2][0].equals(second[1][0])


# ----------------------------------------------------------------------------- SHARD-10/11
def trained_on(n, backend, cfg, folder, saves=True):
    rng = np.random.default_rng(n)
    steps = [([rng.integers(-1, 60, 12) for _ in range(n)], True, False) for _ in range(4)]

    def body(rank, store):
        for step, (slices, _, _) in enumerate(steps):
            result = store.lookup(slices[rank], step=step)
            store.apply_gradients(result, gradient_for(step, rank, result.unique_keys), step=step)
        path = store.save(folder) if saves else None
        return store.export(), path
    return sharded_run(n, backend, cfg, body, OPTIMIZERS["adagrad"])


def test_shard_10_save_writes_one_merged_checkpoint_that_one_process_reads(backend, tmp_path):
    cfg = config(access_threshold=1)
    out = trained_on(4, backend, cfg, tmp_path)
    state, path = out[0]
    assert all(p == path for _, p in out) and path == str(tmp_path / "t")
    assert sorted(os.listdir(tmp_path)) == ["t"]
    one = open_store(cfg, OPTIMIZERS["adagrad"], backend=backend)
    one.load(tmp_path)
    assert one.export().equals(state) and len(state.keys) > 0


@pytest.mark.parametrize("n, m", [(2, 3), (4, 2), (3, 1)])
def test_shard_11_a_checkpoint_of_n_ranks_loads_on_m_ranks(backend, tmp_path, n, m):
    cfg = config(access_threshold=2)
    saved = trained_on(n, backend, cfg, tmp_path)[0][0]

    def body(rank, store):
        store.load(tmp_path)
        mine = store.local.export()
        result = store.lookup([3, 11, 3], step=10)          # training continues on M ranks
        return store.export(), mine, result.embeddings(), store.size()

    one = open_store(cfg, OPTIMIZERS["adagrad"], backend=backend)
    one.load(tmp_path)
    expected_rows = one.lookup(np.array([3, 11, 3] * m), step=10).embeddings()[:3]
    out = sharded_run(m, backend, cfg, body, OPTIMIZERS["adagrad"])
    seen = []
    for rank, (state, mine, rows, size) in enumerate(out):
        assert state.equals(one.export()) and size == one.size()
        assert set((owner_of(mine.keys, m)).tolist()) <= {rank}
        seen.extend(mine.keys.tolist() + mine.pending_keys.tolist())
        assert np.array_equal(rows, expected_rows)
    assert sorted(seen) == sorted(saved.keys.tolist() + saved.pending_keys.tolist())   # every key exactly once


def test_shard_11_merge_and_slice_are_inverse(backend):
    cfg = config(access_threshold=1)
    state = trained_on(3, backend, cfg, None, saves=False)[0][0]
    for m in (1, 2, 5):
        assert merge_states([slice_state(state, r, m) for r in range(m)]).equals(state)


def test_shard_11_warm_start_merges_each_owners_slice(backend, tmp_path):
    cfg = config(access_threshold=1)
    saved = trained_on(2, backend, cfg, tmp_path)[0][0]

    def body(rank, store):
        store.lookup([100 + rank], step=0)
        loaded = store.warm_start(tmp_path, now=5)
        return loaded, store.export()

    one = open_store(cfg, OPTIMIZERS["adagrad"], backend=backend)
    one.lookup([100, 101, 102], step=0)
    one.warm_start(tmp_path, now=5)
    for loaded, state in sharded_run(3, backend, cfg, body, OPTIMIZERS["adagrad"]):
        assert loaded == len(saved.keys) and state.equals(one.export())


def test_open_store_builds_a_ranks_stack(tmp_path):
    """CON, SHARD-2, SHARD-14, SHARD-16: ``open_store(comm=)`` gives this rank's shard behind a ShardedStore,
    or with ``replicated=True`` its replica; an SSD table's files go to a folder per rank; one rank (or no
    comm) gives the store itself; a comm that is no Communicator is refused, naming the table."""
    comm = VirtualWorld(2).communicators()[1]
    store = open_store(config(), SGD(0.1), backend="ref", comm=comm, divide_gradients=True)
    assert isinstance(store, ShardedStore) and store.rank == 1 and store.divide_gradients
    replica = open_store(config(), SGD(0.1), backend="ref", comm=comm, replicated=True)
    assert type(replica).__name__ == "ReplicatedStore"
    assert not isinstance(open_store(config(), backend="ref", comm=SingleProcess()), ShardedStore)
    ssd = TableConfig("s", dim=2, device_vocabulary_size=4, host_vocabulary_size=4, ssd_vocabulary_size=64,
                      ssd_data_path=(str(tmp_path / "a"),))
    assert open_store(ssd, backend="ref", comm=comm).local.config.ssd_data_path == (str(tmp_path / "a" / "rank1"),)
    with pytest.raises(UsageError, match="table 't'.*comm: must be"):
        open_store(config(), backend="ref", comm=2)
