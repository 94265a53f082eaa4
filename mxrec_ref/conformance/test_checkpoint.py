"""Checkpoint format, save and load (spec/checkpoint.md)."""
import json

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mxrec_ref import (Adagrad, CapacityError, CheckpointError, Ftrl, LazyAdam, TableConfig, checkpoint, initializers,
                       open_store)

from .checks import assert_unchanged, keys, make_store, snapshot
from .strategies import gradients, key_batches, optimizers, table_configs


def _trained(backend, optimizer=None, *, thresholds=True, **extra):
    """A small trained table; ``thresholds=False`` for tests of file handling, where pending keys are not
    the point, so that a backend without admission (CON-11) runs them too."""
    extra.setdefault("device_vocabulary_size", 32)
    if thresholds:
        extra.update(access_threshold=2, eviction_threshold=10)
    store = make_store(backend, optimizer or LazyAdam(learning_rate=0.1), **extra)
    for step in range(3):
        result = store.lookup(keys(1, 1, 2, 3, 3, 40 + step, 2**62), step=step)
        store.apply_gradients(result, np.full((len(result.unique_keys), 4), 0.1 * (step + 1)), step=step)
    return store


@pytest.mark.parametrize("thresholds", [True, False], ids=["pending-keys", "no-admission"])
def test_ckpt_1_layout_matches_mxrec(backend, tmp_path, thresholds):
    store = _trained(backend, thresholds=thresholds)
    path = store.save(tmp_path)
    state = store.export()
    n = len(state.keys)
    assert np.array_equal(np.fromfile(f"{path}/key/slice.data", "<i8"), state.keys)
    assert np.fromfile(f"{path}/key/slice.attribute", "<i8").tolist() == [n, 8]
    assert np.fromfile(f"{path}/embedding/slice.attribute", "<i8").tolist() == [n, 4, 4]
    values = np.fromfile(f"{path}/embedding/slice.data", "<f4").reshape(n, 4)
    assert np.array_equal(values, state.values)
    momentum = np.fromfile(f"{path}/LazyAdam_momentum/slice.data", "<f4").reshape(n, 4)
    assert np.array_equal(momentum, state.slots["momentum"])
    feat = np.fromfile(f"{path}/feat_info/slice.data", "<i8").reshape(-1, 3)
    assert feat[:n, 0].tolist() == state.keys.tolist() and feat[n:, 0].tolist() == state.pending_keys.tolist()
    meta = json.loads(open(f"{path}/meta.json").read())
    assert meta["clock"] == 2 and meta["optimizer"]["kind"] == "LazyAdam"


@pytest.mark.parametrize("thresholds", [True, False], ids=["pending-keys", "no-admission"])
@pytest.mark.parametrize("optimizer", [None, Adagrad(), Ftrl(l1_regularization_strength=0.01)])
def test_ckpt_2_round_trip_both_ways(backend, tmp_path, optimizer, thresholds):
    store = _trained(backend, optimizer, thresholds=thresholds)
    store.save(tmp_path)
    for target in ("ref", "fast") if backend == "fast" else ("ref",):
        other = make_store(target, optimizer or LazyAdam(learning_rate=0.1), device_vocabulary_size=32,
                           **(dict(access_threshold=2, eviction_threshold=10) if thresholds else {}))
        other.load(tmp_path)
        assert other.export().differences(store.export()) == []


def test_ckpt_3_store_save_ignores_is_save(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=4, is_save=False)
    store.lookup(keys(1), step=0)
    store.save(tmp_path)
    assert (tmp_path / "t" / "meta.json").is_file()


def test_ckpt_4_save_replaces_whole_table(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=8)
    store.lookup(keys(1, 2, 3), step=0)
    store.save(tmp_path)
    store2 = make_store(backend, device_vocabulary_size=8)
    store2.lookup(keys(9), step=0)
    store2.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
    fresh = make_store(backend, device_vocabulary_size=8)
    fresh.load(tmp_path)
    assert fresh.export().keys.tolist() == [9]


@pytest.mark.parametrize("thresholds", [True, False], ids=["pending-keys", "no-admission"])
def test_ckpt_5_bad_checkpoints_change_nothing(backend, tmp_path, thresholds):
    _trained(backend, thresholds=thresholds).save(tmp_path / "good")
    store = _trained(backend, thresholds=thresholds)
    extra = dict(access_threshold=2, eviction_threshold=10) if thresholds else {}
    store.lookup(keys(77, 77), step=5)
    before = snapshot(store)
    with pytest.raises(CheckpointError, match=r"no table 'other'.*tables present: \['t'\]"):
        make_store(backend, name="other").load(tmp_path / "good")
    with pytest.raises(CheckpointError, match="dim: the checkpoint has dim 4"):
        make_store(backend, dim=8).load(tmp_path / "good")
    with pytest.raises(CheckpointError, match="optimizer"):
        make_store(backend, Adagrad()).load(tmp_path / "good")
    with pytest.raises(CapacityError, match="device_vocabulary_size"):
        small = open_store(TableConfig("t", dim=4, device_vocabulary_size=2, **extra), LazyAdam(learning_rate=0.1),
                           backend=backend)
        small.load(tmp_path / "good")
    int32 = open_store(TableConfig("t", dim=4, key_dtype="int32", device_vocabulary_size=32, **extra),
                       LazyAdam(learning_rate=0.1), backend=backend)
    with pytest.raises(CheckpointError, match="key_dtype"):
        int32.load(tmp_path / "good")
    data = tmp_path / "good" / "t" / "embedding" / "slice.data"
    intact = data.read_bytes()
    data.write_bytes(intact[:-4])
    with pytest.raises(CheckpointError, match=r"embedding/slice.data.*bytes"):
        store.load(tmp_path / "good")
    data.write_bytes(intact)
    (tmp_path / "good" / "t" / "LazyAdam_velocity" / "slice.attribute").unlink()
    with pytest.raises(CheckpointError, match="missing"):
        store.load(tmp_path / "good")
    assert_unchanged(store, before)


def test_ckpt_6_loaded_rows_are_dense_in_key_order(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=8, access_threshold=1, eviction_threshold=1)
    store.lookup(keys(30, 10, 20), step=0)
    store.lookup(keys(20), step=1)
    store.evict()
    store.save(tmp_path)
    fixed = make_store(backend, device_vocabulary_size=8, access_threshold=1, eviction_threshold=1)
    fixed.load(tmp_path)
    assert fixed.row_handles(keys(20)).tolist() == [0] and fixed.capacity() == 8
    fixed.lookup(keys(5), step=2)
    assert fixed.row_handles(keys(5)).tolist() == [1]      # free list empty after load
    grown = make_store(backend, device_vocabulary_size=1, dynamic_expansion=True)
    grown.lookup(np.arange(5), step=0)
    grown.save(tmp_path / "g")
    again = make_store(backend, device_vocabulary_size=1, dynamic_expansion=True)
    again.load(tmp_path / "g")
    assert again.capacity() == 5


def test_ckpt_7_new_rows_after_load_start_from_initializer(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=8)
    store.lookup(keys(1), step=0)
    store.save(tmp_path)
    loaded = make_store(backend, device_vocabulary_size=8)
    loaded.load(tmp_path)
    row = loaded.lookup(keys(2), step=1).rows
    assert np.array_equal(row, initializers.initial_rows(loaded.config, keys(2)))


@given(config=table_configs(), optimizer=optimizers, plan=st.lists(st.tuples(
    key_batches(max_size=30), st.integers(0, 2**16), st.booleans(), st.sampled_from([None, "full", "delta"])),
    min_size=1, max_size=12))
def test_ckpt_9_base_plus_deltas_restores_what_a_full_save_holds(backend, tmp_path_factory, config, optimizer, plan):
    """CKPT-9: after any sequence of lookups, applies and evictions with full and
    incremental saves in between, loading a save's folder (its whole chain)
    gives exactly the state the store had when it saved."""
    root = tmp_path_factory.mktemp("chain")
    store = open_store(config, optimizer, backend=backend)
    saved = []
    for step, (batch, seed, evict, save) in enumerate(plan):
        batch = batch[(batch >= config.key_min) & (batch <= config.key_max)]
        try:
            result = store.lookup(batch, step=step)
            store.apply_gradients(result, gradients(len(result.unique_keys), config.dim, seed), step=step)
        except CapacityError:
            pass
        if evict and config.eviction_enabled:
            store.evict()
        if save is not None:
            folder = root / f"step-{step}"
            store.save(folder, incremental=save == "delta")
            saved.append((folder, store.export()))
    for folder, state in saved:
        for target in {backend, "ref"}:
            fresh = open_store(config, optimizer, backend=target)
            fresh.load(folder)
            assert fresh.export().differences(state) == []


def test_ckpt_9_delta_holds_only_changed_keys(backend, tmp_path):
    store = make_store(backend, device_vocabulary_size=64)
    store.lookup(np.arange(40), step=0)
    store.save(tmp_path / "base")
    store.lookup(keys(3, 100), step=1)                 # 3 changes (last-seen), 100 is new
    path = store.save(tmp_path / "delta", incremental=True)
    assert np.fromfile(f"{path}/key/slice.data", "<i8").tolist() == [3, 100]
    meta = json.loads(open(f"{path}/meta.json").read())
    assert meta["kind"] == "delta" and meta["previous"] == "../base"
    fresh = make_store(backend, device_vocabulary_size=64)
    fresh.load(tmp_path / "delta")
    assert fresh.export().differences(store.export()) == []


def test_ckpt_9_an_incremental_save_into_its_own_chain_is_refused(backend, tmp_path):
    """Saving a delta over its base (or over any checkpoint its chain builds
    on) would destroy the base and point at itself: refused before writing."""
    store = _trained(backend)
    base_state = store.export()
    store.save(tmp_path / "base")
    store.lookup(keys(5, 6), step=7)
    for folder in ("base", "base/.", "base/../base"):
        with pytest.raises(CheckpointError, match="directory: an incremental save into .* would overwrite"):
            store.save(tmp_path / folder, incremental=True)
    fresh = _trained(backend)
    fresh.load(tmp_path / "base")
    assert fresh.export().differences(base_state) == []
    store.save(tmp_path / "delta", incremental=True)        # base <- delta
    store.lookup(keys(8), step=8)
    with pytest.raises(CheckpointError, match="would overwrite"):
        store.save(tmp_path / "base", incremental=True)     # delta2 over base would make a cycle
    store.save(tmp_path / "delta2", incremental=True)
    fresh.load(tmp_path / "delta2")
    assert fresh.export().differences(store.export()) == []


def test_ckpt_9_a_delta_chain_that_loops_raises_checkpoint_error(backend, tmp_path):
    store = _trained(backend)
    store.save(tmp_path / "a")
    store.lookup(keys(9), step=9)
    store.save(tmp_path / "b", incremental=True)            # b builds on a
    checkpoint.write_table(tmp_path / "a", store.config, store.optimizer, store.export(),
                           previous=tmp_path / "b")         # a forged delta on b: a -> b -> a
    fresh = _trained(backend)
    before = snapshot(fresh)
    with pytest.raises(CheckpointError, match="delta chain loops back"):
        fresh.load(tmp_path / "b")
    assert_unchanged(fresh, before)


def test_ckpt_9_previous_is_kept_across_a_change_of_directory(backend, tmp_path, monkeypatch):
    """A relative checkpoint folder, then chdir, then the delta: ``previous``
    still names the base (resolved when each folder was used)."""
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    store = _trained(backend)
    store.save("base")
    store.lookup(keys(11, 12), step=9)
    monkeypatch.chdir(tmp_path / "sub")
    path = store.save("delta", incremental=True)
    assert json.loads(open(f"{path}/meta.json").read())["previous"] == "../../base"
    monkeypatch.chdir("/")
    fresh = _trained(backend)
    fresh.load(tmp_path / "sub" / "delta")
    assert fresh.export().differences(store.export()) == []


def _box_muller_rows(config, keys_):
    """INIT-3's truncated normal as it was when tests/data/ckpt-format-1 was written (Box-Muller, redrawn
    past 2 sigma; replaced by INIT-6 in issue 16): rebuilds the store that wrote the fixture."""
    keys_ = np.asarray(keys_, dtype=np.int64).reshape(-1)
    init, dim = config.initializer, config.dim
    out = np.zeros(keys_.size * dim)
    todo_keys, todo_cols = np.repeat(keys_, dim), np.tile(np.arange(dim, dtype=np.int64), keys_.size)
    todo = np.arange(out.size)
    for attempt in range(64):
        u1 = initializers.uniform_at(init.seed, todo_keys, todo_cols, attempt, stream=1)
        u2 = initializers.uniform_at(init.seed, todo_keys, todo_cols, attempt, stream=2)
        z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
        accept = np.abs(z) <= 2.0
        out[todo[accept]] = z[accept]
        todo, todo_keys, todo_cols = todo[~accept], todo_keys[~accept], todo_cols[~accept]
    values = init.mean + init.stddev * out.reshape(keys_.size, dim)
    return (values * config.init_param).astype(np.float32)


def test_ckpt_4_checkpoints_of_the_first_format_still_load(backend, monkeypatch):
    """A checkpoint written by the version before the exchange protocol
    (tests/data/ckpt-format-1, see its README) loads unchanged: it stores rows, so INIT-6's new
    initial values do not change what it holds; the store to compare with is rebuilt with the
    initial values of the time (patched into both backends' initializer calls)."""
    from pathlib import Path

    from mxrec_ref.ref import store as ref_store   # local: only this test patches the backends' initializer

    folder = Path(__file__).resolve().parents[2] / "tests" / "data" / "ckpt-format-1"
    if not folder.is_dir():
        pytest.skip("the repository's tests/data is not installed with the package")
    with monkeypatch.context() as patch:
        patch.setattr(ref_store, "initial_rows", _box_muller_rows)
        if backend == "fast":
            from mxrec_ref.fast import initializers as fast_initializers   # local: the fast path may not be built
            patch.setattr(fast_initializers, "initial_rows", _box_muller_rows)
        expected = _trained(backend)
    fresh = _trained(backend)
    fresh.load(folder)
    assert fresh.export().differences(expected.export()) == []


def _bare_save_errors(store, tmp_path):
    """(call, error pattern) pairs of saves into folders that cannot be written."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    return [
        (lambda: store.save(None), r"directory: must be a folder path.*None"),
        (lambda: store.save(b"bytes"), r"directory: must be a folder path"),
        (lambda: store.save(str(tmp_path / "nul\0byte")), r"directory: must be a non-empty path without NUL"),
        (lambda: store.save(a_file), r"directory: cannot write checkpoint .*a-file"),          # FileExistsError
        (lambda: store.save(a_file / "below"), r"directory: cannot write checkpoint .*below"),  # ENOTDIR
        (lambda: store.save(tmp_path / ("x" * 300)), r"directory: cannot write checkpoint .*xxx"),  # ENAMETOOLONG
        (lambda: store.load(None), r"directory: must be a folder path"),
        (lambda: store.load(tmp_path / ("x" * 300)), r"directory: cannot open .*File name too long"),
    ]


def test_ckpt_10_io_errors_are_checkpoint_errors_naming_table_and_path(backend, tmp_path):
    store = _trained(backend, thresholds=False)
    before = snapshot(store)
    for call, pattern in _bare_save_errors(store, tmp_path):
        with pytest.raises(CheckpointError, match=r"table 't': " + pattern):
            call()
    assert_unchanged(store, before)


def test_ckpt_10_a_failed_save_leaves_the_old_table_and_no_temporary_folder(backend, tmp_path, monkeypatch):
    """A full disk (ENOSPC) in the middle of a save: CheckpointError with the
    OSError as its cause; the table folder holds the old version; nothing else."""
    import errno
    store = _trained(backend, thresholds=False)
    store.save(tmp_path)
    saved = store.export()
    store.lookup(keys(21, 22), step=9)

    def disk_full(step):
        if step == "fsync embedding/slice.data":
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "t"))

    monkeypatch.setattr(checkpoint, "fault_hook", disk_full)
    with pytest.raises(CheckpointError, match=r"table 't': directory: cannot write checkpoint .*No space left") as info:
        store.save(tmp_path)
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
    fresh = _trained(backend, thresholds=False)
    fresh.load(tmp_path)
    assert fresh.export().differences(saved) == []


def _dead_pid() -> str:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()


def test_ckpt_10_a_save_removes_temporary_folders_of_dead_processes(backend, tmp_path):
    import os

    store = _trained(backend, thresholds=False)
    store.save(tmp_path)
    dead = _dead_pid()
    alive = str(os.getppid())
    names = [f".t.writing-{dead}", f".t.old-{dead}", f".t.writing-{dead}-3", f".t.writing-{alive}-0",
             ".other.writing-1"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "slice.data").write_bytes(b"x" * 100)
    store.save(tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["t", f".t.writing-{alive}-0", ".other.writing-1"])


def test_ckpt_11_a_save_during_a_load_gives_one_whole_version(backend, tmp_path, monkeypatch):
    """Deterministically: while a load reads the table, another save replaces
    (and deletes) the version it opened; the load reads the new version whole."""
    old, new = _trained(backend, thresholds=False), _trained(backend, thresholds=False)
    new.lookup(keys(30, 31), step=9)
    old.save(tmp_path)
    read_at, interfered = checkpoint.reader.read_at, []

    def read_and_interfere(fd, name):
        if name == "embedding/slice.data" and not interfered:
            interfered.append(name)
            new.save(tmp_path)                    # exchanges the folders, then deletes the old version
        return read_at(fd, name)

    monkeypatch.setattr(checkpoint.reader, "read_at", read_and_interfere)
    fresh = _trained(backend, thresholds=False)
    fresh.load(tmp_path)
    assert interfered and fresh.export().differences(new.export()) == []


def test_ckpt_8_a_switch_killed_between_two_renames_still_loads(backend, tmp_path):
    """The state the two-rename protocol (and earlier versions) leave when
    killed between the renames: no table folder, the old version aside and the
    new one under its temporary name. load recovers the old one; the next
    save puts a table back."""
    store = _trained(backend, thresholds=False)
    store.save(tmp_path)
    dead = _dead_pid()
    (tmp_path / "t").rename(tmp_path / f".t.old-{dead}")
    (tmp_path / f".t.writing-{dead}").mkdir()
    fresh = _trained(backend, thresholds=False)
    fresh.load(tmp_path)
    assert fresh.export().differences(store.export()) == []
    store.lookup(keys(40), step=9)
    store.save(tmp_path)
    store.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def _files(folder) -> dict:
    from pathlib import Path
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def test_ckpt_12_one_pass_parallel_io_writes_the_same_files_and_checksums(backend, tmp_path, monkeypatch):
    """Pieces of 16 bytes on four threads, or one piece on one thread: the same files; every
    manifest checksum is the CRC-32 of the file's bytes; the hook names the files in the fixed
    order of CKPT-8; a load checksumming 16-byte pieces reads the state back; the loaded store,
    its rows in key order, saves the same files without a sort, and exports in key order once
    a new key breaks that order; ref and fast write identical files."""
    import zlib

    store = _trained(backend, Adagrad())
    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", 1 << 30)
    monkeypatch.setattr(checkpoint, "IO_THREADS", 1)
    one = _files(store.save(tmp_path / "one"))
    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", 16)
    monkeypatch.setattr(checkpoint, "IO_THREADS", 4)
    steps = []
    monkeypatch.setattr(checkpoint, "fault_hook", steps.append)
    many = _files(store.save(tmp_path / "many"))
    monkeypatch.setattr(checkpoint, "fault_hook", None)
    assert many == one
    manifest = json.loads(many.pop("manifest.json"))["files"]
    assert manifest == {name: {"bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"} for name, data in many.items()}
    assert len(many["embedding/slice.data"]) >= 16 * 3       # several pieces
    slices = ["key", "embedding", "Adagrad_accumulator", "feat_info"]
    files = [f"fsync {s}/slice.{part}" for s in slices for part in ("data", "attribute")]
    assert steps[1:len(files) + 3] == [*files, "fsync meta.json", "fsync manifest.json"]
    fresh = make_store(backend, Adagrad(), access_threshold=2, eviction_threshold=10, device_vocabulary_size=32)
    fresh.load(tmp_path / "many")
    assert fresh.export().differences(store.export()) == []
    # after a load the rows are in key order (CKPT-6): exported without a sort, the same files
    assert _files(fresh.save(tmp_path / "again")) == one
    reference = make_store("ref", Adagrad(), access_threshold=2, eviction_threshold=10, device_vocabulary_size=32)
    reference.load(tmp_path / "many")
    for table in (fresh, reference):      # a key below every saved one gets the next row: out of key order
        table.lookup(keys(0, 0, 0), step=5)
        table.lookup(keys(0, 7), step=6)
    assert fresh.export().differences(reference.export()) == []
    assert fresh.export().keys[0] == 0
    if backend == "fast":
        twin = _trained("ref", Adagrad())
        assert _files(twin.save(tmp_path / "ref")) == one


def _fifo_in_place_of(path) -> None:
    import os
    path.unlink()
    os.mkfifo(path)


def load_or_hang(call, fifos, wait_s: float = 30.0):
    """Run ``call`` (a load) on a thread; if it is still running after ``wait_s`` -- waiting on a
    FIFO's open or read -- open each FIFO for writing and close it, which ends the wait, and fail:
    a hang becomes a test failure instead of a stuck test run (CKPT-13)."""
    import os
    import threading
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as error:      # noqa: BLE001 - handed back to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait_s)
    if thread.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        thread.join(wait_s)
        pytest.fail(f"load waited on a FIFO for {wait_s} s instead of refusing it")
    return outcome


@pytest.mark.parametrize("name", ["manifest.json", "meta.json", "embedding/slice.data", "key/slice.attribute"])
def test_ckpt_13_a_fifo_in_place_of_a_file_is_refused_naming_it(backend, tmp_path, name):
    store = _trained(backend, thresholds=False)
    store.save(tmp_path)
    fifo = tmp_path / "t" / name
    _fifo_in_place_of(fifo)
    fresh = _trained(backend, thresholds=False)
    fresh.lookup(keys(90), step=5)
    before = snapshot(fresh)
    outcome = load_or_hang(lambda: fresh.load(tmp_path), [fifo])
    error = outcome.get("error")
    assert isinstance(error, CheckpointError), outcome
    assert "table 't'" in str(error) and name in str(error) and "not a regular file (a FIFO)" in str(error)
    assert_unchanged(fresh, before)


def test_ckpt_13_a_folder_in_place_of_a_file_is_refused_naming_it(backend, tmp_path):
    store = _trained(backend, thresholds=False)
    store.save(tmp_path)
    target = tmp_path / "t" / "embedding" / "slice.data"
    target.unlink()
    target.mkdir()
    fresh = _trained(backend, thresholds=False)
    before = snapshot(fresh)
    with pytest.raises(CheckpointError, match=r"table 't': .*embedding/slice.data.*not a regular file \(a folder\)"):
        fresh.load(tmp_path)
    assert_unchanged(fresh, before)


@pytest.mark.parametrize("protocol", ["exchange", "rename"])
def test_ckpt_14_a_save_over_a_symlinked_table_folder_writes_through_it_and_leaves_nothing(backend, tmp_path,
                                                                                           protocol, monkeypatch):
    """The table folder is a symlink to a folder elsewhere (another disk): the save lands in the folder
    it points to, the link stays a link, and neither folder keeps a temporary entry."""
    monkeypatch.setattr(checkpoint, "use_exchange", protocol == "exchange")
    checkpoints, elsewhere = tmp_path / "ckpt", tmp_path / "disk2"
    store = _trained(backend, thresholds=False)
    store.save(checkpoints)
    elsewhere.mkdir()
    (checkpoints / "t").rename(elsewhere / "t-data")
    (checkpoints / "t").symlink_to(elsewhere / "t-data")
    store.lookup(keys(70, 71), step=9)
    store.save(checkpoints)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["t"] and (checkpoints / "t").is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["t-data"]
    fresh = _trained(backend, thresholds=False)
    fresh.load(checkpoints)
    assert fresh.export().differences(store.export()) == []


def test_ckpt_14_a_symlinked_table_recovers_a_killed_switch_and_litter_of_earlier_saves(backend, tmp_path):
    """Beside the link's target: the old version a two-rename switch killed between its renames left
    there loads; the symlink an earlier version's save left under a temporary name is deleted."""
    checkpoints, elsewhere = tmp_path / "ckpt", tmp_path / "disk2"
    store = _trained(backend, thresholds=False)
    store.save(checkpoints)
    elsewhere.mkdir()
    (checkpoints / "t").rename(elsewhere / "t-data")
    (checkpoints / "t").symlink_to(elsewhere / "t-data")
    dead = _dead_pid()
    (checkpoints / f".t.writing-{dead}-0").symlink_to(elsewhere / "t-data")      # an earlier save's litter
    (elsewhere / "t-data").rename(elsewhere / f".t-data.old-{dead}")             # killed between the renames
    fresh = _trained(backend, thresholds=False)
    fresh.load(checkpoints)
    assert fresh.export().differences(store.export()) == []
    store.save(checkpoints)                    # puts the table back; the .old folder was its only copy till now
    store.save(checkpoints)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["t"] and (checkpoints / "t").is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["t-data"]
