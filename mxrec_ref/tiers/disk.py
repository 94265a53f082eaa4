"""The SSD tier's row store: a table's coldest rows in append-only files on
local disk (spec/tiers.md, TIER-6, TIER-7, TIER-9).

``DiskTier`` is the facade the tiered store calls; each of its jobs has its module:

* disk_folders.py -- the parameters and folders, checked before a byte is written;
* disk_records.py -- the record format: packing, unpacking, checksums, the checks of a read;
* disk_index.py   -- the in-memory index, key -> (file, offset), 16 bytes a row;
* disk_files.py   -- the data files: where a batch goes, all-or-nothing writes, folder limits;
* disk_reads.py   -- reading a file's records back;
* disk_compaction.py -- copying live records out of files mostly dead.

The index search and merge, the checksums and the reads have fast twins
(mxrec_ref/fast/disk.py); which set a tier uses is its store's backend's
(``kernels``: ``RefDiskKernels`` here, ``FastDiskKernels`` there), never
whether the extension is built, so the reference is pure Python and numpy.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import DiskCorruptionError, DiskFullError, MxrecError
from .disk_compaction import Compaction
from .disk_files import DiskFiles
from .disk_folders import check_config, check_no_files, make_folders
from .disk_index import NONE, OFFSET_BITS, DiskIndex, Hits, unpack_locations
from .disk_reads import SPAN_GAP_BYTES, RecordReader
from .disk_records import HEADER_BYTES, MAGIC, RecordFormat, crc32s, record_dtype

# What this module offered before it was split (its importers keep working), and the facade.
__all__ = ["DiskTier", "RefDiskKernels", "DiskCorruptionError", "DiskFullError", "MxrecError", "record_dtype",
           "FILE_BYTES", "COMPACT_BUDGET", "MAGIC", "HEADER_BYTES", "SPAN_GAP_BYTES", "OFFSET_BITS"]

FILE_BYTES = 64 << 20  # a file is closed and the next begun at this size
# Compaction copies at most this many records a call (a write or a removal), so no call pays for a
# whole file: a file's compaction spreads over calls (TIER-9).
COMPACT_BUDGET = 1 << 16
_COUNTERS = ("disk_reads", "disk_writes", "disk_bytes_read", "disk_bytes_written", "compactions")


class RefDiskKernels:
    """The reference's kernels of a ``DiskTier``: the index searched and merged by numpy, records
    checksummed by zlib and read by ``pread`` (the twin of mxrec_ref/fast/disk.py's
    ``FastDiskKernels``).  A leaf store names its set (``disk_kernels``, CON-10)."""
    index = DiskIndex
    crc32s = staticmethod(crc32s)
    reader = RecordReader


@dataclasses.dataclass(frozen=True, eq=False)
class StagedTake:
    """The search and reads of a ``take``, done ahead without changing anything (``DiskTier.stage``):
    valid while the tier's ``generation`` is the one it was made at, i.e. while no record, file or index
    entry changed (the key pipeline's prefetch, PIPE-10).  ``read``: the statistics its reads add once
    the take happens."""

    generation: int
    hits: Hits
    found: np.ndarray
    entries: np.ndarray
    taken: np.ndarray
    rows: tuple
    read: dict


class DiskTier:
    """The rows of one table that live on disk, with an in-memory index.  ``kernels``: the
    backend's index, checksum and read kernels (``RefDiskKernels`` by default)."""

    def __init__(self, table: str, folders, dim: int, n_slots: int, *, folder_limit_bytes: int | None = None,
                 compact_ratio: float = 0.5, fault_hook=None, file_bytes: int = FILE_BYTES, kernels=None):
        folders = check_config(table, folders, dim, n_slots, folder_limit_bytes, compact_ratio, fault_hook,
                               file_bytes)
        check_no_files(table, folders)
        make_folders(table, folders)
        kernels = RefDiskKernels if kernels is None else kernels
        self.table, self.folders, self.dim, self.n_slots = table, folders, int(dim), int(n_slots)
        self.folder_limit_bytes, self.compact_ratio = folder_limit_bytes, float(compact_ratio)
        self.compact_budget = COMPACT_BUDGET   # records a call's compaction looks at, at most
        self._format = RecordFormat(table, self.dim, self.n_slots, kernels.crc32s)
        record_bytes = self._format.size
        records_per_file = max(1, file_bytes // record_bytes)
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._files = DiskFiles(table, folders, record_bytes, records_per_file, folder_limit_bytes, fault_hook,
                                self._counters)
        self._index = kernels.index()
        self._reader = kernels.reader(self._format, records_per_file * record_bytes)
        self._compaction = Compaction(self._files, self._index, self._read_file, self._point, self._reader.forget,
                                      self.compact_ratio)
        # Bumped by every call that changes a record, a file or the index: a StagedTake made at
        # another generation is stale (PIPE-10).
        self.generation = 0

    # ------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._index)

    def keys(self) -> np.ndarray:
        return self._index.items()[0].copy()  # the index's own array may come back

    def contains(self, keys) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        return (self._index.lookup(keys.ravel())[:, 0] >= 0).reshape(keys.shape)

    def index_bytes(self) -> int:
        """Memory of the in-memory index (TIER-9): 16 bytes per on-disk row once merged."""
        return self._index.nbytes()

    def expired(self, cutoff: int) -> np.ndarray:
        """The keys (sorted) of disk rows last seen at or before ``cutoff`` (EVI-1).  The index
        holds no last-seen times (TIER-9); each file bounds those of the records written into
        it: a file whose bound says all its records are expired gives its live keys unread, one
        whose records are all later gives none, and only the others are read (their live
        records, checked as any read: DiskCorruptionError before anything changes)."""
        if len(self._index) == 0:
            return NONE
        keys, entries = self._index.items()
        found, read = [], {"disk_reads": 0, "disk_bytes_read": 0}
        for file, rows in self._files.by_file(entries):
            if file.min_seen > cutoff:
                continue
            if file.max_seen <= cutoff:
                found.append(keys[rows])
                continue
            records = self._read_file(file, entries[rows, 1], keys[rows], read)
            found.append(keys[rows][records["last_seen"] <= cutoff])
        self._count_reads(read)
        return np.sort(np.concatenate(found)) if found else NONE

    @property
    def stats(self) -> dict[str, int]:
        return {**self._counters, **self._files.stats()}

    # ------------------------------------------------------------ changes
    def write(self, keys, values, slots, counts, last_seen) -> None:
        """Append one record per key, superseding the key's old record; all
        or nothing (DiskFullError).  A key repeated in the batch keeps its
        last row, as separate writes would."""
        records = self._format.pack(keys, values, slots, counts, last_seen)
        if len(records) == 0:
            return
        self.generation += 1        # before the append: a failed write may have compacted or rolled back
        fids, offsets = self._files.append(records)
        self._point(records["key"], fids, offsets)
        self._compaction.run(self.compact_budget)

    def read(self, keys) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(values [n, dim], slots [n_slots, n, dim], counts, last_seen) of
        present keys, each record checked (DiskCorruptionError)."""
        unique, inverse = np.unique(np.asarray(keys, dtype=np.int64).ravel(), return_inverse=True)
        return self._read_entries(unique, self._locate(unique), inverse.ravel())

    def take(self, keys, staged: StagedTake | None = None) -> tuple:
        """Those of ``keys`` (distinct; absent ones allowed) that are on disk leave it, with what
        they carry: (their keys sorted, values, slots, counts, last_seen), every record checked
        before any key leaves (DiskCorruptionError).  One search of the index for the whole call,
        where contains, read and remove would make three.  ``staged``: this call's ``stage``, made
        ahead at this ``generation`` (the caller checks it is current: ``is_current``), whose search
        and reads are taken instead of made again."""
        if staged is None:
            staged = self.stage(keys)
        elif not self.is_current(staged):
            raise AssertionError(f"table {self.table!r}: a stale staged take")      # the caller's check, not input
        taken = staged.taken
        if len(taken) == 0:
            return (taken, *staged.rows)
        self._count_reads(staged.read)    # as the reads happened now (TIER-10)
        self.generation += 1
        self._index.drop_hits(staged.hits, staged.found)
        self._files.count_live(staged.entries[:, 0], -1)
        self._compaction.run(self.compact_budget)
        return (taken, *staged.rows)

    def stage(self, keys) -> StagedTake:
        """``take``'s search of ``keys`` and its checked reads of the records found, changing nothing
        (no statistic either: ``take`` counts the reads when it takes them); DiskCorruptionError as
        ``take`` raises it."""
        # Sorted first: the result is in key order anyway, and sorted queries walk the index's
        # levels forward (3-4x faster than random ones once a level outgrows the cache).
        keys = np.sort(np.asarray(keys, dtype=np.int64).ravel())
        hits = self._index.search(keys)
        found = np.flatnonzero(hits.words >= 0)
        taken = keys[found]
        read = {"disk_reads": 0, "disk_bytes_read": 0}
        if len(taken) == 0:
            rows = (np.zeros((0, self.dim), np.float32), np.zeros((self.n_slots, 0, self.dim), np.float32),
                    taken.copy(), taken.copy())
            return StagedTake(self.generation, hits, found, np.zeros((0, 2), np.int64), taken, rows, read)
        entries = unpack_locations(hits.words[found])
        rows = self._read_entries(taken, entries, np.arange(len(taken)), read)
        return StagedTake(self.generation, hits, found, entries, taken, rows, read)

    def is_current(self, staged: StagedTake) -> bool:
        """Whether nothing on disk changed since ``staged`` was made."""
        return staged.generation == self.generation

    def remove(self, keys) -> None:
        """Forget keys (absent ones are ignored); their records become dead."""
        self.generation += 1
        old = self._index.drop(np.unique(np.asarray(keys, dtype=np.int64)))
        self._files.count_live(old[:, 0], -1)
        self._compaction.run(self.compact_budget)

    def compact(self) -> int:
        """Compact every file past the threshold now, however many records that copies; the
        number of files compacted."""
        self.generation += 1
        return self._compaction.run(None)

    def verify(self) -> None:
        """Read and check every live record (DiskCorruptionError)."""
        keys = self.keys()
        entries = self._locate(keys)
        for file, rows in self._files.by_file(entries):
            self._read_file(file, entries[rows, 1], keys[rows])

    def clear(self) -> None:
        """Delete every record and file; the tier stays usable (a load starts over)."""
        self.generation += 1
        self._reader.clear()
        self._files.delete_all()
        self._index.clear()

    def close(self) -> None:
        """Close the open files; a later call reopens the ones it needs."""
        self._reader.clear()
        self._files.close()

    # ------------------------------------------------------------ reading
    def _read_entries(self, unique: np.ndarray, entries: np.ndarray, take: np.ndarray, counted: dict | None = None):
        """(values, slots, counts, last_seen) of records ``take`` of the records of ``unique``
        at ``entries``, read file by file in offset order and checked; counted once all are (or,
        with ``counted``, added to it for the caller to count)."""
        # Records as bytes (numpy moves structured arrays field by field, far slower), in read order;
        # ``where``: each unique key's record there.
        parts = [np.empty((0, self._format.size), dtype=np.uint8)]
        where, done = np.empty(len(unique), np.intp), 0
        read = {"disk_reads": 0, "disk_bytes_read": 0}
        for file, rows in self._files.by_file(entries):
            parts.append(self._read_file(file, entries[rows, 1], unique[rows], read).view(np.uint8)
                         .reshape(len(rows), -1))
            where[rows] = np.arange(done, done + len(rows))
            done += len(rows)
        if counted is None:
            self._count_reads(read)   # a read that raised counts nothing (STAT-2, CON-4)
        else:
            for name, value in read.items():
                counted[name] += value
        raw = parts[-1] if len(parts) == 2 else np.concatenate(parts)
        return self._format.unpack(raw, where[take])

    def _read_file(self, file, offsets: np.ndarray, keys: np.ndarray, read: dict | None = None) -> np.ndarray:
        """The checked records at ``offsets`` (sorted) of one file, expected to
        hold ``keys``.  What was read is added to ``read`` (the caller counts
        it once the whole call succeeded) or, without it, to the statistics --
        in both cases only once the records checked out (CON-4)."""
        records, n_bytes = self._reader.read(file, self._files.fd(file), offsets, keys)
        done = {"disk_reads": len(records), "disk_bytes_read": n_bytes}
        if read is None:
            self._count_reads(done)
        else:
            for name, value in done.items():
                read[name] += value
        return records

    def _count_reads(self, read: dict) -> None:
        for name, value in read.items():
            self._counters[name] += value

    # ------------------------------------------------------------ index
    def _locate(self, keys: np.ndarray) -> np.ndarray:
        """Index entries [n, 2] (file id, offset) of present keys."""
        entries = self._index.lookup(keys)
        missing = entries[:, 0] < 0
        if missing.any():
            raise KeyError(f"table {self.table!r}: key {int(keys[np.argmax(missing)])} is not on disk")
        return entries

    def _point(self, keys, fids, offsets) -> None:
        """Point the index at newly written records; the old ones become dead."""
        keys = np.asarray(keys, dtype=np.int64)
        last = np.argsort(keys, kind="stable")
        unique = keys[last]
        if len(unique) > 1 and not bool(np.all(unique[1:] != unique[:-1])):
            # A key repeated in the batch: its last record is the live one.
            unique, last = np.unique(keys[::-1], return_index=True)
            last = len(keys) - 1 - last
        entries = np.stack([np.asarray(column, dtype=np.int64)[last]
                            for column in (fids, offsets)], axis=1)
        old = self._index.put(unique, entries)
        self._files.count_live(old[:, 0], -1)
        self._files.count_live(entries[:, 0], 1)
