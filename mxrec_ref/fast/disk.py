"""The fast path's disk kernels (spec/tiers.md, TIER-6, TIER-9): the twins of the reference's
index search and merge (mxrec_ref/tiers/disk_index.py), record checksums
(tiers/disk_records.py) and record reads (tiers/disk_reads.py), over the core's C loops
(cext/_tiers.pxi), all without the GIL.  The fast store names them (``FastStore.disk_kernels``,
CON-10) and the tiered store hands them to its ``DiskTier``; tests/test_disk_tier.py compares the
two sets call by call, file bytes included.
"""
from __future__ import annotations

import numpy as np

from .._fast import RecordMap, crc32_records, index_merge, index_search
from ..tiers.disk_index import DiskIndex, Hits
from ..tiers.disk_records import MAGIC, RecordFormat, corruption, fault_reason


def crc32s(records: np.ndarray) -> np.ndarray:
    """CRC-32 of every record's header and payload (all but the crc field), bit-identical to
    zlib.crc32: one C loop over the batch."""
    if len(records) == 0:
        return np.zeros(0, dtype=np.uint32)
    size = records.dtype.itemsize
    rows = np.ascontiguousarray(records).view(np.uint8).reshape(len(records), size)
    return crc32_records(rows, size - 4)


class FastDiskIndex(DiskIndex):
    """The reference's index with both levels searched in one C loop and levels merged in C."""

    def _search(self, keys: np.ndarray) -> Hits:
        words, level, at = index_search(self.main_keys, self.main, self.delta_keys, self.delta,
                                        np.ascontiguousarray(keys, dtype=np.int64))
        return Hits(words, level == 2, at, level == 1, at)

    @staticmethod
    def _merge(keys_a, words_a, keys_b, words_b):
        return index_merge(keys_a, words_a, keys_b, words_b)


class FastRecordReader:
    """Copies a file's records out of a read-only shared mapping of the file (its whole capacity,
    so appends never remap it) and checks them as ``RecordFormat.check`` would, in one C loop
    without the GIL.  Only records below the file's size (one ``fstat`` a read) are touched, so a
    file cut short raises DiskCorruptionError, not SIGBUS."""

    def __init__(self, form: RecordFormat, capacity: int):
        self.form, self.capacity = form, capacity
        self._maps: dict[int, RecordMap] = {}    # file id -> the mapping of its descriptor, made on first read

    def read(self, file, fd: int, offsets: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, int]:
        form = self.form
        raw = np.empty((len(offsets), form.size), dtype=np.uint8)
        try:
            n_bytes, cut, bad, why = self._map(file, fd).read(
                np.ascontiguousarray(offsets, dtype=np.int64), form.size, raw,
                np.ascontiguousarray(keys, dtype=np.int64), MAGIC, form.payload_bytes)
        except OSError as error:
            raise corruption(form.table, file.path, int(offsets[0]), f"cannot be read ({error})") from error
        if cut >= 0:
            raise corruption(form.table, file.path, int(offsets[cut]),
                             "is cut short: the file ends before the record does")
        records = raw.view(form.dtype).reshape(-1)
        if bad >= 0:     # the first bad record, its first fault, as RecordFormat.check reports it
            raise corruption(form.table, file.path, int(offsets[bad]), fault_reason(why, records[bad], keys[bad]))
        return records, n_bytes

    def _map(self, file, fd: int) -> RecordMap:
        mapped = self._maps.get(file.fid)
        if mapped is None or mapped.fd != fd:     # a descriptor closed and reopened since: map it again
            try:
                mapped = self._maps[file.fid] = RecordMap(fd, self.capacity)
            except OSError as error:
                raise corruption(self.form.table, file.path, 0, f"cannot be mapped ({error})") from error
        return mapped

    def forget(self, fid: int) -> None:
        """The file is deleted: its mapping goes."""
        self._maps.pop(fid, None)

    def clear(self) -> None:
        """Every descriptor was closed: the mappings go."""
        self._maps.clear()


class FastDiskKernels:
    """The fast path's kernels of a ``DiskTier`` (the twin of ``RefDiskKernels``)."""
    index = FastDiskIndex
    crc32s = staticmethod(crc32s)
    reader = FastRecordReader
