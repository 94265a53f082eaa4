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
in-memory index (key -> file, offset, count, last seen) always names the
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
import os
import re
import weakref
import zlib
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, DiskCorruptionError, DiskFullError, MxrecError

FILE_BYTES = 64 << 20  # a file is closed and the next begun at this size
MAGIC = int.from_bytes(b"MXSD", "little")
HEADER_BYTES = 32
# Records of one file closer than this are fetched by one pread, gap and all:
# fewer system calls for a few wasted bytes.
SPAN_GAP_BYTES = 64 << 10
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.]+$")
_COUNTERS = ("disk_reads", "disk_writes", "disk_bytes_read", "disk_bytes_written", "compactions")


def record_dtype(dim: int, n_slots: int) -> np.dtype:
    """The packed numpy layout of one record (see the module docstring)."""
    return np.dtype([("magic", "<u4"), ("key", "<i8"), ("count", "<i8"), ("last_seen", "<i8"),
                     ("payload_len", "<u4"), ("payload", "<f4", ((1 + n_slots) * dim,)), ("crc", "<u4")])


def _crc32s(records: np.ndarray) -> np.ndarray:
    """CRC-32 of every record's header and payload.  zlib has no batched
    form, so this is the one loop per record; it runs over slices of one
    buffer, without copies."""
    size = records.dtype.itemsize
    data = memoryview(np.ascontiguousarray(records).view(np.uint8))
    return np.fromiter((zlib.crc32(data[start:start + size - 4]) for start in range(0, len(data), size)),
                       dtype=np.uint32, count=len(records))


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
    if not isinstance(table, str) or not _TABLE_NAME.match(table):
        raise _config_error(table, "name", "must be letters, digits, '_' and '.'")
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


@dataclass
class _File:
    """One file of the tier: where it is, its bytes and its live records."""
    fid: int
    folder: int
    path: str
    size: int = 0
    live: int = 0


class DiskTier:
    """The rows of one table that live on disk, with an in-memory index."""

    def __init__(self, table: str, folders, dim: int, n_slots: int, *, folder_limit_bytes: int | None = None,
                 compact_ratio: float = 0.5, fault_hook=None, file_bytes: int = FILE_BYTES):
        folders = _check_config(table, folders, dim, n_slots, folder_limit_bytes, compact_ratio, fault_hook,
                                file_bytes)
        _check_no_files(table, folders)
        for folder in folders:
            os.makedirs(folder, exist_ok=True)
        self.table, self.folders, self.dim, self.n_slots = table, folders, int(dim), int(n_slots)
        self.folder_limit_bytes, self.compact_ratio = folder_limit_bytes, float(compact_ratio)
        self._fault_hook = fault_hook
        self._dtype = record_dtype(self.dim, self.n_slots)
        self._record_bytes = self._dtype.itemsize
        self._records_per_file = max(1, file_bytes // self._record_bytes)
        self._files: dict[int, _File] = {}
        # Per folder: the file appends go to, if it still exists (file ids are never reused).
        self._current: list[int | None] = [None] * len(folders)
        self._index: dict[int, tuple[int, int, int, int]] = {}  # key -> (file id, offset, count, last_seen)
        self._next_fid = 0
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._fds: dict[int, int] = {}  # file id -> open descriptor, opened on first use
        weakref.finalize(self, _close_fds, self._fds)

    # ------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._index)

    def keys(self) -> np.ndarray:
        return np.sort(np.fromiter(self._index, dtype=np.int64, count=len(self._index)))

    def contains(self, keys) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        return np.fromiter((key in self._index for key in keys.ravel().tolist()), dtype=bool,
                           count=keys.size).reshape(keys.shape)

    def meta(self, keys) -> tuple[np.ndarray, np.ndarray]:
        """(counts, last_seen) of present keys, from the index: no disk read."""
        entries = self._locate(np.asarray(keys, dtype=np.int64).ravel())
        return entries[:, 2].copy(), entries[:, 3].copy()

    def all_meta(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys sorted, counts, last_seen) of every key on disk."""
        keys = self.keys()
        return (keys, *self.meta(keys))

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
        self._point(records["key"], fids, offsets, records["count"], records["last_seen"])
        self._compact_due()

    def read(self, keys) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(values [n, dim], slots [n_slots, n, dim], counts, last_seen) of
        present keys, each record checked (DiskCorruptionError)."""
        unique, inverse = np.unique(np.asarray(keys, dtype=np.int64).ravel(), return_inverse=True)
        entries = self._locate(unique)
        raw = np.empty((len(unique), self._record_bytes), dtype=np.uint8)  # records as bytes: see _concat
        for file, rows in self._by_file(entries):
            raw[rows] = self._read_file(file, entries[rows, 1], unique[rows]).view(np.uint8).reshape(len(rows), -1)
        return self._unpack(raw.view(self._dtype).reshape(-1), inverse.ravel())

    def remove(self, keys) -> None:
        """Forget keys (absent ones are ignored); their records become dead."""
        for key in np.unique(np.asarray(keys, dtype=np.int64)).tolist():
            entry = self._index.pop(key, None)
            if entry is not None:
                self._files[entry[0]].live -= 1
        self._compact_due()

    def compact(self) -> int:
        """Compact every file past the threshold now; the number compacted."""
        return self._compact_due()

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

    def _concat(self, parts: list) -> np.ndarray:
        """Records joined as bytes: numpy joins and scatters structured
        arrays field by field, several times slower."""
        return np.concatenate([np.empty(0, np.uint8)] + [part.view(np.uint8) for part in parts]).view(self._dtype)

    def _unpack(self, records: np.ndarray, take: np.ndarray):
        """(values, slots, counts, last_seen) of ``records[take]``, gathered
        straight from the payload column, one copy per output."""
        dim, payload = self.dim, records["payload"]
        slots = np.empty((self.n_slots, len(take), dim), dtype=np.float32)
        for slot in range(self.n_slots):
            slots[slot] = np.take(payload[:, dim * (1 + slot):dim * (2 + slot)], take, axis=0)
        return (np.take(payload[:, :dim], take, axis=0).astype(np.float32, copy=False), slots,
                records["count"][take].astype(np.int64, copy=False),
                records["last_seen"][take].astype(np.int64, copy=False))

    # ------------------------------------------------------------ index
    def _locate(self, keys: np.ndarray) -> np.ndarray:
        """Index entries [n, 4] (file id, offset, count, last_seen) of present keys."""
        try:
            entries = [self._index[key] for key in keys.tolist()]
        except KeyError as error:
            raise KeyError(f"table {self.table!r}: key {error.args[0]} is not on disk") from None
        return np.array(entries, dtype=np.int64).reshape(len(keys), 4)

    def _point(self, keys, fids, offsets, counts, last_seen) -> None:
        """Point the index at newly written records; the old ones become dead."""
        for key, fid, offset, count, seen in zip(keys.tolist(), fids.tolist(), offsets.tolist(), counts.tolist(),
                                                 last_seen.tolist()):
            old = self._index.get(key)
            if old is not None:
                self._files[old[0]].live -= 1
            self._index[key] = (fid, offset, count, seen)
            self._files[fid].live += 1

    def _by_file(self, entries: np.ndarray):
        """(file, rows of ``entries``) per file in file order, rows sorted by
        offset, so reads go through each file once and forward."""
        if len(entries) == 0:
            return
        order = np.lexsort((entries[:, 1], entries[:, 0]))
        for rows in np.split(order, np.flatnonzero(np.diff(entries[order, 0])) + 1):
            yield self._files[int(entries[rows[0], 0])], rows

    def _live(self, file: _File) -> tuple[np.ndarray, np.ndarray]:
        """(keys, offsets) of the file's live records, by offset."""
        pairs = sorted((offset, key) for key, (fid, offset, _, _) in self._index.items() if fid == file.fid)
        pairs = np.array(pairs, dtype=np.int64).reshape(len(pairs), 2)
        return pairs[:, 1].copy(), pairs[:, 0].copy()

    # ------------------------------------------------------------ reading
    def _fd(self, file: _File) -> int:
        if file.fid not in self._fds:
            self._fds[file.fid] = os.open(file.path, os.O_RDWR)
        return self._fds[file.fid]

    def _read_file(self, file: _File, offsets: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """The checked records at ``offsets`` (sorted) of one file, expected to hold ``keys``."""
        size = self._record_bytes
        parts = []
        for span in np.split(offsets, np.flatnonzero(np.diff(offsets) - size > SPAN_GAP_BYTES) + 1):
            start, stop = int(span[0]), int(span[-1]) + size
            try:
                data = os.pread(self._fd(file), stop - start, start)
            except OSError as error:
                raise self._corrupt(file, start, f"cannot be read ({error})") from error
            self._counters["disk_bytes_read"] += len(data)
            if len(data) < stop - start:
                cut = int(span[np.searchsorted(span + size, start + len(data), side="right")])
                raise self._corrupt(file, cut, f"is cut short: the file ends at byte {start + len(data)}")
            parts.append(np.frombuffer(data, self._dtype)[(span - start) // size])
        records = self._concat(parts)
        self._counters["disk_reads"] += len(records)
        self._check(file, offsets, keys, records)
        return records

    def _check(self, file: _File, offsets, keys, records) -> None:
        crc_bad = _crc32s(records) != records["crc"]
        form_bad = (records["magic"] != MAGIC) | (records["payload_len"] != self._dtype["payload"].itemsize)
        key_bad = records["key"] != keys
        bad = crc_bad | form_bad | key_bad
        if bad.any():
            i = int(np.argmax(bad))
            reason = ("fails its checksum" if crc_bad[i] else "is not a record of this table's format"
                      if form_bad[i] else f"holds key {int(records['key'][i])}, expected {int(keys[i])}")
            raise self._corrupt(file, int(offsets[i]), reason)

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
        return self._commit(plan)

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
                if file is None or file.fid == avoid or used == self._records_per_file:
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

    def _compact_due(self) -> int:
        """Compact due files, oldest first, until none is due; the number compacted."""
        done, stuck = 0, set()
        while True:
            due = [fid for fid in sorted(self._files) if fid not in stuck and self._due(self._files[fid])]
            if not due:
                return done
            try:
                self._compact_file(self._files[due[0]])
                done += 1
            except OSError:
                # Housekeeping only: the live records are still valid where
                # they are (a full disk) or are left for read and verify to
                # report (corruption); the file is tried again next time.
                stuck.add(due[0])

    def _compact_file(self, file: _File) -> None:
        """Copy the file's live records forward (never into itself), then delete it."""
        keys, offsets = self._live(file)
        if len(keys):
            records = self._read_file(file, offsets, keys)
            fids, new_offsets = self._append(records, avoid=file.fid)
            self._point(keys, fids, new_offsets, records["count"], records["last_seen"])
        self._delete(file)
        self._counters["compactions"] += 1

    def _delete(self, file: _File) -> None:
        fd = self._fds.pop(file.fid, None)
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(file.path)
        except FileNotFoundError:
            pass
        del self._files[file.fid]
