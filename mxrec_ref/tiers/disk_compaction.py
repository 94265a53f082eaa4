"""Compaction of the SSD tier's files (spec/tiers.md, TIER-9): a key written again gets a new
record and its old one becomes dead; a file whose dead bytes pass ``compact_ratio`` of its size
(or that has no live record left) has its live records copied forward and is deleted.

Incrementally: one call looks at most at ``budget`` records, so no write or removal pays for a
whole file; a file being compacted takes no appends (``DiskFiles``), and records superseded or
removed meanwhile are skipped (the index says which record is live).  Housekeeping only: a failed
step (a full disk, a corrupt record) leaves the live records where they are, valid, and the file
is tried again by a later call.
"""
from __future__ import annotations

import logging

import numpy as np

from .disk_files import DiskFile, DiskFiles
from .disk_index import DiskIndex

# The disk tier's logger since it was one module: log filters and tests name it.
logger = logging.getLogger("mxrec_ref.tiers.disk")


class Compaction:
    """Compacts the files of one tier.  ``read(file, offsets, keys)``: the tier's checked read of a
    file's records; ``point(keys, fids, offsets)``: the tier's index update after records moved;
    ``forget(fid)``: what the tier drops with a deleted file (its read mapping)."""

    def __init__(self, files: DiskFiles, index: DiskIndex, read, point, forget, ratio: float):
        self.files, self.index, self.ratio = files, index, ratio
        self._read, self._point, self._forget = read, point, forget

    def due(self, file: DiskFile) -> bool:
        """Dead bytes past the ratio of the file, or no live record left."""
        dead = file.size - file.live * self.files.record_bytes
        return dead > 0 and (dead > self.ratio * file.size or file.live == 0)

    def run(self, budget: int | None) -> int:
        """Compact due files, oldest first (a file already begun first of all), looking at most
        at ``budget`` records (None: no limit); the number of files finished."""
        by_id = self.files.by_id
        done, stuck = 0, set()
        while budget is None or budget > 0:
            due = [fid for fid in sorted(by_id) if fid not in stuck
                   and (by_id[fid].compact_keys is not None or self.due(by_id[fid]))]
            if not due:
                return done
            begun = [fid for fid in due if by_id[fid].compact_keys is not None]
            file = by_id[(begun or due)[0]]
            try:
                moved, finished = self._step(file, budget)
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

    def _step(self, file: DiskFile, budget: int | None) -> tuple[int, bool]:
        """Copy the next (at most ``budget``) of the file's live records forward (never into
        itself); delete the file once all are.  Returns (records looked at, finished)."""
        if file.compact_keys is None:   # one pass over the index per file, shared by its steps
            file.compact_keys, file.compact_offsets = self._live(file)
            file.compact_at = 0
            if self.files.current[file.folder] == file.fid:
                self.files.current[file.folder] = None
        start = file.compact_at
        stop = len(file.compact_keys) if budget is None else min(len(file.compact_keys), start + budget)
        # A step's records by key: sorted queries walk the index forward (random ones, as by offset,
        # miss the cache once the index outgrows it); then read in offset order.
        keys, offsets = file.compact_keys[start:stop], file.compact_offsets[start:stop]
        entries = self.index.lookup(keys)
        still = (entries[:, 0] == file.fid) & (entries[:, 1] == offsets)   # not superseded or removed since
        keys, offsets = keys[still], offsets[still]
        by_offset = np.argsort(offsets)
        keys, offsets = keys[by_offset], offsets[by_offset]
        if len(keys):
            records = self._read(file, offsets, keys)
            fids, new_offsets = self.files.append(records, avoid=file.fid)
            self._point(keys, fids, new_offsets)
        file.compact_at = stop
        if stop < len(file.compact_keys):
            return stop - start, False
        self._forget(file.fid)
        self.files.delete(file)
        self.files.counters["compactions"] += 1
        logger.info("table %r: compacted %s (%d live records moved)", self.files.table, file.path, stop)
        return stop - start, True

    def _live(self, file: DiskFile) -> tuple[np.ndarray, np.ndarray]:
        """(keys, offsets) of the file's live records, by key."""
        keys, entries = self.index.items()
        mine = entries[:, 0] == file.fid
        return keys[mine], entries[mine, 1]
