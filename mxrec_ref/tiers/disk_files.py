"""The SSD tier's data files (spec/tiers.md, TIER-7, TIER-9): which files exist, where a batch
of records goes, and writing it all or nothing.

Files.  Under each folder of ``ssd_data_path`` the tier creates
``<table>.<seq:06d>.ssd`` files; ``seq`` counts up across all folders, so a
name says which file came first.  Folders are used in order: a write goes to
the current file of the first folder with room under ``folder_limit_bytes``
(the bytes of this tier's files there); a file is closed and a new one begun
when it holds ``records_per_file`` records.  Files of the table must not
exist when the tier opens (mxRec's rule), so every matching file is ours.

Atomicity.  A batch is planned (which file gets which records) before any
byte is written, and written with one ``pwrite`` per file at the offsets this
class tracks; a failure (a full folder, ``ENOSPC``, any ``OSError``) truncates
every file the batch touched back to its length and deletes the files it
created, and nothing is registered until every byte is down.  Nothing is
fsynced: the tier is working storage that dies with its store, not a
checkpoint.
"""
from __future__ import annotations

import errno
import os
import weakref
from dataclasses import dataclass

import numpy as np

from ..errors import DiskFullError


@dataclass
class DiskFile:
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


def _close_fds(fds: dict) -> None:
    """Close the tier's open files; also run when the tier is collected."""
    while fds:
        os.close(fds.popitem()[1])


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``: one call unless the system writes short."""
    while len(data):
        written = os.pwrite(fd, data, offset)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        data, offset = data[written:], offset + written


class DiskFiles:
    """The tier's files, their descriptors (opened on first use) and the folder limits.
    ``counters``: the tier's statistics, where writes are counted (TIER-10)."""

    def __init__(self, table: str, folders: tuple, record_bytes: int, records_per_file: int,
                 folder_limit_bytes: int | None, fault_hook, counters: dict):
        self.table, self.folders, self.folder_limit_bytes = table, folders, folder_limit_bytes
        self.record_bytes, self.records_per_file = record_bytes, records_per_file
        self.fault_hook = fault_hook    # called with (path, bytes) before each write: tests fail writes there
        self.counters = counters
        self.by_id: dict[int, DiskFile] = {}
        # Per folder: the file appends go to, if it still exists (file ids are never reused).
        self.current: list[int | None] = [None] * len(folders)
        self.next_fid = 0
        self.fds: dict[int, int] = {}  # file id -> open descriptor, opened on first use
        weakref.finalize(self, _close_fds, self.fds)

    def fd(self, file: DiskFile) -> int:
        if file.fid not in self.fds:
            self.fds[file.fid] = os.open(file.path, os.O_RDWR)
        return self.fds[file.fid]

    def by_file(self, entries: np.ndarray):
        """(file, rows of ``entries`` [n, 2] (file id, offset)) per file in file order, rows sorted
        by offset, so reads go through each file once and forward."""
        if len(entries) == 0:
            return
        order = np.lexsort((entries[:, 1], entries[:, 0]))
        for rows in np.split(order, np.flatnonzero(np.diff(entries[order, 0])) + 1):
            yield self.by_id[int(entries[rows[0], 0])], rows

    def count_live(self, fids: np.ndarray, sign: int) -> None:
        """Add ``sign`` to the live count of each file, once per entry of ``fids`` (-1: no file)."""
        counts = np.bincount(fids[fids >= 0])
        for fid in np.flatnonzero(counts).tolist():
            self.by_id[fid].live += sign * int(counts[fid])

    def stats(self) -> dict[str, int]:
        live = sum(file.live for file in self.by_id.values()) * self.record_bytes
        size = sum(file.size for file in self.by_id.values())
        return {"disk_files": len(self.by_id), "disk_live_bytes": live, "disk_dead_bytes": size - live}

    # ------------------------------------------------------------ writing
    def append(self, records: np.ndarray, avoid: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Write ``records`` (never into file ``avoid``); all or nothing (DiskFullError).
        Returns each record's (file id, offset)."""
        plan = self._plan(len(records), avoid)
        touched: list[DiskFile] = []
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

    def _plan(self, n: int, avoid: int | None) -> list[tuple[DiskFile, int]]:
        """(file, records) in write order: folders in order, each folder's
        current file first, a new file when one is full.  New files are not
        registered until the batch commits."""
        plan, left, next_fid = [], n, self.next_fid
        for folder in range(len(self.folders)):
            room = self._room(folder, left)
            file = self.by_id.get(self.current[folder])
            used = file.size // self.record_bytes if file is not None else 0
            while left and room:
                if (file is None or file.fid == avoid or file.compact_keys is not None
                        or used == self.records_per_file):
                    file, used = DiskFile(next_fid, folder, self._path(folder, next_fid)), 0
                    next_fid += 1
                count = min(left, room, self.records_per_file - used)
                plan.append((file, count))
                left, room, used = left - count, room - count, used + count
        if left:
            raise DiskFullError(errno.ENOSPC, f"table {self.table!r}: disk full: {n} records of "
                                              f"{self.record_bytes} bytes do not fit; every ssd_data_path folder "
                                              f"{list(self.folders)} is at its limit of {self._limit_text()}")
        return plan

    def _room(self, folder: int, wanted: int) -> int:
        """Records that still fit in a folder (``wanted`` when it has no limit)."""
        if self.folder_limit_bytes is None:
            return wanted
        used = sum(file.size for file in self.by_id.values() if file.folder == folder)
        return max(0, (self.folder_limit_bytes - used) // self.record_bytes)

    def _limit_text(self) -> str:
        return "no limit" if self.folder_limit_bytes is None else f"{self.folder_limit_bytes} bytes a folder"

    def _path(self, folder: int, fid: int) -> str:
        return os.path.join(self.folders[folder], f"{self.table}.{fid:06d}.ssd")

    def _write_chunk(self, file: DiskFile, chunk: np.ndarray, touched: list) -> None:
        """One write call for the file's share of the batch, at the end this class tracks."""
        data = memoryview(chunk.view(np.uint8))
        if self.fault_hook is not None:
            self.fault_hook(file.path, len(data))
        if file.fid not in self.by_id:  # O_EXCL: never write into (or roll back by deleting) a file not ours
            self.fds[file.fid] = os.open(file.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        touched.append(file)
        _pwrite_all(self.fd(file), data, file.size)

    def _roll_back(self, touched: list) -> None:
        """Truncate the files a failed batch touched to their tracked size and
        delete those it created.  Best effort: if truncating fails too, the
        next append still writes at the tracked size, over the leftovers."""
        for file in touched:
            try:
                if file.fid in self.by_id:
                    os.ftruncate(self.fd(file), file.size)
                else:
                    os.close(self.fds.pop(file.fid))
                    os.unlink(file.path)
            except OSError:
                pass

    def _commit(self, plan) -> tuple[np.ndarray, np.ndarray]:
        """Register a written batch: new files, sizes, current files, counters."""
        fids, offsets = [], []
        for file, count in plan:
            self.by_id[file.fid] = file
            self.current[file.folder] = file.fid
            self.next_fid = max(self.next_fid, file.fid + 1)
            fids.append(np.full(count, file.fid, dtype=np.int64))
            offsets.append(file.size + self.record_bytes * np.arange(count, dtype=np.int64))
            file.size += count * self.record_bytes
            self.counters["disk_writes"] += count
            self.counters["disk_bytes_written"] += count * self.record_bytes
        return np.concatenate(fids), np.concatenate(offsets)

    # ------------------------------------------------------------ removing
    def delete(self, file: DiskFile) -> None:
        """Close and delete one file (compacted: no live record left in it)."""
        fd = self.fds.pop(file.fid, None)
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(file.path)
        except FileNotFoundError:
            pass
        del self.by_id[file.fid]

    def delete_all(self) -> None:
        """Close and delete every file; new files still get new ids."""
        self.close()
        for fid in sorted(self.by_id):
            try:
                os.unlink(self.by_id.pop(fid).path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Close the open files; a later call reopens the ones it needs."""
        _close_fds(self.fds)
