"""Reading a table a chunk at a time (CKPT-5, CKPT-8, CKPT-11, CKPT-12): ``TableReader`` streams one
version's rows, checking every key (``checks.KeyChecks``) and every byte's CRC-32 as it goes, so a
table never needs to fit in memory; ``read_owned`` keeps only the keys a predicate selects (a rank's
own keys, SHARD-11), with peak memory its kept rows plus a chunk per file."""
from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Callable

import numpy as np

from ..config import TableConfig
from ..optimizers import SparseOptimizer
from ..state import TableState
from .checks import (KeyChecks, check_attribute, check_clock, check_data_size, check_digest, check_meta, corrupt,
                     delta_removed, manifest_entries, read_meta)
from .files import FileReader, open_regular, read_at
from .folder import Vanished, read_one_version
from .format import CHUNK_BYTES, FLOAT32, INT64, MANIFEST, META, table_slices
from .reader import read_chain

Keep = Callable[[np.ndarray], np.ndarray]      # keys -> bool mask of the keys to keep


class TableReader:
    """One version of a table, open as the folder descriptor ``fd`` (CKPT-11), read a chunk at a time.

    Opening reads and checks the manifest, ``meta.json`` and every attribute, and opens every data
    file, checking its size (CKPT-5, CKPT-8).  Then ``admitted(rows)`` returns the next admitted rows,
    ``pending(rows)`` the next pending keys (once every admitted row was read), ``removed(rows)`` a
    delta's removed keys; each chunk's keys are checked as they pass.  ``finish`` reads what is left,
    checks every file's CRC-32 (reported first, in file-name order: a flipped byte is corruption,
    whatever it decodes to), then reports the first key problem.  Use as a context manager."""

    def __init__(self, fd: int, folder: Path, config: TableConfig, optimizer: SparseOptimizer,
                 slots_required: bool = True, *, owns_fd: bool = False):
        self._stack = contextlib.ExitStack()        # every open file; ``fd`` too where the reader owns it
        if owns_fd:
            self._stack.callback(os.close, fd)
        try:
            self._open_version(fd, folder, config, optimizer, slots_required)
        except BaseException:
            self._stack.close()
            raise

    def _open_version(self, fd, folder, config, optimizer, slots_required) -> None:
        table = self.table = config.name
        self.folder, self.config, self.fd = folder, config, fd
        raw, crc = self._read_small(MANIFEST, None)
        self.manifest = manifest_entries(raw, folder, table)
        self.identity = f"{crc:08x}"       # the version's identity: the ranks check they read the same one
        meta = self.meta = read_meta(self._read_small(META, self.manifest)[0], folder, table)
        self.same_slots = check_meta(meta, config, optimizer, slots_required)
        self.n_keys, self.n_pending, self.dim = meta["n_keys"], meta["n_pending"], config.dim
        self.n_removed = delta_removed(meta, folder, table)      # None: a full table
        check_clock(meta, folder, table)
        self.clock, self.clock_source = meta["clock"], meta["clock_source"]
        self.slot_files = ([(slot, optimizer.checkpoint_slot_name(slot)) for slot in optimizer.slot_names]
                           if self.same_slots else [])
        self.slices = table_slices(optimizer, self.n_keys, self.n_pending, self.dim, n_removed=self.n_removed,
                                   with_slots=self.same_slots)
        for spec in self.slices:       # attributes first: they say what the data must hold
            for part in (spec.data_file, spec.attribute_file):
                if part not in self.manifest:
                    corrupt(table, folder / part, "file is missing")
            check_attribute(self._read_small(spec.attribute_file, self.manifest)[0], folder, spec, table)
        self.readers = {spec.name: self._stack.enter_context(self._open(spec)) for spec in self.slices}
        self.checks = KeyChecks(config, folder)
        self._admitted_left, self._pending_left = self.n_keys, self.n_pending

    @classmethod
    def at_path(cls, folder: Path, config: TableConfig, optimizer: SparseOptimizer) -> "TableReader":
        """A folder that no save replaces while it is read (a sharded save's own slices, SHARD-10),
        opened by its path; the reader closes it."""
        try:
            return cls(os.open(folder, os.O_RDONLY | os.O_DIRECTORY), folder, config, optimizer, owns_fd=True)
        except Vanished as vanished:
            corrupt(config.name, folder / vanished.name, vanished.problem)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Close every file (again: a no-op)."""
        self._stack.close()

    @property
    def row_bytes(self) -> int:
        """The bytes of one admitted row over every file: a chunk of rows is CHUNK_BYTES over this."""
        return sum(self.readers[spec.name].row_bytes for spec in self.slices if spec.name != "removed")

    def chunk_rows(self) -> int:
        return max(1, CHUNK_BYTES // self.row_bytes)

    def admitted(self, rows: int) -> tuple[np.ndarray, np.ndarray, dict, np.ndarray, np.ndarray]:
        """The next ``rows`` admitted rows: (keys, values, slots by name, counts, last_seen).  Without
        the store's slots (another optimizer, ``slots_required=False``) the slots dict is empty."""
        rows = min(rows, self._admitted_left)
        self._admitted_left -= rows
        keys = self.readers["key"].read(rows)
        feat = self.readers["feat_info"].read(rows)
        values = self.readers["embedding"].read(rows)
        slots = {slot: self.readers[file].read(rows) for slot, file in self.slot_files}
        self.checks.admitted(keys, feat)
        return keys, values, slots, feat[:, 1], feat[:, 2]

    def pending(self, rows: int) -> np.ndarray:
        """The next ``rows`` pending feat_info rows (key, count, last_seen), after every admitted row."""
        if self._admitted_left:
            raise ValueError("read every admitted row before the pending ones")
        rows = min(rows, self._pending_left)
        self._pending_left -= rows
        feat = self.readers["feat_info"].read(rows)
        self.checks.pending(feat)
        return feat

    def removed(self, rows: int) -> np.ndarray:
        return self.readers["removed"].read(rows)

    def count_kept(self, keep: Keep) -> tuple[int, int, int]:
        """How many admitted, pending and removed keys ``keep`` selects: a first pass over the key
        columns alone (``pread``, nothing checked: the main pass does), so the kept rows can go
        straight into arrays of their final size."""
        chunk = self.chunk_rows()

        def count(name, first_row, rows):
            total = 0
            for start in range(0, rows, chunk):
                block = self.readers[name].pread_rows(first_row + start, min(chunk, rows - start))
                total += int(np.count_nonzero(keep(block if block.ndim == 1 else block[:, 0])))
            return total
        return (count("key", 0, self.n_keys), count("feat_info", self.n_keys, self.n_pending),
                count("removed", 0, self.n_removed) if self.n_removed is not None else 0)

    def finish(self, kept_keys: np.ndarray | None = None, kept_pending: np.ndarray | None = None) -> None:
        """Checksums of every file (file-name order), then the key checks; ``kept_keys`` and
        ``kept_pending`` (ascending) are checked to be disjoint (each key is someone's: some reader
        sees every conflict)."""
        for name in sorted(self.readers):
            self.readers[name].finish()
        if kept_keys is not None and kept_pending is not None:
            self.checks.both(kept_keys, kept_pending)
        self.checks.raise_first()

    def _read_small(self, name: str, manifest: dict | None):
        """A small file (the manifest, meta.json, an attribute) read whole; checked against ``manifest``."""
        if manifest is not None and name not in manifest:
            corrupt(self.table, self.folder / name, "file is missing")
        try:
            data, crc = read_at(self.fd, name)
        except (FileNotFoundError, NotADirectoryError):
            if manifest is None:
                raise Vanished(name, "manifest is missing: the table was not written completely") from None
            raise Vanished(name, "file listed in the manifest is missing") from None
        except OSError as error:
            corrupt(self.table, self.folder / name, f"cannot be read ({error.strerror or error})")
        if manifest is not None:
            check_digest(self.folder / name, len(data), crc, manifest[name], self.table)
        return data, crc

    def _open(self, spec) -> FileReader:
        name, path = spec.data_file, self.folder / spec.data_file
        try:
            file = open_regular(name, dir_fd=self.fd)
        except (FileNotFoundError, NotADirectoryError):
            raise Vanished(name, "file listed in the manifest is missing") from None
        except OSError as error:         # a FIFO or device (CKPT-13), or unreadable
            corrupt(self.table, path, f"cannot be read ({error.strerror or error})")
        reader = FileReader(file, path, self.manifest[name], spec.dtype, spec.row_shape, self.table)
        try:
            size = os.fstat(file).st_size
            if size != self.manifest[name].get("bytes"):
                corrupt(self.table, path, f"holds {size} bytes, the manifest says {self.manifest[name].get('bytes')}")
            check_data_size(size, self.folder, spec, self.table)
        except BaseException:
            reader.__exit__()
            raise
        return reader


@dataclasses.dataclass(frozen=True)
class VersionTally:
    """What one reader kept of one version of the table (a full checkpoint or a delta): the version's
    identity (its manifest's CRC-32), its totals, and how many of each were kept (SHARD-11)."""

    folder: str
    identity: str
    totals: tuple[int, int, int]      # admitted, pending, removed keys in the files
    kept: tuple[int, int, int]        # of which ``keep`` selected


def read_owned(directory, config: TableConfig, optimizer: SparseOptimizer, keep: Keep, *,
               source_table: str | None = None, slots_required: bool = True) -> tuple[TableState, list[VersionTally]]:
    """``read_table`` keeping only the keys ``keep`` selects, streamed: peak memory is the kept rows
    plus a chunk per file.  A delta is read with its chain, base first, each version filtered the
    same way (CKPT-9); validation and errors as ``read_table``'s (CKPT-5, CKPT-8, CKPT-11).  Returns
    the kept state and what was kept of each version, newest first."""
    saved_name = source_table or config.name

    def read(root):
        return read_one_version(root, saved_name, config.name,
                                lambda fd, folder: _read_kept(fd, folder, config, optimizer, slots_required, keep))
    return read_chain(directory, config.name, read)


def _read_kept(fd: int, folder: Path, config: TableConfig, optimizer: SparseOptimizer, slots_required: bool,
               keep: Keep):
    """(meta, kept state, kept removed keys or None, tally) of the version open as ``fd``."""
    dim = config.dim
    with TableReader(fd, folder, config, optimizer, slots_required) as version:
        n, m, n_removed = version.n_keys, version.n_pending, version.n_removed
        chunk = version.chunk_rows()
        n_mine, m_mine, r_mine = version.count_kept(keep)
        out = _Kept(folder, config.name)
        keys, values = out.array("keys", n_mine), out.array("values", n_mine, dim, FLOAT32)
        counts, last_seen = out.array("counts", n_mine), out.array("last_seen", n_mine)
        slots = {slot: out.array(slot, n_mine, dim, FLOAT32) for slot, _ in version.slot_files}
        pending, pending_counts, pending_last_seen = (out.array(name, m_mine)
                                                      for name in ("pending", "pcounts", "pseen"))
        removed = out.array("removed", r_mine) if n_removed is not None else None
        for _ in range(0, n, chunk):
            chunk_keys, chunk_values, chunk_slots, chunk_counts, chunk_seen = version.admitted(chunk)
            mine = keep(chunk_keys)
            at = out.advance("keys", int(np.count_nonzero(mine)))
            keys[at], values[at] = chunk_keys[mine], chunk_values[mine]
            counts[at], last_seen[at] = chunk_counts[mine], chunk_seen[mine]
            for slot in slots:
                slots[slot][at] = chunk_slots[slot][mine]
        for _ in range(0, m, chunk):
            feat = version.pending(chunk)
            mine = keep(feat[:, 0])
            at = out.advance("pending", int(np.count_nonzero(mine)))
            pending[at], pending_counts[at], pending_last_seen[at] = feat[mine, 0], feat[mine, 1], feat[mine, 2]
        for start in range(0, n_removed or 0, chunk):
            chunk_removed = version.removed(min(chunk, n_removed - start))
            mine = keep(chunk_removed)
            removed[out.advance("removed", int(np.count_nonzero(mine)))] = chunk_removed[mine]
        out.check_full()
        version.finish(keys, pending)
        meta, identity, same_slots = version.meta, version.identity, version.same_slots
    if not same_slots:
        slots = {slot: np.full((n_mine, dim), value, dtype=np.float32)
                 for slot, value in optimizer.slot_initial_values().items()}
    clock = meta["clock"]
    state = TableState(keys=keys, values=values, slots=slots, counts=counts, last_seen=last_seen,
                       pending_keys=pending, pending_counts=pending_counts, pending_last_seen=pending_last_seen,
                       clock=None if clock is None else int(clock), clock_source=meta["clock_source"])
    tally = VersionTally(str(folder), identity, (n, m, n_removed or 0),
                         (n_mine, m_mine, 0 if removed is None else len(removed)))
    return meta, state, removed, tally


class _Kept:
    """Positions in the arrays of the kept rows, filled a chunk at a time."""

    def __init__(self, folder: Path, table: str):
        self.folder, self.table = folder, table
        self.size: dict[str, int] = {}
        self.filled: dict[str, int] = {}

    def array(self, name: str, rows: int, dim: int | None = None, dtype=INT64) -> np.ndarray:
        if name in ("keys", "pending", "removed"):
            self.size[name], self.filled[name] = rows, 0
        return np.empty((rows,) if dim is None else (rows, dim), dtype=dtype.newbyteorder("="))

    def advance(self, name: str, rows: int) -> slice:
        start = self.filled[name]
        if start + rows > self.size[name]:      # the files changed between the two passes: never, they are immutable
            corrupt(self.table, self.folder, "changed while it was read")
        self.filled[name] = start + rows
        return slice(start, start + rows)

    def check_full(self) -> None:
        if self.filled != self.size:
            corrupt(self.table, self.folder, "changed while it was read")
