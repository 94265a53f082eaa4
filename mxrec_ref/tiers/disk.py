"""The SSD tier's row store: a table's coldest rows in append-only files on
local disk (spec/tiers.md, TIER-6, TIER-7, TIER-9).

Files.  Under each folder of ``ssd_data_path`` the tier creates
``<table>.<seq:06d>.ssd`` files; ``seq`` counts up across all folders, so a
name says which file came first.  Folders are used in order: a write goes to
the current file of the first folder with room under ``folder_limit_bytes``
(the bytes of this tier's files there); a file is closed and a new one begun
when it holds ``file_bytes`` (at least one record).  Files of the table must
not exist when the tier opens (mxRec's rule), so every matching file is ours.

Record format, little-endian, one fixed-size record per row (so a file is an
array of records and an offset is a multiple of the record size)::

    offset       size   field
    0            4      magic        u32  0x4453584D (b"MXSD")
    4            8      key          i64
    12           8      count        i64
    20           8      last_seen    i64
    28           4      payload_len  u32  P = 4 * (1 + n_slots) * dim
    32           P      payload      f32  values[dim], then slot 0[dim], slot 1[dim], ...
    32 + P       4      crc          u32  zlib.crc32 of bytes [0, 32 + P)

A key written again gets a new record and its old one becomes dead; the
in-memory index (key -> file, offset; 16 bytes a row) always names the
live one.  A file whose dead bytes pass ``compact_ratio`` of its size (or
that has no live record left) is compacted: its live records are copied
forward and the file deleted.

Atomicity.  A batch is planned (which file gets which records) before any
byte is written, and written with one ``pwrite`` per file at the offsets the
tier tracks; a failure (a full folder, ``ENOSPC``, any ``OSError``) truncates
every file the batch touched back to its length and deletes the files it
created, and the index is only updated after every byte is down.  Nothing is
fsynced: the tier is working storage that dies with its store, not a
checkpoint.
"""
from __future__ import annotations

import errno
import logging
import math
import os
import re
import weakref
import zlib
from dataclasses import dataclass

import numpy as np

from ..config import check_table_name
from ..errors import ConfigError, DiskCorruptionError, DiskFullError, MxrecError

FILE_BYTES = 64 << 20  # a file is closed and the next begun at this size
MAGIC = int.from_bytes(b"MXSD", "little")
HEADER_BYTES = 32
# Records of one file closer than this are fetched by one pread, gap and all:
# fewer system calls for a few wasted bytes (a page: a step's cold rows are
# scattered, and a wider gap read up to 80x the bytes it needed).
SPAN_GAP_BYTES = 4 << 10
# Compaction copies at most this many records a call (a write or a removal), so no call pays for a
# whole file: a file's compaction spreads over calls (TIER-9).
COMPACT_BUDGET = 1 << 16
_COUNTERS = ("disk_reads", "disk_writes", "disk_bytes_read", "disk_bytes_written", "compactions")
logger = logging.getLogger(__name__)


def record_dtype(dim: int, n_slots: int) -> np.dtype:
    """The packed numpy layout of one record (see the module docstring)."""
    return np.dtype([("magic", "<u4"), ("key", "<i8"), ("count", "<i8"), ("last_seen", "<i8"),
                     ("payload_len", "<u4"), ("payload", "<f4", ((1 + n_slots) * dim,)), ("crc", "<u4")])


def _crc32s_zlib(records: np.ndarray) -> np.ndarray:
    """CRC-32 of every record's header and payload with zlib, one call per
    record over slices of one buffer, without copies: the fallback when the
    fast path (mxrec_ref._fast) is not built."""
    size = records.dtype.itemsize
    data = memoryview(np.ascontiguousarray(records).view(np.uint8))
    return np.fromiter((zlib.crc32(data[start:start + size - 4]) for start in range(0, len(data), size)),
                       dtype=np.uint32, count=len(records))


try:
    from .._fast import RecordMap
    from .._fast import crc32_records as _crc32_records
    from .._fast import index_merge as _index_merge
    from .._fast import index_search as _index_search
except ImportError:  # the fast path is not built: zlib, one record at a time; one pread call per span from Python;
    _crc32_records = RecordMap = _index_search = _index_merge = None     # the index searched by numpy


def _crc32s(records: np.ndarray) -> np.ndarray:
    """CRC-32 of every record's header and payload (all but the crc field),
    bit-identical to zlib.crc32: one C loop over the batch when the fast path
    is built, else one zlib call per record."""
    if _crc32_records is None or len(records) == 0:
        return _crc32s_zlib(records)
    size = records.dtype.itemsize
    rows = np.ascontiguousarray(records).view(np.uint8).reshape(len(records), size)
    return _crc32_records(rows, size - 4)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``: one call unless the system writes short."""
    while len(data):
        written = os.pwrite(fd, data, offset)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        data, offset = data[written:], offset + written


def _close_fds(fds: dict) -> None:
    """Close the tier's open files; also run when the tier is collected."""
    while fds:
        os.close(fds.popitem()[1])


def _config_error(table, parameter: str, message: str) -> ConfigError:
    return ConfigError(f"table {table!r}: {parameter}: {message}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_config(table, folders, dim, n_slots, folder_limit_bytes, compact_ratio, fault_hook, file_bytes):
    """Every parameter, before anything touches the disk; returns the folders as a tuple of str."""
    check_table_name(table)
    if isinstance(folders, (str, os.PathLike)):
        folders = (folders,)
    folders = tuple(os.fspath(folder) for folder in folders)
    if not folders or any(not folder for folder in folders):
        raise _config_error(table, "ssd_data_path", f"must name at least one folder, got {folders!r}")
    if len({os.path.realpath(folder) for folder in folders}) != len(folders):
        raise _config_error(table, "ssd_data_path", f"names a folder twice: {folders!r}")
    for folder in folders:
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise _config_error(table, "ssd_data_path", f"{folder!r} is not a folder")
    if not _is_int(dim) or dim < 1:
        raise _config_error(table, "dim", f"must be an integer >= 1, got {dim!r}")
    if not _is_int(n_slots) or n_slots < 0:
        raise _config_error(table, "n_slots", f"must be an integer >= 0, got {n_slots!r}")
    if folder_limit_bytes is not None and (not _is_int(folder_limit_bytes) or folder_limit_bytes <= 0):
        raise _config_error(table, "folder_limit_bytes",
                            f"must be None or an integer > 0, got {folder_limit_bytes!r}")
    if isinstance(compact_ratio, bool) or not isinstance(compact_ratio, (int, float)) or not 0 < compact_ratio <= 1:
        raise _config_error(table, "compact_ratio", f"must be a number in (0, 1], got {compact_ratio!r}")
    if fault_hook is not None and not callable(fault_hook):
        raise _config_error(table, "fault_hook", f"must be None or callable, got {fault_hook!r}")
    if not _is_int(file_bytes) or file_bytes <= 0:
        raise _config_error(table, "file_bytes", f"must be an integer > 0, got {file_bytes!r}")
    return folders


def _check_no_files(table: str, folders: tuple) -> None:
    """mxRec refuses SSD files that exist before the table opens: they would
    be another run's rows, and this tier deletes the files it owns."""
    pattern = re.compile(re.escape(table) + r"\.\d+\.ssd")
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        found = sorted(name for name in os.listdir(folder) if pattern.fullmatch(name))
        if found:
            raise _config_error(table, "ssd_data_path",
                                f"SSD file {os.path.join(folder, found[0])!r} already exists; the table's SSD files "
                                "must not exist when it opens: remove them or choose another folder")

_NONE = np.empty(0, dtype=np.int64)


OFFSET_BITS = 40     # a record's location word: file id << 40 | byte offset (files stay far below 1 TiB)
_OFFSET_MASK = (1 << OFFSET_BITS) - 1


def _pack_locations(entries: np.ndarray) -> np.ndarray:
    """[n, 2] (file id, offset) as one int64 word each; -1 where the file id is -1."""
    words = (entries[:, 0] << OFFSET_BITS) | entries[:, 1]
    words[entries[:, 0] < 0] = -1
    return words


def _unpack_locations(words: np.ndarray) -> np.ndarray:
    """Location words as [n, 2] (file id, offset), both -1 for -1."""
    entries = np.empty((len(words), 2), dtype=np.int64)
    np.right_shift(words, OFFSET_BITS, out=entries[:, 0])     # -1 stays -1 (arithmetic shift)
    np.bitwise_and(words, _OFFSET_MASK, out=entries[:, 1])
    entries[words < 0, 1] = -1
    return entries


class _Index:
    """key -> (file id, offset) for every key on disk, as two int64 columns
    (the key and a location word, file id << 40 | offset): 16 bytes a row
    (TIER-9).  Counts and last-seen times live only in the records; eviction
    bounds them per file instead (``DiskTier.expired``).  Numpy arrays, so
    that batches are looked up and updated with ``np.searchsorted`` instead of
    one dict operation per key.

    Two sorted levels, disjoint in keys: ``main`` and a small ``delta`` that
    new keys are merged into (cheap for small batches); the delta is merged
    into main once it passes sqrt(DELTA_MIN x main) keys, which balances the
    two costs: a batch of b new keys costs O(delta) to insert and the merge
    O(main) every delta / b batches, so O(sqrt(main)) a batch either way
    (an eighth of main, as before, made the delta inserts grow with the table).
    A key already in a level is updated in place there; a removed key keeps
    its slot with location -1 (a tombstone, reusable by a later write) until
    the next merge drops it.  Everything is sorted by key: no hash order.
    Searched by the fast path's ``index_search`` (both levels, one C loop)
    when it is built, else by numpy."""

    DELTA_MIN = 4096

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.main_keys, self.main = _NONE, _NONE
        self.delta_keys, self.delta = _NONE, _NONE
        self.n = 0  # live keys

    def _find(self, keys_sorted: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position, found) of ``keys`` in one level."""
        if len(keys_sorted) == 0:
            return np.zeros(len(keys), dtype=np.intp), np.zeros(len(keys), dtype=bool)
        if len(keys) > 64 and not bool(np.all(keys[1:] >= keys[:-1])):
            # Sorted queries walk the level forward (numpy narrows each search by the last one),
            # random ones miss the cache on every step once the level outgrows it.
            order = np.argsort(keys, kind="stable")
            pos = np.empty(len(keys), dtype=np.intp)
            pos[order] = np.searchsorted(keys_sorted, keys[order])
        else:
            pos = np.searchsorted(keys_sorted, keys)
        np.minimum(pos, len(keys_sorted) - 1, out=pos)
        return pos, keys_sorted[pos] == keys

    def _words(self, keys: np.ndarray):
        """(location words, -1 where absent; found in delta, its position there; found in main,
        its position there)."""
        if _index_search is not None:
            words, level, pos = _index_search(self.main_keys, self.main, self.delta_keys, self.delta,
                                              np.ascontiguousarray(keys, dtype=np.int64))
            return words, level == 2, pos, level == 1, pos
        dpos, in_delta = self._find(self.delta_keys, keys)
        mpos, in_main = self._find(self.main_keys, keys)
        in_main &= ~in_delta
        words = self.main[mpos] if len(self.main_keys) else np.full(len(keys), -1, dtype=np.int64)
        words[~in_main] = -1
        if len(self.delta_keys):
            words[in_delta] = self.delta[dpos[in_delta]]
        return words, in_delta, dpos, in_main, mpos

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Entries [n, 2] (file id, offset) of ``keys``, -1 where absent."""
        return _unpack_locations(self._words(keys)[0])

    def put(self, keys: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """Set ``keys`` (sorted, unique) to ``entries`` [n, 2] (file id >= 0); returns their
        previous entries (file id -1 where absent)."""
        words = _pack_locations(entries)
        old, in_delta, dpos, in_main, mpos = self._words(keys)
        self.delta[dpos[in_delta]] = words[in_delta]
        self.main[mpos[in_main]] = words[in_main]
        new = ~(in_delta | in_main)
        self.n += int(np.count_nonzero(old < 0))
        if new.any():
            new_keys, new_words = keys[new], words[new]
            if len(self.delta_keys) + len(new_keys) > max(self.DELTA_MIN, math.isqrt(self.DELTA_MIN * len(self.main_keys))):
                self.main_keys, self.main = self._merge(self.main_keys, self.main,
                                                        *self._merge(self.delta_keys, self.delta, new_keys,
                                                                     new_words))
                self.delta_keys, self.delta = _NONE, _NONE
            else:
                self.delta_keys, self.delta = self._merge(self.delta_keys, self.delta, new_keys, new_words)
        return _unpack_locations(old)

    def drop(self, keys: np.ndarray) -> np.ndarray:
        """Forget ``keys`` (sorted, unique); returns their previous entries (file id -1 where absent)."""
        old, in_delta, dpos, in_main, mpos = self._words(keys)
        self.delta[dpos[in_delta]] = -1
        self.main[mpos[in_main]] = -1
        self.n -= int(np.count_nonzero(old >= 0))
        return _unpack_locations(old)

    @staticmethod
    def _merge(keys_a, words_a, keys_b, words_b):
        """Two sorted, key-disjoint levels as one, tombstones dropped."""
        if _index_merge is not None:
            return _index_merge(keys_a, words_a, keys_b, words_b)
        keys_a, words_a = _Index._live(keys_a, words_a)
        keys_b, words_b = _Index._live(keys_b, words_b)
        if len(keys_a) == 0:
            return keys_b, words_b
        if len(keys_b) == 0:
            return keys_a, words_a
        at = np.searchsorted(keys_a, keys_b)
        return np.insert(keys_a, at, keys_b), np.insert(words_a, at, words_b)

    @staticmethod
    def _live(keys, words):
        """A level without its tombstones (itself when it has none; callers
        never modify a level they did not build)."""
        keep = words >= 0
        return (keys, words) if keep.all() else (keys[keep], words[keep])

    def nbytes(self) -> int:
        """Bytes of the index's arrays (both levels, tombstones included)."""
        return sum(array.nbytes for array in (self.main_keys, self.main, self.delta_keys, self.delta))

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys sorted, entries [n, 2]) of every live key."""
        keys, words = self._merge(self.main_keys, self.main, self.delta_keys, self.delta)
        return keys, _unpack_locations(words)


@dataclass
class _File:
    """One file of the tier: where it is, its bytes and its live records."""
    fid: int
    folder: int
    path: str
    size: int = 0
    live: int = 0
    # Compaction in progress: the file's live records when it began, by key, and how many are done.
    # Such a file takes no appends; records superseded since are skipped (the index decides).
    compact_keys: np.ndarray | None = None
    compact_offsets: np.ndarray | None = None
    compact_at: int = 0
    # Bounds of the last-seen times of every record written into the file (live or dead): eviction
    # reads only files whose bounds straddle its cutoff (DiskTier.expired).
    min_seen: int = 2**63 - 1
    max_seen: int = -2**63


class DiskTier:
    """The rows of one table that live on disk, with an in-memory index."""

    def __init__(self, table: str, folders, dim: int, n_slots: int, *, folder_limit_bytes: int | None = None,
                 compact_ratio: float = 0.5, fault_hook=None, file_bytes: int = FILE_BYTES):
        folders = _check_config(table, folders, dim, n_slots, folder_limit_bytes, compact_ratio, fault_hook,
                                file_bytes)
        _check_no_files(table, folders)
        for folder in folders:
            try:
                os.makedirs(folder, exist_ok=True)
                if not os.access(folder, os.W_OK | os.X_OK):
                    raise PermissionError(errno.EACCES, "not writable", folder)
            except OSError as error:
                raise _config_error(table, "ssd_data_path", f"cannot use folder {folder!r}: "
                                                            f"{error.strerror or error}") from error
        self.table, self.folders, self.dim, self.n_slots = table, folders, int(dim), int(n_slots)
        self.folder_limit_bytes, self.compact_ratio = folder_limit_bytes, float(compact_ratio)
        self._fault_hook = fault_hook
        self._dtype = record_dtype(self.dim, self.n_slots)
        self._record_bytes = self._dtype.itemsize
        self._records_per_file = max(1, file_bytes // self._record_bytes)
        self._files: dict[int, _File] = {}
        # Per folder: the file appends go to, if it still exists (file ids are never reused).
        self._current: list[int | None] = [None] * len(folders)
        self._index = _Index()  # key -> (file id, offset, count, last_seen)
        self._next_fid = 0
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self.compact_budget = COMPACT_BUDGET   # records a call's compaction looks at, at most
        self._fds: dict[int, int] = {}  # file id -> open descriptor, opened on first use
        self._maps: dict = {}           # file id -> RecordMap of its descriptor (reads), made on first read
        weakref.finalize(self, _close_fds, self._fds)

    # ------------------------------------------------------------ queries
    def __len__(self) -> int:
        return self._index.n

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
        if self._index.n == 0:
            return _NONE
        keys, entries = self._index.items()
        found, read = [], {"disk_reads": 0, "disk_bytes_read": 0}
        for file, rows in self._by_file(entries):
            if file.min_seen > cutoff:
                continue
            if file.max_seen <= cutoff:
                found.append(keys[rows])
                continue
            records = self._read_file(file, entries[rows, 1], keys[rows], read)
            found.append(keys[rows][records["last_seen"] <= cutoff])
        self._count_reads(read)
        return np.sort(np.concatenate(found)) if found else _NONE

    @property
    def stats(self) -> dict[str, int]:
        live = sum(file.live for file in self._files.values()) * self._record_bytes
        size = sum(file.size for file in self._files.values())
        return {**self._counters, "disk_files": len(self._files), "disk_live_bytes": live,
                "disk_dead_bytes": size - live}

    # ------------------------------------------------------------ changes
    def write(self, keys, values, slots, counts, last_seen) -> None:
        """Append one record per key, superseding the key's old record; all
        or nothing (DiskFullError).  A key repeated in the batch keeps its
        last row, as separate writes would."""
        records = self._pack(keys, values, slots, counts, last_seen)
        if len(records) == 0:
            return
        fids, offsets = self._append(records)
        self._point(records["key"], fids, offsets)
        self._compact_due()

    def read(self, keys) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(values [n, dim], slots [n_slots, n, dim], counts, last_seen) of
        present keys, each record checked (DiskCorruptionError)."""
        unique, inverse = np.unique(np.asarray(keys, dtype=np.int64).ravel(), return_inverse=True)
        return self._read_entries(unique, self._locate(unique), inverse.ravel())

    def take(self, keys) -> tuple:
        """Those of ``keys`` (distinct; absent ones allowed) that are on disk leave it, with what
        they carry: (their keys sorted, values, slots, counts, last_seen), every record checked
        before any key leaves (DiskCorruptionError).  One search of the index for the whole call,
        where contains, read and remove would make three."""
        # Sorted first: the result is in key order anyway, and sorted queries walk the index's
        # levels forward (3-4x faster than random ones once a level outgrows the cache).
        keys = np.sort(np.asarray(keys, dtype=np.int64).ravel())
        index = self._index
        words, in_delta, dpos, in_main, mpos = index._words(keys)
        found = np.flatnonzero(words >= 0)
        taken = keys[found]
        if len(taken) == 0:
            return (taken, np.zeros((0, self.dim), np.float32), np.zeros((self.n_slots, 0, self.dim), np.float32),
                    taken.copy(), taken.copy())
        entries = _unpack_locations(words[found])
        rows = self._read_entries(taken, entries, np.arange(len(taken)))
        index.delta[dpos[found][in_delta[found]]] = -1
        index.main[mpos[found][in_main[found]]] = -1
        index.n -= len(taken)
        self._count_live(entries[:, 0], -1)
        self._compact_due()
        return (taken, *rows)

    def _read_entries(self, unique: np.ndarray, entries: np.ndarray, take: np.ndarray):
        """(values, slots, counts, last_seen) of records ``take`` of the records of ``unique``
        at ``entries``, read file by file in offset order and checked; counted once all are."""
        # Records as bytes (numpy moves structured arrays field by field, far slower), in read order;
        # ``where``: each unique key's record there.
        parts, where, done = [np.empty((0, self._record_bytes), dtype=np.uint8)], np.empty(len(unique), np.intp), 0
        read = {"disk_reads": 0, "disk_bytes_read": 0}
        for file, rows in self._by_file(entries):
            parts.append(self._read_file(file, entries[rows, 1], unique[rows], read).view(np.uint8)
                         .reshape(len(rows), -1))
            where[rows] = np.arange(done, done + len(rows))
            done += len(rows)
        self._count_reads(read)   # a read that raised counts nothing (STAT-2, CON-4)
        raw = parts[-1] if len(parts) == 2 else np.concatenate(parts)
        return self._unpack(raw, where[take])

    def remove(self, keys) -> None:
        """Forget keys (absent ones are ignored); their records become dead."""
        old = self._index.drop(np.unique(np.asarray(keys, dtype=np.int64)))
        self._count_live(old[:, 0], -1)
        self._compact_due()

    def compact(self) -> int:
        """Compact every file past the threshold now, however many records that copies; the
        number of files compacted."""
        return self._compact_due(unlimited=True)

    def verify(self) -> None:
        """Read and check every live record (DiskCorruptionError)."""
        keys = self.keys()
        entries = self._locate(keys)
        for file, rows in self._by_file(entries):
            self._read_file(file, entries[rows, 1], keys[rows])

    def clear(self) -> None:
        """Delete every record and file; the tier stays usable (a load starts over)."""
        self.close()
        for fid in sorted(self._files):
            try:
                os.unlink(self._files.pop(fid).path)
            except FileNotFoundError:
                pass
        self._index.clear()

    def close(self) -> None:
        """Close the open files; a later call reopens the ones it needs."""
        self._maps.clear()
        _close_fds(self._fds)

    # ------------------------------------------------------------ records
    def _pack(self, keys, values, slots, counts, last_seen) -> np.ndarray:
        """The batch as records, checksums included, built column by column."""
        keys = np.asarray(keys, dtype=np.int64).ravel()
        n, dim = len(keys), self.dim
        values = np.asarray(values, dtype=np.float32)
        slots = np.asarray(slots, dtype=np.float32)
        counts = np.asarray(counts, dtype=np.int64).ravel()
        last_seen = np.asarray(last_seen, dtype=np.int64).ravel()
        if slots.size == 0 and self.n_slots == 0:
            slots = slots.reshape(0, n, dim)
        for name, array, shape in (("values", values, (n, dim)), ("slots", slots, (self.n_slots, n, dim)),
                                   ("counts", counts, (n,)), ("last_seen", last_seen, (n,))):
            if array.shape != shape:
                raise ValueError(f"table {self.table!r}: disk write: {name} must have shape {shape}, "
                                 f"got {array.shape}")
        records = np.empty(n, self._dtype)
        records["magic"], records["key"], records["count"], records["last_seen"] = MAGIC, keys, counts, last_seen
        records["payload_len"] = 4 * (1 + self.n_slots) * dim
        records["payload"][:, :dim] = values
        for slot in range(self.n_slots):
            records["payload"][:, dim * (1 + slot):dim * (2 + slot)] = slots[slot]
        records["crc"] = _crc32s(records)
        return records

    def _unpack(self, raw: np.ndarray, take: np.ndarray):
        """(values, slots, counts, last_seen) of records ``raw[take]`` (raw:
        records as bytes [n, record size]): whole records gathered as bytes
        first (contiguous rows, several times faster than gathering strided
        columns), then each output copied out of them."""
        records = np.take(raw, take, axis=0).view(self._dtype).reshape(-1)
        dim, payload = self.dim, records["payload"]
        slots = np.empty((self.n_slots, len(take), dim), dtype=np.float32)
        for slot in range(self.n_slots):
            slots[slot] = payload[:, dim * (1 + slot):dim * (2 + slot)]
        return (payload[:, :dim].astype(np.float32), slots, records["count"].astype(np.int64),
                records["last_seen"].astype(np.int64))

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
        self._count_live(old[:, 0], -1)
        self._count_live(entries[:, 0], 1)

    def _count_live(self, fids: np.ndarray, sign: int) -> None:
        """Add ``sign`` to the live count of each file, once per entry of ``fids`` (-1: no file)."""
        counts = np.bincount(fids[fids >= 0])
        for fid in np.flatnonzero(counts).tolist():
            self._files[fid].live += sign * int(counts[fid])

    def _by_file(self, entries: np.ndarray):
        """(file, rows of ``entries``) per file in file order, rows sorted by
        offset, so reads go through each file once and forward."""
        if len(entries) == 0:
            return
        order = np.lexsort((entries[:, 1], entries[:, 0]))
        for rows in np.split(order, np.flatnonzero(np.diff(entries[order, 0])) + 1):
            yield self._files[int(entries[rows[0], 0])], rows

    def _live(self, file: _File) -> tuple[np.ndarray, np.ndarray]:
        """(keys, offsets) of the file's live records, by key."""
        keys, entries = self._index.items()
        mine = entries[:, 0] == file.fid
        return keys[mine], entries[mine, 1]

    # ------------------------------------------------------------ reading
    def _fd(self, file: _File) -> int:
        if file.fid not in self._fds:
            self._fds[file.fid] = os.open(file.path, os.O_RDWR)
        return self._fds[file.fid]

    def _map(self, file: _File):
        """The file's ``RecordMap`` over its whole capacity (appends never remap it), made on
        first read and dropped with the file's descriptor."""
        mapped = self._maps.get(file.fid)
        if mapped is None or mapped.fd != self._fds.get(file.fid):
            try:
                mapped = self._maps[file.fid] = RecordMap(self._fd(file), self._records_per_file * self._record_bytes)
            except OSError as error:
                raise self._corrupt(file, 0, f"cannot be mapped ({error})") from error
        return mapped

    def _read_file(self, file: _File, offsets: np.ndarray, keys: np.ndarray, read: dict | None = None) -> np.ndarray:
        """The checked records at ``offsets`` (sorted) of one file, expected to
        hold ``keys``.  What was read is added to ``read`` (the caller counts
        it once the whole call succeeded) or, without it, to the statistics --
        in both cases only once the records checked out (CON-4)."""
        size = self._record_bytes
        if RecordMap is not None:      # copied out of the file's mapping and checked in one C loop, without the GIL
            raw = np.empty((len(offsets), size), dtype=np.uint8)
            try:
                n_bytes, cut, bad, why = self._map(file).read(
                    np.ascontiguousarray(offsets, dtype=np.int64), size, raw,
                    np.ascontiguousarray(keys, dtype=np.int64), MAGIC, self._dtype["payload"].itemsize)
            except OSError as error:
                raise self._corrupt(file, int(offsets[0]), f"cannot be read ({error})") from error
            if cut >= 0:
                raise self._corrupt(file, int(offsets[cut]), "is cut short: the file ends before the record does")
            records = raw.view(self._dtype).reshape(-1)
            if bad >= 0:     # checked in the C loop as _check would (the first bad record, its first fault)
                raise self._corrupt(file, int(offsets[bad]), self._fault(why, records[bad], keys[bad]))
        else:
            records, n_bytes = self._read_spans(file, offsets)
            self._check(file, offsets, keys, records)
        done = {"disk_reads": len(records), "disk_bytes_read": n_bytes}
        if read is None:
            self._count_reads(done)
        else:
            for name, value in done.items():
                read[name] += value
        return records

    def _read_spans(self, file: _File, offsets: np.ndarray) -> tuple[np.ndarray, int]:
        """The records at ``offsets`` (sorted) by one ``os.pread`` per span of nearby records (the
        fallback of ``RecordMap`` when the fast path is not built); (records, their bytes)."""
        size = self._record_bytes
        parts = []
        for span in np.split(offsets, np.flatnonzero(np.diff(offsets) - size > SPAN_GAP_BYTES) + 1):
            start, stop = int(span[0]), int(span[-1]) + size
            try:
                data = os.pread(self._fd(file), stop - start, start)
            except OSError as error:
                raise self._corrupt(file, start, f"cannot be read ({error})") from error
            if len(data) < stop - start:
                cut = int(span[np.searchsorted(span + size, start + len(data), side="right")])
                raise self._corrupt(file, cut, "is cut short: the file ends before the record does")
            rows = np.frombuffer(data, np.uint8).reshape(-1, size)  # as bytes: whole records move at once
            parts.append(rows if len(rows) == len(span) else rows[(span - start) // size])
        # The records' bytes count as read (TIER-10), not the gaps between them, as RecordMap counts.
        records = (parts[0] if len(parts) == 1 else np.concatenate(parts)).view(self._dtype).reshape(-1)
        return records, len(offsets) * size

    def _count_reads(self, read: dict) -> None:
        for name, value in read.items():
            self._counters[name] += value

    def _check(self, file: _File, offsets, keys, records) -> None:
        crc_bad = _crc32s(records) != records["crc"]
        form_bad = (records["magic"] != MAGIC) | (records["payload_len"] != self._dtype["payload"].itemsize)
        key_bad = records["key"] != keys
        bad = crc_bad | form_bad | key_bad
        if bad.any():
            i = int(np.argmax(bad))
            why = 1 if crc_bad[i] else 2 if form_bad[i] else 3
            raise self._corrupt(file, int(offsets[i]), self._fault(why, records[i], keys[i]))

    @staticmethod
    def _fault(why: int, record, key) -> str:
        """What is wrong with a record: ``why`` 1 its checksum, 2 its format, 3 its key."""
        return ("fails its checksum" if why == 1 else "is not a record of this table's format" if why == 2
                else f"holds key {int(record['key'])}, expected {int(key)}")

    def _corrupt(self, file: _File, offset: int, reason: str) -> DiskCorruptionError:
        return DiskCorruptionError(errno.EIO, f"table {self.table!r}: SSD record in {file.path!r} at byte offset "
                                              f"{offset} {reason}")

    # ------------------------------------------------------------ writing
    def _append(self, records: np.ndarray, avoid: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Write ``records`` (never into file ``avoid``); all or nothing.
        Returns each record's (file id, offset)."""
        plan = self._plan(len(records), avoid)
        touched: list[_File] = []
        start = 0
        try:
            for file, count in plan:
                self._write_chunk(file, records[start:start + count], touched)
                start += count
        except BaseException as error:  # whatever stops a batch, its bytes go
            self._roll_back(touched)
            if not isinstance(error, OSError):
                raise
            raise DiskFullError(errno.ENOSPC, f"table {self.table!r}: disk full: writing {file.path!r} failed "
                                              f"({error}); ssd_data_path {list(self.folders)}, limit "
                                              f"{self._limit_text()}; nothing was written") from error
        fids, offsets = self._commit(plan)
        start = 0
        for file, count in plan:
            if count:
                seen = records["last_seen"][start:start + count]
                file.min_seen = min(file.min_seen, int(seen.min()))
                file.max_seen = max(file.max_seen, int(seen.max()))
            start += count
        return fids, offsets

    def _plan(self, n: int, avoid: int | None) -> list[tuple[_File, int]]:
        """(file, records) in write order: folders in order, each folder's
        current file first, a new file when one is full.  New files are not
        registered until the batch commits."""
        plan, left, next_fid = [], n, self._next_fid
        for folder in range(len(self.folders)):
            room = self._room(folder, left)
            file = self._files.get(self._current[folder])
            used = file.size // self._record_bytes if file is not None else 0
            while left and room:
                if (file is None or file.fid == avoid or file.compact_keys is not None
                        or used == self._records_per_file):
                    file, used = _File(next_fid, folder, self._path(folder, next_fid)), 0
                    next_fid += 1
                count = min(left, room, self._records_per_file - used)
                plan.append((file, count))
                left, room, used = left - count, room - count, used + count
        if left:
            raise DiskFullError(errno.ENOSPC, f"table {self.table!r}: disk full: {n} records of "
                                              f"{self._record_bytes} bytes do not fit; every ssd_data_path folder "
                                              f"{list(self.folders)} is at its limit of {self._limit_text()}")
        return plan

    def _room(self, folder: int, wanted: int) -> int:
        """Records that still fit in a folder (``wanted`` when it has no limit)."""
        if self.folder_limit_bytes is None:
            return wanted
        used = sum(file.size for file in self._files.values() if file.folder == folder)
        return max(0, (self.folder_limit_bytes - used) // self._record_bytes)

    def _limit_text(self) -> str:
        return "no limit" if self.folder_limit_bytes is None else f"{self.folder_limit_bytes} bytes a folder"

    def _path(self, folder: int, fid: int) -> str:
        return os.path.join(self.folders[folder], f"{self.table}.{fid:06d}.ssd")

    def _write_chunk(self, file: _File, chunk: np.ndarray, touched: list) -> None:
        """One write call for the file's share of the batch, at the end the tier tracks."""
        data = memoryview(chunk.view(np.uint8))
        if self._fault_hook is not None:
            self._fault_hook(file.path, len(data))
        if file.fid not in self._files:  # O_EXCL: never write into (or roll back by deleting) a file not ours
            self._fds[file.fid] = os.open(file.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        touched.append(file)
        _pwrite_all(self._fd(file), data, file.size)

    def _roll_back(self, touched: list) -> None:
        """Truncate the files a failed batch touched to their tracked size and
        delete those it created.  Best effort: if truncating fails too, the
        next append still writes at the tracked size, over the leftovers."""
        for file in touched:
            try:
                if file.fid in self._files:
                    os.ftruncate(self._fd(file), file.size)
                else:
                    os.close(self._fds.pop(file.fid))
                    os.unlink(file.path)
            except OSError:
                pass

    def _commit(self, plan) -> tuple[np.ndarray, np.ndarray]:
        """Register a written batch: new files, sizes, current files, counters."""
        fids, offsets = [], []
        for file, count in plan:
            self._files[file.fid] = file
            self._current[file.folder] = file.fid
            self._next_fid = max(self._next_fid, file.fid + 1)
            fids.append(np.full(count, file.fid, dtype=np.int64))
            offsets.append(file.size + self._record_bytes * np.arange(count, dtype=np.int64))
            file.size += count * self._record_bytes
            self._counters["disk_writes"] += count
            self._counters["disk_bytes_written"] += count * self._record_bytes
        return np.concatenate(fids), np.concatenate(offsets)

    # ------------------------------------------------------------ compaction
    def _due(self, file: _File) -> bool:
        """Dead bytes past the ratio of the file, or no live record left."""
        dead = file.size - file.live * self._record_bytes
        return dead > 0 and (dead > self.compact_ratio * file.size or file.live == 0)

    def _compact_due(self, unlimited: bool = False) -> int:
        """Compact due files, oldest first (a file already begun first of all), looking at most
        at ``compact_budget`` records unless ``unlimited``; the number of files finished."""
        done, stuck, budget = 0, set(), None if unlimited else self.compact_budget
        while budget is None or budget > 0:
            due = [fid for fid in sorted(self._files) if fid not in stuck
                   and (self._files[fid].compact_keys is not None or self._due(self._files[fid]))]
            if not due:
                return done
            begun = [fid for fid in due if self._files[fid].compact_keys is not None]
            file = self._files[(begun or due)[0]]
            try:
                moved, finished = self._compact_step(file, budget)
            except OSError:
                # Housekeeping only: the live records are still valid where
                # they are (a full disk) or are left for read and verify to
                # report (corruption); the file is tried again next time.
                stuck.add(file.fid)
                continue
            if budget is not None:
                budget -= max(moved, 1)
            done += finished
        return done

    def _compact_step(self, file: _File, budget: int | None) -> tuple[int, bool]:
        """Copy the next (at most ``budget``) of the file's live records forward (never into
        itself); delete the file once all are.  Returns (records looked at, finished)."""
        if file.compact_keys is None:   # one pass over the index per file, shared by its steps
            file.compact_keys, file.compact_offsets = self._live(file)
            file.compact_at = 0
            if self._current[file.folder] == file.fid:
                self._current[file.folder] = None
        start = file.compact_at
        stop = len(file.compact_keys) if budget is None else min(len(file.compact_keys), start + budget)
        # A step's records by key: sorted queries walk the index forward (random ones, as by offset,
        # miss the cache once the index outgrows it); then read in offset order.
        keys, offsets = file.compact_keys[start:stop], file.compact_offsets[start:stop]
        entries = self._index.lookup(keys)
        still = (entries[:, 0] == file.fid) & (entries[:, 1] == offsets)   # not superseded or removed since
        keys, offsets = keys[still], offsets[still]
        by_offset = np.argsort(offsets)
        keys, offsets = keys[by_offset], offsets[by_offset]
        if len(keys):
            records = self._read_file(file, offsets, keys)
            fids, new_offsets = self._append(records, avoid=file.fid)
            self._point(keys, fids, new_offsets)
        file.compact_at = stop
        if stop < len(file.compact_keys):
            return stop - start, False
        self._delete(file)
        self._counters["compactions"] += 1
        logger.info("table %r: compacted %s (%d live records moved)", self.table, file.path, stop)
        return stop - start, True

    def _delete(self, file: _File) -> None:
        self._maps.pop(file.fid, None)
        fd = self._fds.pop(file.fid, None)
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(file.path)
        except FileNotFoundError:
            pass
        del self._files[file.fid]
