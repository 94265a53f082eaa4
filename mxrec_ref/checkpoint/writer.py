"""Writing a table folder (CKPT-1, CKPT-4, CKPT-12): from a whole state on a few threads
(``write_state_files``), or streamed a chunk at a time (``TableWriter``); both write the same bytes."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

from ..config import TableConfig
from ..optimizers import SparseOptimizer
from ..state import TableState
from .delta import check_delta_target, delta_between
from .faults import fault_point
from .files import FileWriter, fsync_directory, write_file, write_in_parallel
from .folder import checked_directory, io_errors, prepare_save, switch, temporary_folder
from .format import FLOAT32, INT64, MANIFEST, META, manifest_bytes, meta_bytes, table_meta, table_slices


def write_table(directory, config: TableConfig, optimizer: SparseOptimizer, state: TableState, *,
                previous=None, removed: np.ndarray | None = None) -> str:
    """Write ``state`` as a full table, or -- with ``previous`` (the checkpoint
    folder it builds on) -- as a delta: ``state`` then holds only the changed
    keys and ``removed`` the keys gone since ``previous`` (CKPT-9).  An I/O
    error raises CheckpointError naming the table and the path, and leaves no
    temporary folder behind (CKPT-10)."""
    table = config.name
    root = Path(checked_directory(directory, table))
    with io_errors(table, root):
        root.mkdir(parents=True, exist_ok=True)
        if previous is not None:
            removed = np.zeros(0, np.int64) if removed is None else removed
        meta = table_meta(config, optimizer, len(state.keys), len(state.pending_keys), state.clock,
                          state.clock_source, root=root, previous=previous,
                          n_removed=None if previous is None else len(removed))
        target = prepare_save(root, table)
        with temporary_folder(target.parent, target.name) as temporary:
            fault_point("begin")
            write_state_files(temporary, optimizer, state, meta, removed if previous is not None else None)
            switch(temporary, target)
    return str(root / table)


def save_state(directory, config: TableConfig, optimizer: SparseOptimizer, state: TableState, *,
               base: tuple | None = None) -> str:
    """A store's save (CKPT-4): ``state`` as a full table, or -- with ``base``, the (folder, state) of
    the store's last save or load -- what changed since then, as a delta pointing at it (CKPT-9).  An
    incremental save into its base's chain raises CheckpointError before writing anything."""
    directory = os.path.abspath(checked_directory(directory, config.name))
    if base is None:
        return write_table(directory, config, optimizer, state)
    check_delta_target(directory, base[0], config.name)
    delta, removed = delta_between(base[1], state)
    return write_table(directory, config, optimizer, delta, previous=base[0], removed=removed)


def write_state_files(folder: Path, optimizer: SparseOptimizer, state: TableState, meta: dict,
                      removed: np.ndarray | None, *, durable: bool = True) -> None:
    """A table's files in ``folder``, manifest last, the data files on a few threads (CKPT-12).
    ``durable=False`` skips the fsyncs: for a sharded save's slices, which rank 0 reads back before
    its merged files are made durable and are never read after a crash (SHARD-10)."""
    n, m, dim = meta["n_keys"], meta["n_pending"], meta["dim"]
    feat = np.empty((n + m, 3), dtype=INT64)      # filled in place: one copy of each column
    for column, (admitted, pending) in enumerate(((state.keys, state.pending_keys),
                                                  (state.counts, state.pending_counts),
                                                  (state.last_seen, state.pending_last_seen))):
        feat[:n, column] = admitted
        feat[n:, column] = pending
    data = {"key": state.keys, "embedding": state.values, "feat_info": feat, "removed": removed}
    data.update({optimizer.checkpoint_slot_name(slot): state.slots[slot] for slot in optimizer.slot_names})
    slices = table_slices(optimizer, n, m, dim, n_removed=None if removed is None else len(removed))
    files = []
    for spec in slices:
        (folder / spec.name).mkdir()
        files += [(spec.data_file, np.ascontiguousarray(data[spec.name].astype(spec.dtype, copy=False))),
                  (spec.attribute_file, np.asarray(spec.attribute, dtype=INT64))]
    digests = write_in_parallel(folder, files, durable=durable)
    _finish_folder(folder, [spec.name for spec in slices], digests, meta, durable)


def _finish_folder(folder: Path, names: list[str], digests: dict, meta: dict, durable: bool) -> None:
    """``meta.json``, then ``manifest.json`` (every file's size and CRC-32, written last, CKPT-8), then the
    folder and its sub-folders fsynced."""
    digests[META] = write_file(folder, META, meta_bytes(meta), durable=durable)
    write_file(folder, MANIFEST, manifest_bytes(digests), durable=durable)
    if durable:
        for name in sorted(names):
            fsync_directory(folder / name)
        fsync_directory(folder)
    fault_point("fsync folder")


class TableWriter:
    """A table written into ``folder`` (an empty temporary folder, CKPT-4) a chunk at a time, so no
    table-sized array is ever needed: every admitted row (``admitted``, in ascending key order), then
    every pending key (``pending``), then a delta's removed keys (``removed``), then ``finish``.  The
    totals and the rest of ``meta.json`` are given up front (``table_meta``).  The files are byte for
    byte those ``write_state_files`` writes for the same state, and the fault hook names them in the
    same order (CKPT-8).  Use as a context manager: leaving it closes every file."""

    def __init__(self, folder: Path, optimizer: SparseOptimizer, meta: dict, *, durable: bool = True):
        self.folder, self.meta, self.durable = folder, meta, durable
        self.slot_files = [(slot, optimizer.checkpoint_slot_name(slot)) for slot in optimizer.slot_names]
        self.slices = table_slices(optimizer, meta["n_keys"], meta["n_pending"], meta["dim"],
                                   n_removed=meta.get("n_removed") if meta.get("kind") == "delta" else None)
        self._stack = contextlib.ExitStack()
        self.writers: dict[str, FileWriter] = {}
        for spec in self.slices:
            (folder / spec.name).mkdir()
            self.writers[spec.name] = self._stack.enter_context(FileWriter(folder / spec.data_file, durable=durable))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def admitted(self, keys, values, slots: dict, counts, last_seen) -> None:
        """The next admitted rows: keys, their rows, each optimizer slot by name, counts, last-seen."""
        self.writers["key"].write(np.asarray(keys).astype(INT64, copy=False))
        self.writers["embedding"].write(np.asarray(values).astype(FLOAT32, copy=False))
        for slot, file in self.slot_files:
            self.writers[file].write(np.asarray(slots[slot]).astype(FLOAT32, copy=False))
        self.pending(keys, counts, last_seen)

    def pending(self, keys, counts, last_seen) -> None:
        """The next feat_info rows (key, count, last_seen): pending keys once every admitted row is in."""
        self.writers["feat_info"].write(np.stack([np.asarray(keys), np.asarray(counts), np.asarray(last_seen)],
                                                 axis=1).astype(INT64, copy=False))

    def removed(self, keys) -> None:
        self.writers["removed"].write(np.asarray(keys).astype(INT64, copy=False))

    def finish(self) -> None:
        """Every data file closed (fsynced), the attributes, ``meta.json`` and ``manifest.json``, the
        folders fsynced; the fault hook names each file once it is durable, in the one-process order."""
        digests = {}
        for spec in self.slices:
            written = self.writers[spec.name]
            expected = spec.rows * spec.row_bytes
            if written.size != expected:     # a caller's bug, never a file to keep
                raise ValueError(f"table {self.meta['table']!r}: {spec.data_file} got {written.size} bytes, "
                                 f"its meta.json announces {expected}")
            digests[spec.data_file] = written.close()
            fault_point(f"fsync {spec.data_file}")
            digests[spec.attribute_file] = write_file(self.folder, spec.attribute_file,
                                                      np.asarray(spec.attribute, dtype=INT64), durable=self.durable)
        _finish_folder(self.folder, [spec.name for spec in self.slices], digests, self.meta, self.durable)
