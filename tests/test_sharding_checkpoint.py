"""Checkpoints of sharded tables (SHARD-10, SHARD-11): each rank writes its slice, rank 0 merges them
into the one-process layout; a load streams the files and keeps each rank's keys.  On virtual ranks
(VirtualWorld); the real-MPI runs are in tests/test_sharding_mpi.py."""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from mxrec_ref import checkpoint
from mxrec_ref.config import TableConfig
from mxrec_ref.distributed import ShardedStore, VirtualWorld, owner_of
from mxrec_ref.distributed import checkpoint as sharded_checkpoint
from mxrec_ref.errors import CheckpointError, UsageError
from mxrec_ref.optimizers import Adagrad
from mxrec_ref.store import open_store

DIM = 4


def config(**overrides) -> TableConfig:
    fields = dict(name="t", dim=DIM, device_vocabulary_size=64, dynamic_expansion=True, access_threshold=2,
                  eviction_threshold=3, faae_coefficient=1)
    fields.update(overrides)
    return TableConfig(**fields)


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """These tests check bytes and kills of a process, not power cuts (tests/test_checkpoint_faults.py
    does): without fsync they run in a fraction of the time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def scratch(tmp_path):
    """A fresh folder in memory (tmpfs) where there is one: these tests create and delete many small
    files, which costs milliseconds each on a loaded virtual disk; else pytest's tmp_path."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="mxrec-shard-ckpt-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def optimizer():
    return Adagrad(learning_rate=0.1)


def train(store, rank: int, ranks: int, steps: range, seed: int = 0) -> None:
    """A few training steps on this rank's slice of a seeded global batch (pending keys included)."""
    for step in steps:
        keys = np.random.default_rng(seed * 1000 + step).integers(-1, 90, 15 * ranks)
        result = store.lookup(np.array_split(keys, ranks)[rank], step=step)
        grads = np.sin(result.unique_keys[:, None] * 0.3 + np.arange(DIM) + step).astype(np.float32)
        store.apply_gradients(result, grads, step=step)


def on_ranks(n, backend, body, cfg=None):
    def job(rank, comm):
        return body(rank, ShardedStore(open_store(cfg or config(), optimizer(), backend=backend), comm))
    return VirtualWorld(n).run(job)


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- SHARD-10
def test_shard_10_merged_files_are_byte_for_byte_one_processs_full_and_incremental(backend, scratch):
    """3 ranks save a full checkpoint, train on and save a delta: every file (data, attributes, meta,
    manifest) equals the one process's save of the same state, and the slices are gone."""
    def body(rank, store):
        train(store, rank, 3, range(4))
        store.save(scratch / "full")
        full = store.export()
        train(store, rank, 3, range(4, 7))
        store.save(scratch / "delta", incremental=True)
        return full, store.export()

    full, later = on_ranks(3, backend, body)[0]
    one = open_store(config(), optimizer(), backend=backend)
    with one._lock:
        one._import_state(full)
    one.save(scratch / "one-full")
    with one._lock:
        one._import_state(later)
    one.save(scratch / "one-delta", incremental=True)
    assert len(full.keys) and len(full.pending_keys)
    assert files_of(scratch / "full") == files_of(scratch / "one-full")
    delta, one_delta = files_of(scratch / "delta"), files_of(scratch / "one-delta")
    assert delta.keys() == one_delta.keys() and "t/removed/slice.data" in delta
    # meta.json names its base relative to itself: the same scratch name, so the same bytes
    assert {k: v for k, v in delta.items() if k not in ("t/meta.json", "t/manifest.json")} == \
        {k: v for k, v in one_delta.items() if k not in ("t/meta.json", "t/manifest.json")}
    assert sorted(os.listdir(scratch / "full")) == ["t"] and not any("slices" in k for k in delta)


def test_shard_10_merge_and_filter_work_a_few_rows_at_a_time(backend, scratch, monkeypatch):
    """With chunks of a few rows the merge's rounds and the load's filter cross every boundary:
    the same bytes, the same tables."""
    def body(rank, store):
        train(store, rank, 2, range(5))
        store.save(scratch / f"chunk-{chunk}")
        return store.export()

    states = {}
    for chunk in (1 << 22, 8):
        monkeypatch.setattr(checkpoint.stream, "CHUNK_BYTES", chunk)      # rows streamed at a time
        states[chunk] = on_ranks(2, backend, body)[0]
    assert files_of(scratch / "chunk-8") == files_of(scratch / f"chunk-{1 << 22}")

    def load(rank, store):
        store.load(scratch / "chunk-8")
        return store.export(), store.local.export()

    for m in (1, 3):
        out = on_ranks(m, backend, load)
        assert all(state.equals(states[8]) for state, _ in out)
        for rank, (_, mine) in enumerate(out):
            assert set(owner_of(np.concatenate([mine.keys, mine.pending_keys]), m).tolist()) <= {rank}


class Killed(BaseException):
    """The stand-in for SIGKILL: not an Exception, so nothing on the way handles it."""


def test_shard_10_a_rank_killed_at_any_step_of_a_save_leaves_a_loadable_checkpoint(scratch, monkeypatch):
    """Each rank in turn is stopped at each step of a 2-rank save (its slice files, the barrier, rank 0's
    merge, the switch), the folder copied as a kill would leave it; one process then loads the old
    table or the new one, never neither or a mix; a later save in the copy cleans up after it."""
    cfg, states, slices = config(access_threshold=1), {}, {}

    def prepare(rank, store):            # the old checkpoint in "base", and each rank's new state
        train(store, rank, 2, range(3))
        store.save(scratch / "base")
        states["old"] = store.export()
        train(store, rank, 2, range(3, 6))
        states["new"], slices[rank] = store.export(), store.local.export()

    on_ranks(2, "ref", prepare, cfg)

    def job(rank, store, folder, hook):
        if rank == 0:
            shutil.copytree(scratch / "base", folder)
        with store.local._lock:
            store.local._import_state(slices[rank])
        store.comm.barrier()
        monkeypatch.setattr(checkpoint, "fault_hook", hook)
        store.save(folder)

    steps = {0: [], 1: []}

    def record(step):
        steps[int(threading.current_thread().name.rsplit("-", 1)[1])].append(step)

    on_ranks(2, "ref", lambda rank, store: job(rank, store, scratch / "dry", record), cfg)
    monkeypatch.setattr(checkpoint, "fault_hook", None)
    assert steps[1][-1] == "fsync folder" and steps[0][-3:] == ["exchange", "fsync parent", "remove old"]
    seen = set()
    for victim in (0, 1):
        for index, step in enumerate(steps[victim]):
            if "/" in step and index and "/" in steps[victim][index - 1]:
                continue    # one data file per phase: the others are the same stage (CKPT-8 kills at each)
            folder, snapshot = scratch / f"run-{victim}-{index}", scratch / f"killed-{victim}-{index}"
            calls = {0: 0, 1: 0}

            def kill(step, victim=victim, index=index, folder=folder, snapshot=snapshot):
                rank = int(threading.current_thread().name.rsplit("-", 1)[1])
                calls[rank] += 1
                if rank == victim and calls[rank] == index + 1 and not snapshot.exists():
                    shutil.copytree(folder, snapshot, symlinks=True)
                    raise Killed(step)

            with pytest.raises(BaseException):
                on_ranks(2, "ref", lambda rank, store: job(rank, store, folder, kill), cfg)
            monkeypatch.setattr(checkpoint, "fault_hook", None)
            one = open_store(cfg, optimizer())
            one.load(snapshot)
            got = one.export()
            assert got.equals(states["old"]) or got.equals(states["new"]), (victim, step)
            seen.add("new" if got.equals(states["new"]) else "old")
    assert seen == {"old", "new"}
    last = got

    def save_again(rank, store):        # the copy still holds the killed save's temporary folder
        store.load(snapshot)
        store.save(snapshot)
        return store.export()

    assert any(name.startswith(".t.writing-") for name in os.listdir(snapshot))
    assert on_ranks(2, "ref", save_again, cfg)[0].equals(last) and os.listdir(snapshot) == ["t"]


def test_shard_10_a_failed_slice_write_fails_every_rank_and_keeps_the_old_table(scratch, monkeypatch):
    """An I/O error on rank 1 while it writes its slice: every rank raises, the old table stays and
    no temporary scratch is left."""
    def job(rank, store):
        train(store, rank, 2, range(3))
        store.save(scratch)
        old = store.export()
        train(store, rank, 2, range(3, 5))
        if rank == 1:
            write_files = checkpoint.write_state_files

            def broken(folder, *args, **options):      # rank 1's slice only (the module is shared by the virtual ranks)
                if threading.current_thread().name == "virtual-rank-1":
                    raise OSError(28, "No space left on device", str(folder))
                return write_files(folder, *args, **options)
            monkeypatch.setattr(checkpoint, "write_state_files", broken)
        try:
            store.save(scratch)
        except (CheckpointError, UsageError) as error:
            return old, error
        return old, None

    out = on_ranks(2, "ref", job)
    assert isinstance(out[1][1], CheckpointError) and "No space left" in str(out[1][1])
    assert isinstance(out[0][1], UsageError) and "rank 1 of 2 failed" in str(out[0][1])
    one = open_store(config(), optimizer())
    one.load(scratch)
    assert one.export().equals(out[0][0]) and os.listdir(scratch) == ["t"]


# ----------------------------------------------------------------------------- SHARD-11
@pytest.mark.parametrize("m", [1, 3])
def test_shard_11_a_delta_chain_of_2_ranks_loads_on_m_ranks(backend, scratch, m):
    def save(rank, store):
        train(store, rank, 2, range(3))
        store.save(scratch / "base")
        train(store, rank, 2, range(3, 6))
        store.save(scratch / "delta", incremental=True)

    on_ranks(2, backend, save)
    one = open_store(config(), optimizer(), backend=backend)
    one.load(scratch / "delta")

    def load(rank, store):
        store.load(scratch / "delta")
        return store.export(), store.local.export()

    seen = []
    for rank, (state, mine) in enumerate(on_ranks(m, backend, load)):
        assert state.equals(one.export())
        seen += mine.keys.tolist() + mine.pending_keys.tolist()
    assert sorted(seen) == sorted(one.export().keys.tolist() + one.export().pending_keys.tolist())


def test_shard_11_ranks_that_do_not_split_the_keys_fail_naming_the_table_and_counts(scratch):
    """Two ranks that both believe they are rank 0 keep the same keys: the sum over ranks finds it."""
    on_ranks(2, "ref", lambda rank, store: (train(store, rank, 2, range(3)), store.save(scratch)))
    saved = checkpoint.read_table(scratch, config(), optimizer())

    def load(rank, store):
        store.rank = 0
        store.load(scratch)

    with pytest.raises(UsageError) as failed:
        on_ranks(2, "ref", load)
    mine = int(np.count_nonzero(owner_of(saved.keys, 2) == 0))
    assert f"table 't': load: the 2 ranks loaded {2 * mine} of {len(saved.keys)} admitted keys" in str(failed.value)
    assert "exactly one rank" in str(failed.value)


def test_shard_11_a_corrupted_byte_fails_the_load_on_every_rank_and_changes_nothing(backend, scratch):
    on_ranks(2, backend, lambda rank, store: (train(store, rank, 2, range(3)), store.save(scratch)))
    data = scratch / "t" / "embedding" / "slice.data"
    raw = bytearray(data.read_bytes())
    raw[5] ^= 0x10
    data.write_bytes(bytes(raw))

    def load(rank, store):
        store.lookup([rank + 100], step=0)
        before = store.export()
        try:
            store.load(scratch)
        except (CheckpointError, UsageError) as error:
            return error, before.equals(store.export())

    out = on_ranks(3, backend, load)
    assert all(unchanged for _, unchanged in out)
    assert isinstance(out[0][0], CheckpointError) and "embedding/slice.data" in str(out[0][0])
    assert all("checksum differs from the manifest" in str(error) for error, _ in out)   # the others name rank 0's


def test_shard_11_warm_start_reads_each_owners_keys_and_counts_the_tables(backend, scratch):
    on_ranks(2, backend, lambda rank, store: (train(store, rank, 2, range(3)), store.save(scratch)))
    saved = checkpoint.read_table(scratch, config(), optimizer())
    one = open_store(config(), optimizer(), backend=backend)
    one.lookup([100, 101, 102], step=0)
    one.warm_start(scratch, now=5)

    def body(rank, store):
        store.lookup([100 + rank], step=0)
        plan = store.plan_warm_start(scratch, now=5)
        assert set(owner_of(plan.loaded.keys, 3).tolist()) <= {rank}
        return store.apply_warm_start(plan), store.export()

    for loaded, state in on_ranks(3, backend, body):
        assert loaded == len(saved.keys) and state.equals(one.export())


def test_shard_11_ranks_that_read_different_versions_read_again(scratch, monkeypatch):
    """A save replaces the table after rank 0 has read it and before rank 1 does: the ranks see that
    they read different versions (the manifests differ) and both read again, the new one."""
    on_ranks(2, "ref", lambda rank, store: (train(store, rank, 2, range(3)), store.save(scratch)))
    newer = open_store(config(), optimizer())
    newer.load(scratch)
    newer.lookup(np.arange(200, 230), step=9)
    read_owned, rank0_read, reads, saved = sharded_checkpoint.read_owned, threading.Event(), [], []

    def racing(*args, **options):
        rank = threading.current_thread().name
        # rank 1's first read, whenever it starts (rank 0 may have read already): the save comes first
        if rank == "virtual-rank-1" and not saved:
            assert rank0_read.wait(30)
            newer.save(scratch)                       # the concurrent save, between the ranks' reads
            saved.append(True)
        result = read_owned(*args, **options)
        reads.append(rank)
        if rank == "virtual-rank-0":
            rank0_read.set()
        return result

    monkeypatch.setattr(sharded_checkpoint, "read_owned", racing)

    def load(rank, store):
        store.load(scratch)
        return store.export()

    out = on_ranks(2, "ref", load)
    assert len(reads) == 4 and all(state.equals(newer.export()) for state in out)


def test_shard_11_ssd_owners_save_and_load_their_slices(scratch):
    """Owners with a device budget and rows on disk (TIER-*): 2 ranks save, 3 load, as one process does."""
    cfg = config(access_threshold=1, dynamic_expansion=False, device_vocabulary_size=20, host_vocabulary_size=8,
                 ssd_vocabulary_size=400, ssd_data_path=(str(scratch / "ssd"),))

    def on_ssd_ranks(n, body):
        def job(rank, comm):
            own = dataclasses.replace(cfg, ssd_data_path=(str(scratch / f"ssd-{n}-{rank}"),))
            return body(rank, ShardedStore(open_store(own, optimizer(), backend="fast"), comm))
        return VirtualWorld(n).run(job)

    def save(rank, store):
        train(store, rank, 2, range(4))
        store.save(scratch / "ckpt")
        return store.export(), store.stats()["disk_rows"]

    saved, on_disk = on_ssd_ranks(2, save)[0]
    one = open_store(config(), optimizer())
    one.load(scratch / "ckpt")

    def load(rank, store):
        store.load(scratch / "ckpt")
        return store.export(), store.stats()["disk_rows"]

    assert on_disk > 0 and one.export().equals(saved)
    assert all(state.equals(saved) and disk > 0 for state, disk in on_ssd_ranks(3, load))


def test_shard_11_a_fifo_in_place_of_a_data_file_is_refused_on_every_rank(backend, scratch):
    """CKPT-13 on the sharded load, which streams the data files through its own readers."""
    from mxrec_ref.conformance.test_checkpoint import load_or_hang
    on_ranks(2, backend, lambda rank, store: (train(store, rank, 2, range(3)), store.save(scratch)))
    fifo = scratch / "t" / "embedding" / "slice.data"
    fifo.unlink()
    os.mkfifo(fifo)

    def load(rank, store):
        store.lookup([rank + 100], step=0)
        before = store.export()
        try:
            store.load(scratch)
        except (CheckpointError, UsageError) as error:
            return error, before.equals(store.export())

    out = load_or_hang(lambda: on_ranks(2, backend, load), [fifo])["value"]
    assert all(unchanged for _, unchanged in out)
    assert isinstance(out[0][0], CheckpointError) and "embedding/slice.data" in str(out[0][0])
    assert all("not a regular file (a FIFO)" in str(error) for error, _ in out)


def test_shard_10_a_save_over_a_symlinked_table_folder_writes_through_it(backend, scratch):
    """CKPT-14 on the sharded save: the merged table lands in the folder the link points to; no litter."""
    checkpoints, elsewhere = scratch / "ckpt", scratch / "disk2"
    on_ranks(2, backend, lambda rank, store: (train(store, rank, 2, range(2)), store.save(checkpoints)))
    elsewhere.mkdir()
    (checkpoints / "t").rename(elsewhere / "t-data")
    (checkpoints / "t").symlink_to(elsewhere / "t-data")
    saved = on_ranks(2, backend, lambda rank, store: (train(store, rank, 2, range(4)), store.save(checkpoints),
                                                      store.export())[2])
    assert sorted(p.name for p in checkpoints.iterdir()) == ["t"] and (checkpoints / "t").is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["t-data"]
    loaded = on_ranks(2, backend, lambda rank, store: (store.load(checkpoints), store.export())[1])
    assert all(a.equals(b) for a, b in zip(saved, loaded))
