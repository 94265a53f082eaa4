"""The checkpoint package's public API (issue 31, deliverable 4): the same bytes on disk as before it
became a package (CKPT-1, CKPT-12), and its streaming writer and reader agree with the whole-table ones."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mxrec_ref import Adagrad, CheckpointError, LazyAdam, TableConfig, checkpoint
from mxrec_ref.state import TableState

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "checkpoint_golden_child.py"
GOLDEN = Path(__file__).resolve().parent / "data" / "checkpoint-golden.json"


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_ckpt_1_the_files_are_byte_for_byte_those_of_the_writer_before_the_package(tmp_path):
    """tests/checkpoint_golden_child.py writes full tables and deltas of three optimizers; every file's
    SHA-256 (meta.json and manifest.json included) is the one main's checkpoint.py (7e63fe5) wrote."""
    out = subprocess.run([sys.executable, str(CHILD), str(tmp_path)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert json.loads(out.stdout) == json.loads(GOLDEN.read_text())


def _state(optimizer, dim: int, n: int, m: int, seed: int) -> TableState:
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.choice(np.arange(0, 5_000), n + m, replace=False)).astype(np.int64)
    admitted = np.sort(rng.choice(keys, n, replace=False))
    return TableState(
        keys=admitted, values=rng.standard_normal((n, dim)).astype(np.float32),
        slots={slot: rng.standard_normal((n, dim)).astype(np.float32) for slot in optimizer.slot_names},
        counts=rng.integers(0, 9, n).astype(np.int64), last_seen=rng.integers(0, 7, n).astype(np.int64),
        pending_keys=np.setdiff1d(keys, admitted), pending_counts=rng.integers(0, 3, m).astype(np.int64),
        pending_last_seen=rng.integers(0, 7, m).astype(np.int64), clock=6, clock_source="step")


def _stream_write(folder: Path, config, optimizer, state: TableState, rows: int, *, previous=None,
                  removed=None) -> None:
    meta = checkpoint.table_meta(config, optimizer, len(state.keys), len(state.pending_keys), state.clock,
                                 state.clock_source, root=folder.parent, previous=previous,
                                 n_removed=None if removed is None else len(removed))
    folder.mkdir(parents=True)
    with checkpoint.TableWriter(folder, optimizer, meta) as writer:
        for start in range(0, len(state.keys), rows):
            part = slice(start, start + rows)
            writer.admitted(state.keys[part], state.values[part], {s: v[part] for s, v in state.slots.items()},
                            state.counts[part], state.last_seen[part])
        for start in range(0, len(state.pending_keys), rows):
            part = slice(start, start + rows)
            writer.pending(state.pending_keys[part], state.pending_counts[part], state.pending_last_seen[part])
        for start in range(0, 0 if removed is None else len(removed), rows):
            writer.removed(removed[start:start + rows])
        writer.finish()


@pytest.mark.parametrize("optimizer", [Adagrad(learning_rate=0.1), LazyAdam(learning_rate=0.1)], ids=str)
def test_ckpt_12_the_streaming_writer_writes_the_bytes_of_the_whole_table_writer(tmp_path, optimizer):
    """TableWriter fed a few rows at a time writes exactly write_table's files, a delta's included,
    and the fault hook names them in the same order (CKPT-8)."""
    config = TableConfig(name="t", dim=3)
    base, later = _state(optimizer, 3, 40, 9, seed=1), _state(optimizer, 3, 45, 6, seed=2)
    steps = {}
    for how in ("whole", "stream"):
        steps[how] = []
        checkpoint.fault_hook = steps[how].append
        try:
            if how == "whole":
                checkpoint.write_table(tmp_path / how / "full", config, optimizer, base)
            else:
                _stream_write(tmp_path / how / "full" / "t", config, optimizer, base, rows=7)
        finally:
            checkpoint.fault_hook = None
    assert files_of(tmp_path / "whole") == files_of(tmp_path / "stream")
    whole_steps = [s for s in steps["whole"] if s not in ("begin", "rename", "fsync parent", "remove old")]
    assert whole_steps == steps["stream"]
    delta, removed = checkpoint.delta_between(base, later)
    checkpoint.write_table(tmp_path / "whole" / "delta", config, optimizer, delta,
                           previous=tmp_path / "whole" / "full", removed=removed)
    _stream_write(tmp_path / "stream" / "delta" / "t", config, optimizer, delta, rows=4,
                  previous=tmp_path / "stream" / "full", removed=removed)
    assert files_of(tmp_path / "whole") == files_of(tmp_path / "stream")
    assert checkpoint.read_table(tmp_path / "stream" / "delta", config, optimizer).differences(later) == []


def test_ckpt_12_a_streaming_writer_given_too_few_rows_refuses_to_finish(tmp_path):
    optimizer, config = Adagrad(learning_rate=0.1), TableConfig(name="t", dim=2)
    state = _state(optimizer, 2, 10, 0, seed=3)
    meta = checkpoint.table_meta(config, optimizer, 11, 0, 1, "step")
    with checkpoint.TableWriter(tmp_path, optimizer, meta) as writer:
        writer.admitted(state.keys, state.values, state.slots, state.counts, state.last_seen)
        with pytest.raises(ValueError, match="key/slice.data got 80 bytes, its meta.json announces 88"):
            writer.finish()
    assert not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize("chunk", [8, 1 << 22])
def test_ckpt_5_the_streaming_reader_reads_what_read_table_reads(tmp_path, monkeypatch, chunk):
    """read_owned keeping every key (in chunks of a few rows, or one) gives read_table's state and
    tallies every key; keeping the odd keys gives exactly those."""
    monkeypatch.setattr(checkpoint.stream, "CHUNK_BYTES", chunk)
    optimizer, config = LazyAdam(learning_rate=0.1), TableConfig(name="t", dim=4)
    state = _state(optimizer, 4, 50, 11, seed=4)
    checkpoint.write_table(tmp_path, config, optimizer, state)
    everything, tallies = checkpoint.read_owned(tmp_path, config, optimizer, lambda keys: np.ones(len(keys), bool))
    assert everything.differences(checkpoint.read_table(tmp_path, config, optimizer)) == []
    assert [(t.totals, t.kept) for t in tallies] == [((50, 11, 0), (50, 11, 0))]
    odd, _ = checkpoint.read_owned(tmp_path, config, optimizer, lambda keys: keys % 2 == 1)
    assert odd.keys.tolist() == [k for k in state.keys.tolist() if k % 2]
    assert odd.pending_keys.tolist() == [k for k in state.pending_keys.tolist() if k % 2]


@pytest.mark.parametrize("chunk", [8, 1 << 22])
@pytest.mark.parametrize("damage, message", [
    ("unsorted", "keys are not strictly ascending"),
    ("padding", "holds the padding key -1"),
    ("negative count", "a count is negative"),
    ("key range", "key_dtype: checkpoint key 3000000000 does not fit"),
])
def test_ckpt_5_both_readers_report_the_same_problem(tmp_path, monkeypatch, chunk, damage, message):
    """CKPT-5's checks are written once (checkpoint.checks): the whole-table reader and the streaming
    reader, in chunks of any size, name the same problem for the same files."""
    monkeypatch.setattr(checkpoint.stream, "CHUNK_BYTES", chunk)
    optimizer = Adagrad(learning_rate=0.1)
    config = TableConfig(name="t", dim=2, key_dtype="int32" if damage == "key range" else "int64")
    state = _state(optimizer, 2, 30, 5, seed=5)
    keys = state.keys.copy()
    counts = state.counts.copy()
    if damage == "unsorted":
        keys[[10, 20]] = keys[[20, 10]]
    elif damage == "padding":
        keys = np.concatenate([[-1], keys[1:]])
    elif damage == "negative count":
        counts[25] = -1
    else:
        keys[-1] = 3_000_000_000
    state = TableState(**{**state.__dict__, "keys": keys, "counts": counts})
    checkpoint.write_table(tmp_path, config, optimizer, state)
    errors = []
    for read in (lambda: checkpoint.read_table(tmp_path, config, optimizer),
                 lambda: checkpoint.read_owned(tmp_path, config, optimizer, lambda k: np.ones(len(k), bool))):
        with pytest.raises(CheckpointError, match=message) as error:
            read()
        errors.append(str(error.value))
    assert errors[0] == errors[1]


def test_ckpt_4_write_file_atomically_leaves_the_old_file_or_the_new_one(tmp_path):
    """The Saver's small files use the folder protocol: written aside, fsynced, renamed over; a
    failed write leaves the old file and no temporary."""
    path = tmp_path / "steps.json"
    checkpoint.write_file_atomically(path, b"old")
    checkpoint.write_file_atomically(path, b"new")
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["steps.json"]
    with pytest.raises(TypeError):
        checkpoint.write_file_atomically(path, None)
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["steps.json"]


def test_ckpt_9_save_state_writes_a_full_table_or_a_delta_on_its_base(tmp_path):
    """One function for a store's save: full without a base, a delta on (folder, state) with one,
    and an incremental save into its own base refused before anything is written."""
    optimizer, config = Adagrad(learning_rate=0.1), TableConfig(name="t", dim=2)
    base, later = _state(optimizer, 2, 20, 4, seed=6), _state(optimizer, 2, 22, 3, seed=7)
    checkpoint.save_state(tmp_path / "one", config, optimizer, base)
    path = checkpoint.save_state(tmp_path / "two", config, optimizer, later, base=(str(tmp_path / "one"), base))
    assert json.loads(Path(path, "meta.json").read_text())["previous"] == "../one"
    assert checkpoint.read_table(tmp_path / "two", config, optimizer).differences(later) == []
    with pytest.raises(CheckpointError, match="directory: an incremental save into .* would overwrite"):
        checkpoint.save_state(tmp_path / "one", config, optimizer, later, base=(str(tmp_path / "one"), base))
    assert checkpoint.read_table(tmp_path / "one", config, optimizer).differences(base) == []


def test_ckpt_5_every_damage_raises_the_message_it_raised_before_the_package(tmp_path):
    """57 damaged tables (tests/checkpoint_messages_child.py): the whole-table reader and the streaming
    reader raise exactly the messages main's checkpoint.py and distributed/checkpoint.py raised (7e63fe5)."""
    out = subprocess.run([sys.executable, str(CHILD.with_name("checkpoint_messages_child.py")), str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         check=True)
    assert json.loads(out.stdout) == json.loads((GOLDEN.with_name("checkpoint-messages.json")).read_text())
